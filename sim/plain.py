"""The timing of a run computed directly, without simpy (see ``sim.timeline`` for the rules).

Used to check the simpy engine (they must agree to rounding) and as the baseline of
``benchmarks/sim_speed.py``. Valid because transfers join the link only when a router
runs, and the compute stream waits for a layer's loads before the next router runs, so a
queued copy that a layer waits for starts before any later arrival could pass it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from hobbit.sim.cost import Contention, CostModel
from hobbit.sim.decisions import Decisions
from hobbit.sim.timeline import Timeline, late_copies, requeue
from hobbit.sim.workload import Workload


class _Link:
    """FIFO, non-preemptive link: queued copies start back to back when it frees."""

    def __init__(self, demand_first: bool, clear: bool = False) -> None:
        self.gone: dict[int, float] | None = {} if clear else None  # prefetches a step dropped (clear_queue)
        self.free_at = 0.0
        self.queue: list[tuple[int, float, bool]] = []  # not started: (tid, seconds, is_demand)
        self.done: dict[int, float] = {}
        self.busy = 0.0
        self.moved = 0  # bytes
        self.cancelled = 0
        self.demand_first = demand_first
        self.nbytes: dict[int, int] = {}
        self.started: dict[int, float] = {}

    def _start_next(self) -> None:
        tid, dur, _ = self.queue.pop(0)
        self.started[tid] = self.free_at
        self.free_at += dur
        self.busy += dur
        self.moved += self.nbytes.pop(tid)
        self.done[tid] = self.free_at

    def enqueue(
        self, items: list[tuple[int, float, bool]], now: float, cancel: list[int], uses: Sequence[int] = ()
    ) -> None:
        while self.queue and self.free_at <= now:  # these started before ``now``
            self._start_next()
        self.cancelled += requeue(self.queue, items, cancel, self.demand_first, self.gone, uses)
        if self.queue and self.free_at <= now:  # idle: the head starts now
            self.free_at = now
            self._start_next()

    def done_at(self, tid: int) -> float:
        while tid not in self.done:
            self._start_next()
        return self.done[tid]


class _SharedLink:
    """The link of ``_Link`` when it and the compute stream slow each other (``CostModel.contention``):
    while both work, a copy progresses at 1/f.link of its own speed and the compute at 1/f of its.
    The compute stream drives the clock: each of its steps advances the link alongside."""

    def __init__(self, demand_first: bool, f: Contention, clear: bool = False) -> None:
        self.f, self.demand_first = f, demand_first
        self.gone: dict[int, float] | None = {} if clear else None  # prefetches a step dropped (clear_queue)
        self.now = 0.0
        self.queue: list[tuple[int, float, bool]] = []  # not started: (tid, seconds alone, is_demand)
        self.cur: list | None = None  # in flight: [tid, seconds alone left, start]
        self.done: dict[int, float] = {}
        self.busy = 0.0
        self.moved = 0
        self.cancelled = 0
        self.nbytes: dict[int, int] = {}
        self.started: dict[int, float] = {}

    def _finish(self) -> None:
        assert self.cur is not None  # called when the copy in flight lands
        tid, _, start = self.cur
        self.busy += self.now - start
        self.moved += self.nbytes.pop(tid)
        self.done[tid] = self.now
        self.cur = None
        self._start()

    def _start(self) -> None:
        if self.cur is None and self.queue:
            tid, dur, _ = self.queue.pop(0)
            self.cur = [tid, dur, self.now]
            self.started[tid] = self.now

    def enqueue(self, items: list[tuple[int, float, bool]], cancel: list[int], uses: Sequence[int] = ()) -> None:
        self.cancelled += requeue(self.queue, items, cancel, self.demand_first, self.gone, uses)
        self._start()

    def compute(self, solo: float, factor: float) -> float:
        """Run ``solo`` seconds of compute from ``now`` (``factor`` slower while a copy runs); its end."""
        while solo > 0.0:
            if self.cur is None:
                self.now += solo
                break
            copy_left, compute_left = self.cur[1] * self.f.link, solo * factor
            if compute_left <= copy_left:
                self.now += compute_left
                self.cur[1] -= compute_left / self.f.link
                break
            self.now += copy_left
            solo -= copy_left / factor
            self._finish()
        return self.now

    def idle_until(self, t: float) -> None:
        """The compute stream waits (for the CPU): copies run alone until ``t``."""
        if t <= self.now:
            return
        while self.cur is not None and self.now + self.cur[1] <= t:
            self.now += self.cur[1]
            self._finish()
        if self.cur is not None:
            self.cur[1] -= t - self.now
        self.now = t

    def wait_first(self, tids: list[int]) -> float:
        """The compute stream waits for the first of ``tids``: copies run alone until it lands."""
        want = set(tids)
        while not want & self.done.keys():
            assert self.cur is not None  # a wanted copy not done yet is in flight or queued behind it
            self.now += self.cur[1]
            self._finish()
        return self.now


def _replay_shared(
    wl: Workload,
    dec: Decisions,
    cost: CostModel,
    demand_first: bool,
    rec: list | None = None,
    passes: int | None = None,
) -> Timeline:
    """``replay`` with contention: the same rules, the overlap of copies and compute charged."""
    f, issue = cost.contention, cost.issue_s()
    link = _SharedLink(demand_first, f, cost.clear_queue)
    n_pass, L = len(wl.pass_start), wl.num_layers
    tl = Timeline(np.zeros(n_pass), np.zeros(n_pass), np.zeros(len(dec.steps)), np.zeros(len(dec.steps)))
    cpu_free = 0.0
    for p in range(n_pass if passes is None else min(passes, n_pass)):
        tokens = wl.pass_end[p] - wl.pass_start[p]
        tl.pass_start[p] = link.now
        denses = cost.pass_dense(tokens, wl.pass_context[p], L)
        for layer in range(L):
            i = p * L + layer
            step = dec.steps[i]
            t0 = link.now
            routed = link.compute(denses[layer], f.dense)
            if rec is not None:
                rec.append((i, "dense", t0, routed, -1))
            if step.loads and issue:
                link.compute(issue * len(step.loads), f.dense)
                if rec is not None:
                    rec.append((i, "issue", routed, link.now, -1))
            if step.loads or step.cancel or cost.clear_queue:
                link.nbytes.update((ld.tid, cost.link_bytes(ld.nbytes)) for ld in step.loads)
                link.enqueue(
                    [(ld.tid, cost.cached("transfer_s", ld.nbytes), ld.demand) for ld in step.loads],
                    step.cancel,
                    [g.tid for g in step.gpu],
                )
            todo, stall = list(range(len(step.gpu))), 0.0
            tl.late += len(late_copies(step, link.done.__contains__))
            if step.loads and cost.serial_copies:  # copies on the compute stream: all land before an expert runs
                t0 = link.now
                for ld in step.loads:
                    if ld.tid not in link.done:
                        link.wait_first([ld.tid])
                stall += link.now - t0
                if rec is not None and link.now > t0:
                    rec.append((i, "stall", t0, link.now, -1))
            stall = _experts_shared(step, link, cost, todo, stall, i, rec)
            if step.cpu:
                cpu_free = _cpu_work(step, cost, max(cpu_free, routed), i, rec)
                t0 = link.now
                link.idle_until(cpu_free)
                if rec is not None and link.now > t0:
                    rec.append((i, "wait_cpu", t0, link.now, -1))
            tl.step_stall[i] = stall
            tl.step_end[i] = link.now
        t0 = link.now
        tl.pass_end[p] = link.compute(cost.cached("other_s", tokens), f.dense)
        if rec is not None:
            rec.append((p * L + L - 1, "head", t0, tl.pass_end[p], -1))
    tl.link_busy_s, tl.bytes_moved, tl.cancelled = link.busy, link.moved, link.cancelled
    tl.transfer_done, tl.transfer_start = link.done, link.started
    return tl


def _cpu_work(step, cost: CostModel, start: float, i: int, rec: list | None) -> float:
    """The layer's CPU experts one after another from ``start``; when the CPU is done."""
    if rec is None:
        return start + sum(cost.cached("cpu_expert_s", n) for n in step.cpu)
    for j, n in enumerate(step.cpu):
        end = start + cost.cached("cpu_expert_s", n)
        rec.append((i, "cpu_expert", start, end, j))
        start = end
    return start


