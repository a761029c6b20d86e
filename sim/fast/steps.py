"""The compiled walk's phases that no eviction policy changes (``sim.fast.walk`` calls them; compiled once, here, for
every policy's copy of the walk, ``sim.fast.special``): a step's need (``needed``) and FreeToken's split
(``split``), the pools' admit (``admit``, ``enter``) and a use's records (``use``, ``note_use``), the CPU's share of a
step's bound (``split_makespan``) and the walk's scratch arrays (``scratch``)."""

from __future__ import annotations

import numpy as np
from numba import njit

from hobbit.sim.fast.borrow import borrowed_all
from hobbit.sim.fast.jit import in_place
from hobbit.sim.fast.order import stable_order
from hobbit.sim.fast.records import (
    BYTES,
    CLOCK,
    CM_FASTER,
    CM_NEVER,
    CM_SPLIT,
    CPU,
    EVICTIONS,
    HIGH,
    HIGH_HIT,
    HIGH_LOAD,
    INSERTS,
    LOW,
    LOW_HIT,
    NEXT_TID,
    SKIP,
    USED,
    WARM,
    Cache,
    Logs,
    Out,
    Rows,
    Scratch,
    Step,
)
from hobbit.sim.policies import compiled as _parts
from hobbit.sim.policies.compiled import (
    ALL_USES,
    EXPERT,
    HIGH_USES,
    LAST_USE,
    LAYER,
    NEVER,
    PINNED,
    TOUCHED,
    TRANSFER,
    USES,
)

# the rule and the check the walk shares with the compiled parts, compiled in place (``policies.compiled``)
in_place(_parts)
rule_row, present = _parts.rule_row, _parts.present


@njit(cache=True, inline="always")
def region(roff, pr, per_layer, key_layer):
    """The slots ``r0:r1`` a copy of layer ``key_layer`` may take in pool ``pr``: the pool, or with ``per_layer`` its
    layer's region (``roff``: [2, L + 1] region offsets, ``fast.region_offsets``; regions may differ in size)."""
    if not per_layer:
        return 0, roff[pr, roff.shape[1] - 1]
    return roff[pr, key_layer], roff[pr, key_layer + 1]


@njit(cache=True, _nrt=False)
def future_start(fut_off, fut_steps, cur, nu):
    """Each key's cursor at the first of its lists' steps, and its next use there (a run's, or a window's, first
    step)."""
    for key in range(cur.shape[0]):
        c = cur[key] = fut_off[key]
        nu[key] = fut_steps[c] if c < fut_off[key + 1] else NEVER


# ``_nrt=False``: compiled without numba's reference counting, for the functions a step calls often that allocate
# nothing: the calls of the policies' hooks, which take a policy's state and many arrays besides (``walk._passed``,
# ``walk._edge``, ``note_use``), and the hooks a policy's file gives (``sim.fast.special`` compiles them so). A call of a counting function counts each array
# argument, and each array of a tuple argument, up on entry and down on return, atomically, through calls into
# numba's runtime (``NRT_incref``/``NRT_decref``); on the walk's borrowed arrays (``borrow.borrowed``) those calls find
# nothing to count, but they are still made, and in the hooks of the policies that keep lists, called at every step, those counts
# were most of the walk's time (benchmarks/profile_core.py shows where a walk's time goes).
# A function so compiled compiles the functions it calls likewise, unless they say otherwise: it may call none that
# allocates (numba refuses to compile one that does). (Not for recursion: numba's on-disk cache cannot load a
# self-recursive function, numba issue #6061.)
@njit(cache=True, _nrt=False)
def note_use(pool, index, rec, layer, e, precision, token):
    """A use of ``(layer, e)``: its records, and each pool's copy's (the policy hears ``records`` once the use is
    served: ``_serve_one``)."""
    rec[layer, e, 0] = token
    rec[layer, e, 1] += 1
    if precision == HIGH:
        rec[layer, e, 2] += 1
    for pr in range(2):
        s = index[pr, layer, e]
        if s >= 0:
            pool[pr, s, LAST_USE] = rec[layer, e, 0]
            pool[pr, s, USES] = rec[layer, e, 1]
            pool[pr, s, HIGH_USES] = rec[layer, e, 2]


