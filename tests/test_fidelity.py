"""The baselines as their released code ran (issue: fidelity), on crafted cases timed by every engine: the
reference walk's decisions, timed by the simpy engine, the plain replay (with and without the shared-link path)
and the compiled timing, which must agree."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from hobbit.commands.sim import summary_line
from hobbit.sim import fast
from hobbit.sim.bound import pass_bounds
from hobbit.sim.config import (
    CacheConfig,
    ConfigError,
    HardwareConfig,
    ModelConfig,
    PrefetchConfig,
    SystemConfig,
)
from hobbit.sim.cost import CostModel
from hobbit.sim.decide import Decider
from hobbit.sim.decisions import HIGH_HIT, LOW_HIT, SKIPPED, Placement
from hobbit.sim.engine import Engine
from hobbit.sim.memory import fit
from hobbit.sim.plain import replay
from hobbit.sim.policies import make_eviction
from hobbit.sim.policies.base import HIGH, PolicyInputs
from hobbit.sim.policies.cache import ExpertCache
from hobbit.sim.precisions import PrecisionConfig
from hobbit.sim.results import hit_rate, prefetch_counts
from hobbit.sim.run import simulate
from hobbit.sim.system_checks import check_system
from hobbit.sim.workload import Workload

from sim_helpers import bundled, compose_sim, decode_workload

MODEL = ModelConfig(name="m", num_layers=1, num_experts=4, top_k=2, hidden_size=256, expert_ffn=512)
# a link of 1 GB/s with a 1 ms fixed cost; compute fast and flat: every time below is checked by hand
HW = HardwareConfig(
    name="h", link_gbps=1.0, link_t0_s=1e-3, device_mem_gbps=1000.0, device_tflops=1000.0, kernel_overhead_s=0.0
)


def _one_layer(ids: list[list[int]]) -> Workload:
    """Decode passes of one token over one MoE layer, the token's experts ``ids`` (equal weights)."""
    return decode_workload([[e] for e in ids], [[[0.5, 0.5]]] * len(ids))


def _system(**kw) -> SystemConfig:
    return SystemConfig(
        precision=PrecisionConfig(mode="high"),
        prefetch=PrefetchConfig(kind="none"),
        cache=CacheConfig(policy="lru"),
        **kw,
    )


def _every_engine(wl: Workload, dec, cost: CostModel) -> list:
    """``dec`` timed by every engine (the simpy engine first, then the plain replay with and without the shared-link
    path, then the compiled timing both ways), which must agree on every pass, stall, byte, drop and late use."""
    runs = [
        Engine(wl, dec, cost).run(),
        replay(wl, dec, cost),
        replay(wl, dec, cost, shared=True),
        fast.time_decisions(wl, dec, cost),
        fast.time_decisions(wl, dec, cost, shared=True),
    ]
    for tl in runs[1:]:
        np.testing.assert_allclose(tl.pass_end, runs[0].pass_end, rtol=1e-12)
        np.testing.assert_allclose(tl.step_stall, runs[0].step_stall, rtol=1e-12, atol=1e-15)
        assert (tl.bytes_moved, tl.cancelled, tl.late) == (runs[0].bytes_moved, runs[0].cancelled, runs[0].late)
    return runs


def _timed(wl: Workload, system: SystemConfig, slots: int = 2):
    """The pass ends and bytes moved by every engine, and the cost model (the simpy engine's numbers first)."""
    nbytes = MODEL.expert_bytes("fp16")
    dec = Decider(wl, system, (slots, 0), (nbytes, nbytes)).run()
    cost = CostModel(MODEL, HW, write_back=system.write_back, serial_copies=system.copy_stream == "compute")
    runs = _every_engine(wl, dec, cost)
    return runs[0], cost, nbytes


