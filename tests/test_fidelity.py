"""The baselines as their released code ran (issue: fidelity), on crafted cases timed by every engine: the
reference walk's decisions, timed by the simpy engine, the plain replay (with and without the shared-link path)
and the compiled timing, which must agree."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from hobbit.sim import fast
from hobbit.sim.config import (
    CacheConfig,
    ConfigError,
    HardwareConfig,
    ModelConfig,
    PrecisionConfig,
    PrefetchConfig,
    SystemConfig,
    check_system,
)
from hobbit.sim.cost import CostModel
from hobbit.sim.decide import Decider
from hobbit.sim.engine import Engine
from hobbit.sim.plain import replay
from hobbit.sim.policies.base import HIGH
from hobbit.sim.workload import Workload

from sim_helpers import compose_sim, decode_workload

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


def _timed(wl: Workload, system: SystemConfig, slots: int = 2):
    """The pass ends and bytes moved by every engine, and the cost model (the simpy engine's numbers first)."""
    nbytes = MODEL.expert_bytes("fp16")
    dec = Decider(wl, system, (slots, 0), (nbytes, nbytes)).run()
    cost = CostModel(MODEL, HW, write_back=system.write_back, serial_copies=system.copy_stream == "compute")
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
        assert tl.bytes_moved == runs[0].bytes_moved
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
