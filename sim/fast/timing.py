"""The timing of ``sim.plain`` compiled with numba: the same rules (``sim.timeline``), the same floats.

Reads the decision log as tables (``sim.fast.walk``'s ``loads``, ``gpu``, ``cpu``, ``cancel``,
rows in step order) and per-size costs looked up in arrays built once per run: ``dense_s[P, 2]`` (a layer on the
device, one run whole on the CPU: ``whole[L]``),
``other_s[P]``, ``expert_s[precision, tokens]``, ``cpu_s[tokens]``, ``dur`` and ``nbytes`` per
transfer. ``shared``: the link and the compute stream slow each other (``plain._SharedLink``).
The link's state lives in ``fs`` (floats: free_at or now, busy, the copy in flight's seconds
left and its start, the compute stream's clock, the CPU's) and ``ls`` (ints: queue head and
tail, bytes moved, cancelled, the copy in flight, late uses); the queue holds transfer ids not yet started.
``replay`` and ``replay_shared`` time a range of passes and leave that state (``link_state``)
where the next range picks it up: a whole run is one range, a streamed run
(``sim.fast.stream``) one per chunk, with its copies numbered afresh each time (``renumber``).
The link's helpers, called at every step, allocate nothing and are compiled without numba's
reference counting (``_nrt=False``, as in ``sim.fast.walk``: no count of each array argument on
every call).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
from numba import njit

from hobbit.sim.fast.order import order_few

FREE_AT, BUSY, LEFT, CUR_START, CLOCK, CPU_FREE = range(6)  # fs (FREE_AT is ``now`` for the shared link; CLOCK:
# the compute stream's time in ``replay``; CPU_FREE: when the CPU's experts are done)
HEAD, TAIL, MOVED, CANCELLED, CUR, LATE = range(6)  # ls (LATE: ``Timeline.late``)
GONE, BACK = 1, 2  # a copy's mark in ``gone`` (clear_queue): dropped from the queue; queued again as a demand load


class Span(NamedTuple):
    """The passes a replay times: ``p0:p1`` of a trace of ``num_layers`` layers; the per-pass arrays' row 0 is pass
    ``first_pass`` (a window's, in a streamed run); the passes' loads are the transfers ``base``, ``base + 1``, .. of
    the link's arrays."""

    p0: int
    p1: int
    num_layers: int
    base: int
    first_pass: int


class Tables(NamedTuple):
    """The decision log's tables for the passes (``sim.fast.walk``'s, rows in step order)."""

    loads: Any
    gpu: Any
    cpu: Any
    cancel: Any


class Costs(NamedTuple):
    """The seconds and bytes a replay charges: per transfer (``dur``, ``nbytes``), per pass (``dense_s`` [P, 2],
    ``other_s``), per layer (``whole``: the layer runs whole on the CPU), per precision and token count
    (``expert_s``), per token count on the CPU (``cpu_s``), and a copy's issue (``issue``)."""

    dur: Any
    nbytes: Any
    dense_s: Any
    whole: Any
    other_s: Any
    expert_s: Any
    cpu_s: Any
    issue: float


class Rules(NamedTuple):
    """How the link runs: demand loads ahead of prefetches, copies on the compute stream, the queue cleared at each
    step (``CostModel.serial_copies``, ``clear_queue``)."""

    demand_first: bool
    serial: bool
    clear: bool


class Shares(NamedTuple):
    """The contention's slow-downs (``replay_shared``; ``cost.Contention``)."""

    link: float
    dense: float
    high: float
    low: float


class Link(NamedTuple):
    """The link's state (``link_state``), carried from one replay to the next: which copies are demand loads, the
    queue, cancel marks, start and end times (NaN: never ran), ``fs``, ``ls`` and the clear_queue marks."""

    demand: Any
    q: Any
    dropped: Any
    started: Any
    done: Any
    fs: Any
    ls: Any
    gone: Any


class Clock(NamedTuple):
    """A replay's times, written: per pass (by its row), and per step of the range (the range's first step is 0)."""

    pass_start: Any
    pass_end: Any
    step_stall: Any
    step_end: Any


class Rows(NamedTuple):
    """Each table's first row of each step of the range, and the end (``_setup``)."""

    lo_l: Any
    lo_g: Any
    lo_c: Any
    lo_x: Any


@njit(cache=True)
def _offsets(table, i0, n_steps):
    """Each of the steps ``i0:i0 + n_steps``' first row of ``table`` (rows in step order: column 0), and the end: one
    pass down the table, not a binary search per step."""
    r, n = 0, table.shape[0]
    if n == 0:  # a table a run does not write (no CPU, nothing cancelled): no pass down the steps
        return np.zeros(n_steps + 1, np.int64)
    out = np.empty(n_steps + 1, np.int64)
    for s in range(n_steps + 1):
        while r < n and table[r, 0] - i0 < s:
            r += 1
        out[s] = r
    return out


@njit(cache=True, _nrt=False, inline="always")
def _insert(q, ls, demand, gone, tid, first, demand_first):
    """``tid`` joins the queue: at its tail, or ``first`` (a demand load) ahead of the first queued prefetch."""
    at = ls[TAIL]
    if first and demand_first:
        for r in range(ls[HEAD], ls[TAIL]):
            if not (demand[q[r]] or gone[q[r]] == BACK):
                at = r
                break
    for r in range(ls[TAIL], at, -1):
        q[r] = q[r - 1]
    q[at] = tid
    ls[TAIL] += 1


@njit(cache=True, _nrt=False)
def _requeue(link, tables, rules, x0, x1, lo, hi, g0, g1):
    """``timeline.requeue``: with ``rules.clear`` every prefetch not started leaves (``gone``), then the cancelled
    copies not started (``cancel``'s rows ``x0:x1``), then those the step uses (``gpu``'s rows ``g0:g1``) that had
    left come back as demand loads, then the loads ``lo:hi`` join. The tables come whole with their row ranges: a
    slice made at every step would cost a reference count each."""
    q, ls, demand, dropped, gone = link.q, link.ls, link.demand, link.dropped, link.gone
    cancel, gpu, clear, demand_first = tables.cancel, tables.gpu, rules.clear, rules.demand_first
    if clear:
        w = ls[HEAD]
        for r in range(ls[HEAD], ls[TAIL]):
            t = q[r]
            if demand[t] or gone[t] == BACK:
                q[w] = t
                w += 1
            else:
                gone[t] = GONE
                ls[CANCELLED] += 1
        ls[TAIL] = w
    if x1 > x0:
        for x in range(x0, x1):
            dropped[cancel[x, 1]] = True
        w = ls[HEAD]
        for r in range(ls[HEAD], ls[TAIL]):
            if dropped[q[r]]:
                ls[CANCELLED] += 1
            else:
                q[w] = q[r]
                w += 1
        ls[TAIL] = w
        for x in range(x0, x1):
            dropped[cancel[x, 1]] = False
    if clear:
        for x in range(g0, g1):
            t = gpu[x, 1]
            if t >= 0 and gone[t] == GONE:
                gone[t] = BACK
                ls[CANCELLED] -= 1
                _insert(q, ls, demand, gone, t, True, demand_first)
    for tid in range(lo, hi):
        _insert(q, ls, demand, gone, tid, demand[tid], demand_first)


@njit(cache=True, _nrt=False, inline="always")
def _start_next(q, fs, ls, dur, nbytes, started, done):
    tid = q[ls[HEAD]]
    ls[HEAD] += 1
    started[tid] = fs[FREE_AT]
    fs[FREE_AT] += dur[tid]
    fs[BUSY] += dur[tid]
    ls[MOVED] += nbytes[tid]
    done[tid] = fs[FREE_AT]


@njit(cache=True, _nrt=False)
def _finish(q, fs, ls, dur, nbytes, started, done):
    tid = ls[CUR]
    fs[BUSY] += fs[FREE_AT] - fs[CUR_START]
    ls[MOVED] += nbytes[tid]
    done[tid] = fs[FREE_AT]
    ls[CUR] = -1
    _start(q, fs, ls, dur, started)


@njit(cache=True, _nrt=False)
def _start(q, fs, ls, dur, started):
    if ls[CUR] < 0 and ls[TAIL] > ls[HEAD]:
        tid = q[ls[HEAD]]
        ls[HEAD] += 1
        ls[CUR] = tid
        fs[LEFT] = dur[tid]
        fs[CUR_START] = fs[FREE_AT]
        started[tid] = fs[FREE_AT]


@njit(cache=True, _nrt=False)
def _compute(q, fs, ls, dur, nbytes, started, done, solo, factor, f_link):
    """``_SharedLink.compute``: ``solo`` seconds of compute, ``factor`` slower while a copy runs."""
    while solo > 0.0:
        if ls[CUR] < 0:
            fs[FREE_AT] += solo
            break
        copy_left, compute_left = fs[LEFT] * f_link, solo * factor
        if compute_left <= copy_left:
            fs[FREE_AT] += compute_left
            fs[LEFT] -= compute_left / f_link
            break
        fs[FREE_AT] += copy_left
        solo -= copy_left / factor
        _finish(q, fs, ls, dur, nbytes, started, done)
    return fs[FREE_AT]


@njit(cache=True)
def renumber(table, live, first, base):
    """Transfer ids (``table``'s column 1, in place) in a streamed chunk's numbering (``sim.fast.stream``): an id
    ``first`` or above (the chunk's own loads) becomes ``base`` + its distance from ``first``, one below it its place
    in ``live`` (sorted; it must be there), -1 (resident) stays; false when one was not in ``live``. The table comes
    whole: its column is a strided view, or a contiguous one when it has a row or none, two types to compile."""
    n = live.shape[0]
    for r in range(table.shape[0]):
        t = table[r, 1]
        if t >= first:
            table[r, 1] = base + (t - first)
        elif t >= 0:
            at = np.searchsorted(live, t)
            if at >= n or live[at] != t:
                return False
            table[r, 1] = at
    return True


@njit(cache=True)
def _setup(i0, n_steps, tables):
    """Each table's first row of each of the steps ``i0:i0 + n_steps`` (and the end: ``Rows``), the most GPU rows of
    one."""
    lo_l, lo_g = _offsets(tables.loads, i0, n_steps), _offsets(tables.gpu, i0, n_steps)
    lo_c, lo_x = _offsets(tables.cpu, i0, n_steps), _offsets(tables.cancel, i0, n_steps)
    max_g = 1
    for i in range(n_steps):
        max_g = max(max_g, lo_g[i + 1] - lo_g[i])
    return Rows(lo_l, lo_g, lo_c, lo_x), max_g


@njit(cache=True)
def link_state(loads):
    """The link's state (``Link``) for a run whose copies are ``loads`` (transfer id = row)."""
    n_loads = loads.shape[0]
    fs, ls = np.zeros(6), np.zeros(6, np.int64)
    ls[CUR] = -1
    return Link(
        loads[:, 1] == 1,
        np.zeros(2 * n_loads + 1, np.int64),  # a copy joins at most twice (dropped, then back: clear_queue)
        np.zeros(n_loads + 1, np.bool_),
        np.full(n_loads, np.nan),
        np.full(n_loads, np.nan),
        fs,
        ls,
        np.zeros(n_loads + 1, np.int8),
    )


@njit(cache=True)
def carry(space, live, tid0, loads, dur_of, nbytes_of, demand, dur, nbytes, started, done, gone):
    """A streamed chunk's per-copy arrays (``sim.fast.stream_windows``): the copies ``live`` (sorted) carried from
    the last chunk's arrays, indexed by ``space`` (sorted transfer ids), then the chunk's ``loads`` (transfer ids
    ``tid0``, ``tid0 + 1``, ..) with their seconds and bytes (``dur_of`` / ``nbytes_of`` [layer, precision]), not
    started. Returns the new ``space``, demand marks, seconds, bytes, start and end times and clear_queue marks (one
    longer), and false in place of ``space`` when a live copy is not in the old one. One pass, where numpy took a
    dozen over every chunk."""
    n_live, n_new, m = live.shape[0], loads.shape[0], space.shape[0]
    n = n_live + n_new
    sp, dm = np.empty(n, np.int64), np.empty(n, np.bool_)
    du, nb = np.empty(n), np.empty(n, np.int64)
    st, dn, gn = np.empty(n), np.empty(n), np.zeros(n + 1, np.int8)
    ok = True
    for i in range(n_live):
        at = np.searchsorted(space, live[i])
        if at >= m or space[at] != live[i]:
            ok = False
            break
        sp[i], dm[i], du[i], nb[i] = live[i], demand[at], dur[at], nbytes[at]
        st[i], dn[i], gn[i] = started[at], done[at], gone[at]
    for r in range(n_new):
        k = n_live + r
        sp[k], dm[k] = tid0 + r, loads[r, 1] == 1
        du[k], nb[k] = dur_of[loads[r, 2], loads[r, 4]], nbytes_of[loads[r, 2], loads[r, 4]]
        st[k] = dn[k] = np.nan
    return ok, sp, dm, du, nb, st, dn, gn


@njit(cache=True, _nrt=False)
def tally(loads, L, stall, decode, demand_n, prefetch_n, layer_stall, decode_stall):
    """A streamed chunk's sums, added in place: its demand loads and prefetches by the layer of the step that issued
    them (``loads_per_step``'s), and its stalls ([passes * L], pass after pass) by layer, all and in decode passes
    (``decode`` by the chunk's pass). The stalls are added pass after pass, as ``sim.timeline.layer_sums`` adds
    them: the same floats however a run is cut into chunks."""
    for r in range(loads.shape[0]):
        layer = loads[r, 0] % L
        if loads[r, 1] == 1:
            demand_n[layer] += 1
        elif loads[r, 1] == 0:
            prefetch_n[layer] += 1
    for p in range(stall.shape[0] // L):
        w = 1.0 if decode[p] else 0.0
        for layer in range(L):
            x = stall[p * L + layer]
            layer_stall[layer] += x
            decode_stall[layer] += x * w


@njit(cache=True, _nrt=False)
def _cpu_end(cpu, cpu_s, c0, c1, start):
    """``plain._cpu_work``: the layer's CPU experts one after another from ``start``."""
    s = 0.0
    for r in range(c0, c1):
        s += cpu_s[cpu[r, 1]]
    return start + s


@njit(cache=True)
def replay(span, tables, costs, rules, link, clock):
    """``plain.replay`` without contention, the passes of ``span`` (``Span``), continuing ``link`` (``link_state``;
    updated in place): their times into ``clock`` (``Clock``: by pass, pass p's row p - ``span.first_pass``, as in
    ``costs.dense_s`` and ``costs.other_s``, a window's rows in a streamed run; by step of the range, its first step
    0); ``started`` / ``done`` of ``link`` NaN for a copy that never ran. ``tables`` (``Tables``) hold these passes'
    rows; their loads are the transfers ``span.base``, ``span.base + 1``, .. of ``link``'s arrays (``costs.dur``,
    ``costs.nbytes``, ``link.started`` and ``link.done`` are indexed by transfer)."""
    L = span.num_layers
    rows, max_g = _setup(span.p0 * L, (span.p1 - span.p0) * L, tables)
    ready = np.zeros(max_g)
    order, tmp = np.zeros(max_g, np.int64), np.zeros(max_g, np.int64)
    _replay_steps(span, tables, costs, rules, link, clock, rows, ready, order, tmp)


@njit(cache=True, _nrt=False)
def _replay_steps(span, tables, costs, rules, link, clock, rows, ready, order, tmp):
    """``replay``'s steps, over the arrays it made: compiled without reference counts, so the link's helpers it
    inlines (``_start_next``, ``_insert``) count none for their arrays on every copy."""
    L, p0, first_pass = span.num_layers, span.p0, span.first_pass
    dense_s, whole, other_s, issue = costs.dense_s, costs.whole, costs.other_s, costs.issue
    lo_l, lo_c, lo_x = rows.lo_l, rows.lo_c, rows.lo_x
    fs = link.fs
    t, cpu_free = fs[CLOCK], fs[CPU_FREE]
    for p in range(p0, span.p1):
        pw = p - first_pass  # the pass's row of the per-pass arrays (a window's, in a streamed run)
        clock.pass_start[pw] = t
        for layer in range(L):
            i = (p - p0) * L + layer
            nl = lo_l[i + 1] - lo_l[i]
            t += dense_s[pw, 1 if whole[layer] else 0]
            routed = t
            if nl and issue:
                t += issue * nl
            if nl or lo_x[i + 1] > lo_x[i] or rules.clear:  # _Link.enqueue at t
                _enqueue(tables, costs, rules, link, rows, i, span.base, t)
            stall, t = _experts(tables, costs, rules, link, rows, i, span.base, t, ready, order, tmp)
            if lo_c[i + 1] > lo_c[i]:
                cpu_free = _cpu_end(tables.cpu, costs.cpu_s, lo_c[i], lo_c[i + 1], max(cpu_free, routed))
                t = max(t, cpu_free)
            clock.step_stall[i] = stall
            clock.step_end[i] = t
        t += other_s[pw]
        clock.pass_end[pw] = t
    fs[CLOCK], fs[CPU_FREE] = t, cpu_free


@njit(cache=True, _nrt=False, inline="always")
def _enqueue(tables, costs, rules, link, rows, i, base, t):
    """``_Link.enqueue`` at ``t`` (``replay``'s step ``i``): the copies due by then start, the step's cancels and
    loads change the queue (``_requeue``), and the link, idle, starts the next."""
    q, fs, ls, demand, gone = link.q, link.fs, link.ls, link.demand, link.gone
    dur, nbytes, started, done = costs.dur, costs.nbytes, link.started, link.done
    lo_l, lo_x = rows.lo_l, rows.lo_x
    while ls[TAIL] > ls[HEAD] and fs[FREE_AT] <= t:
        _start_next(q, fs, ls, dur, nbytes, started, done)
    if not rules.clear and lo_x[i + 1] == lo_x[i]:  # only loads join (``_requeue``'s last part, without its call)
        for tid in range(base + lo_l[i], base + lo_l[i + 1]):
            _insert(q, ls, demand, gone, tid, demand[tid], rules.demand_first)
    else:
        _requeue(
            link,
            tables,
            rules,
            lo_x[i],
            lo_x[i + 1],
            base + lo_l[i],
            base + lo_l[i + 1],
            rows.lo_g[i],
            rows.lo_g[i + 1],
        )
    if ls[TAIL] > ls[HEAD] and fs[FREE_AT] <= t:
        fs[FREE_AT] = t
        _start_next(q, fs, ls, dur, nbytes, started, done)


@njit(cache=True, _nrt=False, inline="always")
def _experts(tables, costs, rules, link, rows, i, base, t, ready, order, tmp):
    """``replay``'s step ``i`` from ``t``: its copies on the compute stream land (``serial``), then its experts run
    as their weights arrive; (the step's stall, the time it ends)."""
    q, fs, ls, demand, started, done = link.q, link.fs, link.ls, link.demand, link.started, link.done
    dur, nbytes, expert_s, gpu = costs.dur, costs.nbytes, costs.expert_s, tables.gpu
    g0, g1, l0, l1 = rows.lo_g[i], rows.lo_g[i + 1], rows.lo_l[i], rows.lo_l[i + 1]
    stall = 0.0
    t_ready = t  # when the experts could start: a copy ahead landing after it is late
    if rules.serial and l1 > l0:  # copies on the compute stream: every one of the step's lands before an expert runs
        r = t
        for tid in range(base + l0, base + l1):
            while np.isnan(done[tid]):
                _start_next(q, fs, ls, dur, nbytes, started, done)
            r = max(r, done[tid])
        stall, t = r - t, r
    ng = g1 - g0
    for j in range(ng):
        tid = gpu[g0 + j, 1]
        if tid < 0:
            ready[j] = -1.0
        else:
            while np.isnan(done[tid]):  # done_at
                _start_next(q, fs, ls, dur, nbytes, started, done)
            ready[j] = done[tid]
            if not demand[tid] and ready[j] > t_ready:
                ls[LATE] += 1
    order_few(ready, ng, order, tmp)
    for j in range(ng):
        r = ready[order[j]]
        if r > t:
            stall += r - t
            t = r
        row = g0 + order[j]
        t += expert_s[gpu[row, 2], gpu[row, 3]]
    return stall, t


@njit(cache=True)
def replay_shared(span, tables, costs, rules, link, clock, shares):
    """``plain._replay_shared``: ``replay`` with the overlap of copies and compute charged (``Shares``)."""
    L = span.num_layers
    rows, max_g = _setup(span.p0 * L, (span.p1 - span.p0) * L, tables)
    ready = np.zeros(max_g)
    picked = np.zeros(max_g, np.int64)
    todo = np.zeros(max_g, np.int64)
    order, tmp = np.zeros(max_g, np.int64), np.zeros(max_g, np.int64)
    q, fs, ls, demand, started, done = link.q, link.fs, link.ls, link.demand, link.started, link.done
    dur, nbytes, dense_s, whole, other_s, issue = (
        costs.dur,
        costs.nbytes,
        costs.dense_s,
        costs.whole,
        costs.other_s,
        costs.issue,
    )
    lo_l, lo_g, lo_c, lo_x = rows.lo_l, rows.lo_g, rows.lo_c, rows.lo_x
    f_link, f_dense = shares.link, shares.dense
    cpu_free = fs[CPU_FREE]
    for p in range(span.p0, span.p1):
        pw = p - span.first_pass
        clock.pass_start[pw] = fs[FREE_AT]
        for layer in range(L):
            i = (p - span.p0) * L + layer
            g0, g1 = lo_g[i], lo_g[i + 1]
            nl = lo_l[i + 1] - lo_l[i]
            dense = dense_s[pw, 1 if whole[layer] else 0]
            routed = _compute(q, fs, ls, dur, nbytes, started, done, dense, f_dense, f_link)
            if nl and issue:
                _compute(q, fs, ls, dur, nbytes, started, done, issue * nl, f_dense, f_link)
            if nl or lo_x[i + 1] > lo_x[i] or rules.clear:
                b = span.base
                _requeue(link, tables, rules, lo_x[i], lo_x[i + 1], b + lo_l[i], b + lo_l[i + 1], g0, g1)
                _start(q, fs, ls, dur, started)
            for row in range(g0, g1):
                tid = tables.gpu[row, 1]
                if tid >= 0 and not demand[tid] and np.isnan(done[tid]):
                    ls[LATE] += 1
            stall = 0.0 + _serial_shared(costs, rules, link, span.base + lo_l[i], span.base + lo_l[i + 1])
            stall = _experts_shared(tables, costs, link, shares, g0, g1, ready, picked, todo, order, tmp, stall)
            if lo_c[i + 1] > lo_c[i]:
                cpu_free = _cpu_end(tables.cpu, costs.cpu_s, lo_c[i], lo_c[i + 1], max(cpu_free, routed))
                _idle_until(costs, link, cpu_free)
            clock.step_stall[i] = stall
            clock.step_end[i] = fs[FREE_AT]
        clock.pass_end[pw] = _compute(q, fs, ls, dur, nbytes, started, done, other_s[pw], f_dense, f_link)
    fs[CPU_FREE] = cpu_free


@njit(cache=True, inline="always")
def _serial_shared(costs, rules, link, lo, hi):
    """``replay_shared``'s copies on the compute stream (``serial``): the copies run alone until the step's last
    (transfers ``lo:hi``) lands; the stall."""
    if not (rules.serial and hi > lo):
        return 0.0
    q, fs, ls, started, done = link.q, link.fs, link.ls, link.started, link.done
    t0 = fs[FREE_AT]
    for tid in range(lo, hi):
        while np.isnan(done[tid]):
            fs[FREE_AT] += fs[LEFT]
            _finish(q, fs, ls, costs.dur, costs.nbytes, started, done)
    return fs[FREE_AT] - t0


@njit(cache=True, inline="always")
def _experts_shared(tables, costs, link, shares, g0, g1, ready, picked, todo, order, tmp, stall):
    """``replay_shared``'s experts of a step (``gpu``'s rows ``g0:g1``): those whose weights are resident, in arrival
    order, then a wait for the next to land; ``stall`` with the waits added."""
    q, fs, ls, started, done = link.q, link.fs, link.ls, link.started, link.done
    dur, nbytes, expert_s, gpu = costs.dur, costs.nbytes, costs.expert_s, tables.gpu
    nt = g1 - g0
    for j in range(nt):
        todo[j] = g0 + j
    while nt:  # the experts whose weights are resident, in arrival order; then wait for the next
        nr = keep = 0
        for j in range(nt):
            tid = gpu[todo[j], 1]
            if tid < 0 or not np.isnan(done[tid]):
                picked[nr] = todo[j]
                ready[nr] = -1.0 if tid < 0 else done[tid]
                nr += 1
            else:
                todo[keep] = todo[j]
                keep += 1
        if nr == 0:
            t0 = fs[FREE_AT]
            while True:  # wait_first: copies run alone until one of these lands
                landed = False
                for j in range(nt):
                    if not np.isnan(done[gpu[todo[j], 1]]):
                        landed = True
                        break
                if landed:
                    break
                fs[FREE_AT] += fs[LEFT]
                _finish(q, fs, ls, dur, nbytes, started, done)
            stall += fs[FREE_AT] - t0
            continue
        order_few(ready, nr, order, tmp)
        for r in range(nr):
            row = picked[order[r]]
            prec = gpu[row, 2]
            factor = shares.high if prec == 0 else shares.low
            _compute(q, fs, ls, dur, nbytes, started, done, expert_s[prec, gpu[row, 3]], factor, shares.link)
        nt = keep
    return stall


@njit(cache=True, inline="always")
def _idle_until(costs, link, t):
    """``idle_until``: copies run alone until ``t`` (the CPU's experts done)."""
    q, fs, ls, started, done = link.q, link.fs, link.ls, link.started, link.done
    if t > fs[FREE_AT]:
        while ls[CUR] >= 0 and fs[FREE_AT] + fs[LEFT] <= t:
            fs[FREE_AT] += fs[LEFT]
            _finish(q, fs, ls, costs.dur, costs.nbytes, started, done)
        if ls[CUR] >= 0:
            fs[LEFT] -= t - fs[FREE_AT]
        fs[FREE_AT] = t
