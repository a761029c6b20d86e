"""The systems users meet in the field (KTransformers, FreeToken, TEC, llama.cpp's expert cache) on the bundled
trace: each does what its source says it does, and no run beats its latency bound."""

from __future__ import annotations

import dataclasses

import pytest

from hobbit.sim.decisions import CPU, HIGH_HIT, HIGH_LOAD, SKIPPED
from hobbit.sim.run import simulate

from sim_helpers import bundled, compose_sim


@pytest.fixture(scope="module")
def trace():
    return bundled(6)


def _run(trace, system: str, *over: str):
    cfg = compose_sim(f"system={system}", *over)
    res = simulate(trace, cfg.model, cfg.hardware, cfg.system)
    assert res.summary["decode_ms_per_token"]["mean"] >= res.summary["bound"]["decode_ms_per_token"] - 1e-9, system
    return res


def test_ktransformers_computes_every_routed_expert_on_the_cpu(trace):
    res = _run(trace, "ktransformers")
    served = res.decisions.served
    assert served[CPU] == served.sum() - served[SKIPPED] > 0
    assert res.summary["bytes_loaded"] == 0 and res.decisions.evictions == 0


def test_freetoken_splits_a_layers_misses_between_the_link_and_the_cpu(trace):
    """On the 4090 a 352 MB copy takes over twice the CPU's time for an expert: its auto backend splits.
    With the threshold out of reach, it copies every miss into one LRU cache, as on-demand loading does."""
    res = _run(trace, "freetoken")
    served = res.decisions.served
    assert served[CPU] > 0 and served[HIGH_LOAD] > 0 and served[HIGH_HIT] > 0
    off = _run(trace, "freetoken", "system.split_threshold=1e9")
    ref = _run(trace, "on-demand")
    assert list(off.decisions.served) == list(ref.decisions.served) and off.decisions.served[CPU] == 0
    # the split balances the two: it is faster than copying every miss
    assert res.summary["decode_ms_per_token"]["mean"] < off.summary["decode_ms_per_token"]["mean"]


def test_freetoken_max_fetch_caps_the_copies_of_a_layer(trace):
    """A decode step's misses all go to the CPU with no copies allowed (a prefill's many tokens make the CPU
    the slower side: there every miss is still copied)."""
    res = _run(trace, "freetoken", "system.split_max_fetch=0")
    wl = res.workload
    assert wl is not None
    single = {p for p, (a, b) in enumerate(zip(wl.pass_start, wl.pass_end)) if b - a == 1}
    steps = [s for s in res.decisions.steps if s.pass_index in single]
    assert steps and not any(s.loads for s in steps) and any(s.cpu for s in steps)


def test_tec_caps_each_layers_cache_at_its_share_of_the_experts(trace):
    """TEC's rule: 0.75 x the experts, at least 4 x top-k (8 of Mixtral's 8: all of them); a 60-expert
    top-4 model keeps 45 per layer, however much memory is free."""
    res = _run(trace, "tec", "hardware=h200-pcie5")
    assert res.summary["cache"]["high_slots"] == 8 * 32
    cfg = compose_sim("system=tec", "hardware=h200-pcie5", "model=qwen1.5-moe-a2.7b")
    from hobbit.sim.sizing import size_cache

    assert size_cache(cfg.model, cfg.hardware, cfg.system, 4096).high_slots == 45 * cfg.model.num_layers
    # per layer: a layer's misses never evict another layer's experts
    small = _run(
        trace, "tec", "system.weights=fp16", "hardware=h200-pcie5", f"system.cache.high_bytes={64 * 352 * 2**20}"
    )
    assert small.decisions.evictions > 0
    for step in small.decisions.steps:
        assert all(v[0] == step.layer for v in step.evicted)


def test_llama_cpp_cache_computes_misses_on_the_cpu_and_copies_two_behind(trace):
    """Misses on the CPU, at most two copies behind it per layer and step; a prompt pass of 32+ tokens computes its
    misses on the GPU instead, each copied and not kept (op offload, ``offload_min_batch``)."""
    res = _run(trace, "llama-cpp-lru", "system.offload_min_batch=0")
    dec = res.decisions
    assert dec.served[HIGH_LOAD] == 0 and dec.served[CPU] > 0 and dec.served[HIGH_HIT] > 0
    for step in dec.steps:
        assert len(step.loads) <= 2 and not any(demand for _, _, demand in step.loads)
        assert all(v[0] == step.layer for v in step.evicted)  # per-layer LRU
    wl, offload = res.workload, _run(trace, "llama-cpp-lru").decisions
    assert wl is not None
    assert offload.served[HIGH_LOAD] > 0
    for step in offload.steps:
        wide = wl.pass_end[step.pass_index] - wl.pass_start[step.pass_index] >= 32
        assert wide or (len(step.loads) <= 2 and not any(demand for _, _, demand in step.loads))
        assert not wide or not step.kept  # what a wide pass copies is used once
    no_insert = _run(trace, "llama-cpp-lru", "system.cpu_insert=0", "system.offload_min_batch=0")
    assert no_insert.decisions.served[HIGH_HIT] == 0 and no_insert.summary["bytes_loaded"] == 0


def test_a_cap_on_slots_per_layer_shrinks_the_pool(trace):
    cfg = compose_sim("system=on-demand", "hardware=h200-pcie5")
    from hobbit.sim.sizing import size_cache

    full = size_cache(cfg.model, cfg.hardware, cfg.system, 4096)
    capped = dataclasses.replace(cfg.system, cache=dataclasses.replace(cfg.system.cache, layer_slots=3))
    got = size_cache(cfg.model, cfg.hardware, capped, 4096)
    assert got.high_slots == 3 * 32 < full.high_slots and got.high_bytes <= full.high_bytes


def test_tec_pins_each_layers_hot_set_from_the_profiling_requests(trace):
    """TEC's pin list: half of a layer's slots hold its most used experts in the requests held apart, for
    good; only the other half is the LRU cache, so a hot expert is never copied."""
    import numpy as np

    from hobbit.sim.workload import build_workload, split_requests

    four = "system.cache.high_bytes=" + str(4 * 32 * 352_321_536)  # four fp16 Mixtral experts per layer
    res = _run(trace, "tec", four, "system.cache.layer_pinned=0.5", "system.weights=fp16", "hardware=h200-pcie5")
    profile, _ = split_requests(trace, 0.25)
    assert profile is not None
    counts = build_workload(profile, "none").expert_counts()
    hot = {(layer, int(e)) for layer in range(32) for e in np.argsort(-counts[layer], kind="stable")[:2]}
    loaded = {(k[0], k[1]) for s in res.decisions.steps for k in s.load_keys}
    assert res.decisions.slots[0] == 2 * 32 and loaded and not loaded & hot
    evicted = {(v[0], v[1]) for s in res.decisions.steps for v in s.evicted}
    assert evicted and not evicted & hot
    plain = _run(trace, "tec", four, "system.weights=fp16", "hardware=h200-pcie5")
    assert plain.decisions.slots[0] == 4 * 32 and loaded != {
        (k[0], k[1]) for s in plain.decisions.steps for k in s.load_keys
    }
