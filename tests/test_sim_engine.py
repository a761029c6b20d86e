"""The simulator end to end: the two timing engines agree, limits behave, results are deterministic."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hobbit.sim.config import ConfigError, ModelConfig
from hobbit.sim.cost import CostModel
from hobbit.sim.decisions import HIGH_LOAD, LOW_LOAD, SKIPPED
from hobbit.sim.formats import weights
from hobbit.sim.policies.base import SKIP
from hobbit.sim.policies.precision import classes_for
from hobbit.sim.run import simulate
from hobbit.traces.io import Trace
from hobbit.traces.schema import InputError
from hobbit.traces.synthetic import SyntheticConfig, generate

from sim_helpers import bundled, compose_sim, without_predictions

SYSTEMS = [
    "hobbit",
    "hobbit-no-mixed",
    "hobbit-no-prefetch",
    "hobbit-lru",
    "moe-offloading",
    "moe-infinity",
    "fiddler",
    "llama-cpp",
    "on-demand",
    "hobbit-oracle",
    "hobbit-cpu",
    "ktransformers",
    "freetoken",
    "tec",
    "llama-cpp-lru",
    "llama-cpp-2024",
]


@pytest.fixture(scope="module")
def small():
    return bundled(3)


@pytest.mark.parametrize("system", SYSTEMS)
def test_simpy_engine_and_plain_replay_agree(small, system):
    cfg = compose_sim(f"system={system}")
    a = simulate(small, cfg.model, cfg.hardware, cfg.system, engine="simpy")
    b = simulate(small, cfg.model, cfg.hardware, cfg.system, engine="plain")
    np.testing.assert_allclose(a.timeline.pass_end, b.timeline.pass_end, rtol=1e-9)
    np.testing.assert_allclose(a.timeline.step_stall, b.timeline.step_stall, rtol=1e-9, atol=1e-12)
    assert a.summary["bytes_loaded"] == b.summary["bytes_loaded"]
    assert a.summary["prefetch"] == b.summary["prefetch"] and a.summary["hit_rate"] == b.summary["hit_rate"]


def _compute_only(res, cost: CostModel, wl_passes) -> np.ndarray:
    """Pass latencies if every weight were resident: dense + the experts it computed + LM head."""
    out = []
    steps = res.decisions.steps
    L = len(steps) // len(wl_passes)
    for p, tokens, ctx in wl_passes:
        t = 0.0
        for s in steps[p * L : (p + 1) * L]:
            t += cost.dense_s(tokens, ctx) + sum(cost.expert_s(prec, n) for _, prec, n in s.gpu)
        out.append(t + cost.other_s(tokens))
    return np.array(out)


@pytest.mark.parametrize("system", ["hobbit", "on-demand", "moe-offloading"])
def test_infinite_bandwidth_gives_compute_only_latency(small, system):
    """A link of 10^15 GB/s with no per-copy cost (knobs are finite; this is the limit)."""
    cfg = compose_sim(f"system={system}", "hardware.link_gbps=1e15", "hardware.link_t0_s=0")
    res = simulate(small, cfg.model, cfg.hardware, cfg.system)
    assert res.timeline.step_stall.max() < 1e-12 and res.summary["stall_ms_per_token"] < 1e-9
    p = res.passes
    passes = list(zip(range(len(p)), p.tokens, p.context))
    want = _compute_only(res, CostModel(cfg.model, cfg.hardware), passes)
    np.testing.assert_allclose(p.latency_ms.to_numpy(), want * 1e3, rtol=1e-9)


def test_zero_cache_loads_every_expert_that_is_not_skipped(small):
    cfg = compose_sim(
        "system=hobbit", "system.prefetch.kind=none", "system.cache.high_bytes=0", "system.cache.low_bytes=0"
    )
    res = simulate(small, cfg.model, cfg.hardware, cfg.system)
    served = res.decisions.served
    # count (pass, layer, expert) uses not skipped, straight from the trace
    from hobbit.sim.workload import build_workload

    wl = build_workload(small)
    cls = classes_for(wl.weights, "hobbit", cfg.system.precision.t1, cfg.system.precision.t2)
    needed = skipped = 0
    for a, b in zip(wl.pass_start, wl.pass_end):
        for layer in range(wl.num_layers):
            best: dict[int, int] = {}
            for t in range(a, b):
                for e, c in zip(wl.ids[t, layer], cls[t, layer]):
                    best[int(e)] = min(best.get(int(e), SKIP), int(c))
            needed += sum(c != SKIP for c in best.values())
            skipped += sum(c == SKIP for c in best.values())
    assert served[HIGH_LOAD] + served[LOW_LOAD] == needed and served[SKIPPED] == skipped
    assert res.summary["hit_rate"] == 0.0 and res.summary["evictions"] == 0


def test_runs_are_deterministic(small):
    cfg = compose_sim("system=hobbit")
    a, b = (simulate(small, cfg.model, cfg.hardware, cfg.system).summary for _ in range(2))
    a.pop("wall_s")
    b.pop("wall_s")
    assert a == b


def test_the_decision_log_is_typed(small):
    """Every record of the decision log names its fields: copies (``Load``, ``CopyKey``), computations
    (``Compute``), log entries (``LogEntry``); precisions are ``Precision`` and served kinds ``Served``;
    and the fields agree with each other (a demand load is waited for by a computation of its step)."""
    from hobbit.sim.decisions import SERVED_NAMES, Compute, CopyKey, Load, LogEntry, Served
    from hobbit.sim.policies.base import Precision

    cfg = compose_sim("system=hobbit")
    res = simulate(small, cfg.model, cfg.hardware, cfg.system, keep_log=True)
    steps = res.decisions.steps
    assert any(s.loads for s in steps) and any(s.evicted for s in steps)
    for s in steps:
        assert all(type(x) is Load for x in s.loads) and all(type(x) is Compute for x in s.gpu)
        assert all(type(k) is CopyKey for k in (*s.load_keys, *s.evicted, *s.kept))
        assert all(isinstance(g.precision, Precision) and g.precision != Precision.SKIP for g in s.gpu)
        waited = {g.tid for g in s.gpu}
        assert all(ld.tid in waited for ld in s.loads if ld.demand)
        assert all(
            k.precision == Precision.HIGH
            and ld.nbytes == res.cost.expert_bytes(Precision.HIGH)
            or k.precision == Precision.LOW
            and ld.nbytes == res.cost.expert_bytes(Precision.LOW)
            for ld, k in zip(s.loads, s.load_keys)
        )
    log = res.decisions.log
    assert log and all(type(x) is LogEntry and isinstance(x.precision, Precision) for x in log)
    assert SERVED_NAMES == tuple(k.name.lower() for k in Served) == tuple(res.summary["served_mix"])
    counts = {a: sum(x.action == a for x in log) for a in ("skip", "load")}
    assert counts["skip"] == res.decisions.served[Served.SKIPPED] > 0
    assert counts["load"] == res.decisions.served[Served.HIGH_LOAD] + res.decisions.served[Served.LOW_LOAD]


def test_more_bandwidth_is_never_slower(small):
    times = []
    for gbps in (8, 25, 64, 256):
        cfg = compose_sim("system=hobbit", f"hardware.link_gbps={gbps}")
        times.append(simulate(small, cfg.model, cfg.hardware, cfg.system).summary["decode_ms_per_token"]["mean"])
    assert times == sorted(times, reverse=True)


def test_topology_mismatch_names_both(small):
    cfg = compose_sim("model=olmoe-1b-7b")
    with pytest.raises(ConfigError, match="hobbit-tiny-mixtral.*32 MoE layers, 8 experts, top-2.*olmoe-1b-7b"):
        simulate(small, cfg.model, cfg.hardware, cfg.system)


@pytest.mark.parametrize(
    "override,knob",
    [
        ("system.precision.t1=0.95", "t1"),
        ("system.cache.multidim.w_lfu=-0.1", "system.cache.multidim.w_lfu=-0.1 must be >= 0"),
        ("system=moe-infinity system.prefetch.eam.capacity=0", "system.prefetch.eam.capacity=0 must be >= 1"),
        ("system.cache.high_bytes=1000", "high_bytes"),
        ("system.prefetch.kind=psychic", "prefetch.kind"),
        ("system.prefetch.precision=medium", "system.prefetch.precision=medium must be rule, high or low"),
    ],
)
def test_bad_knobs_fail_before_the_run(small, override, knob):
    with pytest.raises(InputError, match=knob):  # when composed (a value out of its limits) or as the run starts
        cfg = compose_sim(*override.split())
        simulate(small, cfg.model, cfg.hardware, cfg.system)


def test_a_model_too_big_for_the_device_is_named(small):
    cfg = compose_sim("hardware.device_memory_bytes=1000000000")
    with pytest.raises(ConfigError, match="mixtral-8x7b needs"):
        simulate(small, cfg.model, cfg.hardware, cfg.system)


def test_unified_memory_reads_experts_from_the_ssd(small):
    cfg = compose_sim("hardware=jetson-agx-orin")
    res = simulate(small, cfg.model, cfg.hardware, cfg.system)
    cost = CostModel(cfg.model, cfg.hardware)
    assert cost.link_gbps == 3.0
    assert res.summary["bytes_loaded"] > 0
    # the link is the SSD: its busy time is the bytes it moved at 3 GB/s plus t0 per copy
    assert res.timeline.link_busy_s >= res.summary["bytes_loaded"] / 3e9


def test_a_trace_without_predictions_uses_the_fallback(small):
    bare = without_predictions(small)
    for fallback in ("oracle", "history", "none"):
        cfg = compose_sim("system=hobbit", f"system.prefetch.fallback={fallback}")
        s = simulate(bare, cfg.model, cfg.hardware, cfg.system).summary
        assert (s["prefetch"]["issued"] > 0) == (fallback != "none"), fallback


@settings(max_examples=20, deadline=None)
@given(
    seed=st.integers(0, 1000),
    layers=st.integers(2, 5),
    experts=st.integers(2, 8),
    k=st.integers(1, 3),
    system=st.sampled_from(SYSTEMS),
    high=st.integers(0, 6),
    low=st.integers(0, 6),
    gbps=st.sampled_from([1.0, 25.0, 1000.0]),
    demand_first=st.booleans(),
)
def test_small_random_traces_keep_the_invariants(seed, layers, experts, k, system, high, low, gbps, demand_first):
    k = min(k, experts)
    arrays, meta = generate(
        SyntheticConfig(
            num_layers=layers,
            num_experts=experts,
            top_k=k,
            requests=2,
            prompt_tokens=3,
            decode_tokens=6,
            lookahead_depth=2,
            seed=seed,
        )
    )
    trace = Trace(meta, arrays, "synthetic")
    model = ModelConfig(
        name="m",
        num_layers=layers,
        num_experts=experts,
        top_k=k,
        hidden_size=256,
        expert_ffn=512,
        dense_params_per_layer=10_000,
        other_params=10_000,
        kv_bytes_per_token=64,
    )
    cfg = compose_sim(f"system={system}", f"hardware.link_gbps={gbps}")
    high_eb = weights(model, cfg.system.weights).expert_bytes  # per layer; the simulator charges their mean
    eb = (round(sum(high_eb) / len(high_eb)), model.expert_bytes(cfg.system.precision.low))
    sys_cfg = dataclasses.replace(
        cfg.system,
        demand_first=demand_first,
        cache=dataclasses.replace(cfg.system.cache, high_bytes=high * eb[0], low_bytes=low * eb[1]),
    )
    a = simulate(trace, model, cfg.hardware, sys_cfg, engine="simpy")
    b = simulate(trace, model, cfg.hardware, sys_cfg, engine="plain")
    np.testing.assert_allclose(a.timeline.pass_end, b.timeline.pass_end, rtol=1e-9)
    s, dec = a.summary, a.decisions
    uses = sum(
        len(
            {
                int(e)
                for e in arrays.expert_ids[
                    (arrays.request_id == r) & (arrays.step == st_) & (arrays.layer == lay)
                ].ravel()
            }
        )
        for r, st_, lay in {(int(r), int(x), int(y)) for r, x, y in zip(arrays.request_id, arrays.step, arrays.layer)}
    )
    assert dec.served.sum() == uses
    assert s["bytes_loaded"] <= dec.bytes_requested * (2 if sys_cfg.write_back else 1)  # a swap moves them twice
    assert 0.0 <= s["hit_rate"] <= 1.0 and 0.0 <= s["link_busy_fraction"] <= 1.0 + 1e-9
    assert np.all(np.diff(a.timeline.pass_start) >= 0) and np.all(a.timeline.step_stall >= 0)


def test_the_tables_written_without_pandas_read_back_as_the_runs_frames(small, tmp_path):
    import pandas as pd

    from hobbit.plumbing.results_io import write_results

    cfg = compose_sim()
    res = simulate(small, cfg.model, cfg.hardware, cfg.system)
    write_results(res, tmp_path)
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "passes.parquet"), res.passes)
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "layers.parquet"), res.layers)
    assert res.passes is res.passes  # built once, on first use
    dec = res.passes[res.passes.phase == 1]
    assert res.summary["decode_ms_per_token"]["mean"] == (dec.latency_ms / dec.tokens.clip(lower=1)).mean()
    assert res.summary["stall_ms_per_token"] == dec.stall_ms.sum() / dec.tokens.sum()
