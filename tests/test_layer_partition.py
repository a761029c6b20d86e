"""A per-layer cache's split of its pools (``system.cache.layer_partition``) and its wide steps
(``system.cache.wide_step``): the regions worked by hand, the compiled walk against the reference where the
layers' regions differ in size, and a prefill that keeps none of its misses."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from test_fast import assert_same, assert_streamed, streamed

from hobbit.sim import fast
from hobbit.sim.config import ModelConfig, PrefetchConfig, SystemConfig
from hobbit.sim.decide import Decider
from hobbit.sim.decisions import HIGH_HIT, HIGH_LOAD
from hobbit.sim.memory import fit
from hobbit.sim.policies.base import HIGH
from hobbit.sim.policies.registry import EVICTION
from hobbit.sim.run import simulate
from hobbit.sim.sizing import cache_regions, layer_slots, recorded_bytes, size_cache
from hobbit.sim.workload import Workload
from hobbit.traces.io import Trace
from hobbit.traces.synthetic import SyntheticConfig, generate

from sim_helpers import compose_sim


def _model(layer_bytes: list[int], num_experts: int = 8, top_k: int = 2) -> ModelConfig:
    """A model whose file stores each MoE layer's experts at ``layer_bytes`` (a GGUF's layers differ)."""
    return ModelConfig(
        name="m",
        num_layers=len(layer_bytes),
        num_experts=num_experts,
        top_k=top_k,
        hidden_size=64,
        expert_ffn=128,
        dense_params_per_layer=10_000,
        other_params=10_000,
        kv_bytes_per_token=64,
        layer_expert_bytes=layer_bytes,
        file_resident_bytes=100_000,
    )


def _trace(model: ModelConfig, seed: int = 7, requests: int = 5, prompt: int = 12, decode: int = 20) -> Trace:
    arrays, meta = generate(
        SyntheticConfig(
            num_layers=model.num_layers,
            num_experts=model.num_experts,
            top_k=model.top_k,
            requests=requests,
            prompt_tokens=prompt,
            decode_tokens=decode,
            lookahead_depth=2,
            seed=seed,
        )
    )
    return Trace(meta, arrays, "synthetic")


def _system(base: SystemConfig, **cache) -> SystemConfig:
    return dataclasses.replace(base, cache=dataclasses.replace(base.cache, per_layer=True, **cache))


def _occupancy(dec, num_layers: int, pool: int = HIGH) -> np.ndarray:
    """The most copies of each layer a pool held at once, from the decisions' kept and evicted records."""
    held, most = np.zeros(num_layers, np.int64), np.zeros(num_layers, np.int64)
    for step in dec.steps:
        for k in step.evicted:
            held[k.layer] -= k.precision == pool
        for k in step.kept:
            held[k.layer] += k.precision == pool
        most = np.maximum(most, held)
    return most


# ---------------------------------------------------------------- the split, by hand