def test_a_write_back_doubles_the_bytes_and_the_time_of_a_miss():
    wl = _one_layer([[0, 1], [2, 3]])  # two slots: the second pass's two misses evict the first pass's experts
    plain, cost, nbytes = _timed(wl, _system())
    swap, _, _ = _timed(wl, _system(write_back=True))
    one = 1e-3 + nbytes / 1e9
    assert cost.transfer_s(nbytes) == pytest.approx(one)
    assert plain.bytes_moved == 4 * nbytes and swap.bytes_moved == 8 * nbytes
    assert swap.link_busy_s == pytest.approx(2 * plain.link_busy_s) == pytest.approx(8 * one)
    # each pass waits for its copies: the write-back adds one copy's time per miss to the run
    assert swap.makespan - plain.makespan == pytest.approx(4 * one, rel=1e-9)


def test_copies_on_the_compute_stream_do_not_overlap_a_hit():
    # pass 1 hits expert 0 and misses expert 2 (one slot each way): on a copy stream of its own, expert 0 computes
    # while 2 copies; on the compute stream, after it
    wl = _one_layer([[0, 1], [0, 2]])
    sep, cost, nbytes = _timed(wl, _system(), slots=3)
    ser, _, _ = _timed(wl, _system(copy_stream="compute"), slots=3)
    expert = cost.expert_s(HIGH, 1)
    copy = cost.transfer_s(nbytes)

    def second(tl):
        return tl.pass_end[1] - tl.pass_start[1]

    dense_head = cost.dense_s(1, 2) + cost.other_s(1)  # the second token attends over 2
    assert second(sep) == pytest.approx(dense_head + copy + expert, rel=1e-9)  # the hit hides under the copy
    assert second(ser) == pytest.approx(dense_head + copy + 2 * expert, rel=1e-9)
    assert ser.step_stall[1] == pytest.approx(copy, rel=1e-9)


def test_moe_offloading_runs_as_released():
    s = compose_sim("system=moe-offloading").system
    assert s.write_back and s.copy_stream == "compute" and s.prefetch.kind == "none"
    assert s.cache.per_layer and s.cache.policy == "lru"
    spec = compose_sim("system=moe-offloading-speculative").system
    assert spec.prefetch.kind == "next_layer" and spec.copy_stream == "separate" and spec.write_back
    # the knob's other values are refused by name
    with pytest.raises(ConfigError, match="system.copy_stream=both"):
        check_system(dataclasses.replace(s, copy_stream="both"))


@pytest.mark.parametrize(("link_gbps", "late"), [(1.0, 2), (1e5, 0)])
def test_a_prefetch_still_in_flight_is_late_not_a_hit(link_gbps, late):
    """One token over two layers, its experts all misses; layer 0 prefetches layer 1's two (oracle). Behind layer 0's
    own demand copies on a 1 GB/s link they land long after layer 1's experts could start: both uses wait, so
    they are late and no hit. On a fast link they land while layer 0 computes: two hits of four uses."""
    model = dataclasses.replace(MODEL, num_layers=2)
    hw = dataclasses.replace(HW, link_gbps=link_gbps, link_t0_s=0.0 if link_gbps > 1 else HW.link_t0_s)
    wl = decode_workload([[[0, 1], [2, 3]]], [[[0.5, 0.5], [0.5, 0.5]]])
    system = dataclasses.replace(_system(), prefetch=PrefetchConfig(kind="oracle", max_depth=1))
    nbytes = model.expert_bytes("fp16")
    dec = Decider(wl, system, (4, 0), (nbytes, nbytes)).run()
    cost = CostModel(model, hw)
    runs = _every_engine(wl, dec, cost)
    assert [tl.late for tl in runs] == [late] * 5
    assert dec.prefetch_issued == dec.prefetch_used == 2 and dec.copies_behind == 0
    assert dec.served[HIGH_HIT] == 2  # both prefetched uses found their copies in the cache
    assert hit_rate(dec, runs[1]) == (0.5 if late == 0 else 0.0)
    assert prefetch_counts(dec, runs[1]) == {
        "issued": 2,
        "used": 2,
        "late": late,
        "wasted": 0,
        "cancelled": 0,
        "accuracy": 1.0,
        "behind_cpu": 0,
    }