@njit(cache=True, inline="always")
def use(pool, index, rec, st, pr, slot, token):
    """The copy in ``slot`` serves a use. Inlined where it is called (a hit of every step): as a call, LLVM's choice
    to inline it or not turned on its arguments, and a plain cache's walk took a fifth longer when it did not
    (``benchmarks/vs_libcachesim.py``)."""
    st[CLOCK] += 1
    pool[pr, slot, TOUCHED] = st[CLOCK]
    pool[pr, slot, ALL_USES] += 1
    note_use(pool, index, rec, pool[pr, slot, LAYER], pool[pr, slot, EXPERT], pr, token)


@njit(cache=True, inline="always")
def admit(ca, layer, e, pr, transfer, pinned, per_layer, chosen):
    """``ExpertCache.admit``: the slot the copy took (-1: not kept) and the evicted key as layer * E + expert (-1).
    ``chosen``: the victim ``_pre_admit`` picked (the policy's miss and evict hooks run there, its insert hook in
    ``walk._copy_in``).

    It and its caller (``enter``) are inlined where they are called (``inline="always"``), and take the arrays they
    use one by one, not out of a tuple: a call, or an array taken out of a tuple, costs atomic reference counts
    that were a fifth of the walk's time on a 512-expert model. A call inlined this way takes at most 30
    arguments (CPython passes more as ``*args``, which numba cannot inline)."""
    pool, roff, nfree, index, rec, st = ca.pool, ca.roff, ca.nfree, ca.index, ca.rec, ca.st
    num_experts = index.shape[2]
    r0, r1 = region(roff, pr, per_layer, layer)
    if r1 == r0:  # no slot at all (the pool, or the layer's region)
        return -1, -1
    st[CLOCK] += 1
    slot, victim = -1, -1
    if per_layer:
        for s in range(r0, r1):
            if pool[pr, s, LAYER] < 0:
                slot = s
                break
    elif nfree[pr] < r1:
        slot = nfree[pr]
        nfree[pr] += 1
    if slot < 0:
        slot = chosen
        if slot < 0:
            return -1, -1
        vl, ve = pool[pr, slot, LAYER], pool[pr, slot, EXPERT]
        victim = vl * num_experts + ve
        index[pr, vl, ve] = -1
    pool[pr, slot, LAYER], pool[pr, slot, EXPERT] = layer, e
    pool[pr, slot, LAST_USE], pool[pr, slot, USES], pool[pr, slot, HIGH_USES] = (
        rec[layer, e, 0],
        rec[layer, e, 1],
        rec[layer, e, 2],
    )
    pool[pr, slot, ALL_USES] = 0
    pool[pr, slot, TOUCHED] = st[CLOCK]
    pool[pr, slot, TRANSFER] = transfer
    pool[pr, slot, PINNED] = 1 if pinned else 0
    index[pr, layer, e] = slot
    return slot, victim


