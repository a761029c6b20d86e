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

import numpy as np
from numba import njit

from hobbit.sim.fast.order import order_few

FREE_AT, BUSY, LEFT, CUR_START, CLOCK, CPU_FREE = range(6)  # fs (FREE_AT is ``now`` for the shared link; CLOCK:
# the compute stream's time in ``replay``; CPU_FREE: when the CPU's experts are done)
HEAD, TAIL, MOVED, CANCELLED, CUR, LATE = range(6)  # ls (LATE: ``Timeline.late``)
GONE, BACK = 1, 2  # a copy's mark in ``gone`` (clear_queue): dropped from the queue; queued again as a demand load


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
def _requeue(q, ls, demand, dropped, cancel, x0, x1, lo, hi, demand_first, gone, clear, gpu, g0, g1):
    """``timeline.requeue``: with ``clear`` every prefetch not started leaves (``gone``), then the cancelled copies not
    started (``cancel``'s rows ``x0:x1``), then those the step uses (``gpu``'s rows ``g0:g1``) that had left come
    back as demand loads, then the loads ``lo:hi`` join. The tables come whole with their row ranges: a slice made
    at every step would cost a reference count each."""
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
def _setup(i0, n_steps, loads, gpu, cpu, cancel):
    """Each table's first row of each of the steps ``i0:i0 + n_steps`` (and the end), the most GPU rows of one."""
    lo_l, lo_g = _offsets(loads, i0, n_steps), _offsets(gpu, i0, n_steps)
    lo_c, lo_x = _offsets(cpu, i0, n_steps), _offsets(cancel, i0, n_steps)
    max_g = 1
    for i in range(n_steps):
        max_g = max(max_g, lo_g[i + 1] - lo_g[i])
    return lo_l, lo_g, lo_c, lo_x, max_g