def test_on_the_bundled_trace_a_prefetch_in_flight_is_no_hit():
    """On the 4090 HOBBIT's link is busy nearly all the time: many prefetched copies are still in flight when their
    layer's experts could start. They are hits in ``served_mix`` (the cache holds them) and not in ``hit_rate``;
    the oracle, which fetches only what will be used, wastes nothing."""
    tr = bundled(3)
    runs = {}
    for system in ("hobbit", "hobbit-oracle"):
        cfg = compose_sim(f"system={system}")
        res = simulate(tr, cfg.model, cfg.hardware, cfg.system)
        s, served = res.summary, res.decisions.served
        runs[system] = s
        pf = s["prefetch"]
        assert pf["late"] > 0 and pf["issued"] == pf["used"] + pf["wasted"] + pf["cancelled"], system
        hits, not_skipped = served[HIGH_HIT] + served[LOW_HIT], served.sum() - served[SKIPPED]
        assert s["hit_rate"] == pytest.approx((hits - pf["late"]) / not_skipped, rel=1e-12), system
        assert s["hit_rate"] < hits / not_skipped, system
    assert runs["hobbit-oracle"]["prefetch"]["wasted"] == 0 < runs["hobbit"]["prefetch"]["wasted"]
    assert "uses waited for a prefetch in flight" in summary_line(runs["hobbit"])


def _whole_cpu_run(tokens: int):
    """Passes of ``tokens`` tokens over two layers, layer 0 run whole on the CPU (``-ngl 1``), layer 1 on the GPU with
    its experts resident: (the timelines of every engine, the cost model)."""
    model = dataclasses.replace(MODEL, num_layers=2)
    hw = dataclasses.replace(HW, cpu_tflops=0.5, cpu_mem_gbps=50.0)
    ids = [[[0, 1], [2, 3]]] * tokens
    wl = decode_workload(ids, [[[0.5, 0.5], [0.5, 0.5]]] * tokens)
    if tokens > 1:  # one prompt pass of every token
        wl = dataclasses.replace(
            wl, pass_request=[0], pass_start=[0], pass_end=[tokens], pass_phase=[0], pass_context=[tokens]
        )
    placement = Placement(resident=frozenset((1, e) for e in range(4)), cpu_layers=frozenset({0}), static=True)
    system = dataclasses.replace(_system(), placement="static", cpu_layer_scope="whole", n_cpu_moe=1)
    nbytes = model.expert_bytes("fp16")
    dec = Decider(wl, system, (0, 0), (nbytes, nbytes), placement).run()
    cost = CostModel(model, hw, cpu_dense_layers=frozenset({0}), dense_offload_tokens=32)
    runs = _every_engine(wl, dec, cost)
    bounds = [pass_bounds(wl, cost, system), fast.pass_bounds(wl, cost, system)]
    np.testing.assert_allclose(bounds[1], bounds[0], rtol=1e-12)
    return runs, cost, bounds[0]


def test_a_layer_run_whole_on_the_cpu_computes_its_attention_there():
    """-ngl below the layer count (llama.cpp in 2024): layer 0's dense part runs on the CPU, at the CPU's bandwidth,
    then its two experts there; layer 1 runs on the GPU. Every engine and both bounds time it alike."""
    runs, cost, bound = _whole_cpu_run(1)
    cpu_dense = cost.cpu_dense_s(1, 1)
    assert cpu_dense > 50 * cost.dense_s(1, 1)  # 50 GB/s against 1000
    assert cost.layer_dense_s(0, 1, 1) == cpu_dense and cost.layer_dense_s(1, 1, 1) == cost.dense_s(1, 1)
    want = cpu_dense + 2 * cost.cpu_expert_s(1) + cost.dense_s(1, 1) + 2 * cost.expert_s(HIGH, 1) + cost.other_s(1)
    assert runs[0].pass_end[0] == pytest.approx(want, rel=1e-12)
    assert bound[0] <= runs[0].pass_end[0] + 1e-15
    # a prompt pass of 32 tokens or more (op offload) copies the layer's dense weights and runs it on the GPU
    runs, cost, _ = _whole_cpu_run(32)
    copy = HW.link_t0_s + MODEL.dense_bytes_per_layer() / (HW.link_gbps * 1e9)
    assert cost.layer_dense_s(0, 32, 32) == pytest.approx(cost.dense_s(32, 32) + copy, rel=1e-12)
    assert cost.layer_dense_s(0, 31, 32) == cost.cpu_dense_s(31, 32)