def _experts(
    step, link: _Link, cost: CostModel, t: float, stall: float, i: int, rec: list | None
) -> tuple[float, float]:
    """The step's device experts, each when its copy has landed (resident ones first), from ``t``; (when they are
    done, ``stall`` plus the waits)."""
    ready = [(-1.0 if g.tid < 0 else link.done_at(g.tid), j) for j, g in enumerate(step.gpu)]
    for r, j in sorted(ready):
        if r > t:
            if rec is not None:
                rec.append((i, "stall", t, r, -1))
            stall += r - t
            t = r
        _, prec, n = step.gpu[j]  # Compute(tid, precision, tokens)
        if rec is not None:
            rec.append((i, "expert", t, t + cost.cached("expert_s", prec, n), j))
        t += cost.cached("expert_s", prec, n)
    return t, stall


def _experts_shared(
    step, link: _SharedLink, cost: CostModel, todo: list[int], stall: float, i: int, rec: list | None
) -> float:
    """``_experts`` with contention: the step's device experts ``todo`` run as their copies land; ``stall`` plus the
    time they waited."""
    while todo:  # the experts whose weights are resident, in arrival order; then wait for the next
        ready = sorted(
            (-1.0 if step.gpu[j].tid < 0 else link.done[step.gpu[j].tid], j)
            for j in todo
            if step.gpu[j].tid < 0 or step.gpu[j].tid in link.done
        )
        if not ready:
            t0 = link.now
            stall += link.wait_first([step.gpu[j].tid for j in todo]) - t0
            if rec is not None:
                rec.append((i, "stall", t0, link.now, -1))
            continue
        for _, j in ready:
            _, prec, n = step.gpu[j]  # Compute(tid, precision, tokens)
            t0 = link.now
            link.compute(cost.cached("expert_s", prec, n), cost.contention.expert(prec))
            if rec is not None:
                rec.append((i, "expert", t0, link.now, j))
        done = {j for _, j in ready}
        todo = [j for j in todo if j not in done]
    return stall


