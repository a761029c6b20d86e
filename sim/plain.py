"""The timing of a run computed directly, without simpy (see ``sim.timeline`` for the rules).

Used to check the simpy engine (they must agree to rounding) and as the baseline of
``benchmarks/sim_speed.py``. Valid because transfers join the link only when a router
runs, and the compute stream waits for a layer's loads before the next router runs, so a
queued copy that a layer waits for starts before any later arrival could pass it.
"""

from __future__ import annotations

import numpy as np

from hobbit.sim.cost import CostModel
from hobbit.sim.decide import Decisions
from hobbit.sim.timeline import Timeline, demand_insert_at
from hobbit.sim.workload import Workload


class _Link:
    """FIFO, non-preemptive link: queued copies start back to back when it frees."""

    def __init__(self, demand_first: bool) -> None:
        self.free_at = 0.0
        self.queue: list[tuple[int, float, bool]] = []  # not started: (tid, seconds, is_demand)
        self.done: dict[int, float] = {}
        self.busy = 0.0
        self.moved = 0  # bytes
        self.cancelled = 0
        self.demand_first = demand_first
        self.nbytes: dict[int, int] = {}

    def _start_next(self) -> None:
        tid, dur, _ = self.queue.pop(0)
        self.free_at += dur
        self.busy += dur
        self.moved += self.nbytes.pop(tid)
        self.done[tid] = self.free_at

    def enqueue(self, items: list[tuple[int, float, bool]], now: float, cancel: list[int]) -> None:
        while self.queue and self.free_at <= now:  # these started before ``now``
            self._start_next()
        if cancel:
            drop = set(cancel)
            kept = [q for q in self.queue if q[0] not in drop]
            self.cancelled += len(self.queue) - len(kept)
            self.queue = kept
        for item in items:
            at = demand_insert_at(self.queue, self.demand_first) if item[2] else len(self.queue)
            self.queue.insert(at, item)
        if self.queue and self.free_at <= now:  # idle: the head starts now
            self.free_at = now
            self._start_next()

    def done_at(self, tid: int) -> float:
        while tid not in self.done:
            self._start_next()
        return self.done[tid]


def replay(wl: Workload, dec: Decisions, cost: CostModel, demand_first: bool = True) -> Timeline:
    """Times of every pass and layer of ``dec`` on ``cost``'s machine."""
    link = _Link(demand_first)
    n_pass = len(wl.pass_start)
    tl = Timeline(np.zeros(n_pass), np.zeros(n_pass), np.zeros(len(dec.steps)), np.zeros(len(dec.steps)))
    t = cpu_free = 0.0
    L = wl.num_layers
    for p in range(n_pass):
        tokens = wl.pass_end[p] - wl.pass_start[p]
        tl.pass_start[p] = t
        dense = cost.cached("dense_s", tokens, wl.pass_context[p])
        for layer in range(L):
            i = p * L + layer
            step = dec.steps[i]
            t += dense
            routed = t
            if step.loads or step.cancel:
                link.nbytes.update((tid, nb) for tid, nb, _ in step.loads)
                link.enqueue([(tid, cost.cached("transfer_s", nb), dm) for tid, nb, dm in step.loads], t, step.cancel)
            ready = [(-1.0 if tid < 0 else link.done_at(tid), j) for j, (tid, _, _) in enumerate(step.gpu)]
            stall = 0.0
            for r, j in sorted(ready):
                if r > t:
                    stall += r - t
                    t = r
                _, prec, n = step.gpu[j]
                t += cost.cached("expert_s", prec, n)
            if step.cpu:
                cpu_free = max(cpu_free, routed) + sum(cost.cached("cpu_expert_s", n) for n in step.cpu)
                t = max(t, cpu_free)
            tl.step_stall[i] = stall
            tl.step_end[i] = t
        t += cost.cached("other_s", tokens)
        tl.pass_end[p] = t
    tl.link_busy_s, tl.bytes_moved, tl.cancelled = link.busy, link.moved, link.cancelled
    tl.transfer_done = link.done
    return tl