def test_an_mmapped_expert_is_read_at_the_page_fault_rate():
    """On a machine whose experts live on the SSD, a runtime that memory-maps the file (llama.cpp) reads an expert at
    ``hardware.ssd_fault_gbps``; one that reads its files itself (HOBBIT, host_load=load or stream) at ``ssd_gbps``."""
    orin = compose_sim("hardware=jetson-agx-orin").hardware
    assert orin.expert_source == "ssd" and orin.ssd_fault_gbps == pytest.approx(0.29 * orin.ssd_gbps)
    model = compose_sim().model
    q8 = model.expert_bytes("q8_0")
    costs = {}
    for load in ("mmap", "load", "stream"):
        system = dataclasses.replace(_system(), host_load=load, precision=PrecisionConfig(mode="high", high="q8_0"))
        memory = fit(model, orin, system, 1)
        costs[load] = CostModel(model, orin, memory=memory)
    assert costs["mmap"].ssd_gbps == orin.ssd_fault_gbps and costs["load"].ssd_gbps == costs["stream"].ssd_gbps == 3.0
    assert costs["mmap"].link_gbps == orin.ssd_fault_gbps  # a prompt's op offload copies through the same faults
    read = {k: orin.ssd_t0_s + q8 / (c.ssd_gbps * 1e9) for k, c in costs.items()}  # one expert from the SSD
    # the CPU's work is the same; only the read differs, 1 / 0.29 times as long through the page faults
    slower = costs["mmap"].cpu_expert_s(1) - costs["load"].cpu_expert_s(1)
    assert slower == pytest.approx(read["mmap"] - read["load"], rel=1e-9) and slower > 0.1


def _cleared(pred_layer1: list[int], clear: bool):
    """Two decode passes of one token over two layers, experts {0, 1} in both, then {2, 3} in layer 0; layer 0 prefetches
    the two experts it predicts for layer 1 (``pred_layer1``). Six slots. (timelines of every engine, decisions)."""
    model = dataclasses.replace(MODEL, num_layers=2)
    ids = [[[0, 1], [0, 1]], [[2, 3], [0, 1]]]
    pred = [[[pred_layer1], [pred_layer1]]] * 2  # [N][L][D=1][K]
    wl = decode_workload(ids, [[[0.5, 0.5], [0.5, 0.5]]] * 2, pred=pred)
    system = dataclasses.replace(_system(), prefetch=PrefetchConfig(kind="next_layer", max_depth=1, clear_queue=clear))
    nbytes = model.expert_bytes("fp16")
    dec = Decider(wl, system, (6, 0), (nbytes, nbytes)).run()
    cost = CostModel(model, HW, clear_queue=clear)
    runs = _every_engine(wl, dec, cost)
    return runs, dec, nbytes