def replay(
    wl: Workload,
    dec: Decisions,
    cost: CostModel,
    demand_first: bool = True,
    shared: bool | None = None,
    rec: list | None = None,
    passes: int | None = None,
) -> Timeline:
    """Times of every pass and layer of ``dec`` on ``cost``'s machine. ``shared``: charge contention
    (None: when the cost model has any; True with no contention gives the same times, the slow way).
    ``rec``: a list that receives the compute stream's and the CPU's work as (step, kind, start, end,
    index into the step's gpu or cpu list, or -1), kinds dense | issue | stall | expert | cpu_expert |
    wait_cpu | head (``sim.events``); copies are in the timeline's transfer_start / transfer_done.
    ``passes``: time only the first ``passes`` passes (the rest of the timeline stays 0). Their times are those of
    the whole run's: a pass's times depend on nothing after it. A copy still queued or in flight at their end is
    not in transfer_start / transfer_done, or in transfer_start only."""
    if shared if shared is not None else cost.contention.active:
        return _replay_shared(wl, dec, cost, demand_first, rec, passes)
    link = _Link(demand_first, cost.clear_queue)
    issue = cost.issue_s()
    n_pass = len(wl.pass_start)
    tl = Timeline(np.zeros(n_pass), np.zeros(n_pass), np.zeros(len(dec.steps)), np.zeros(len(dec.steps)))
    t = cpu_free = 0.0
    L = wl.num_layers
    for p in range(n_pass if passes is None else min(passes, n_pass)):
        tokens = wl.pass_end[p] - wl.pass_start[p]
        tl.pass_start[p] = t
        denses = cost.pass_dense(tokens, wl.pass_context[p], L)
        for layer in range(L):
            i = p * L + layer
            step = dec.steps[i]
            if rec is not None:
                rec.append((i, "dense", t, t + denses[layer], -1))
            t += denses[layer]
            routed = t
            if step.loads and issue:
                if rec is not None:
                    rec.append((i, "issue", t, t + issue * len(step.loads), -1))
                t += issue * len(step.loads)
            if step.loads or step.cancel or cost.clear_queue:
                link.nbytes.update((ld.tid, cost.link_bytes(ld.nbytes)) for ld in step.loads)
                link.enqueue(
                    [(ld.tid, cost.cached("transfer_s", ld.nbytes), ld.demand) for ld in step.loads],
                    t,
                    step.cancel,
                    [g.tid for g in step.gpu],
                )
            stall = 0.0
            tl.late += len(late_copies(step, lambda tid: link.done_at(tid) <= t))  # noqa: B023 (called here, at once)
            if step.loads and cost.serial_copies:  # copies on the compute stream: all land before an expert runs
                r = max(link.done_at(ld.tid) for ld in step.loads)
                if r > t:
                    if rec is not None:
                        rec.append((i, "stall", t, r, -1))
                    stall, t = r - t, r
            t, stall = _experts(step, link, cost, t, stall, i, rec)
            if step.cpu:
                cpu_free = _cpu_work(step, cost, max(cpu_free, routed), i, rec)
                if rec is not None and cpu_free > t:
                    rec.append((i, "wait_cpu", t, cpu_free, -1))
                t = max(t, cpu_free)
            tl.step_stall[i] = stall
            tl.step_end[i] = t
        if rec is not None:
            rec.append((p * L + L - 1, "head", t, t + cost.cached("other_s", tokens), -1))
        t += cost.cached("other_s", tokens)
        tl.pass_end[p] = t
    tl.link_busy_s, tl.bytes_moved, tl.cancelled = link.busy, link.moved, link.cancelled
    tl.transfer_done, tl.transfer_start = link.done, link.started
    return tl