@njit(cache=True, inline="always")
def enter(ca, lg, i, layer, e, pr, tid, pinned, token, per_layer, chosen, rows):
    """A copy enters its pool (evicting; ``chosen``: ``walk._pre_admit``'s victim). ``tid >= 0``: the transfer that
    serves a use now (``Decider._admit``: in use, its victim logged; used once and not kept where it takes no slot).
    ``tid < 0``: a copy ahead of its use (``Decider._copy_ahead``: a prefetch, ``pinned`` until its layer, or a copy
    behind the CPU), a new transfer, logged; nothing copied where it takes no slot. (The slot it took or -1, and the
    log's rows after it, ``Rows``; the caller counts the copy's bytes.) One function for every copy that enters, so
    that each call site holds the admit path once."""
    pool, index, st = ca.pool, ca.index, ca.st
    loads, evicted, kept = lg.loads, lg.evicted, lg.kept
    nl, nv, nk = rows.loads, rows.evicted, rows.kept
    slot, victim = admit(ca, layer, e, pr, tid, pinned, per_layer, chosen)
    num_experts = index.shape[2]
    if tid < 0 and slot >= 0:
        pool[pr, slot, TRANSFER] = st[NEXT_TID]
        st[NEXT_TID] += 1
        loads[nl, 0], loads[nl, 1], loads[nl, 2], loads[nl, 3], loads[nl, 4] = i, 0, layer, e, pr
        nl += 1
    if victim >= 0:
        st[EVICTIONS] += 1
        evicted[nv, 0], evicted[nv, 1], evicted[nv, 2], evicted[nv, 3] = (
            i,
            victim // num_experts,
            victim % num_experts,
            pr,
        )
        nv += 1
    if slot >= 0:
        if tid >= 0:
            use(pool, index, ca.rec, st, pr, slot, token)
        kept[nk, 0], kept[nk, 1], kept[nk, 2], kept[nk, 3] = i, layer, e, pr
        nk += 1
    elif tid >= 0:
        note_use(pool, index, ca.rec, layer, e, pr, token)
    return slot, Rows(nl, rows.gpu, rows.cpu, rows.cancel, nv, nk, rows.staged, rows.pins)


@njit(cache=True, _nrt=False)
def split_makespan(device, cpu, n, use_cpu, ratio, order, tmp):
    """The shortest time to compute ``n`` experts split between the device (``device`` seconds each) and the CPU
    (``cpu``), both at once (``sim.bound.split_makespan``; ``bound.pass_bounds``), over scratch arrays of at least
    ``n`` (``ratio``, ``order``, ``tmp``): it allocates nothing."""
    total = 0.0
    for i in range(n):
        total += device[i]
    if not use_cpu or n == 0 or total <= 0.0:
        return total
    return split_cpu_into(device, cpu, n, total, ratio, order, tmp)


@njit(cache=True)
def split_cpu(device, cpu, n, total):
    """``split_makespan`` once the CPU takes part: ``total`` is the device's time for all ``n``. Apart, so that the
    walk's step (``_bound_step``) sums the device's times inline and calls this only where the CPU computes: a call
    with arrays costs their reference counts on every step."""
    return split_cpu_into(device, cpu, n, total, np.empty(n), np.empty(n, np.int64), np.empty(n, np.int64))


@njit(cache=True, _nrt=False)
def split_cpu_into(device, cpu, n, total, ratio, order, tmp):
    """``split_cpu`` over scratch arrays of at least ``n`` (``ratio``, ``order``, ``tmp``)."""
    for i in range(n):
        ratio[i] = cpu[i] / device[i] if device[i] > 0 else np.inf
    stable_order(ratio, n, order, tmp)
    on_cpu = 0.0
    for j in range(n):
        i = order[j]
        g, c = device[i], cpu[i]
        if g <= 0.0:
            continue
        if on_cpu + c <= total - g:
            on_cpu, total = on_cpu + c, total - g
            continue
        x = (total - on_cpu) / (c + g)
        return on_cpu + x * c
    return max(total, on_cpu)


@njit(cache=True)
def scratch(K, E, max_depth, most):
    """A walk's ``Scratch``: room for ``max_depth`` layers' proposals, or ``most``."""
    return Scratch(
        need_c=np.full(E, SKIP, np.int64),
        need_n=np.zeros(E, np.int64),
        need_m=np.zeros(E),
        order=np.zeros(E, np.int64),
        on_cpu=np.zeros(E, np.bool_),
        want=np.full(E, SKIP, np.int64),
        worder=np.zeros(E, np.int64),
        props=np.zeros((max(max_depth * E, most) + 1, 3), np.int64),
        sink=np.zeros(1, np.int64),
        m_e=np.zeros(E, np.int64),
        m_c=np.zeros(E, np.int64),
        m_key=np.zeros(E, np.int64),
        hist=np.zeros(E, np.int64),
        b_dev=np.zeros(E),
        b_cpu=np.zeros(E),
        row=np.zeros(K),
        rc=np.zeros(K, np.int64),
        rm=np.zeros(K),
    )