@njit(cache=True)
def link_state(loads):
    """The link's state for a run whose copies are ``loads`` (transfer id = row): which loads are demand, the queue,
    cancel marks, start and end times, ``fs``, ``ls`` and the clear_queue marks (``gone``)."""
    n_loads = loads.shape[0]
    fs, ls = np.zeros(6), np.zeros(6, np.int64)
    ls[CUR] = -1
    return (
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
def replay(
    p0,
    p1,
    num_layers,
    loads,
    gpu,
    cpu,
    cancel,
    dur,
    nbytes,
    dense_s,
    whole,
    other_s,
    expert_s,
    cpu_s,
    issue,
    demand_first,
    serial,
    clear,
    link,
    base,
    first_pass,
    pass_start,
    pass_end,
    step_stall,
    step_end,
):
    """``plain.replay`` without contention, passes ``p0:p1``, continuing ``link`` (``link_state``; updated in
    place): their times into ``pass_start`` and ``pass_end`` (by pass: pass p's row is p - ``first_pass``, as in
    ``dense_s`` and ``other_s``, a window's rows in a streamed run) and ``step_stall`` and ``step_end``
    (by step of the range: the range's first step is 0); ``started`` / ``done`` of
    ``link`` NaN for a copy that never ran. The tables hold these passes' rows; their loads are the transfers
    ``base``, ``base + 1``, .. of ``link``'s arrays (``dur``, ``nbytes``, ``started`` and ``done`` are indexed by
    transfer)."""
    L = num_layers
    i0, n_steps = p0 * L, (p1 - p0) * L
    lo_l, lo_g, lo_c, lo_x, max_g = _setup(i0, n_steps, loads, gpu, cpu, cancel)
    demand, q, dropped, started, done, fs, ls, gone = link
    ready = np.zeros(max_g)
    order, tmp = np.zeros(max_g, np.int64), np.zeros(max_g, np.int64)
    _replay_steps(
        p0, p1, L, loads, gpu, cpu, cancel, dur, nbytes, dense_s, whole, other_s, expert_s, cpu_s, issue,
        demand_first, serial, clear, demand, q, dropped, started, done, fs, ls, gone, base, first_pass, pass_start,
        pass_end, step_stall, step_end, lo_l, lo_g, lo_c, lo_x, ready, order, tmp,
    )  # fmt: skip


@njit(cache=True, _nrt=False)
def _replay_steps(
    p0, p1, L, loads, gpu, cpu, cancel, dur, nbytes, dense_s, whole, other_s, expert_s, cpu_s, issue, demand_first,
    serial, clear, demand, q, dropped, started, done, fs, ls, gone, base, first_pass, pass_start, pass_end,
    step_stall, step_end, lo_l, lo_g, lo_c, lo_x, ready, order, tmp,
):  # fmt: skip
    """``replay``'s steps, over the arrays it made: compiled without reference counts, so the link's helpers it
    inlines (``_start_next``, ``_insert``) count none for their arrays on every copy."""
    t, cpu_free = fs[CLOCK], fs[CPU_FREE]
    for p in range(p0, p1):
        pw = p - first_pass  # the pass's row of the per-pass arrays (a window's, in a streamed run)
        pass_start[pw] = t
        for layer in range(L):
            i = (p - p0) * L + layer
            g0, g1 = lo_g[i], lo_g[i + 1]
            nl = lo_l[i + 1] - lo_l[i]
            t += dense_s[pw, 1 if whole[layer] else 0]
            routed = t
            if nl and issue:
                t += issue * nl
            if nl or lo_x[i + 1] > lo_x[i] or clear:  # _Link.enqueue at t
                while ls[TAIL] > ls[HEAD] and fs[FREE_AT] <= t:
                    _start_next(q, fs, ls, dur, nbytes, started, done)
                if not clear and lo_x[i + 1] == lo_x[i]:  # only loads join (``_requeue``'s last part, without its
                    # call: a dozen arrays passed on every step)
                    for tid in range(base + lo_l[i], base + lo_l[i + 1]):
                        _insert(q, ls, demand, gone, tid, demand[tid], demand_first)
                else:
                    _requeue(
                        q,
                        ls,
                        demand,
                        dropped,
                        cancel,
                        lo_x[i],
                        lo_x[i + 1],
                        base + lo_l[i],
                        base + lo_l[i + 1],
                        demand_first,
                        gone,
                        clear,
                        gpu,
                        g0,
                        g1,
                    )
                if ls[TAIL] > ls[HEAD] and fs[FREE_AT] <= t:
                    fs[FREE_AT] = t
                    _start_next(q, fs, ls, dur, nbytes, started, done)
            stall = 0.0
            t_ready = t  # when the experts could start: a copy ahead landing after it is late
            if serial and nl:  # copies on the compute stream: every one of the step's lands before an expert runs
                r = t
                for tid in range(base + lo_l[i], base + lo_l[i + 1]):
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
            if lo_c[i + 1] > lo_c[i]:
                cpu_free = _cpu_end(cpu, cpu_s, lo_c[i], lo_c[i + 1], max(cpu_free, routed))
                t = max(t, cpu_free)
            step_stall[i] = stall
            step_end[i] = t
        t += other_s[pw]
        pass_end[pw] = t
    fs[CLOCK], fs[CPU_FREE] = t, cpu_free


@njit(cache=True)
def replay_shared(
    p0,
    p1,
    num_layers,
    loads,
    gpu,
    cpu,
    cancel,
    dur,
    nbytes,
    dense_s,
    whole,
    other_s,
    expert_s,
    cpu_s,
    issue,
    demand_first,
    serial,
    clear,
    link,
    base,
    first_pass,
    pass_start,
    pass_end,
    step_stall,
    step_end,
    f_link,
    f_dense,
    f_high,
    f_low,
):
    """``plain._replay_shared``: ``replay`` with the overlap of copies and compute charged (``Contention``)."""
    L = num_layers
    i0, n_steps = p0 * L, (p1 - p0) * L
    lo_l, lo_g, lo_c, lo_x, max_g = _setup(i0, n_steps, loads, gpu, cpu, cancel)
    demand, q, dropped, started, done, fs, ls, gone = link
    ready = np.zeros(max_g)
    rows = np.zeros(max_g, np.int64)
    todo = np.zeros(max_g, np.int64)
    order, tmp = np.zeros(max_g, np.int64), np.zeros(max_g, np.int64)
    cpu_free = fs[CPU_FREE]
    for p in range(p0, p1):
        pw = p - first_pass
        pass_start[pw] = fs[FREE_AT]
        for layer in range(L):
            i = (p - p0) * L + layer
            g0, g1 = lo_g[i], lo_g[i + 1]
            nl = lo_l[i + 1] - lo_l[i]
            dense = dense_s[pw, 1 if whole[layer] else 0]
            routed = _compute(q, fs, ls, dur, nbytes, started, done, dense, f_dense, f_link)
            if nl and issue:
                _compute(q, fs, ls, dur, nbytes, started, done, issue * nl, f_dense, f_link)
            if nl or lo_x[i + 1] > lo_x[i] or clear:
                _requeue(
                    q,
                    ls,
                    demand,
                    dropped,
                    cancel,
                    lo_x[i],
                    lo_x[i + 1],
                    base + lo_l[i],
                    base + lo_l[i + 1],
                    demand_first,
                    gone,
                    clear,
                    gpu,
                    g0,
                    g1,
                )
                _start(q, fs, ls, dur, started)
            stall = 0.0
            for row in range(g0, g1):
                tid = gpu[row, 1]
                if tid >= 0 and not demand[tid] and np.isnan(done[tid]):
                    ls[LATE] += 1
            if serial and nl:  # copies on the compute stream: they run alone until the step's last one lands
                t0 = fs[FREE_AT]
                for tid in range(base + lo_l[i], base + lo_l[i + 1]):
                    while np.isnan(done[tid]):
                        fs[FREE_AT] += fs[LEFT]
                        _finish(q, fs, ls, dur, nbytes, started, done)
                stall += fs[FREE_AT] - t0
            nt = g1 - g0
            for j in range(nt):
                todo[j] = g0 + j
            while nt:  # the experts whose weights are resident, in arrival order; then wait for the next
                nr = keep = 0
                for j in range(nt):
                    tid = gpu[todo[j], 1]
                    if tid < 0 or not np.isnan(done[tid]):
                        rows[nr] = todo[j]
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
                    row = rows[order[r]]
                    prec = gpu[row, 2]
                    _compute(
                        q,
                        fs,
                        ls,
                        dur,
                        nbytes,
                        started,
                        done,
                        expert_s[prec, gpu[row, 3]],
                        f_high if prec == 0 else f_low,
                        f_link,
                    )
                nt = keep
            if lo_c[i + 1] > lo_c[i]:
                cpu_free = _cpu_end(cpu, cpu_s, lo_c[i], lo_c[i + 1], max(cpu_free, routed))
                t = cpu_free  # idle_until: copies run alone until the CPU is done
                if t > fs[FREE_AT]:
                    while ls[CUR] >= 0 and fs[FREE_AT] + fs[LEFT] <= t:
                        fs[FREE_AT] += fs[LEFT]
                        _finish(q, fs, ls, dur, nbytes, started, done)
                    if ls[CUR] >= 0:
                        fs[LEFT] -= t - fs[FREE_AT]
                    fs[FREE_AT] = t
            step_stall[i] = stall
            step_end[i] = fs[FREE_AT]
        pass_end[pw] = _compute(q, fs, ls, dur, nbytes, started, done, other_s[pw], f_dense, f_link)
    fs[CPU_FREE] = cpu_free
