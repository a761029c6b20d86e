"""A lower bound on every pass's latency: the least time a system's own rules could take on
this trace and machine, whatever it caches, prefetches or leaves on the CPU.

Per pass: the LM head, and per layer the dense part, then the layer's experts as if every
one were already where it runs, nothing copied and nothing contended. An expert costs
nothing when the precision rule skips it (every token of the pass scores it above T2);
otherwise the cheaper of the system's precisions on the device, or the CPU when the system
computes there (``cpu_misses`` or a static placement). Device and CPU work in parallel, so
the layer takes at least ``dense + min over splits of max(device work, CPU work)``; the
fractional split (experts ranked by CPU cost over device cost, one split across the
balance point) is the minimum of the linear relaxation and therefore below every real
schedule. The timing rules (``sim.timeline``) only add to it: copies, stalls, the cost of
issuing a copy, contention, a CPU still busy from the layer before. Decisions whose experts
are all resident reach it exactly.
"""

from __future__ import annotations

import numpy as np

from hobbit.sim.config import SystemConfig
from hobbit.sim.cost import CostModel
from hobbit.sim.policies.base import HIGH, LOW, SKIP
from hobbit.sim.policies.precision import classes_for
from hobbit.sim.workload import Workload


def split_makespan(device: list[float], cpu: list[float]) -> float:
    """min over fractional splits of max(device work, CPU work): experts ranked by CPU cost over device
    cost move to the CPU until the two sides balance (the linear relaxation of two-machine scheduling)."""
    total = float(sum(device))
    if not cpu or total <= 0.0:
        return total
    on_cpu = 0.0
    for i in sorted(range(len(device)), key=lambda j: cpu[j] / device[j] if device[j] > 0 else np.inf):
        g, c = device[i], cpu[i]
        if g <= 0.0:
            continue
        if on_cpu + c <= total - g:
            on_cpu, total = on_cpu + c, total - g
            continue
        x = (total - on_cpu) / (c + g)  # the share of this expert that balances the two sides
        return on_cpu + x * c
    return max(total, on_cpu)


def pass_bounds(wl: Workload, cost: CostModel, system: SystemConfig) -> np.ndarray:
    """[P] seconds: no schedule of ``system``'s rules runs pass p in less."""
    p = system.precision
    precisions = {"hobbit": (HIGH, LOW), "high": (HIGH,), "low": (LOW,)}[p.mode]
    cls = classes_for(wl.weights, p.mode, p.t1, p.t2)
    uses_cpu = system.cpu_misses != "never" or system.placement == "static"
    out = np.zeros(len(wl.pass_start))
    for i, (a, b) in enumerate(zip(wl.pass_start, wl.pass_end)):
        tokens = b - a
        denses = cost.pass_dense(tokens, wl.pass_context[i], wl.num_layers)
        total = cost.cached("other_s", tokens)
        for layer in range(wl.num_layers):
            need: dict[int, list[int]] = {}  # expert -> [tokens, every token skips it]
            for e, c in zip(wl.ids[a:b, layer].ravel().tolist(), cls[a:b, layer].ravel().tolist()):
                cur = need.setdefault(e, [0, 1])
                cur[0] += 1
                cur[1] &= c == SKIP
            device, cpu = [], []
            for n, skipped in need.values():
                if skipped:
                    continue
                device.append(min(cost.cached("expert_s", q, n) for q in precisions))
                if uses_cpu:
                    cpu.append(cost.cached("cpu_expert_s", n))
            total += denses[layer] + split_makespan(device, cpu)
        out[i] = total
    return out
