"""Routing locality (hobbit/planner/locality.py): its statistics by hand, the fit's round trip through
synthetic.generate, the real traces against their SOURCE.md figures, and hobbit/catalogue/data/routing.yaml's presets."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from hobbit.planner import locality, real_traces
from hobbit.planner.locality import fit, measure, top_share
from hobbit.traces.io import Trace
from hobbit.traces.stats import summarize
from hobbit.traces.synthetic import SyntheticConfig, generate

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / ".." / "shared" / "real-traces"
ROUTING = ROOT / "hobbit" / "catalogue" / "data" / "routing.yaml"


def _real() -> Path:
    if not REAL.is_dir():
        pytest.skip("../shared/real-traces is absent")
    return REAL


def _ids(cfg: SyntheticConfig) -> np.ndarray:
    """synthetic.generate's expert ids as [requests, T, L, K]."""
    a, _ = generate(cfg)
    return a.expert_ids.reshape(cfg.requests, cfg.prompt_tokens + cfg.decode_tokens, cfg.num_layers, cfg.top_k)


# ----------------------------------------------------------------------------------------------- by hand

# two requests, L = 2 layers, K = 2, E = 8
REQ_A = np.array(
    [
        [[0, 1], [2, 3]],
        [[1, 2], [2, 3]],  # layer 0 shares {1} with the token before (1/2), layer 1 shares {2, 3} (2/2)
        [[3, 0], [3, 1]],  # layer 0 shares nothing (0), layer 1 shares {3} (1/2)
    ]
)
REQ_B = np.array(
    [
        [[0, 1], [4, 5]],
        [[1, 0], [6, 7]],  # layer 0: {0, 1} again (2/2), layer 1: nothing (0)
    ]
)


def test_reuse_by_hand():
    one = measure(REQ_A, 8)
    # layer 0: (1/2 + 0) / 2 = 0.25; layer 1: (1 + 1/2) / 2 = 0.75; mean 0.5
    assert one.reuse_per_layer == (0.25, 0.75)
    assert one.reuse == 0.5
    assert one.pairs == 2 and one.tokens == 3 and one.requests == 1
    assert one.reuse_uniform == 0.25
    assert one.reuse_excess == pytest.approx((0.5 - 0.25) / 0.75)
    two = measure([REQ_A, REQ_B], 8)  # pairs pooled per layer; no pair across the two requests
    # layer 0: (1/2 + 0 + 1) / 3 = 0.5; layer 1: (1 + 1/2 + 0) / 3 = 0.5
    assert two.reuse_per_layer == (0.5, 0.5)
    assert two.reuse == 0.5 and two.pairs == 3 and two.requests == 2
    glued = measure(np.concatenate([REQ_A, REQ_B]), 8)  # as one request, the pair across them counts
    assert glued.pairs == 4 and glued.reuse != two.reuse
    # [R, T, L, K] is R requests
    assert measure(np.stack([REQ_A, REQ_A]), 8).reuse == 0.5


def test_skew_by_hand():
    # E = 10: the top 10 % is exactly the top expert
    assert top_share(np.array([[5, 1, 1, 1, 1, 1, 0, 0, 0, 0]]))[0] == 0.5
    # E = 8: 10 % is 0.8 of the top expert; E = 20: the top two
    assert top_share(np.array([[4, 2, 1, 1, 0, 0, 0, 0]]))[0] == pytest.approx(0.8 * 4 / 8)
    assert top_share(np.array([[1] * 20]))[0] == pytest.approx(0.1)
    assert top_share(np.array([[3, 1] + [1] * 18]))[0] == pytest.approx(4 / 22)
    # measure: per layer over the tokens' selections, then the mean over layers
    ids = np.zeros((10, 2, 1), np.int64)
    ids[:, 0, 0] = np.arange(10)  # layer 0 uniform over 10 experts: 0.1
    ids[:, 1, 0] = [0] * 6 + [1, 2, 3, 4]  # layer 1: expert 0 takes 6 of 10
    loc = measure(ids, 10)
    assert loc.skew_per_layer == pytest.approx((0.1, 0.6))
    assert loc.skew == pytest.approx(0.35) and loc.top_expert_share == pytest.approx(0.35)
    assert measure(np.tile(np.arange(10)[:, None, None], (1, 2, 1)), 10).zipf == 0.0  # uniform: zipf 0