def test_a_pool_splits_into_equal_slots_or_equal_bytes_per_layer():
    """1000 bytes over layers of 100, 120 and 100 bytes: ``slots`` gives every layer 1000 // 320 = 3 slots (9);
    ``bytes`` gives every layer 333.3 bytes: floor(333.3 / 100) = 3, floor(333.3 / 120) = 2, 3 (8)."""
    np.testing.assert_array_equal(layer_slots(1000, [100, 120, 100], "slots"), [3, 3, 3])
    np.testing.assert_array_equal(layer_slots(1000, [100, 120, 100], "bytes"), [3, 2, 3])
    np.testing.assert_array_equal(layer_slots(1000, [100, 120, 100], "bytes", cap=2), [2, 2, 2])
    np.testing.assert_array_equal(layer_slots(1000, [100, 120, 100], "slots", cap=4), [3, 3, 3])
    np.testing.assert_array_equal(layer_slots(999, [111, 111, 111], "bytes"), [3, 3, 3])  # 333 / 111, exactly
    np.testing.assert_array_equal(layer_slots(998, [111, 111, 111], "bytes"), [2, 2, 2])
    np.testing.assert_array_equal(layer_slots(0, [100, 120, 100], "bytes"), [0, 0, 0])
    # the same layers, uniform: both rules are the pool's slots // L, as before the knob
    for rule in ("slots", "bytes"):
        np.testing.assert_array_equal(layer_slots(1000, [110] * 3, rule), [1000 // 110 // 3] * 3)


@pytest.mark.parametrize(("rule", "regions", "reported"), [("slots", [3, 3, 3], 9), ("bytes", [3, 2, 3], 8)])
def test_a_runs_regions_are_its_rules_and_hold_no_more(rule, regions, reported):
    """The worked pool in a run: its regions, the pool's slots the run reports (``slots``: 1000 // 107 at the mean
    expert, as before the knob; ``bytes``: its regions' sum), the decisions' pool (its regions' sum), a note of what
    the split leaves, and no layer ever holding more copies than its region."""
    model = _model([100, 120, 100])
    cfg = compose_sim("system=on-demand")
    system = _system(cfg.system, policy="lru", layer_partition=rule, high_bytes=1000, low_bytes=0)
    mem = fit(model, cfg.hardware, system, 64)
    sizing = size_cache(model, cfg.hardware, system, 64, memory=mem)
    assert (sizing.high_slots, sizing.low_slots, sizing.high_bytes) == (reported, 0, 1000)
    got = cache_regions(model, cfg.hardware, system, mem, 1.0, recorded_bytes(mem, None, 3))
    np.testing.assert_array_equal(got, [regions, [0, 0, 0]])
    trace = _trace(model, requests=3)
    res = simulate(trace, model, cfg.hardware, system, engine="plain", profile_share=0.0)
    assert res.decisions.slots == (sum(regions), 0)
    assert res.summary["cache"]["high_slots"] == reported
    np.testing.assert_array_equal(_occupancy(res.decisions, 3), regions)  # every region filled, none overfilled
    used = sum(n * b for n, b in zip(regions, [100, 120, 100]))
    note = f"cache per layer (layer_partition={rule}): "
    assert any(n.startswith(note) and f"{used / 2**20:,.1f} MiB of" in n for n in res.summary["memory"]["notes"])
    assert_same(simulate(trace, model, cfg.hardware, system, engine="fast", profile_share=0.0), res, compiled=True)


def test_a_layer_cap_and_pinned_hot_set_apply_per_layer():
    """``layer_slots`` caps each layer's region; TEC's pinned hot set takes its slots from every region."""
    model = _model([100, 120, 100])
    cfg = compose_sim("system=on-demand")
    capped = _system(cfg.system, layer_partition="bytes", layer_slots=2, high_bytes=1000, low_bytes=0)
    mem = fit(model, cfg.hardware, capped, 64)
    np.testing.assert_array_equal(
        cache_regions(model, cfg.hardware, capped, mem, 1.0, recorded_bytes(mem, None, 3))[0], [2, 2, 2]
    )
    sizing = size_cache(model, cfg.hardware, capped, 64, memory=mem)
    assert (sizing.high_slots, sizing.high_bytes) == (6, 2 * (100 + 120 + 100))
    trace = _trace(model, requests=6)
    pinned = _system(cfg.system, layer_partition="bytes", layer_pinned=0.5, high_bytes=1000, low_bytes=0)
    res = simulate(trace, model, cfg.hardware, pinned, engine="plain")  # 8 // 3 = 2 slots a layer, 1 pinned
    assert res.decisions.slots == (8 - 3, 0)
    np.testing.assert_array_equal(_occupancy(res.decisions, 3), [2, 1, 2])
    assert_same(simulate(trace, model, cfg.hardware, pinned, engine="fast"), res, compiled=True)


# ---------------------------------------------------------------- the compiled walk where regions differ

# 960,000 bytes over layers of 30, 45, 30 and 60 kB: bytes gives 240 kB a layer, regions of 8, 5, 8 and 4 slots
DIFFERING = [30_000, 45_000, 30_000, 60_000]


@pytest.mark.parametrize("policy", sorted(EVICTION))
@pytest.mark.parametrize("wide", ["keep", "bypass"])
def test_every_policy_on_regions_of_different_sizes_as_the_reference(policy, wide):
    """Every registered eviction policy, HOBBIT's two pools and prefetches, on a per-layer cache whose layers' regions
    differ (bytes: 8, 5, 8, 4 high slots): the compiled walk makes the reference's decisions and times, whole and
    streamed a pass at a time; with ``wide_step=bypass`` too (prefill steps select more experts than a region)."""
    model = _model(DIFFERING, num_experts=16, top_k=4)
    cfg = compose_sim("system=hobbit")
    system = _system(
        cfg.system, policy=policy, layer_partition="bytes", wide_step=wide, high_bytes=960_000, low_bytes=150_000
    )
    assert fast.unsupported(system) is None
    trace = _trace(model)
    ref = simulate(trace, model, cfg.hardware, system, engine="plain", profile_share=0.25)
    got = simulate(trace, model, cfg.hardware, system, engine="fast", profile_share=0.25)
    assert "4-8 high slots per layer (25 in 4 layers)" in " ".join(ref.summary["memory"]["notes"])
    assert ref.decisions.slots == (25, 8) and ref.decisions.evictions > 50
    assert_same(got, ref, compiled=True)
    assert_streamed(streamed(trace, model, cfg.hardware, system, 1, profile_share=0.25), got)


@pytest.mark.parametrize("policy", ["lru", "multidim", "belady", "s3fifo", "arc", "lirs", "sieve"])
def test_a_layer_left_without_slots_keeps_nothing_and_tells_no_policy(policy):
    """Layers of 30, 200, 30 and 60 kB sharing 480 kB by bytes: the second gets no slot (120 kB < 200 kB). Its copies
    are used once and never kept; the compiled walk agrees, hooks and all."""
    model = _model([30_000, 200_000, 30_000, 60_000], num_experts=16, top_k=4)
    cfg = compose_sim("system=hobbit")
    system = _system(cfg.system, policy=policy, layer_partition="bytes", high_bytes=480_000, low_bytes=0)
    trace = _trace(model, seed=3)
    ref = simulate(trace, model, cfg.hardware, system, engine="plain", profile_share=0.0)
    assert ref.decisions.slots == (4 + 0 + 4 + 2, 0)
    np.testing.assert_array_equal(_occupancy(ref.decisions, 4), [4, 0, 4, 2])
    assert_same(simulate(trace, model, cfg.hardware, system, engine="fast", profile_share=0.0), ref, compiled=True)


@pytest.mark.parametrize(("cpu_misses", "insert"), [("always", 2), ("faster", 0), ("faster", 1), ("split", 0)])
def test_a_wide_step_copies_nothing_behind_the_cpu_as_the_reference(cpu_misses, insert):
    """llama.cpp's copies behind a CPU-computed miss (``cpu_insert``) and the fill of an empty slot (``faster``): a
    bypassed step makes none; the compiled walk agrees."""
    model = _model(DIFFERING, num_experts=16, top_k=4)
    cfg = compose_sim("system=llama-cpp-lru")
    base = dataclasses.replace(cfg.system, cpu_misses=cpu_misses, cpu_insert=insert, weights="fp16")
    trace = _trace(model)
    hw = dataclasses.replace(cfg.hardware, link_gbps=0.05) if cpu_misses != "always" else cfg.hardware
    runs = {}
    for wide in ("keep", "bypass"):
        system = _system(base, layer_slots=0, layer_partition="bytes", wide_step=wide, high_bytes=960_000)
        ref = simulate(trace, model, hw, system, engine="plain", profile_share=0.0)
        assert_same(simulate(trace, model, hw, system, engine="fast", profile_share=0.0), ref, compiled=True)
        runs[wide] = ref
    wl = runs["keep"].workload
    regions = [8, 5, 8, 4]
    wide_steps = [
        i
        for i, s in enumerate(runs["keep"].decisions.steps)
        if len(np.unique(wl.ids[wl.pass_start[s.pass_index] : wl.pass_end[s.pass_index], s.layer])) > regions[s.layer]
    ]
    assert wide_steps and any(runs["keep"].decisions.steps[i].kept for i in wide_steps)
    for i in wide_steps:  # nothing kept, nothing evicted, no copy behind the CPU
        s = runs["bypass"].decisions.steps[i]
        assert not s.kept and not s.evicted and all(ld.demand for ld in s.loads), i
    assert runs["bypass"].decisions.steps != runs["keep"].decisions.steps


# ---------------------------------------------------------------- a wide step, worked by hand


def _prefill_then_decode(passes: int = 3) -> Workload:
    """One request over two layers of 8 experts, top-2: a prefill of four tokens (layer 0 selects experts 0-5, six;
    layer 1 selects 0 and 1), then two decode tokens that select 4 and 5 in layer 0, 0 and 1 in layer 1; its first
    ``passes`` passes."""
    ids = np.array(
        [
            [[0, 1], [0, 1]],
            [[2, 3], [0, 1]],
            [[0, 1], [1, 0]],
            [[4, 5], [0, 1]],
            [[4, 5], [0, 1]],
            [[5, 4], [1, 0]],
        ],
        np.int64,
    )[: [0, 4, 5, 6][passes]]
    n = len(ids)
    return Workload(
        num_layers=2,
        num_experts=8,
        top_k=2,
        ids=ids,
        weights=np.full(ids.shape, 0.5, np.float32),
        pred_ids=None,
        pred_weights=None,
        pass_request=[0, 0, 0][:passes],
        pass_start=[0, 4, 5][:passes],
        pass_end=[4, 5, 6][:passes],
        pass_phase=[0, 1, 1][:passes],
        pass_context=[4, 5, 6][:passes],
        token_in_request=np.arange(n),
        layers_total=2,
    )


WORKED = SystemConfig(
    precision=dataclasses.replace(SystemConfig().precision, mode="high"),
    prefetch=PrefetchConfig(kind="none"),
    cache=dataclasses.replace(SystemConfig().cache, policy="lru", per_layer=True),
)
REGIONS = np.array([[3, 3], [0, 0]])  # three high slots in each layer


@pytest.mark.parametrize("wide", ["keep", "bypass"])
def test_a_prefill_wider_than_its_region_keeps_none_of_its_misses(wide):
    """Layer 0's prefill selects six experts, its region has three slots. ``keep``: they evict one another, and LRU
    keeps the last three (3, 4, 5), so the decode tokens hit 4 and 5. ``bypass``: the cache after the prefill is the
    cache before it (empty) in layer 0, so the first decode token misses 4 and 5 (counted as loads) and keeps them;
    layer 1 (two experts, three slots) keeps its copies either way. The compiled walk agrees."""
    wl = _prefill_then_decode()
    system = dataclasses.replace(WORKED, cache=dataclasses.replace(WORKED.cache, wide_step=wide))
    cut = Decider(_prefill_then_decode(1), system, REGIONS, (100, 50))  # the cache right after the prefill
    cut.run()
    after = cut.cache.keys(HIGH)
    if wide == "bypass":
        assert after == {(1, 0), (1, 1)}  # layer 0 as before the prefill: empty
    else:
        assert after == {(0, 3), (0, 4), (0, 5), (1, 0), (1, 1)}
    ref = Decider(wl, system, REGIONS, (100, 50)).run()
    steps = ref.steps
    layer0 = [s for s in steps if s.layer == 0]
    if wide == "bypass":
        assert not layer0[0].kept and not layer0[0].evicted and len(layer0[0].loads) == 6
        assert [k.expert for k in layer0[1].kept] == [4, 5] and len(layer0[1].loads) == 2
        assert ref.served[HIGH_LOAD] == 6 + 2 + 2 and ref.served[HIGH_HIT] == 2 + 2 + 2  # prefill, decode 1, 2
    else:
        assert len(layer0[0].kept) == 6 and len(layer0[0].evicted) == 3
        assert not layer0[1].loads and not layer0[2].loads
        assert ref.served[HIGH_LOAD] == 6 + 2 and ref.served[HIGH_HIT] == 2 + 2 + 2 + 2
    assert [k.expert for k in steps[1].kept] == [0, 1]  # layer 1 of the prefill: within its region, kept
    got = fast.decide_or_refer(wl, system, REGIONS, (100, 50))
    assert got.tables is not None  # the compiled walk decided
    assert list(got.steps) == steps
    np.testing.assert_array_equal(got.served, ref.served)
    assert (got.evictions, got.slots) == (ref.evictions, ref.slots) == (ref.evictions, (6, 0))


def test_a_wide_step_is_the_pass_not_the_token():
    """Decode passes of one token select top-k experts: never wider than a region of at least k slots, so
    ``bypass`` changes nothing there; a region narrower than k makes every step wide (nothing kept)."""
    model = _model(DIFFERING, num_experts=16, top_k=4)
    cfg = compose_sim("system=on-demand")
    trace = _trace(model, prompt=1, decode=30)  # a one-token prompt: every pass one token
    runs = [
        simulate(
            trace,
            model,
            cfg.hardware,
            _system(cfg.system, layer_partition="bytes", wide_step=w, high_bytes=960_000, low_bytes=0),
            engine="fast",
            profile_share=0.0,
        )
        for w in ("keep", "bypass")
    ]
    assert runs[0].decisions.evictions > 0
    assert_same(runs[1], runs[0], compiled=True)
    narrow = _system(
        cfg.system, layer_partition="slots", wide_step="bypass", high_bytes=3 * sum(DIFFERING), low_bytes=0
    )
    res = simulate(trace, model, cfg.hardware, narrow, engine="plain", profile_share=0.0)
    assert res.decisions.slots == (12, 0) and res.decisions.evictions == 0
    assert not any(s.kept for s in res.decisions.steps)
    assert_same(simulate(trace, model, cfg.hardware, narrow, engine="fast", profile_share=0.0), res, compiled=True)


def test_the_default_split_is_the_even_one():
    """A pair of slots given to a per-layer walk splits evenly (the pool's slots // L, the rest unused), as a
    [2, L] table of the same counts does: the same decisions."""
    wl = _prefill_then_decode()
    pair = Decider(wl, WORKED, (7, 0), (100, 50)).run()
    table = Decider(wl, WORKED, np.array([[3, 3], [0, 0]]), (100, 50)).run()
    assert pair.steps == table.steps and pair.slots == (7, 0) and table.slots == (6, 0)
    assert list(fast.decide_or_refer(wl, WORKED, (7, 0), (100, 50)).steps) == pair.steps