@njit(cache=True, inline="always")
def least_room(lg, rows):
    """The fewest rows left in any log table (one branch where ``or``'s would be six)."""
    return min(
        lg.loads.shape[0] - rows.loads,
        lg.gpu.shape[0] - rows.gpu,
        lg.cpu.shape[0] - rows.cpu,
        lg.cancel.shape[0] - rows.cancel,
        lg.evicted.shape[0] - rows.evicted,
        lg.kept.shape[0] - rows.kept,
    )


@njit(cache=True, inline="always")
def all_high(sc, n_need):
    """``precision.multi_token=high``: a step of several tokens loads every expert it does not skip at high."""
    for j in range(n_need):
        e = sc.order[j]
        if sc.need_c[e] != SKIP:
            sc.need_c[e] = HIGH


@njit(cache=True, inline="always")
def forget_need(sc, n_need, layer):
    """The step's need reset for the next."""
    for j in range(n_need):
        e = sc.order[j]
        sc.need_n[e] = 0
        sc.need_c[e] = SKIP
        sc.on_cpu[e] = False


@njit(cache=True, inline="always")
def needed(rt, rl, sc, a, b, layer, K, n_high, n_low):
    """``Decider._needed``: the experts the step's tokens select, in first-appearance order (``order``), each with its class (the highest of its selections'), tokens and gate mass; counts the selections of the rule's classes."""
    ids, weights = rt.ids, rt.weights
    hobbit_rule, rule_hi, rule_lo, uniform = rl.hobbit_rule, rl.rule_hi, rl.rule_lo, rl.uniform
    need_c, need_m, need_n, order, rc, rm, row = sc.need_c, sc.need_m, sc.need_n, sc.order, sc.rc, sc.rm, sc.row
    n_need = 0
    for t in range(a, b):
        rule_row(weights[t, layer], False, hobbit_rule, uniform, rule_hi, rule_lo, row, rc, rm)
        for k in range(K):
            e, c = ids[t, layer, k], rc[k]
            n_high += c == HIGH
            n_low += c == LOW
            if need_n[e] == 0:
                order[n_need] = e
                n_need += 1
                need_c[e] = c
                need_m[e] = rm[k]
            else:
                need_c[e] = min(need_c[e], c)
                need_m[e] += rm[k]
            need_n[e] += 1
    return n_need, n_high, n_low


@njit(cache=True, inline="always")
def split(rl, pl, cp, ca, sc, n_need, layer, E):
    """``Decider._split`` (FreeToken's split): of the step's misses, those beyond the copies worth their time run on the CPU (``on_cpu``), the least recently used first."""
    any_prec, mixed, uniform = rl.any_prec, rl.mixed, rl.uniform
    resident = pl.resident
    copy_s, cpu_s, split_max_fetch, split_threshold = cp.copy_s, cp.cpu_s, cp.split_max_fetch, cp.split_threshold
    index, rec = ca.index, ca.rec
    m_c, m_e, m_key, need_c, need_n, on_cpu, order = sc.m_c, sc.m_e, sc.m_key, sc.need_c, sc.need_n, sc.on_cpu, sc.order
    nm, maxn = 0, 0
    for j in range(n_need):
        e = order[j]
        c = need_c[e]
        if c == SKIP or resident[layer, e]:
            continue
        if index[HIGH, layer, e] >= 0 or ((c == LOW or any_prec) and index[LOW, layer, e] >= 0):
            continue
        m_e[nm] = e
        m_c[nm] = c if mixed else uniform
        maxn = max(maxn, need_n[e])
        nm += 1
    if nm:
        cs, us = copy_s[m_c[0]], cpu_s[maxn]
        frac = us / cs if cs > 0 else 1.0
        if not frac * split_threshold >= 1.0:
            lo = int(nm * frac)
            v0 = max(lo * (1 - frac), (nm - lo) * frac)
            v1 = max((lo + 1) * (1 - frac), (nm - lo - 1) * frac)
            F = lo + 1 if v1 < v0 else lo
            if split_max_fetch >= 0:
                F = min(F, split_max_fetch)
            for j in range(nm):
                m_key[j] = -rec[layer, m_e[j], 0] * (E + 1) + m_e[j]
            srt, tmp = np.empty(nm, np.int64), np.empty(nm, np.int64)
            stable_order(m_key, nm, srt, tmp)
            for j in range(F, nm):
                on_cpu[m_e[srt[j]]] = True