def test_cross_layer_by_hand():
    rng = np.random.default_rng(0)
    first = rng.integers(0, 8, size=(4, 20))  # 4 requests, 20 tokens, K = 1
    ids = np.stack([first, (first + 3) % 8], axis=-1)[..., None]  # layer 1 = a fixed map of layer 0
    loc = measure(ids, 8)
    assert loc.cross_layer == 1.0  # the map learnt on one half of the requests names every expert of the other
    assert loc.cross_layer_baseline is not None and loc.cross_layer_baseline < 0.5
    assert measure(ids, 8, consecutive_layers=False).cross_layer is None


def test_weight_concentration_inverts_the_dirichlet():
    for alpha, k in ((0.5, 4), (2.0, 6), (1.0, 2)):
        w = np.random.default_rng(1).dirichlet(np.full(k, alpha), size=(20_000, 1))[:, :, :] * 0.3  # any scale
        ids = np.tile(np.arange(k), (20_000, 1, 1))
        loc = measure(ids, 8, weights=w)
        assert loc.weight_hhi is not None
        assert locality.concentration_for_hhi(loc.weight_hhi, k) == pytest.approx(alpha, rel=0.06)


def test_measure_agrees_with_stats_summarize(synthetic_small):
    """measure's reuse, baseline and top-expert share are stats.summarize's definitions."""
    arrays, meta = synthetic_small
    s = summarize(Trace(meta, arrays))
    L, k = meta.model.num_layers, meta.model.top_k
    ids = arrays.expert_ids.reshape(3, -1, L, k)  # 3 requests, in order
    loc = measure(ids, meta.model.num_experts)
    assert loc.reuse == pytest.approx(s["next_token_reuse"]["all"], abs=1e-12)
    assert loc.reuse_baseline == pytest.approx(s["next_token_reuse"]["baseline"], abs=1e-12)
    assert loc.top_expert_share == pytest.approx(np.mean(s["expert_load"]["top_share"]), abs=1e-4)


# ----------------------------------------------------------------------------------------------- the fit


def test_reuse_excess_is_the_knob_under_uniform_top1_routing():
    """K = 1, uniform popularity, no cross-layer copying: measured = reuse + (1 - reuse) K/E exactly in
    expectation, so reuse_excess recovers the knob; fit agrees."""
    cfg = SyntheticConfig(
        num_layers=4, num_experts=16, top_k=1, requests=8, prompt_tokens=8, decode_tokens=120, zipf=0.0,
        reuse=0.4, cross_layer=0.0, lookahead_depth=0, seed=3,
    )  # fmt: skip
    loc = measure(_ids(cfg), 16)
    assert loc.reuse_excess == pytest.approx(0.4, abs=0.03)
    assert fit(loc, 16, 1)["reuse"] == pytest.approx(0.4, abs=0.03)


@pytest.mark.parametrize(
    "knobs",
    [
        {"zipf": 0.8, "reuse": 0.3, "cross_layer": 0.3},
        {"zipf": 0.3, "reuse": 0.1, "cross_layer": 0.5},
        {"zipf": 1.0, "reuse": 0.5, "cross_layer": 0.2},
    ],
)
def test_fit_recovers_the_knobs_of_a_synthetic_trace(knobs):
    def cfg(k: dict[str, float], seed: int) -> SyntheticConfig:
        return SyntheticConfig(
            num_layers=6, num_experts=16, top_k=2, requests=16, prompt_tokens=8, decode_tokens=56, lookahead_depth=0,
            zipf=k["zipf"], reuse=k["reuse"], cross_layer=k["cross_layer"], seed=seed,
        )  # fmt: skip

    loc = measure(_ids(cfg(knobs, 11)), 16)
    got = fit(loc, 16, 2)
    assert got["zipf"] == pytest.approx(knobs["zipf"], abs=0.15)
    assert got["reuse"] == pytest.approx(knobs["reuse"], abs=0.04)
    assert got["cross_layer"] == pytest.approx(knobs["cross_layer"], abs=0.05)
    # generating with the fitted knobs (another seed) measures the same again
    again = measure(_ids(cfg(got, 12)), 16)
    assert again.reuse == pytest.approx(loc.reuse, abs=0.02)
    assert again.skew == pytest.approx(loc.skew, abs=0.02)
    assert again.cross_layer_excess == pytest.approx(loc.cross_layer_excess, abs=0.03)


