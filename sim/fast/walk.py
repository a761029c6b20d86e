"""The decision walk of ``sim.decide`` compiled with numba: the same rules, step for step.

``sim.decide.Decider`` is the reference; this module makes exactly its decisions (the differential tests in
tests/test_fast.py hold it to that) for every registered eviction policy and prefetcher whose file gives its compiled
part, with every knob of the walk: mixed precision, skips, staging slots, per-layer pools (regions of any sizes,
``roff``; wide steps kept or bypassed, ``cache.wide_step``), resident and CPU placements, cpu_misses (never, always,
faster, split) and cpu_insert.

This file is a template and holds what depends on the eviction policy and the run's settings. A policy's compiled
decisions live in its own file (``policies.compiled``: its state and hooks, which the walk calls as ``_p_evict`` ..
``_p_begin``), a prefetcher's likewise (called as ``_f_propose`` and ``_f_begin``), and the policy is the module
global ``POLICY`` (-1 here): ``sim.fast.special`` imports a copy of this file per policy with it set and the
policy's hooks bound (and, in a copy for a run's settings, ``PREFETCHER``, ``MISSES``, ``HISTORY`` and
``BOUND_CPU``), so that numba compiles each policy's walk with that policy's branches alone. What no policy changes
lives beside it and compiles once for every copy: the records and numbers (``records``), the phases (``steps``),
the state a run carries (``state.walk_state``) and the borrowed arrays (``borrow``).

``walk`` walks a range of passes continuing a ``State`` (``records``): a whole run is one range; a streamed run
(``sim.fast.stream``) walks a chunk of passes at a time, timing and dropping each chunk's log before the next.

``walk`` is the reference's ``Decider.run``: per step, its phases are functions named as the reference's methods
(``needed``, ``split``, ``_serve_one``, ``_drop_stale``, the prefetcher's ``_f_propose`` and ``_issue`` for
``_prefetch``), inlined (``inline="always"``: one compiled loop), which read the walk's named records of borrowed
arrays (``records``: ``Cache``, ``Staged``, ``Logs``, ``Future``, ``Scratch``, the prefetcher's ``Sight`` and the
inputs'), the step's own (``Step``), and move on the log's row counts (``Rows``).
Legend: N tokens, L layers, K top-k, D lookahead depth, E experts, P passes.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from hobbit.sim.fast.borrow import borrowed, borrowed_all, grow, keep
from hobbit.sim.fast.records import (
    BEHIND,
    BYTES,
    CM_ALWAYS,
    CM_FASTER,
    CPU,
    DROPPED,
    HIGH,
    HIGH_HIT,
    HIGH_LOAD,
    INSERTS,
    ISSUED,
    LOW,
    LOW_HIT,
    LOW_LOAD,
    NEXT_TID,
    OVERFLOW,
    REQUESTS,
    SKIP,
    SKIPPED,
    STEP,
    TOKENS,
    USED,
    Future,
    Logs,
    Rows,
    Staged,
)
from hobbit.sim.fast.steps import (
    cache_of,
    copy_behind,
    enter,
    forget_need,
    from_place,
    from_staged,
    future_start,
    least_room,
    needed,
    note_use,
    out_of,
    present,
    region,
    scratch,
    split_cpu,
    step_of,
    use,
)
from hobbit.sim.policies.compiled import HIGH_USES, LAST_USE, LAYER, NEVER, PINNED, TRANSFER, USES, Sight

# a registered policy whose own file gives its compiled part (``policies.compiled.Compiled``): its copy of this
# module binds the part's functions as ``_p_evict`` .. ``_p_begin``
OWN = 0
# The eviction policy this copy decides for (``sim.fast.special.core``): -1 in the template, whose ``walk`` refuses
# to run; each copy sets it to ``OWN``. Numba reads a global as a constant and prunes every branch on it, and on the
# flags below, before typing, so a copy compiles the calls of its own policy's hooks.
POLICY = -1
OWN_HIT = False  # whether the policy has a hit hook (a copy sets these with ``POLICY``)
OWN_MISS = False  # a miss hook
OWN_INSERT = False  # an insert hook
OWN_UNPIN = False  # an unpin hook
OWN_RENEW = False  # a renew hook
OWN_RECORDS = False  # a records hook
OWN_BEGIN = False  # a begin hook
FUTURE = False  # the policy reads each key's next use (``Space.next_use``, which ``_next_uses`` moves on)
# The run's settings a copy may be specialised for besides the policy (``sim.fast.special.Variant``): the prefetcher
# (its place in ``special.prefetchers``), cpu_misses (``CM_*``), the history fallback (0, 1) and whether a step's
# bound splits its experts with the CPU (0, 1). -1 here and in a general copy, which reads each from its inputs; a
# specialised copy reads the constant (a phase reads ``X if X >= 0 else record.field``, which branch pruning
# reduces), so that it compiles none of the code other settings need, and its ``walk`` refuses other settings.
PREFETCHER = -1
MISSES = -1
HISTORY = -1
BOUND_CPU = -1
# policies whose victim ``_pre_admit`` picks (their miss hook runs there): those whose file gives their compiled part
PICKS_VICTIM = POLICY == OWN


@njit(cache=True, _nrt=False)
def _passed(own, fu, pool, index, ids, t0, t1, layer, per_layer, step):
    """At the start of ``step``: the keys the step before selected (its tokens ``t0:t1`` at ``layer``) move their
    cursors past it, to their next use; the policy renews each copy of one (``_p_renew``). Each key's next use, for a
    policy that needs the future (``Space.next_use``): ``fu.cur_b`` holds each key's place in its list of steps
    (``state.future_uses``; a window's lists end with the key's first use after it), ``fu.nu_b`` the step there
    (NEVER past the list's end)."""
    E = index.shape[2]
    fut_off, fut_steps, cur, nu = fu.fo_b, fu.fs_b, fu.cur_b, fu.nu_b
    for t in range(t0, t1):
        for k in range(ids.shape[2]):
            e = ids[t, layer, k]
            key = layer * E + e
            c = cur[key]
            if c >= fut_off[key + 1] or fut_steps[c] >= step:  # moved on already (a key selected twice)
                continue
            cur[key] = c = c + 1
            nu[key] = fut_steps[c] if c < fut_off[key + 1] else NEVER
            if OWN_RENEW:
                for pr in range(2):
                    s = index[pr, layer, e]
                    if s >= 0:
                        _p_renew(own, pool, pr, layer if per_layer else 0, s)


@njit(cache=True, _nrt=False)
def _edge(own, pool, index, sel, layer, per_layer):
    """``_passed`` at a window's first step (``fast.stream_windows``): the keys the last step of the window before
    selected (``sel`` [T, K], at ``layer``) have their next use from this window's lists, whose cursors start at the
    window (each key's uses in it, then its first use after it); the policy renews each copy of one."""
    if not OWN_RENEW:
        return
    for t in range(sel.shape[0]):
        for k in range(sel.shape[1]):
            e = sel[t, k]
            for pr in range(2):
                s = index[pr, layer, e]
                if s >= 0:
                    _p_renew(own, pool, pr, layer if per_layer else 0, s)


# The hooks of a policy whose own file gives its compiled part (``POLICY == OWN``; ``policies.compiled``): a copy of
# this module binds the policy's functions to these names (``sim.fast.special``); the template's are never called
# (the evict, hit, insert and miss hooks only where ``POLICY == OWN`` and the flags say so).
@njit(cache=True)
def _p_evict(state, pool, pr, g, r0, r1):
    return -1


@njit(cache=True)
def _p_hit(state, pool, pr, g, slot):
    pass


@njit(cache=True)
def _p_insert(state, pool, pr, g, r0, r1, slot):
    pass


@njit(cache=True)
def _p_miss(state, pool, pr, g, r0, r1, key):
    pass


@njit(cache=True)
def _p_overflow(state):
    return 0


@njit(cache=True)
def _p_unpin(state, pool, pr, g, slot):
    pass


@njit(cache=True)
def _p_renew(state, pool, pr, g, slot):
    pass


@njit(cache=True)
def _p_records(state, pool, pr, g, slot):
    pass


@njit(cache=True)
def _p_begin(state, pool):
    pass


@njit(cache=True, inline="always")
def _pre_admit(own, pool, roff, nfree, index, layer, e, pr, per_layer):
    """What ``ExpertCache.admit`` asks of a policy whose file gives its compiled part (``own``: the state its file
    builds, whose hooks a copy of this module binds, ``_p_*``) before the copy takes a slot: its miss hook, then,
    when the region has no free slot, its victim (-1: none or a free slot). Called from the walk's body before
    ``admit``, so that the policy's state never passes through the admit path (each array an inlined call takes is
    counted up and down). Inlined where it is called: as a call of its own, the state's arrays, each passed as
    several arguments, and the pools' cost about 20 ns an eviction (a plain cache, ``benchmarks/vs_libcachesim.py``:
    1.7x the walk's time where LLVM chose not to inline it, as it may for one signature and not another)."""
    r0, r1 = region(roff, pr, per_layer, layer)
    if r1 == r0:  # no slot at all (the pool, or the layer's region): the policy hears nothing
        return -1
    g = layer if per_layer else 0
    if OWN_MISS:
        _p_miss(own, pool, pr, g, r0, r1, layer * index.shape[2] + e)
    if per_layer:
        for s in range(r0, r1):
            if pool[pr, s, LAYER] < 0:
                return -1
    elif nfree[pr] < r1:
        return -1
    return _p_evict(own, pool, pr, g, r0, r1)


@njit(cache=True, inline="always")
def _next_uses(rt, pl, ca, fu, own_b, i, L):
    """The keys of the step before have passed their next use (``_passed``); at a window's first step, those of the
    window before's last (``_edge``), whose uses this window's lists start after."""
    q = (i - 1) // L
    if q >= rt.first_pass:
        t0, t1 = rt.pass_start[q - rt.first_pass], rt.pass_end[q - rt.first_pass]
        _passed(own_b, fu, ca.pool, ca.index, rt.ids, t0, t1, (i - 1) % L, pl.per_layer, i)
    else:
        _edge(own_b, ca.pool, ca.index, rt.prev_ids, L - 1, pl.per_layer)


@njit(cache=True, inline="always")
def _copy_in(own_b, pl, ca, lg, i, layer, e, prec, tid, pinned, token, rows):
    """A copy of ``(layer, e)`` at ``prec`` enters the cache (``enter``'s ``tid``, ``pinned`` and ``token``: a use's
    transfer, or -1 for a copy ahead of its use, pinned when a prefetch): the policy's miss hook and victim
    (``_pre_admit``), the slot and the copy (``enter``), the policy's insert hook; the slot (-1: none) and the log's
    rows after it. Every copy that enters passes here."""
    pool, roff, index = ca.pool, ca.roff, ca.index
    per_layer = pl.per_layer
    ch = _pre_admit(own_b, pool, roff, ca.nfree, index, layer, e, prec, per_layer) if PICKS_VICTIM else -1
    slot, rows = enter(ca, lg, i, layer, e, prec, tid, pinned, token, per_layer, ch, rows)
    if slot >= 0 and OWN_INSERT:  # the policy's insert hook, once the copy took its slot
        r0, r1 = region(roff, prec, per_layer, layer)
        _p_insert(own_b, pool, prec, layer if per_layer else 0, r0, r1, slot)
    return slot, rows


@njit(cache=True, inline="always")
def _new_request(pl, ca, own_b, pfs, kind, L):
    """A new request (``Decider.run``): the records, the pools' records and the counts start again, and the
    prefetcher's ``begin`` runs (``end_request``), and the policy's."""
    per_layer = pl.per_layer
    counts = ca.counts
    nfree, pool, rec, roff, st = ca.nfree, ca.pool, ca.rec, ca.roff, ca.st
    rec[:] = 0
    for pr in range(2):  # the slots taken so far (the others hold no record)
        for s in range(roff[pr, L] if per_layer else nfree[pr]):
            pool[pr, s, LAST_USE] = 0
            pool[pr, s, USES] = 0
            pool[pr, s, HIGH_USES] = 0
    counts[:] = 0
    _f_begin(pfs, kind)
    st[REQUESTS] += 1  # (a policy's state reads it: every use count is 0 again)
    if OWN_BEGIN:
        _p_begin(own_b, pool)


@njit(cache=True, inline="always")
def _bound_step(bd, sc, n_need, pw, layer, L, b_total):
    """``bound.pass_bounds``'s step: the experts not every selection skips, in first-appearance order, and the step's bound added to the pass's."""
    bnd_cpu, bnd_dense, bnd_min, bnd_out, bnd_whole = bd.cpu, bd.dense, bd.min_s, bd.out, bd.whole
    bnd_uses_cpu = BOUND_CPU if BOUND_CPU >= 0 else bd.uses_cpu
    b_cpu, b_dev, need_c, need_n, order = sc.b_cpu, sc.b_dev, sc.need_c, sc.need_n, sc.order
    nd, dev = 0, 0.0
    for j in range(n_need):
        e = order[j]
        if need_c[e] != SKIP:
            b_dev[nd], b_cpu[nd] = bnd_min[need_n[e]], bnd_cpu[need_n[e]]
            dev += b_dev[nd]
            nd += 1
    if bnd_uses_cpu and nd and dev > 0.0:  # split_makespan, its CPU part called only where it is needed
        dev = split_cpu(b_dev, b_cpu, nd, dev)
    b_total += bnd_dense[pw, 1 if bnd_whole[layer] else 0] + dev
    if layer == L - 1:
        bnd_out[pw] = b_total
    return b_total


@njit(cache=True, inline="always")
def _serve_one(rl, pl, pf, cp, ca, lg, sg, sc, own_b, at, e, rows):
    """``Decider._serve_one``: expert ``e`` of step ``at`` (its class, tokens and gate mass in ``sc``), from the
    device's copies (``from_place``, ``_from_pool``), a staged prefetch, the CPU or a demand load (``_missed``), and
    what enters the cache (``_admit_copy``); the log's rows after it."""
    c, n = sc.need_c[e], sc.need_n[e]
    need = LOW if c == SKIP else c
    a_tid, a_prec, behind = -1, HIGH, 0  # a copy to admit: its transfer, precision, and how it follows the CPU
    got, rows = from_place(pl, ca, lg, at, e, n, rows)
    noted = False  # the key's records changed (a use by a copy, or by a load not kept)
    if got < 0:
        got, rows = _from_pool(rl, pl, ca, lg, own_b, at, e, need, n, rows)
        noted = got >= 0
    if got < 0 and pf.staging and sg.stg_tid[at.layer, e] >= 0:
        got, stid, rows = from_staged(rl, ca, lg, sg, at, e, need, n, rows)
        if got >= 0:  # admitted below, as a demand load's copy is
            a_tid, a_prec = stid, got
    if got < 0 and c == SKIP:
        ca.served[SKIPPED] += 1
        got = SKIP
    if got < 0:
        got, a_tid, a_prec, behind, once, rows = _missed(rl, pl, cp, ca, lg, sc, at, e, rows)
        noted = noted or once
    if a_tid >= 0 or behind:  # a staged copy used or a demand load (in use), or a copy behind the CPU: it enters
        noted = noted or a_tid >= 0
        rows = _admit_copy(own_b, pl, ca, lg, at, e, a_prec, a_tid, behind, rows)
    if OWN_RECORDS and noted:  # each pool's copy of the key, once any copy this use brought has entered
        for pr in range(2):
            s = ca.index[pr, at.layer, e]
            if s >= 0:
                _p_records(own_b, ca.pool, pr, at.layer if pl.per_layer else 0, s)
    ca.mass[got] += sc.need_m[e]
    ca.counts[at.layer, e] += n
    return rows


@njit(cache=True, inline="always")
def _from_pool(rl, pl, ca, lg, own_b, at, e, need, n, rows):
    """A copy a pool keeps serves expert ``e``: at high precision, or at low where the need is low or any cached
    copy serves (``precision.serve_any_cached``); the precision served (-1: none) and the log's rows."""
    index, pool, layer = ca.index, ca.pool, at.layer
    hp = -1
    if index[HIGH, layer, e] >= 0:
        hp = HIGH
    elif (need == LOW or rl.any_prec) and index[LOW, layer, e] >= 0:
        hp = LOW
    if hp < 0:
        return hp, rows
    slot = index[hp, layer, e]
    use(pool, index, ca.rec, ca.st, hp, slot, at.token)
    if OWN_HIT:
        _p_hit(own_b, pool, hp, layer if pl.per_layer else 0, slot)
    if ca.prefetched[layer, e]:
        ca.prefetched[layer, e] = False
        ca.st[USED] += 1
    ca.served[HIGH_HIT if hp == HIGH else LOW_HIT] += 1
    gpu, ng = lg.gpu, rows.gpu
    gpu[ng, 0], gpu[ng, 1], gpu[ng, 2], gpu[ng, 3], gpu[ng, 4] = at.i, pool[hp, slot, TRANSFER], hp, n, e
    return hp, Rows(rows.loads, ng + 1, rows.cpu, rows.cancel, rows.evicted, rows.kept, rows.staged, rows.pins)


@njit(cache=True, inline="always")
def _missed(rl, pl, cp, ca, lg, sc, at, e, rows):
    """A miss of expert ``e``: computed on the CPU (cpu_misses, or FreeToken's split) with perhaps a copy behind it,
    or a demand load, kept unless used once (op offload, a wide step). (The precision served, the copy to admit:
    its transfer (-1: none), precision and how it follows the CPU (``behind``), whether a load used once changed
    the key's records, and the log's rows.)"""
    c, n, layer, i, st = sc.need_c[e], sc.need_n[e], at.layer, at.i, ca.st
    cpu_misses = MISSES if MISSES >= 0 else cp.misses
    prec = c if rl.mixed else rl.uniform
    bypass = at.by_l if prec == LOW else at.by_h  # a wide step's miss: no copy follows it
    on_cpu = cpu_misses == CM_ALWAYS or (cpu_misses == CM_FASTER and cp.faster[prec, n]) or sc.on_cpu[e]
    if not at.off_miss and on_cpu:
        ca.served[CPU] += 1
        cpu, nc = lg.cpu, rows.cpu
        cpu[nc, 0], cpu[nc, 1], cpu[nc, 2] = i, n, e
        behind = 0 if bypass else copy_behind(pl, ca, cpu_misses, cp.insert, layer, prec)
        rows = Rows(rows.loads, rows.gpu, nc + 1, rows.cancel, rows.evicted, rows.kept, rows.staged, rows.pins)
        return HIGH, -1, prec, behind, False, rows
    tid = st[NEXT_TID]  # a demand load
    st[NEXT_TID] += 1
    loads, gpu, nl, ng = lg.loads, lg.gpu, rows.loads, rows.gpu
    loads[nl, 0], loads[nl, 1], loads[nl, 2], loads[nl, 3], loads[nl, 4] = i, 1, layer, e, prec
    st[BYTES] += pl.expert_bytes[layer, prec]
    ca.served[HIGH_LOAD if prec == HIGH else LOW_LOAD] += 1
    gpu[ng, 0], gpu[ng, 1], gpu[ng, 2], gpu[ng, 3], gpu[ng, 4] = i, tid, prec, n, e
    rows = Rows(nl + 1, ng + 1, rows.cpu, rows.cancel, rows.evicted, rows.kept, rows.staged, rows.pins)
    if at.off_miss or bypass:  # op offload, a wide step: used once
        note_use(ca.pool, ca.index, ca.rec, layer, e, prec, at.token)
        return prec, -1, prec, 0, True, rows
    return prec, tid, prec, 0, False, rows


@njit(cache=True, inline="always")
def _admit_copy(own_b, pl, ca, lg, at, e, a_prec, a_tid, behind, rows):
    """The copy a use brought enters the cache (``_copy_in``): a staged copy or a demand load (``a_tid``, in use),
    or a copy behind the CPU (``behind``: its bytes and counts); the log's rows after it."""
    slot, rows = _copy_in(own_b, pl, ca, lg, at.i, at.layer, e, a_prec, a_tid, False, at.token, rows)
    if behind:
        st = ca.st
        if slot >= 0:
            st[BYTES] += pl.expert_bytes[at.layer, a_prec]
        if slot >= 0 and behind == 1:
            st[INSERTS] += 1
        if slot >= 0 or behind == 2:
            st[ISSUED] += 1
            st[BEHIND] += 1
    return rows


@njit(cache=True, inline="always")
def _drop_stale(pl, ca, lg, sg, own_b, at, rows):
    """``Decider._drop_stale``: the pins and staged copies of this layer leave their lists (kept in order); the log's
    rows after it."""
    layer, per_layer, index, pool, prefetched = at.layer, pl.per_layer, ca.index, ca.pool, ca.prefetched
    cancel, pins, stg_list, stg_tid = lg.cancel, sg.pins, sg.stg_list, sg.stg_tid
    nx, kq = rows.cancel, 0
    for q in range(rows.pins):
        if pins[q, 0] == layer:
            pr, tl, te = pins[q, 1], pins[q, 2], pins[q, 3]
            s = index[pr, tl, te]
            if s >= 0:
                pool[pr, s, PINNED] = 0
                if OWN_UNPIN:  # it can be evicted again: the policy's state sees it
                    _p_unpin(own_b, pool, pr, tl if per_layer else 0, s)
            prefetched[tl, te] = False
        else:
            for x in range(4):
                pins[kq, x] = pins[q, x]
            kq += 1
    n_pins, kq = kq, 0
    for q in range(rows.staged):
        if stg_list[q, 2] == layer:
            sl, se = stg_list[q, 0], stg_list[q, 1]
            cancel[nx, 0], cancel[nx, 1] = at.i, stg_tid[sl, se]
            nx += 1
            stg_tid[sl, se] = -1
        else:
            for x in range(3):
                stg_list[kq, x] = stg_list[q, x]
            kq += 1
    return Rows(rows.loads, rows.gpu, rows.cpu, nx, rows.evicted, rows.kept, kq, n_pins)


@njit(cache=True, inline="always")
def _sight(rt, rl, pl, pf, ca, sg, sc):
    """What the prefetcher reads of the walk, and the buffers it writes (``policies.compiled.Sight``)."""
    return Sight(
        rt.ids, rt.weights, rt.pred, rt.pred_w, rt.top_k, min(rt.pred.shape[2], pf.max_depth), pf.max_depth,
        HISTORY > 0 if HISTORY >= 0 else pf.history, rl.hobbit_rule, rl.uniform, rl.rule_hi, rl.rule_lo,
        pl.resident, pl.cpu_layer, ca.index, pf.staging, sg.stg_tid, ca.counts, ca.st, sc.want, sc.worder, sc.hist,
        sc.row, sc.rc, sc.rm, sc.props, sc.sink,
    )  # fmt: skip


@njit(cache=True, inline="always")
def _f_propose(pfs, fs, layer, a, b, kind):
    """``Decider._prefetch``'s proposals: the prefetcher's compiled ``propose`` (``policies.compiled.CompiledPrefetch``:
    ``fs`` is its ``Sight``), that of prefetcher ``kind`` of ``pfs`` (``State.pf``). The template's proposes nothing:
    each copy defines this anew (``sim.fast.special``), calling the prefetchers its own (one, in a copy of a run's
    variant)."""
    return 0


@njit(cache=True, inline="always")
def _f_begin(pfs, kind):
    """The prefetcher's ``begin`` at a new request (``_f_propose``'s, defined anew likewise)."""


@njit(cache=True, inline="always")
def _issue(pl, pf, cp, ca, lg, sg, sc, fs, own_b, at, n_props, rows):
    """``Decider._prefetch``'s copies: each of the ``n_props`` proposals still absent is staged, or admitted pinned
    until its layer (``_copy_in``); the log's rows after them."""
    expert_bytes, prefetch_prec, staging = pl.expert_bytes, pf.prefetch_prec, pf.staging
    cpu_misses = MISSES if MISSES >= 0 else cp.misses
    prefetched, st, loads, props, pins = ca.prefetched, ca.st, lg.loads, sc.props, sg.pins
    stg_list, stg_prec, stg_tid = sg.stg_list, sg.stg_prec, sg.stg_tid
    for q in range(n_props):
        tl, te = props[q, 0], props[q, 1]
        if present(fs, tl, te):
            continue
        prec = props[q, 2] if prefetch_prec < 0 else prefetch_prec
        if cpu_misses == CM_FASTER and cp.faster[prec, pl.per_expert[at.pw]]:
            continue
        if staging:
            n_stg, nl = rows.staged, rows.loads
            if n_stg >= staging:
                st[DROPPED] += 1
                continue
            tid = st[NEXT_TID]
            st[NEXT_TID] += 1
            loads[nl, 0], loads[nl, 1], loads[nl, 2], loads[nl, 3], loads[nl, 4] = at.i, 0, tl, te, prec
            st[BYTES] += expert_bytes[tl, prec]
            stg_tid[tl, te], stg_prec[tl, te] = tid, prec
            stg_list[n_stg, 0], stg_list[n_stg, 1], stg_list[n_stg, 2] = tl, te, tl
            rows = Rows(nl + 1, rows.gpu, rows.cpu, rows.cancel, rows.evicted, rows.kept, n_stg + 1, rows.pins)
        else:
            slot, rows = _copy_in(own_b, pl, ca, lg, at.i, tl, te, prec, -1, True, 0, rows)
            if slot < 0:
                st[DROPPED] += 1
                continue
            st[BYTES] += expert_bytes[tl, prec]
            n = rows.pins
            pins[n, 0], pins[n, 1], pins[n, 2], pins[n, 3] = tl, prec, tl, te
            rows = Rows(rows.loads, rows.gpu, rows.cpu, rows.cancel, rows.evicted, rows.kept, rows.staged, n + 1)
            prefetched[tl, te] = True
        st[ISSUED] += 1
    return rows


@njit(cache=True, inline="always")
def _refuse_others(inputs):
    """The template's walk decides for no policy, and a copy for a run's settings refuses another run's."""
    if POLICY < 0:
        raise ValueError("the template's walk decides for no policy: call sim.fast.special.core(policy).walk")
    if (
        (PREFETCHER >= 0 and inputs.prefetch.kind != PREFETCHER)
        or (MISSES >= 0 and inputs.cpu.misses != MISSES)
        or (HISTORY >= 0 and inputs.prefetch.history != HISTORY)
        or (BOUND_CPU >= 0 and inputs.bound.uses_cpu != BOUND_CPU)
    ):
        raise ValueError(
            "this copy of the walk is specialised for other settings: sim.fast.special.core(policy, variant)"
        )


@njit(cache=True)
def walk(state, inputs, p0, p1):
    """Passes ``p0:p1`` of the walk, continuing ``state`` (``walk_state``, updated in place): an ``Out``. ``inputs``
    (``Inputs``) is what it reads and does not carry, as named records, unpacked here once. With ``inputs.bound.on``
    it also writes each pass's bound (``bound.pass_bounds``, the same floats) into ``Bound.out`` and counts the
    selections of each class into ``Bound.cls_n``, so that a run reads the trace's selections once."""
    _refuse_others(inputs)
    # the inputs and the state as the phases read them: named records of borrowed arrays (``borrowed_all``: no atomic
    # reference counts where the hot path hands them on); ``state``, ``inputs`` and ``work`` hold the arrays
    rt, rl, pl = borrowed_all(inputs.routing), borrowed_all(inputs.rule), borrowed_all(inputs.place)
    ev, pf, cp, bd = (
        borrowed_all(inputs.evict), borrowed_all(inputs.prefetch), borrowed_all(inputs.cpu), borrowed_all(inputs.bound)
    )  # fmt: skip
    kind, misses = PREFETCHER if PREFETCHER >= 0 else pf.kind, MISSES if MISSES >= 0 else cp.misses
    L, K, E = rt.ids.shape[1], rt.ids.shape[2], pl.resident.shape[1]
    work = scratch(K, E, pf.max_depth, pf.most)
    sc, own, pfs, ca = borrowed_all(work), borrowed_all(state.own), borrowed_all(state.pf), cache_of(state)
    st = ca.st  # the walk's own stores go through a name it keeps live (see ``tabs``)
    fu = borrowed_all(Future(ev.fut_off, ev.fut_steps, state.fut_cur, state.fut_nu))
    if FUTURE and (fu.cur_b[0] < 0 or p0 == rt.first_pass):  # each key's first use (of the trace, or the window)
        future_start(fu.fo_b, fu.fs_b, fu.cur_b, fu.nu_b)
    rows = Rows(0, 0, 0, 0, 0, 0, state.counts[0], state.counts[1])
    n_high = n_low = n_sel = 0  # the selections of the rule's classes HIGH and LOW, and all
    # log tables (``state``'s buffers, written from their first row), each with room for one token's selections per
    # step (up to 2^20 rows; grown as needed), not zeroed. The tables (and the pins') are owned in lists, which a
    # growth changes in place: an owner that a loop reassigned would be copied (its reference count up, then down,
    # atomically) on every path through the step, growing or not, and its count's cache line is cold by then: about
    # 30 ns a step. (A list, not a comprehension: numba inlines a comprehension as a closure and then removes dead
    # code, taking with it any store into an array read off a record, ``ca.st[STEP] = i``.)
    est, logs = min(max(1024, (p1 - p0) * L * min(K, E)), 1 << 20), state.logs
    tabs, pins_own = [logs[0], logs[1], logs[2], logs[3], logs[4], logs[5]], [state.pins]
    for x, want in enumerate((est, est, 256, 64, est, est)):
        if tabs[x].shape[0] < want:
            tabs[x] = np.empty((want, tabs[x].shape[1]), inputs.log_proto.dtype)
    lg = borrowed_all(Logs(tabs[0], tabs[1], tabs[2], tabs[3], tabs[4], tabs[5]))
    sg = borrowed_all(Staged(state.stg_tid, state.stg_prec, state.stg_list, pins_own[0]))
    fs = borrowed_all(_sight(rt, rl, pl, pf, ca, sg, sc))
    for p in range(p0, p1):
        pw = p - rt.first_pass  # the pass's row of the window's per-pass arrays
        a, b = rt.pass_start[pw], rt.pass_end[pw]
        if p > 0 and rt.pass_request[pw] != (rt.pass_request[pw - 1] if pw > 0 else rt.prev_request):
            _new_request(pl, ca, own, pfs, kind, L)
        token = rt.token_in_request[b - 1] + 1
        st[TOKENS], T = token, b - a
        n_sel += T * K * L
        b_total = bd.other[pw] if bd.on else 0.0
        for layer in range(L):
            i = p * L + layer
            st[STEP] = i
            if FUTURE and i > 0:
                _next_uses(rt, pl, ca, fu, own, i, L)
            room = (3 + pf.max_depth) * min(E, T * K) + pf.staging + pf.most + 2  # this step's records, at most
            if room > least_room(lg, rows):
                for x, n_x in enumerate((rows.loads, rows.gpu, rows.cpu, rows.cancel, rows.evicted, rows.kept)):
                    if n_x + room > tabs[x].shape[0]:  # only then: a list's item set to itself would be freed first
                        tabs[x] = grow(tabs[x], n_x + room, n_x)
                lg = borrowed_all(Logs(tabs[0], tabs[1], tabs[2], tabs[3], tabs[4], tabs[5]))
            n_need, n_high, n_low = needed(rt, rl, sc, a, b, layer, K, n_high, n_low)
            if bd.on:
                b_total = _bound_step(bd, sc, n_need, pw, layer, L, b_total)
            at = step_of(rl, pl, cp, ca, sc, n_need, i, layer, pw, token, T, misses)
            for j in range(n_need):
                rows = _serve_one(rl, pl, pf, cp, ca, lg, sg, sc, own, at, sc.order[j], rows)
            forget_need(sc, n_need, layer)
            rows = _drop_stale(pl, ca, lg, sg, own, at, rows)
            if not pf.prefetching:
                continue
            n_props = _f_propose(pfs, fs, layer, a, b, kind)
            if rows.pins + n_props > sg.pins.shape[0]:  # room for a pin per proposal, here: a check (and the
                # owner's reference count, atomic) once a step, not once a copy
                pins_own[0] = grow(pins_own[0], rows.pins + n_props, rows.pins)
                sg = Staged(sg.stg_tid, sg.stg_prec, sg.stg_list, borrowed(pins_own[0]))
            rows = _issue(pl, pf, cp, ca, lg, sg, sc, fs, own, at, n_props, rows)
    if POLICY == OWN:
        st[OVERFLOW] = _p_overflow(own)
    bd.cls_n[HIGH] += n_high
    bd.cls_n[LOW] += n_low
    bd.cls_n[SKIP] += n_sel - n_high - n_low
    state.counts[0], state.counts[1] = rows.staged, rows.pins
    keep(work)
    return out_of(tabs, pins_own[0], rows, state)