@njit(cache=True, inline="always")
def warm(ca, sc, n_need, layer):
    """The rows serving the step reads, loaded side by side (a tight loop of independent loads that the serving's branches would otherwise issue one miss at a time): the walk waits on memory."""
    index, pool, st = ca.index, ca.pool, ca.st
    order = sc.order
    warm = 0
    for j in range(n_need):
        e = order[j]
        sh, sl = index[HIGH, layer, e], index[LOW, layer, e]
        warm += pool[HIGH, max(sh, 0), TOUCHED] + pool[LOW, max(sl, 0), TOUCHED]
    st[WARM] = warm


@njit(cache=True, inline="always")
def from_place(pl, ca, lg, at, e, n, rows):
    """Expert ``e`` where it lives: resident on the device, or in a CPU layer (computed there, or copied once to the
    device under op offload, ``Decider._offload``); the precision served (-1: neither) and the log's rows."""
    layer, i, gpu, st = at.layer, at.i, lg.gpu, ca.st
    nl, ng, nc = rows.loads, rows.gpu, rows.cpu
    got = -1
    if pl.resident[layer, e]:
        ca.served[HIGH_HIT] += 1
        gpu[ng, 0], gpu[ng, 1], gpu[ng, 2], gpu[ng, 3], gpu[ng, 4] = i, -1, HIGH, n, e
        ng += 1
        got = HIGH
    elif pl.cpu_layer[layer] and at.offload:  # op offload: a demand copy, not kept
        tid = st[NEXT_TID]
        st[NEXT_TID] += 1
        loads = lg.loads
        loads[nl, 0], loads[nl, 1], loads[nl, 2], loads[nl, 3], loads[nl, 4] = i, 1, layer, e, HIGH
        nl += 1
        st[BYTES] += pl.expert_bytes[layer, HIGH]
        ca.served[HIGH_LOAD] += 1
        gpu[ng, 0], gpu[ng, 1], gpu[ng, 2], gpu[ng, 3], gpu[ng, 4] = i, tid, HIGH, n, e
        ng += 1
        got = HIGH
    elif pl.cpu_layer[layer]:
        ca.served[CPU] += 1
        cpu = lg.cpu
        cpu[nc, 0], cpu[nc, 1], cpu[nc, 2] = i, n, e
        nc += 1
        got = HIGH
    return got, Rows(nl, ng, nc, rows.cancel, rows.evicted, rows.kept, rows.staged, rows.pins)