def test_a_stale_prefetch_is_dropped_never_copied():
    """Layer 0 loads experts 0 and 1 on demand (copies 0, 1) and prefetches 2 and 3 for layer 1 (copies 2, 3), wrongly.
    Copy 2 starts when the demand copies land, as layer 0 computes; when layer 1's router runs, copy 3 has not
    started: with clear_queue (MoE-Infinity) it leaves the queue and is never copied, where the FIFO that never drops
    copies it behind layer 1's demand copies 4 and 5, when the next pass's misses reach the link."""
    fifo, dec, nbytes = _cleared([2, 3], clear=False)
    cleared, dec_c, _ = _cleared([2, 3], clear=True)
    loads = [[(ld.tid, ld.demand) for ld in s.loads] for s in dec.steps]
    assert loads[:2] == [[(0, True), (1, True), (2, False), (3, False)], [(4, True), (5, True)]]
    assert loads == [[(ld.tid, ld.demand) for ld in s.loads] for s in dec_c.steps]  # the same decisions
    assert 3 in fifo[1].transfer_done and fifo[1].cancelled == 0
    assert 3 not in cleared[1].transfer_done and cleared[1].cancelled == 1
    assert fifo[1].bytes_moved - cleared[1].bytes_moved == nbytes
    assert 3 not in cleared[0].transfer_done  # the simpy engine's link never ran it either
    assert fifo[1].late == cleared[1].late == 0  # no use waited for a prefetch: both were wrong


def test_a_dropped_prefetch_a_use_needs_is_queued_again_on_demand():
    """Right predictions: copy 3 (expert 1 of layer 1) is dropped at layer 1's router and that layer needs it at once,
    so it joins again as a demand copy, behind copy 2 in flight: the times and bytes of the FIFO, no copy lost,
    nothing counted cancelled, and both of layer 1's uses late."""
    fifo, _, nbytes = _cleared([0, 1], clear=False)
    cleared, _, _ = _cleared([0, 1], clear=True)
    np.testing.assert_allclose(cleared[1].pass_end, fifo[1].pass_end, rtol=1e-12)
    assert cleared[1].bytes_moved == fifo[1].bytes_moved
    assert cleared[1].cancelled == 0 and cleared[1].late == fifo[1].late == 2
    copy = 1e-3 + nbytes / 1e9
    assert cleared[1].transfer_done[3] == pytest.approx(4 * copy, rel=1e-6)  # behind 0, 1 and 2


class _Matched:
    """A prefetcher's ``match`` (layers x experts probabilities), as the activation-matrix prefetcher holds it."""

    def __init__(self, match: np.ndarray | None) -> None:
        self.match = match


def test_moe_infinity_evicts_as_its_release_the_most_visited_copy_no_prefetch_wants():
    """RemoveCachedSparseNode (350f0dd): of the cached experts outside the prefetch candidates (the match's nonzero
    experts from the current layer on), the most visited since it entered the cache leaves; ties to the lowest
    (layer, expert); with every copy a candidate, the same order over all of them."""
    match = np.zeros((3, 4))
    match[2, 1] = 0.7  # layer 2's expert 1 is a candidate while layers 0..2 fill
    advisor = _Matched(match)
    c = ExpertCache(3, 0, make_eviction("eam_release", None, PolicyInputs(prefetcher=advisor)), 3)
    for key in ((0, 0), (2, 1), (1, 3)):
        c.admit(key, HIGH, key[0], transfer=0)
    for key, n in (((0, 0), 1), ((2, 1), 5), ((1, 3), 2)):
        for _ in range(n):
            c.use(HIGH, c.index[HIGH][key], token=1)
    # (2, 1) is visited most, but a candidate: (1, 3), the most visited of the others, leaves
    assert c.admit((1, 0), HIGH, 1, transfer=1)[1] == (1, 3)
    # filling layer 0 again: (0, 0) used once, (1, 0) used at its load (0 since): (0, 0) leaves
    assert c.admit((0, 2), HIGH, 0, transfer=2)[1] == (0, 0)
    # once the prefetcher's match names nothing, the most visited copy goes, candidate or not
    advisor.match = None
    assert c.admit((0, 3), HIGH, 0, transfer=3)[1] == (2, 1)
    # ties (no use since insertion): the lowest (layer, expert)
    assert c.admit((2, 2), HIGH, 2, transfer=4)[1] == (0, 2)