def test_simulate_is_synthetic_generate_in_distribution():
    """fit simulates synthetic.generate's process vectorised; over several traces the two measure alike."""

    def cfg(seed: int) -> SyntheticConfig:
        return SyntheticConfig(
            num_layers=6, num_experts=32, top_k=4, requests=8, prompt_tokens=8, decode_tokens=40,
            zipf=0.8, reuse=0.3, cross_layer=0.3, lookahead_depth=0, seed=seed,
        )  # fmt: skip

    gen = [measure(_ids(cfg(s)), 32) for s in range(4)]
    ids = locality.simulate(32, 4, 6, 8 * 4, 48, zipf=0.8, reuse=0.3, cross_layer=0.3, seed=5, traces=4)
    sim = [measure(ids[8 * i : 8 * (i + 1)], 32) for i in range(4)]
    for stat in ("reuse", "skew", "cross_layer"):
        a, b = np.mean([getattr(x, stat) for x in gen]), np.mean([getattr(x, stat) for x in sim])
        assert a == pytest.approx(b, abs=0.015), stat


def test_counts_give_popularity_only():
    p = np.arange(1, 65, dtype=float) ** -0.7
    counts = np.stack([p * 1e6] * 3)  # top-1 counts shaped like zipf 0.7
    loc = locality.measure_counts(counts, 1, 1_000_000)
    assert loc.reuse is None and loc.zipf == pytest.approx(0.7, abs=0.01)
    assert fit(loc, 64, 1) == {"zipf": loc.zipf}


# ----------------------------------------------------------------------------------------------- real traces


@pytest.fixture(scope="module")
def real() -> dict[str, real_traces.RealTrace]:
    return {t.name: t for t in real_traces.read_real(_real())}


def test_deepseek_reuse_matches_its_source(real):
    """SOURCE.md: 0.282 over the 300-prompt subset, per layer and then averaged over the 26 layers."""
    loc = real["deepseek-v2-lite"].measure()
    assert (loc.tokens, loc.requests, loc.layers, loc.top_k) == (5085, 300, 26, 6)
    assert round(loc.reuse, 3) == 0.282
    assert loc.reuse_uniform == pytest.approx(6 / 64)


def test_llama4_reuse_matches_its_source(real):
    """SOURCE.md: 0.343 over the 40-request subset (5,889 tokens, 24 MoE layers, top-1)."""
    loc = real["llama4-maverick"].measure()
    assert (loc.tokens, loc.requests, loc.layers, loc.top_k) == (5889, 40, 24, 1)
    assert round(loc.reuse, 3) == 0.343


def test_decode_traces_match_their_sources(real):
    """warp's SOURCE.md: next-token reuse 0.336 (Kimi-Linear, 300 steps x 26 layers x 8 of 256) and 0.435 (OLMoE,
    299 x 16 x 8 of 64); PLENA's: consecutive top-6 overlap 4.6598 of 6 and 38.87 distinct experts a layer (127 x 23)."""
    kimi, olmoe, nemo = real["kimi-linear-48b"], real["olmoe-1b-7b-decode"], real["nemotron3-nano-30b"]
    for t, shape, reuse in ((kimi, (300, 26, 8), 0.336), (olmoe, (299, 16, 8), 0.435)):
        assert t.ids is not None and t.ids[0].shape == shape and t.phase == "decode"
        assert round(t.measure().reuse or 0.0, 3) == reuse
    assert nemo.ids is not None and nemo.ids[0].shape == (127, 23, 6) and nemo.num_experts == 128
    assert (nemo.measure().reuse or 0.0) * 6 == pytest.approx(4.659765355417529, abs=1e-9)
    distinct = [len(np.unique(nemo.ids[0][:, layer])) for layer in range(23)]
    assert np.mean(distinct) == pytest.approx(38.869565217391305) and (min(distinct), max(distinct)) == (27, 47)
    assert nemo.citation == "github.com/AICrossSim/PLENA_Simulator@e93b832f6586a16aa43a34ca9e3492116c5fcaf2"
    assert kimi.citation == "github.com/sqliteai/warp@7f1fbba3cbaee0e9fdaffd940d87ff2dba9ee09b"