@njit(cache=True, inline="always")
def from_staged(rl, ca, lg, sg, at, e, need, n, rows):
    """A staged prefetch of expert ``e`` leaves the staging list, and serves it where its precision does (it is then
    admitted as a demand load's copy is), else is cancelled: the precision served (-1: none), its transfer, the
    log's rows."""
    layer, stg_list, stg_tid = at.layer, sg.stg_list, sg.stg_tid
    stid, sprec = stg_tid[layer, e], sg.stg_prec[layer, e]
    stg_tid[layer, e] = -1
    n_stg, ng, nx = rows.staged, rows.gpu, rows.cancel
    for q in range(n_stg):  # out of the insertion-ordered list
        if stg_list[q, 0] == layer and stg_list[q, 1] == e:
            for y in range(q, n_stg - 1):
                for x in range(3):
                    stg_list[y, x] = stg_list[y + 1, x]
            n_stg -= 1
            break
    got = -1
    if sprec == HIGH or need == LOW or rl.any_prec:
        ca.st[USED] += 1
        ca.served[HIGH_HIT if sprec == HIGH else LOW_HIT] += 1
        gpu = lg.gpu
        gpu[ng, 0], gpu[ng, 1], gpu[ng, 2], gpu[ng, 3], gpu[ng, 4] = at.i, stid, sprec, n, e
        ng += 1
        got = sprec
    else:
        lg.cancel[nx, 0], lg.cancel[nx, 1] = at.i, stid
        nx += 1
    return got, stid, Rows(rows.loads, ng, rows.cpu, nx, rows.evicted, rows.kept, n_stg, rows.pins)


@njit(cache=True, inline="always")
def copy_behind(pl, ca, cpu_misses, cpu_insert, layer, prec):
    """Whether a copy follows a miss computed on the CPU: 1, one of cpu_insert's; 2, an empty slot filled
    (cpu_misses=faster); 0, none."""
    if ca.st[INSERTS] < cpu_insert:
        return 1
    if cpu_misses == CM_FASTER:
        roff, pool = ca.roff, ca.pool
        if pl.per_layer:
            r0, r1 = region(roff, prec, True, layer)
            for s in range(r0, r1):
                if pool[prec, s, LAYER] < 0:
                    return 2
        elif ca.nfree[prec] < roff[prec, roff.shape[1] - 1]:
            return 2
    return 0


@njit(cache=True, inline="always")
def step_of(rl, pl, cp, ca, sc, n_need, i, layer, pw, token, T, misses):
    """Step ``i`` before its experts are served: multi_token=high, op offload and wide steps decided, FreeToken's
    split (cpu_misses=split), the pools' rows it reads warmed; the ``Step`` its phases read."""
    if T > 1 and rl.multi_high:
        all_high(sc, n_need)
    ca.st[INSERTS] = 0
    # offload_min_batch: a pass this wide computes host-side experts on the device, each copied and used once
    offload = pl.offload_at > 0 and T >= pl.offload_at
    # wide_step=bypass: a step that selects more experts than its layer's region of a pool has slots keeps none of
    # its misses there (``Decider.run``)
    by_h = pl.wide_bypass and n_need > ca.roff[HIGH, layer + 1] - ca.roff[HIGH, layer]
    by_l = pl.wide_bypass and n_need > ca.roff[LOW, layer + 1] - ca.roff[LOW, layer]
    if misses == CM_SPLIT:
        split(rl, pl, cp, ca, sc, n_need, layer, pl.resident.shape[1])
    warm(ca, sc, n_need, layer)
    return Step(i, layer, pw, token, offload, offload and misses != CM_NEVER, by_h, by_l)


@njit(cache=True, inline="always")
def cache_of(state):
    """The state's pools and per-(layer, expert) arrays as the phases read them (``Cache``, borrowed)."""
    xs = state.xs
    return borrowed_all(
        Cache(state.pool, state.roff, state.nfree, state.index, xs[:, :, 2:5], xs[:, :, 5], xs[:, :, 6], state.st,
              state.served, state.mass)
    )  # fmt: skip


@njit(cache=True, inline="always")
def out_of(tabs, pins, rows, state):
    """``walk``'s ``Out``: its passes' rows of the tables, the counters, the pins' table and the buffers."""
    return Out(
        loads=tabs[0][: rows.loads], gpu=tabs[1][: rows.gpu], cpu=tabs[2][: rows.cpu], cancel=tabs[3][: rows.cancel],
        evicted=tabs[4][: rows.evicted], kept=tabs[5][: rows.kept], served=state.served, mass=state.mass,
        st=state.st, pins=pins, logs=Logs(tabs[0], tabs[1], tabs[2], tabs[3], tabs[4], tabs[5]),
    )  # fmt: skip
