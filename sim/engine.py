"""The discrete-event engine (simpy): a compute stream and a copy link as processes.

One ``simpy.Environment`` per run owns the clock. The link is a process serving a queue of
copies, FIFO and non-preemptive, each taking t0 + bytes / B (SimPy's ``Cable`` shape);
the compute stream is a process that walks the decided layer steps, waits on the events
of the copies it needs and on its own compute timeouts. The rules are in
``sim.timeline``; ``sim.plain`` computes the same times without simpy.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import numpy as np
import simpy

from hobbit.sim.cost import Contention, CostModel
from hobbit.sim.decisions import Decisions, LayerStep
from hobbit.sim.timeline import Timeline, demand_insert_at, late_copies, requeue
from hobbit.sim.workload import Workload


class Shared:
    """The compute stream and the link sharing the machine (contention): each piece of work is
    ``solo`` seconds alone and runs ``factor`` times slower while the other side works too.
    A process of its own re-plans whenever work starts or ends (fluid sharing)."""

    EPS = 1e-15  # seconds alone left below which work is done (rounding of the clock)

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self.jobs: dict[str, list] = {}  # side -> [seconds alone left, factor, done event]
        self.last = 0.0
        self._wake = env.event()
        env.process(self._run())

    def work(self, side: str, solo: float, factor: float) -> simpy.Event:
        self._progress()
        done = self.env.event()
        self.jobs[side] = [solo, factor, done]
        if not self._wake.triggered:
            self._wake.succeed()
        return done

    def _slow(self, job: list) -> float:
        return job[1] if len(self.jobs) > 1 else 1.0

    def _progress(self) -> None:
        dt = self.env.now - self.last
        if dt > 0:
            for job in self.jobs.values():
                job[0] -= dt / self._slow(job)
        self.last = self.env.now

    def _finish(self, side: str) -> None:
        self._progress()
        self.jobs.pop(side)[2].succeed()

    def _run(self) -> Generator:
        while True:
            if not self.jobs:
                yield self._wake
                self._wake = self.env.event()
                continue
            side, job = min(self.jobs.items(), key=lambda kv: kv[1][0] * self._slow(kv[1]))
            timer = self.env.timeout(max(job[0] * self._slow(job), 0.0))
            yield self.env.any_of([timer, self._wake])
            if self._wake.triggered:
                self._wake = self.env.event()
            self._progress()
            if timer.processed and side in self.jobs and self.jobs[side] is job:
                self._finish(side)
            for other in [s for s, j in self.jobs.items() if j[0] <= self.EPS]:
                self._finish(other)


class Link:
    """A host-to-device (or SSD-to-memory) copy engine."""

    def __init__(
        self, env: simpy.Environment, demand_first: bool, shared: Shared | None = None, factor: float = 1.0
    ) -> None:
        self.env = env
        self.shared, self.factor = shared, factor
        self.demand_first = demand_first
        self.queue: list[tuple[int, float, bool]] = []  # not started: (tid, seconds, is_demand)
        self.events: dict[int, simpy.Event] = {}
        self.done_at: dict[int, float] = {}
        self.busy = 0.0
        self.moved = 0
        self.cancelled = 0
        self.nbytes: dict[int, int] = {}
        self._wake: simpy.Event | None = None
        self.inflight = -1
        self.gone: dict[int, float] = {}  # prefetches a step dropped (clear_queue): tid -> seconds
        env.process(self._serve())

    def first_done(self, tids: list[int]) -> int:
        """Of copies not done yet, the one the link will finish first (in flight, then queue order)."""
        if self.inflight in tids:
            return self.inflight
        pending = set(tids)
        return next(q[0] for q in self.queue if q[0] in pending)

    def cancel(self, tids: list[int]) -> None:
        """Drop copies that have not started; an in-flight copy always completes."""
        drop = set(tids)
        kept = [q for q in self.queue if q[0] not in drop]
        self.cancelled += len(self.queue) - len(kept)
        self.queue = kept

    def clear(self, uses: list[int]) -> None:
        """``CostModel.clear_queue``: every prefetch not started leaves the queue (kept in ``gone``); those ``uses``
        names come back as demand loads (``timeline.requeue``)."""
        self.cancelled += requeue(self.queue, [], [], self.demand_first, self.gone, uses)
        if self.queue and self._wake is not None and not self._wake.triggered:  # a copy brought back: serve it
            self._wake.succeed()

    def submit(self, items: list[tuple[int, float, bool]]) -> None:
        for item in items:
            at = demand_insert_at(self.queue, self.demand_first) if item[2] else len(self.queue)
            self.queue.insert(at, item)
            self.events[item[0]] = self.env.event()
        if self._wake is not None and not self._wake.triggered:
            self._wake.succeed()

    def _serve(self) -> Generator:
        while True:
            if not self.queue:
                self._wake = self.env.event()
                yield self._wake
                continue
            tid, dur, _ = self.queue.pop(0)
            self.inflight = tid
            yield self.env.timeout(dur) if self.shared is None else self.shared.work("link", dur, self.factor)
            self.inflight = -1
            self.busy += dur
            self.moved += self.nbytes.pop(tid)
            self.done_at[tid] = self.env.now
            self.events[tid].succeed()


class Engine:
    """Runs the decided steps of one workload on one machine; ``run`` returns the timeline."""

    def __init__(self, wl: Workload, dec: Decisions, cost: CostModel, demand_first: bool = True) -> None:
        self.wl, self.dec, self.cost = wl, dec, cost
        self.env = simpy.Environment()
        self.f: Contention = cost.contention
        self.issue = cost.issue_s()
        self.shared = Shared(self.env) if self.f.active else None
        self.link = Link(self.env, demand_first, self.shared, self.f.link)
        n_pass, n_steps = len(wl.pass_start), len(dec.steps)
        self.tl = Timeline(np.zeros(n_pass), np.zeros(n_pass), np.zeros(n_steps), np.zeros(n_steps))
        self.cpu_free = 0.0
        self.waits: list[tuple[int, float]] = []  # (copy ahead not landed yet, when its use could start)

    def _ready(self, tid: int) -> bool:
        return tid < 0 or tid in self.link.done_at

    def _work(self, solo: float, factor: float) -> simpy.Event:
        """Compute-stream work: a plain timeout, or shared with the link under contention."""
        return self.env.timeout(solo) if self.shared is None else self.shared.work("compute", solo, factor)

    def _experts(self, gpu: list) -> Generator:
        cost = self.cost
        if self.shared is None:
            yield self.env.timeout(sum(cost.cached("expert_s", prec, n) for _, prec, n in gpu))
            return
        for _, prec, n in gpu:
            yield self.shared.work("compute", cost.cached("expert_s", prec, n), self.f.expert(prec))

    def _layer(self, step: LayerStep, dense: float) -> Generator[Any, Any, float]:
        env, cost, link = self.env, self.cost, self.link
        if (
            self.shared is None
            and not step.loads
            and not step.cpu
            and not step.cancel
            and not cost.clear_queue
            and all(self._ready(g.tid) for g in step.gpu)
        ):
            yield env.timeout(dense + sum(cost.cached("expert_s", g.precision, g.tokens) for g in step.gpu))
            return 0.0
        yield self._work(dense, self.f.dense)
        routed = env.now
        if step.loads and self.issue:
            yield self._work(self.issue * len(step.loads), self.f.dense)
        if cost.clear_queue:
            link.clear([g.tid for g in step.gpu])
        if step.cancel:
            link.cancel(step.cancel)
        if step.loads:
            link.nbytes.update((ld.tid, cost.link_bytes(ld.nbytes)) for ld in step.loads)
            link.submit([(ld.tid, cost.cached("transfer_s", ld.nbytes), ld.demand) for ld in step.loads])
        todo = list(enumerate(step.gpu))
        stall = 0.0
        self.waits += [(tid, env.now) for tid in late_copies(step, self._ready)]
        if step.loads and cost.serial_copies:  # copies on the compute stream: every one lands before an expert runs
            t0 = env.now
            yield simpy.AllOf(env, [link.events[ld.tid] for ld in step.loads])
            stall += env.now - t0
        while todo:
            ready = [(-1.0 if g.tid < 0 else link.done_at[g.tid], j, g) for j, g in todo if self._ready(g.tid)]
            if not ready:
                t0 = env.now
                yield link.events[link.first_done([g.tid for _, g in todo])]
                stall += env.now - t0
                continue
            ready.sort(key=lambda r: (r[0], r[1]))
            yield from self._experts([g for _, _, g in ready])
            done = {j for _, j, _ in ready}
            todo = [(j, g) for j, g in todo if j not in done]
        if step.cpu:
            self.cpu_free = max(self.cpu_free, routed) + sum(cost.cached("cpu_expert_s", n) for n in step.cpu)
            if self.cpu_free > env.now:
                yield env.timeout(self.cpu_free - env.now)
        return stall

    def _compute(self) -> Generator:
        wl, tl, L = self.wl, self.tl, self.wl.num_layers
        for p in range(len(wl.pass_start)):
            tokens = wl.pass_end[p] - wl.pass_start[p]
            tl.pass_start[p] = self.env.now
            denses = self.cost.pass_dense(tokens, wl.pass_context[p], L)
            for layer in range(L):
                i = p * L + layer
                tl.step_stall[i] = yield from self._layer(self.dec.steps[i], denses[layer])
                tl.step_end[i] = self.env.now
            yield self._work(self.cost.cached("other_s", tokens), self.f.dense)
            tl.pass_end[p] = self.env.now

    def run(self) -> Timeline:
        self.env.run(until=self.env.process(self._compute()))
        self.tl.link_busy_s, self.tl.bytes_moved, self.tl.cancelled = (
            self.link.busy,
            self.link.moved,
            self.link.cancelled,
        )
        self.tl.transfer_done = self.link.done_at
        # a copy landing at the very moment its use could start counts as landed, whichever event simpy ran first
        self.tl.late = sum(1 for tid, t in self.waits if self.link.done_at[tid] > t)
        return self.tl
