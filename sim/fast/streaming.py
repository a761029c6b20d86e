"""A streamed run: the walk and its timing a chunk of passes at a time over a trace, or over consecutive windows of
one (``stream``, ``stream_windows``), each chunk's log timed, counted and dropped."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

import numpy as np

from hobbit.sim.cost import CostModel
from hobbit.sim.decide import (
    Decisions,
    NotKept,
)
from hobbit.sim.fast import special, timing
from hobbit.sim.fast.compiling import first_use, policy_walk
from hobbit.sim.fast.decisions import decisions_of
from hobbit.sim.fast.inputs import Run, Window, bound_inputs, fill_cpu, pass_tokens, timing_inputs, walk_inputs
from hobbit.sim.fast.records import NEXT_TID, OVERFLOW, Inputs, State
from hobbit.sim.fast.replay import replay_passes
from hobbit.sim.fast.state import walk_state
from hobbit.sim.policies.compiled import TRANSFER
from hobbit.sim.policies.registry import eviction_class
from hobbit.sim.timeline import Timeline
from hobbit.sim.workload import Workload


class Streamed(NamedTuple):
    """A streamed run (``stream``): its decisions and timeline, each pass's bound (``pass_bounds``), and the
    selections' counts per class of HOBBIT's rule (``rule_mix``; None when the system does not apply it)."""

    decisions: Decisions
    timeline: Timeline
    bound: np.ndarray
    classes: np.ndarray | None


class Chunk(NamedTuple):
    """A chunk of a streamed run's passes once timed (``stream_windows``' ``on_chunk``): the trace's passes
    ``p0:p1``, the window they belong to, and their start and end times, stalls and bounds in seconds (views, valid
    during the call)."""

    p0: int
    p1: int
    window: Window
    start: np.ndarray
    end: np.ndarray
    stall: np.ndarray
    bound: np.ndarray


class Totals(NamedTuple):
    """What a streamed run counted beyond its chunks (``stream_windows``): its decisions (``Decisions.steps`` not
    kept), the link's busy seconds, bytes and counts of copies cancelled and landing late, each layer's stall over
    the run and over decode passes (``Timeline.stall_sums``), and the selections' counts per class of HOBBIT's rule
    (None when the system does not apply it)."""

    decisions: Decisions
    link_busy_s: float
    bytes_moved: int
    cancelled: int
    late: int
    layer_stall: np.ndarray
    decode_stall: np.ndarray
    classes: np.ndarray | None

    def timeline(self, start: np.ndarray, end: np.ndarray, stall: np.ndarray) -> Timeline:
        """The run's ``Timeline`` from its passes' start and end times and stalls (seconds), the copies' not kept."""
        return Timeline(
            start,
            end,
            np.zeros(0),
            np.zeros(0),
            link_busy_s=self.link_busy_s,
            bytes_moved=self.bytes_moved,
            cancelled=self.cancelled,
            late=self.late,
            stall_sums=(stall, self.layer_stall, self.decode_stall),
        )


CHUNK_STEPS = 1 << 14  # a streamed run (``stream``) walks and times this many steps at a time (whole passes, >= 1)


