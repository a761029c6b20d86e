"""Simulation speed: token-layers per second of ``system=hobbit`` on a 10,000-token Mixtral-topology trace.

    python benchmarks/sim_speed.py [--tokens 10000] [--system hobbit] [--repeats 2]

The trace is the bundled model's (real routing, Mixtral topology), its requests repeated
under new ids until it holds --tokens tokens; the model is mixtral-8x7b on rtx4090-pcie4.
Timed side by side in one process: the decision walk (policies), the simpy engine, and a
plain Python replay of the same decisions (``sim.plain``). Ends with one line
``token_layers_per_s=<f> ratio_vs_plain=<f>``: the first is the whole simpy run
(decisions + engine), the second that throughput divided by the plain run's.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np


def repeated_trace(tokens: int):
    from hobbit.traces.arrays import concat
    from hobbit.traces.io import Trace, read_trace
    from hobbit.traces.tiny import bundled_trace

    tr = read_trace(bundled_trace())
    L = len(tr.meta.layers)
    parts, n, shift = [], 0, 0
    n_req = int(tr.arrays.request_id.max()) + 1
    while n < tokens:
        for r in range(n_req):
            part = tr.arrays.take(np.flatnonzero(tr.arrays.request_id == r))
            part.request_id = part.request_id + shift
            parts.append(part)
            n += len(part) // L
            if n >= tokens:
                break
        shift += n_req
    return Trace(tr.meta, concat(parts), "bundled x repeated")


def main() -> None:
    from hydra import compose, initialize_config_module
    from omegaconf import OmegaConf

    import hobbit.sim_commands  # noqa: F401
    from hobbit.sim.cost import CostModel
    from hobbit.sim.decide import Decider
    from hobbit.sim.engine import Engine
    from hobbit.sim.plain import replay
    from hobbit.sim.policies.base import HIGH, LOW
    from hobbit.sim.run import place, size_cache
    from hobbit.sim.workload import build_workload

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=10_000)
    ap.add_argument("--system", default="hobbit")
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    trace = repeated_trace(args.tokens)
    with initialize_config_module(config_module="hobbit.conf", version_base="1.3"):
        cfg = OmegaConf.to_object(compose("sim", overrides=["out_dir=.", f"system={args.system}"]))
    n = len(trace.arrays)
    print(f"trace: {n // 32} tokens x 32 layers = {n} token-layers; system={args.system}")
    times: dict[str, list[float]] = {"decide": [], "simpy": [], "plain": []}
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        wl = build_workload(trace, "oracle", 0.9, cfg.system.prefetch.max_depth, np.random.default_rng(0))
        sizing = size_cache(cfg.model, cfg.hardware, cfg.system, max(wl.pass_context))
        cost = CostModel(cfg.model, cfg.hardware)
        slots = (sizing.high_slots - cfg.system.prefetch.max_depth * 2, sizing.low_slots)
        dec = Decider(wl, cfg.system, slots, (cost.expert_bytes(HIGH), cost.expert_bytes(LOW)),
                      place(wl, cfg.model, cfg.hardware, cfg.system, sizing)).run()
        t1 = time.perf_counter()
        a = Engine(wl, dec, cost, cfg.system.demand_first).run()
        t2 = time.perf_counter()
        b = replay(wl, dec, cost, cfg.system.demand_first)
        t3 = time.perf_counter()
        assert np.allclose(a.pass_end, b.pass_end, rtol=1e-9)
        for k, v in zip(times, (t1 - t0, t2 - t1, t3 - t2)):
            times[k].append(v)
    med = {k: statistics.median(v) for k, v in times.items()}
    for k, v in med.items():
        print(f"{k:<7} {v:7.2f} s  ({n / v:,.0f} token-layers/s)")
    simpy_rate = n / (med["decide"] + med["simpy"])
    plain_rate = n / (med["decide"] + med["plain"])
    print(f"token_layers_per_s={simpy_rate:.0f} ratio_vs_plain={simpy_rate / plain_rate:.3f}")


if __name__ == "__main__":
    main()