def test_a_decode_file_with_a_bad_line_names_it(tmp_path):
    folder = tmp_path / "warp-kimi-linear-olmoe-decode"
    shutil.copytree(_real() / folder.name, folder)
    path = folder / "raw" / "tests" / "trace_olmoe_299.jsonl"
    path.chmod(0o644)
    lines = path.read_text().splitlines()
    lines[3] = '{"tok": 4, "layers": [[1, 2, 3]]}'
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(
        ValueError, match=r"trace_olmoe_299\.jsonl: 'layers' is not 16 lists of 8 expert ids below 64 on line 4"
    ):
        real_traces.read_warp(folder)


def test_every_real_trace_is_read(real):
    assert not real_traces.unread_folders(_real())
    assert real["flame-moe-290m"].measure().tokens == 2048
    q = real["qwen1.5-moe"]
    assert q.num_experts == 60 and q.top_k == 4 and not q.consecutive_layers
    olmoe = real["olmoe-1b-7b"].measure()
    assert olmoe.reuse is None and olmoe.tokens == 208_896


# ----------------------------------------------------------------------------------------------- presets


@pytest.fixture(scope="module")
def routing() -> dict:
    return yaml.safe_load(ROUTING.read_text())


def test_presets_are_ordered_and_come_from_their_traces(routing):
    p, traces = routing["presets"], routing["traces"]
    assert list(p) == ["low", "typical", "high"]
    for stat, knob in (("reuse", "reuse"), ("skew", "zipf")):
        knobs = [p[name][knob] for name in p]
        measured = [traces[p[name]["trace"]]["measured"][stat] for name in p]
        assert knobs == sorted(knobs) and measured == sorted(measured), stat
    for name, preset in p.items():
        fitted = traces[preset["trace"]]["fitted"]
        for knob in ("zipf", "reuse", "cross_layer"):
            assert preset[knob] == pytest.approx(fitted[knob], abs=1e-3), (name, knob)  # 3 decimals against 4
        SyntheticConfig(zipf=preset["zipf"], reuse=preset["reuse"], cross_layer=preset["cross_layer"])


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["low", "typical", "high"])
def test_a_preset_reproduces_its_trace(routing, preset):
    """A synthetic trace drawn at a preset, with its trace's experts, top-k, requests and tokens, measures what the
    trace does. For time it has 6 layers, not the trace's L: the per-layer means stand for L layers as in ``fit``
    (layers 0 and 1 as drawn, layer 0 having no cross-layer input, and each later one as the mean of layers 2-5)."""
    p = routing["presets"][preset]
    t = routing["traces"][p["trace"]]
    tokens = max(2, round(t["tokens"] / t["requests"]))
    cfg = SyntheticConfig(
        num_layers=min(t["layers"], 6), num_experts=t["num_experts"], top_k=t["top_k"],
        requests=round(t["tokens"] / tokens), prompt_tokens=tokens, decode_tokens=0, lookahead_depth=0,
        zipf=p["zipf"], reuse=p["reuse"], cross_layer=p["cross_layer"], seed=0,
    )  # fmt: skip
    loc = measure(_ids(cfg), t["num_experts"])
    L = t["layers"]

    def over_l_layers(per_layer: tuple[float, ...]) -> float:
        return (per_layer[0] + per_layer[1] + (L - 2) * float(np.mean(per_layer[2:]))) / L

    m = t["measured"]
    assert over_l_layers(loc.reuse_per_layer) == pytest.approx(m["reuse"], abs=0.01)
    assert over_l_layers(loc.skew_per_layer) == pytest.approx(m["skew"], abs=0.02)
    assert loc.cross_layer_excess == pytest.approx(m["cross_layer"] - m["cross_layer_baseline"], abs=0.03)


def test_routing_yaml_is_what_the_benchmark_writes(routing):
    """hobbit/catalogue/data/routing.yaml holds the real traces' current measurements (rerun benchmarks/routing_fit.py --write)."""
    real = {t.name: t for t in real_traces.read_real(_real())}
    assert set(routing["traces"]) == set(real)
    for name in ("deepseek-v2-lite", "flame-moe-290m", "llama4-maverick"):
        loc = real[name].measure()
        m = routing["traces"][name]["measured"]
        assert (m["reuse"], m["skew"]) == pytest.approx((loc.reuse, loc.skew), abs=1e-4), name