def stream(
    wl: Workload,
    run: Run,
    cost: CostModel,
    demand_first: bool = True,
    chunk_steps: int | None = None,
    shared: bool | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Streamed | None:
    """``decide`` then ``time_decisions``, a chunk of ``chunk_steps`` steps (``CHUNK_STEPS``; whole passes) at a time: each chunk's
    log is timed, counted and dropped, so a run holds the trace, its per-pass and per-step times and O(cache +
    chunk) state, not its log. The same decisions and times as the two in turn; ``Decisions.steps`` and the
    timeline's copy times are not kept (``decide_or_refer`` and ``time_decisions`` for those). None when LIRS runs
    out of its counted-out entries (``decide`` hands such a run to the reference).

    ``stream_windows`` with the whole trace as one window; its results laid out per pass. ``progress(passes done,
    passes)`` is called after each chunk.

    The walk also computes each pass's bound (``pass_bounds``' floats) and, under HOBBIT's rule, the mix of the
    selections' classes (``rule_mix``'s counts) as it reads the selections (``Streamed``)."""
    P = len(wl.pass_start)
    ps, pe, pass_stall, bnd = np.zeros(P), np.zeros(P), np.zeros(P), np.zeros(P)

    def keep(c: Chunk) -> None:
        ps[c.p0 : c.p1], pe[c.p0 : c.p1], pass_stall[c.p0 : c.p1], bnd[c.p0 : c.p1] = c.start, c.end, c.stall, c.bound
        if progress is not None:
            progress(c.p1, P)

    totals = stream_windows([Window(wl)], run, cost, keep, demand_first, chunk_steps, shared)
    if totals is None:
        return None
    return Streamed(totals.decisions, totals.timeline(ps, pe, pass_stall), bnd, totals.classes)


def stream_windows(
    windows: Iterable[Window],
    run: Run,
    cost: CostModel,
    on_chunk: Callable[[Chunk], None],
    demand_first: bool = True,
    chunk_steps: int | None = None,
    shared: bool | None = None,
    records: int | None = None,
) -> Totals | None:
    """The walk and its timing over ``windows``, the trace's passes in order a window at a time (``Window``), a chunk
    of ``chunk_steps`` steps of a window at a time: each chunk's log is timed, counted and dropped, and its per-pass
    results handed to ``on_chunk`` (``Chunk``), so a run holds one window, O(cache + chunk) state and what
    ``on_chunk`` keeps. The cache, the link and the clock carry from one window to the next: the same decisions and
    times however the trace is cut into windows. ``records``: the run's most steps and records in any log table (the
    tables' integer type; the first window's when None, right for a single window). None when LIRS runs out of its
    counted-out entries (``decide`` hands such a run to the reference).

    The timing numbers copies afresh for each chunk: the copies a later step can still name (held in a slot,
    staged, queued or on the link when the chunk starts) first, in order, then the chunk's own loads, so its
    per-copy arrays hold those and no others (``_Carried``)."""
    s = _Streaming(run, cost, on_chunk, demand_first, shared)
    for window in windows:
        if not s.window(window, chunk_steps or CHUNK_STEPS, records):
            return None
    return s.totals()


class _Carried:
    """The timing's state from one chunk to the next: the copies it still knows of, as sorted transfer ids
    (``space``), with their demand marks, seconds, bytes, start and end times and clear_queue marks; the link's
    floats and ints (``fs``, ``ls``); the link's queue and the copy on it, as transfer ids (``waiting``)."""

    def __init__(self) -> None:
        self.fs, self.ls = np.zeros(6), np.zeros(6, np.int64)
        self.ls[timing.CUR] = -1
        self.space = np.zeros(0, np.int64)  # the transfer ids the timing's arrays are indexed by (sorted)
        self.demand = np.zeros(0, np.bool_)
        self.gone = np.zeros(0, np.int8)
        self.started = self.done = self.dur = np.zeros(0)
        self.nbytes = np.zeros(0, np.int64)
        self.waiting = np.zeros(0, np.int64)

    def live(self, state: State) -> np.ndarray:
        """The copies a later step can still name: held in a slot, staged, queued or on the link (sorted)."""
        held = np.concatenate([state.pool[:, :, TRANSFER].ravel(), state.stg_tid.ravel(), self.waiting])
        return np.unique(held[held >= 0])

    def link(
        self, live: np.ndarray, tid0: int, loads: np.ndarray, dur_of: np.ndarray, nbytes_of: np.ndarray
    ) -> timing.Link:
        """The link for a chunk whose loads are ``loads`` (transfer ids ``tid0`` on): the copies ``live`` carried,
        then the chunk's own (``timing.carry``), the queue in the chunk's numbering."""
        with first_use(timing.carry):
            ok, self.space, self.demand, self.dur, self.nbytes, self.started, self.done, self.gone = timing.carry(
                self.space, live, tid0, loads, dur_of, nbytes_of, self.demand, self.dur, self.nbytes, self.started,
                self.done, self.gone,
            )  # fmt: skip
        if not ok:
            raise AssertionError("a copy the timing must still know of is not in its arrays")
        space, waiting, ls = self.space, self.waiting, self.ls
        dropped = np.zeros(len(space) + 1, np.bool_)
        n_wait = len(waiting) - (ls[timing.CUR] >= 0)
        q = np.zeros(n_wait + len(loads) + len(space) + 1, np.int64)  # a copy dropped comes back once at most
        q[:n_wait] = np.searchsorted(space, waiting[:n_wait])
        ls[timing.HEAD], ls[timing.TAIL] = 0, n_wait
        if ls[timing.CUR] >= 0:
            ls[timing.CUR] = np.searchsorted(space, waiting[-1])
        return timing.Link(self.demand, q, dropped, self.started, self.done, self.fs, ls, self.gone)

    def wait(self, q: np.ndarray) -> None:
        """After a chunk: the queue ``q`` and the copy on the link, as transfer ids."""
        ls = self.ls
        self.waiting = self.space[q[ls[timing.HEAD] : ls[timing.TAIL]]]
        if ls[timing.CUR] >= 0:
            self.waiting = np.append(self.waiting, self.space[ls[timing.CUR]])


class _Streaming:
    """``stream_windows``' run: the walk's state and its copy of the walk (from the first window), the timing's state
    (``_Carried``) and the sums over the chunks (``Totals``')."""

    def __init__(
        self, run: Run, cost: CostModel, on_chunk: Callable[[Chunk], None], demand_first: bool, shared: bool | None
    ) -> None:
        self.run, self.cost, self.on_chunk, self.demand_first, self.shared = run, cost, on_chunk, demand_first, shared
        self.state: Any = None
        self.walk_of: Any = None
        self.carried = _Carried()
        self.n_passes = 0
        self.prev_ids = None  # the selections of the last layer of the last pass walked

    def window(self, window: Window, chunk_steps: int, records: int | None) -> bool:
        """The window's passes, a chunk at a time; false when LIRS ran out of its counted-out entries."""
        system = self.run.system
        wl, first = window.wl, window.first_pass
        L, P = wl.num_layers, len(wl.pass_start)
        if first > 0 and window.future is None and "future_uses" in eviction_class(system.cache.policy).needs:
            raise ValueError(
                f"eviction policy {system.cache.policy} over a window needs the window's lists of next uses "
                "(Window.future)"
            )
        max_t, _ = pass_tokens(wl)
        inputs = timing_inputs(wl, self.cost, self.run.expert_bytes, max_t)
        bounds = bound_inputs(wl, self.cost, system, inputs[:2])
        state_args, walk_in = walk_inputs(window, self.run, bounds, records, self.prev_ids)
        if self.state is None:
            self.state = walk_state(**state_args)
            self.walk_of = policy_walk(system.cache.policy, special.Variant.of(walk_in), self.run.walks)
            self.layer_stall, self.decode_stall = np.zeros(L), np.zeros(L)
            self.demand_n, self.prefetch_n = np.zeros(L, np.int64), np.zeros(L, np.int64)
            self.classes = np.zeros(3, np.int64)
        self.n_passes += P
        self.cpu_known = False  # the window's CPU expert times, looked up once a chunk computes experts there
        self.ps, self.pe = np.zeros(P), np.zeros(P)
        self.decode = wl.pass_arrays().phase == 1
        per = max(1, chunk_steps // max(L, 1))  # passes per chunk
        for p0 in range(first, first + P, per):
            if not self.chunk(window, walk_in, inputs, p0, min(first + P, p0 + per)):
                return False
        self.classes += walk_in.bound.cls_n
        self.prev_ids = np.array(wl.ids[wl.pass_start[-1] : wl.pass_end[-1], L - 1], np.int16)
        return True

    def chunk(self, window: Window, walk_in: Inputs, inputs: tuple, p0: int, p1: int) -> bool:
        """Passes ``p0:p1`` of ``window``: walked, timed, counted and handed on (``on_chunk``)."""
        first, L = window.first_pass, window.wl.num_layers
        st, carried = self.state.st, self.carried
        tid0 = int(st[NEXT_TID])
        live = carried.live(self.state)
        with first_use(self.walk_of):
            out = self.walk_of(self.state, walk_in, p0, p1)
        loads, gpu, cpu, cancel = out.loads, out.gpu, out.cpu, out.cancel  # views of the buffers, out.logs
        self.state = self.state._replace(pins=out.pins, logs=out.logs)
        del out
        if st[OVERFLOW]:
            return False
        link = carried.link(live, tid0, loads, inputs[4], inputs[5])
        for t in (gpu, cancel):  # transfer ids -> the chunk's numbering (-1: resident, stays)
            if not timing.renumber(t, live, tid0, len(live)):
                raise AssertionError("a step names a copy the timing was not told to keep")
        if len(cpu) and not self.cpu_known:
            fill_cpu(self.cost, inputs[3])
            self.cpu_known = True
        n = (p1 - p0) * L
        stall = np.zeros(n)
        replay_passes(
            self.cost,
            self.shared,
            timing.Span(p0, p1, L, len(live), first),
            timing.Tables(loads, gpu, cpu, cancel),
            (carried.dur, carried.nbytes),
            inputs,
            self.demand_first,
            link,
            timing.Clock(self.ps, self.pe, stall, np.zeros(n)),
        )
        w0, w1 = p0 - first, p1 - first
        with first_use(timing.tally):
            timing.tally(
                loads, L, stall, self.decode[w0:w1], self.demand_n, self.prefetch_n, self.layer_stall, self.decode_stall
            )
        carried.wait(link.q)
        bound = walk_in.bound.out[w0:w1]
        self.on_chunk(Chunk(p0, p1, window, self.ps[w0:w1], self.pe[w0:w1], stall.reshape(-1, L).sum(axis=1), bound))
        return True

    def totals(self) -> Totals:
        """What the run counted (``Totals``)."""
        if self.state is None:
            raise ValueError("a streamed run needs at least one window of passes")
        run, carried = self.run, self.carried
        dec = decisions_of(
            self.state.st,
            self.state.served,
            self.state.mass,
            run.slots,
            run.system,
            NotKept(self.n_passes * len(self.layer_stall)),
            None,
            (self.demand_n, self.prefetch_n),
        )
        return Totals(
            dec,
            float(carried.fs[timing.BUSY]),
            int(carried.ls[timing.MOVED]),
            int(carried.ls[timing.CANCELLED]),
            int(carried.ls[timing.LATE]),
            self.layer_stall,
            self.decode_stall,
            self.classes if run.system.precision.mode == "hobbit" else None,
        )
