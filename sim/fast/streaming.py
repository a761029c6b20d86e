"""A streamed run: the walk and its timing a chunk of passes at a time over a trace, or over consecutive windows of
one (``stream``, ``stream_windows``), each chunk's log timed, counted and dropped."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

import numpy as np

from hobbit.sim.config import SystemConfig
from hobbit.sim.cost import CostModel
from hobbit.sim.decide import (
    Decisions,
    NotKept,
    Placement,
)
from hobbit.sim.fast import special, timing, walk
from hobbit.sim.fast.compiling import first_use, policy_walk
from hobbit.sim.fast.decisions import decisions_of
from hobbit.sim.fast.inputs import bound_inputs, fill_cpu, pass_tokens, timing_inputs, walk_inputs
from hobbit.sim.fast.replay import replay_passes
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


class Window(NamedTuple):
    """Consecutive whole passes of a trace, laid out for replay (``stream_windows``): ``wl`` holds them, its tokens
    numbered from 0 (``Workload.token_in_request`` counts from each request's first token in the trace); ``first_pass``
    is the trace's number of its first pass, ``prev_request`` the request of the pass before it (-1: none)."""

    wl: Workload
    first_pass: int = 0
    prev_request: int = -1
    future: tuple[np.ndarray, np.ndarray] | None = None  # Belady's lists of the window (``window_future``)


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
    system: SystemConfig,
    slots: Any,
    expert_bytes: Any,
    cost: CostModel,
    demand_first: bool = True,
    placement: Placement | None = None,
    cpu_faster: Callable[[int, int], bool] | None = None,
    miss_costs: Callable[[int, int], tuple[float, float]] | None = None,
    profile: list[np.ndarray] | None = None,
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

    totals = stream_windows(
        [Window(wl)],
        system,
        slots,
        expert_bytes,
        cost,
        keep,
        demand_first,
        placement,
        cpu_faster,
        miss_costs,
        profile,
        chunk_steps,
        shared,
    )
    if totals is None:
        return None
    return Streamed(totals.decisions, totals.timeline(ps, pe, pass_stall), bnd, totals.classes)


def stream_windows(
    windows: Iterable[Window],
    system: SystemConfig,
    slots: Any,
    expert_bytes: Any,
    cost: CostModel,
    on_chunk: Callable[[Chunk], None],
    demand_first: bool = True,
    placement: Placement | None = None,
    cpu_faster: Callable[[int, int], bool] | None = None,
    miss_costs: Callable[[int, int], tuple[float, float]] | None = None,
    profile: list[np.ndarray] | None = None,
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
    per-copy arrays hold those and no others."""
    state = walk_of = None
    fs, ls = np.zeros(6), np.zeros(6, np.int64)
    ls[timing.CUR] = -1
    space = np.zeros(0, np.int64)  # the transfer ids the timing's arrays are indexed by (sorted): the previous chunk's
    demand = dropped = np.zeros(0, np.bool_)
    gone = np.zeros(0, np.int8)
    started = done = dur = np.zeros(0)
    nbytes = np.zeros(0, np.int64)
    waiting = np.zeros(0, np.int64)  # the link's queue and the copy on it, as transfer ids
    layer_stall = decode_stall = demand_n = prefetch_n = classes = None
    n_passes = 0
    prev_ids = None  # the selections of the last layer of the last pass walked
    for window in windows:
        wl, first = window.wl, window.first_pass
        L, P = wl.num_layers, len(wl.pass_start)
        if first > 0 and window.future is None and "future_uses" in eviction_class(system.cache.policy).needs:
            raise ValueError(
                f"eviction policy {system.cache.policy} over a window needs the window's lists of next uses "
                "(Window.future)"
            )
        max_t, _ = pass_tokens(wl)
        inputs = timing_inputs(wl, cost, expert_bytes, max_t)
        state_args, walk_in = walk_inputs(
            wl,
            system,
            slots,
            expert_bytes,
            placement,
            cpu_faster,
            miss_costs,
            profile,
            bound_inputs(wl, cost, system, inputs[:2]),
            window=(first, window.prev_request),
            records=records,
            future=window.future,
            prev_ids=prev_ids,
        )
        if state is None:
            state = walk.walk_state(**state_args)
            walk_of = policy_walk(system.cache.policy, special.Variant.of(walk_in))
            layer_stall, decode_stall = np.zeros(L), np.zeros(L)
            demand_n, prefetch_n = np.zeros(L, np.int64), np.zeros(L, np.int64)
            classes = np.zeros(3, np.int64)
        assert walk_of is not None and layer_stall is not None and decode_stall is not None
        assert demand_n is not None and prefetch_n is not None and classes is not None
        cpu_known = False  # the window's CPU expert times, looked up once a chunk computes experts there
        n_passes += P
        dur_of, nbytes_of = inputs[4], inputs[5]
        decode = wl.pass_arrays().phase == 1
        ps, pe = np.zeros(P), np.zeros(P)
        pool, stg_tid, st = state.pool, state.stg_tid, state.st
        per = max(1, (chunk_steps or CHUNK_STEPS) // max(L, 1))  # passes per chunk
        for p0 in range(first, first + P, per):
            p1 = min(first + P, p0 + per)
            tid0 = int(st[walk.NEXT_TID])
            held = np.concatenate([pool[:, :, walk.TRANSFER].ravel(), stg_tid.ravel(), waiting])
            live = np.unique(held[held >= 0])
            with first_use(walk_of):
                out = walk_of(state, walk_in, p0, p1)
            loads, gpu, cpu, cancel = out.loads, out.gpu, out.cpu, out.cancel  # views of the buffers, out.logs
            state = state._replace(pins=out.pins, logs=out.logs)
            del out
            if st[walk.OVERFLOW]:
                return None
            with first_use(timing.carry):
                ok, space, demand, dur, nbytes, started, done, gone = timing.carry(
                    space, live, tid0, loads, dur_of, nbytes_of, demand, dur, nbytes, started, done, gone
                )
            if not ok:
                raise AssertionError("a copy the timing must still know of is not in its arrays")
            n_new = len(loads)
            dropped = np.zeros(len(space) + 1, np.bool_)
            n_wait = len(waiting) - (ls[timing.CUR] >= 0)
            q = np.zeros(n_wait + n_new + len(space) + 1, np.int64)  # a copy dropped comes back once at most
            q[:n_wait] = np.searchsorted(space, waiting[:n_wait])
            ls[timing.HEAD], ls[timing.TAIL] = 0, n_wait
            if ls[timing.CUR] >= 0:
                ls[timing.CUR] = np.searchsorted(space, waiting[-1])
            for t in (gpu, cancel):  # transfer ids -> the chunk's numbering (-1: resident, stays)
                if not timing.renumber(t, live, tid0, len(live)):
                    raise AssertionError("a step names a copy the timing was not told to keep")
            if len(cpu) and not cpu_known:
                fill_cpu(cost, inputs[3])
                cpu_known = True
            link = (demand, q, dropped, started, done, fs, ls, gone)
            n = (p1 - p0) * L
            stall = np.zeros(n)
            replay_passes(
                wl,
                cost,
                shared,
                p0,
                p1,
                (loads, gpu, cpu, cancel),
                (dur, nbytes),
                inputs,
                demand_first,
                link,
                len(live),
                (ps, pe, stall, np.zeros(n)),
                first,
            )
            w0, w1 = p0 - first, p1 - first
            with first_use(timing.tally):
                timing.tally(loads, L, stall, decode[w0:w1], demand_n, prefetch_n, layer_stall, decode_stall)
            waiting = space[q[ls[timing.HEAD] : ls[timing.TAIL]]]
            if ls[timing.CUR] >= 0:
                waiting = np.append(waiting, space[ls[timing.CUR]])
            on_chunk(
                Chunk(p0, p1, window, ps[w0:w1], pe[w0:w1], stall.reshape(-1, L).sum(axis=1), walk_in.bound.out[w0:w1])
            )
        classes += walk_in.bound.cls_n
        prev_ids = np.array(wl.ids[wl.pass_start[-1] : wl.pass_end[-1], L - 1], np.int16)
    if state is None:
        raise ValueError("a streamed run needs at least one window of passes")
    assert layer_stall is not None and decode_stall is not None
    dec = decisions_of(
        state.st,
        state.served,
        state.mass,
        slots,
        system,
        NotKept(n_passes * len(layer_stall)),
        None,
        (demand_n, prefetch_n),
    )
    return Totals(
        dec,
        float(fs[timing.BUSY]),
        int(ls[timing.MOVED]),
        int(ls[timing.CANCELLED]),
        int(ls[timing.LATE]),
        layer_stall,
        decode_stall,
        classes if system.precision.mode == "hobbit" else None,
    )
