"""The latency bound (``sim.bound``): no system's pass is faster than its bound, and decisions with every
expert resident reach it."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from hobbit.sim.bound import split_makespan
from hobbit.sim.run import simulate

from sim_helpers import bundled, compose_sim

SYSTEMS = sorted(p.stem for p in (Path(__file__).parents[1] / "conf" / "system").glob("*.yaml"))


def test_split_is_below_every_assignment():
    rng = np.random.default_rng(3)
    for _ in range(200):
        n = int(rng.integers(1, 7))
        g, c = rng.uniform(0, 2, n).tolist(), rng.uniform(0, 8, n).tolist()
        g[0] = 0.0 if rng.random() < 0.2 else g[0]  # a skipped expert costs nothing
        best = min(
            max(sum(gi for gi, on in zip(g, a) if not on), sum(ci for ci, on in zip(c, a) if on))
            for a in itertools.product((False, True), repeat=n)
        )
        lb = split_makespan(g, c)
        assert lb <= best + 1e-12
        assert lb >= sum(g) * min(ci / (ci + gi) for gi, ci in zip(g, c) if gi > 0) - 1e-12 if sum(g) else lb == 0
    assert split_makespan([3.0], [6.0]) == pytest.approx(2.0)  # 1/3 on the CPU: 2 s on either side
    assert split_makespan([1.0, 2.0], []) == 3.0


@pytest.mark.slow
@pytest.mark.parametrize("hardware", ["rtx4090-pcie4", "jetson-agx-orin"])
def test_no_system_beats_its_bound(hardware):
    tr = bundled(6)
    for system in SYSTEMS:
        cfg = compose_sim(f"system={system}", f"hardware={hardware}")
        r = simulate(
            tr, cfg.model, cfg.hardware, cfg.system
        )  # the default engine (tests/test_fast.py: the reference's times)
        p = r.passes
        assert (p.latency_ms >= p.bound_ms * (1 - 1e-9)).all(), (system, hardware)
        assert r.summary["gap_to_bound"] >= 1.0


def test_resident_decisions_reach_the_bound():
    """Every expert cached after its first use and nothing to prefetch: a pass that loads nothing takes exactly
    its bound (uniform precision: the bound's cheaper precision is the one used)."""
    cfg = compose_sim("system=on-demand", "hardware.device_memory_bytes=1000000000000000")
    r = simulate(bundled(6), cfg.model, cfg.hardware, cfg.system, engine="plain")
    assert r.workload is not None
    L = r.workload.num_layers
    quiet = [p for p in range(len(r.passes)) if not any(s.loads for s in r.decisions.steps[p * L : (p + 1) * L])]
    assert len(quiet) > len(r.passes) // 2
    p = r.passes.iloc[quiet]
    np.testing.assert_allclose(p.latency_ms, p.bound_ms, rtol=1e-9)  # pass_end - pass_start: float rounding
    loud = r.passes.drop(index=r.passes.index[quiet])
    assert (loud.latency_ms > loud.bound_ms).all()
