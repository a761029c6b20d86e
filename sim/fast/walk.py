"""The decision walk of ``sim.decide`` compiled with numba: the same rules, step for step.

``sim.decide.Decider`` is the reference; this module makes exactly its decisions (the
differential tests in tests/test_fast.py hold it to that) for every registered eviction policy and prefetcher whose
file gives its compiled part, with every knob of the walk: mixed precision, skips, staging
slots, per-layer pools (regions of any sizes, ``roff``; wide steps kept or bypassed, ``cache.wide_step``),
resident and CPU placements, cpu_misses (never, always, faster, split) and cpu_insert.

An eviction policy's compiled decisions live in its own file (``policies.compiled``: its state and hooks, which the
walk calls as ``_p_evict``, ``_p_hit``, ``_p_insert``, ``_p_miss``, ``_p_overflow``, ``_p_unpin``, ``_p_renew``,
``_p_records`` and ``_p_begin``), and a prefetcher's likewise (``policies.compiled.CompiledPrefetch``, called as
``_f_propose`` and ``_f_begin``): the walk names none. This file is a template: the
eviction policy is the module global ``POLICY`` (-1 here), and ``sim.fast.special`` imports a copy of the file per
policy with it set and the policy's hooks bound (and, in a copy for a run's settings, ``PREFETCHER``, ``MISSES``,
``HISTORY`` and ``BOUND_CPU``), so that numba compiles each policy's walk with that policy's branches alone
(``walk_state``, which takes the policy as an argument, runs from this module).

State lives in arrays: ``pool[precision, slot, field]`` (fields ``LAYER`` .. ``PINNED``, as
``policies.base.Pool``), ``index[precision, layer, expert]`` (slot or -1), ``rec[layer,
expert, (R, F, H)]`` (both views of one row per (layer, expert), ``xs``), scalars in ``st`` (``CLOCK`` ..),
a policy's own state in ``own`` and the prefetchers' in ``pf`` (what
their files build). The log is
appended to ``out.*`` tables, one row per record, in the order the reference appends them. All the state a pass
leaves to the next is made by ``walk_state`` (``State``, a named tuple) and passed to ``walk`` with what it reads and
does not carry (``Inputs``: named records of the routing, the rule, the placement, the eviction's and the
prefetcher's inputs, the CPU's and the bound's), which walks a range of passes: a whole run is one range; a streamed
run (``sim.fast.stream``) walks a chunk of passes at a time, timing and dropping each chunk's log before the next.

``walk`` is the reference's ``Decider.run``: per step, its phases are functions named as the reference's methods
(``_needed``, ``_split``, ``_serve_one``, ``_drop_stale``, the prefetcher's ``_f_propose`` and ``_issue`` for
``_prefetch``), inlined
(``inline="always"``: one compiled loop, as before they were split), which read the walk's named records of
borrowed arrays (``Cache``, ``Staged``, ``Logs``, ``Future``, ``Scratch``, the prefetcher's ``Sight`` and the
inputs'), unpack the
fields they use, and return the log's counters they move.
Legend: N tokens, L layers, K top-k, D lookahead depth, E experts, P passes.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
from numba import config, njit, types
from numba.extending import intrinsic

from hobbit.sim.fast.jit import in_place
from hobbit.sim.fast.order import stable_order
from hobbit.sim.policies import compiled as _parts

# pool fields: ``policies.compiled``, where a policy's own compiled part reads them
from hobbit.sim.policies.compiled import (
    ALL_USES,
    EXPERT,
    HIGH_USES,
    LAST_USE,
    LAYER,
    N_FIELDS,
    NEVER,
    NOW_REQUEST,
    NOW_STEP,
    NOW_TOKENS,
    PINNED,
    TOUCHED,
    TRANSFER,
    USES,
    PrefetchSpace,
    Sight,
    Space,
)

# the rule and the check the walk shares with the compiled parts, compiled in place (``policies.compiled``)
in_place(_parts)
_rule_row, _present = _parts.rule_row, _parts.present

HIGH, LOW, SKIP = 0, 1, 2
HIGH_HIT, LOW_HIT, HIGH_LOAD, LOW_LOAD, SKIPPED, CPU = range(6)

# scalars of st
CLOCK, NEXT_TID, TOKENS, STEP, EVICTIONS, ISSUED, USED, DROPPED, BYTES, INSERTS, OVERFLOW, WARM, BEHIND = range(13)
REQUESTS = 13  # requests begun
N_ST = 14
# a policy's compiled part reads the tokens, the current step and the requests in ``st`` (``Space.now``) by these
# numbers
assert (TOKENS, STEP, REQUESTS) == (NOW_TOKENS, NOW_STEP, NOW_REQUEST)
CPU_MISSES = ("never", "always", "faster", "split")
# a registered policy whose own file gives its compiled part (its class's ``compiled``, a
# ``policies.compiled.Compiled``): its copy of this module binds the part's functions as ``_p_evict`` .. ``_p_begin``
OWN = 0
# The eviction policy this copy of the module decides for (``sim.fast.special.core``): -1 in this file, the template,
# whose ``walk`` refuses to run; each generated copy sets it to ``OWN``. Numba reads a global as a constant and prunes
# every branch on it, and on the flags below, before typing, so a copy compiles the calls of its own policy's hooks.
POLICY = -1
# whether the policy has a hit, miss and insert hook (a copy sets them with ``POLICY``)
OWN_HIT = False
OWN_MISS = False
OWN_INSERT = False
OWN_UNPIN = False  # and an unpin hook
OWN_RENEW = False  # and a renew hook
OWN_RECORDS = False  # and a records hook
OWN_BEGIN = False  # and a begin hook
# whether the policy reads each key's next use (``"future_uses"`` in its ``needs``: ``Space.next_use``, which the walk
# moves on at each step, ``_next_uses``)
FUTURE = False
# The run's settings a copy may be specialised for besides the policy (``sim.fast.special.Variant``): the prefetcher
# (its place in ``special.prefetchers``), cpu_misses (``CM_*``), the prefetcher's history fallback (0, 1) and whether a step's bound splits its
# experts with the CPU (0, 1). -1 here and in a policy's general copy, which reads each from its inputs at run time; a
# specialised copy reads the constant (each phase reads a setting as ``X if X >= 0 else record.field``, which numba's
# branch pruning reduces to the one it keeps), so that it types and compiles none of the code other settings need, and
# its ``walk`` refuses inputs of other settings.
PREFETCHER = -1
MISSES = -1
HISTORY = -1
BOUND_CPU = -1
# policies whose victim ``_pre_admit`` picks (their miss hook runs there): those whose file gives their compiled part
PICKS_VICTIM = POLICY == OWN
CM_NEVER, CM_ALWAYS, CM_FASTER, CM_SPLIT = range(4)


@intrinsic
def _borrowed(typingctx, a):
    """The array ``a`` without a reference count of its own: the same data, shape and strides, no meminfo (as
    ``numba.carray`` makes). Numba counts references up and down, atomically, for every array an inlined call takes
    and every view made of it; on a borrowed array those counts find no meminfo and do nothing. The caller keeps
    ``a`` itself alive for as long as the borrowed array is used, and never returns the borrowed one."""
    if not isinstance(a, types.Array):
        return None

    def codegen(context, builder, sig, args):
        src = context.make_array(sig.args[0])(context, builder, value=args[0])
        out = context.make_array(sig.return_type)(context, builder)
        context.populate_array(
            out, data=src.data, shape=src.shape, strides=src.strides, itemsize=src.itemsize, meminfo=None, parent=None
        )
        return out._getvalue()

    return a(a), codegen


def _borrow_items(context, builder, ty, value):
    """``_borrowed_all``'s code for one tuple: each array borrowed, each tuple in it likewise, the rest as it is."""
    items = []
    for i, item in enumerate(ty):
        v = builder.extract_value(value, i)
        if isinstance(item, types.Array):
            src = context.make_array(item)(context, builder, value=v)
            out = context.make_array(item)(context, builder)
            context.populate_array(
                out,
                data=src.data,
                shape=src.shape,
                strides=src.strides,
                itemsize=src.itemsize,
                meminfo=None,
                parent=None,
            )
            v = out._getvalue()
        elif isinstance(item, types.BaseTuple):
            v = _borrow_items(context, builder, item, v)
        items.append(v)
    return context.make_tuple(builder, ty, items)


@intrinsic
def _borrowed_all(typingctx, t):
    """The tuple (or named tuple) ``t`` with each of its arrays borrowed (``_borrowed``), and those of the tuples it
    holds, its other items as they are: a policy's state, which its hooks take on every step. (An item that holds an
    array some other way would be counted down without having been counted up: there is none.)"""
    if not isinstance(t, types.BaseTuple):
        return None

    def codegen(context, builder, sig, args):
        return _borrow_items(context, builder, sig.args[0], args[0])

    return t(t), codegen


if config.DISABLE_JIT:  # pure Python (NUMBA_DISABLE_JIT=1, for debugging): the array itself

    def _borrowed(a):
        return a

    def _borrowed_all(t):
        return t


@njit(cache=True)
def _keep(owners):
    """Nothing: a use of ``owners`` at the walk's end, so that numba keeps them (the memory its borrowed arrays
    point into) alive until then."""
    return len(owners)


@njit(cache=True)
def _grow(a, need, used):
    """``a`` (C-contiguous, 2-D) with room for ``need`` rows: itself, or a copy 1.5 times longer (or ``need``) that
    holds its first ``used`` rows. The rest is neither copied nor written, so its pages are never touched: a whole
    run's tables, grown a few times, fault in about the rows they hold, not every buffer's length. The copy runs over
    the flat buffers, which compiles to a plain block copy (a 2-D slice assignment copies element by element through
    its broadcasting indices, several times slower)."""
    if need <= a.shape[0]:
        return a
    b = np.empty((max(need, a.shape[0] + a.shape[0] // 2), a.shape[1]), a.dtype)
    fa, fb = a.reshape(-1), b.reshape(-1)
    for x in range(used * a.shape[1]):
        fb[x] = fa[x]
    return b


@njit(cache=True, inline="always")
def _region(roff, pr, per_layer, key_layer):
    """The slots ``r0:r1`` a copy of layer ``key_layer`` may take in pool ``pr``: the pool, or with ``per_layer`` its
    layer's region (``roff``: [2, L + 1] region offsets, ``fast.region_offsets``; regions may differ in size)."""
    if not per_layer:
        return 0, roff[pr, roff.shape[1] - 1]
    return roff[pr, key_layer], roff[pr, key_layer + 1]


@njit(cache=True)
def future_uses(ids, pass_start, pass_end, num_experts):
    """``Workload.future_uses`` as CSR arrays (``fast.future_csr``): key layer * E + expert -> the (pass, layer) steps
    that select it, in order, each once. A counting sort over the selections in step order: two passes over ``ids``
    ([tokens, L, K]), no sort."""
    L, K = ids.shape[1], ids.shape[2]
    off = np.zeros(L * num_experts + 1, np.int64)
    seen = np.full(L * num_experts, -1, np.int64)  # the last step that counted each key
    for q in range(2):  # 0: count each key's steps; 1: write them
        if q == 1:
            for x in range(L * num_experts):
                off[x + 1] += off[x]
            at = off[:-1].copy()
            steps = np.empty(off[-1], np.int64)
            seen[:] = -1
        for p in range(pass_start.shape[0]):
            for layer in range(L):
                step = p * L + layer
                for t in range(pass_start[p], pass_end[p]):
                    for k in range(K):
                        key = layer * num_experts + ids[t, layer, k]
                        if seen[key] == step:
                            continue
                        seen[key] = step
                        if q == 0:
                            off[key + 1] += 1
                        else:
                            steps[at[key]] = step
                            at[key] += 1
    return off, steps


# each key's next use (``Space.next_use``, for a policy that needs the future): ``fut_cur`` holds each key's place in
# its list of steps (``future_uses``; a window's lists end with the key's first use after the window) and ``fut_nu``
# the step there (NEVER past the list's end). At the start of each step the keys of the step before move on
# (``_passed``), and the policy renews its copies of them (``_p_renew``).


@njit(cache=True, _nrt=False)
def _passed(own, fut_off, fut_steps, cur, nu, pool, index, ids, t0, t1, layer, per_layer, step):
    """At the start of ``step``: the keys the step before selected (its tokens ``t0:t1`` at ``layer``) move their
    cursors past it, to their next use; the policy renews each copy of one."""
    E = index.shape[2]
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


@njit(cache=True, _nrt=False)
def _future_start(fut_off, fut_steps, cur, nu):
    """Each key's cursor at the first of its lists' steps, and its next use there (a run's, or a window's, first
    step)."""
    for key in range(cur.shape[0]):
        c = cur[key] = fut_off[key]
        nu[key] = fut_steps[c] if c < fut_off[key + 1] else NEVER


# ``_nrt=False``: compiled without numba's reference counting, for the functions a step calls often that allocate
# nothing: the calls of the policies' hooks, which take a policy's state and many arrays besides (``_passed``,
# ``_edge``, ``_note_use``), and the hooks a policy's file gives (``sim.fast.special`` compiles them so). A call of a counting function counts each array
# argument, and each array of a tuple argument, up on entry and down on return, atomically, through calls into
# numba's runtime (``NRT_incref``/``NRT_decref``); on the walk's borrowed arrays (``_borrowed``) those calls find
# nothing to count, but they are still made, and in the hooks of the policies that keep lists, called at every step, those counts
# were most of the walk's time (benchmarks/profile_core.py shows where a walk's time goes).
# A function so compiled compiles the functions it calls likewise, unless they say otherwise: it may call none that
# allocates (numba refuses to compile one that does). (Not for recursion: numba's on-disk cache cannot load a
# self-recursive function, numba issue #6061.)
@njit(cache=True, _nrt=False)
def _note_use(pool, index, rec, layer, e, precision, token):
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
def _use(pool, index, rec, st, pr, slot, token):
    """The copy in ``slot`` serves a use. Inlined where it is called (a hit of every step): as a call, LLVM's choice
    to inline it or not turned on its arguments, and a plain cache's walk took a fifth longer when it did not
    (``benchmarks/vs_libcachesim.py``)."""
    st[CLOCK] += 1
    pool[pr, slot, TOUCHED] = st[CLOCK]
    pool[pr, slot, ALL_USES] += 1
    _note_use(pool, index, rec, pool[pr, slot, LAYER], pool[pr, slot, EXPERT], pr, token)


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
    ``_admit``, so that the policy's state never passes through the admit path (each array an inlined call takes is
    counted up and down). Inlined where it is called: as a call of its own, the state's arrays, each passed as
    several arguments, and the pools' cost about 20 ns an eviction (a plain cache, ``benchmarks/vs_libcachesim.py``:
    1.7x the walk's time where LLVM chose not to inline it, as it may for one signature and not another)."""
    r0, r1 = _region(roff, pr, per_layer, layer)
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
def _post_admit(own, pool, roff, pr, layer, slot, per_layer):
    """A policy's insert hook, once the copy took ``slot`` (the rest of ``_pre_admit``'s part of the admit; inlined
    as it is)."""
    r0, r1 = _region(roff, pr, per_layer, layer)
    _p_insert(own, pool, pr, layer if per_layer else 0, r0, r1, slot)


@njit(cache=True, inline="always")
def _admit(ca, layer, e, pr, transfer, pinned, per_layer, chosen):
    """``ExpertCache.admit``: the slot the copy took (-1: not kept) and the evicted key as layer * E + expert (-1).
    ``chosen``: the victim ``_pre_admit`` picked (the policy's miss and evict hooks run there, its insert hook in
    ``_post_admit``).

    It and its caller (``_enter``) are inlined where they are called (``inline="always"``), and take the arrays they
    use one by one, not out of a tuple: a call, or an array taken out of a tuple, costs atomic reference counts
    that were a fifth of the walk's time on a 512-expert model. A call inlined this way takes at most 30
    arguments (CPython passes more as ``*args``, which numba cannot inline)."""
    pool, roff, nfree, index, rec, st = ca.pool, ca.roff, ca.nfree, ca.index, ca.rec, ca.st
    num_experts = index.shape[2]
    r0, r1 = _region(roff, pr, per_layer, layer)
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
def _enter(ca, i, layer, e, pr, tid, pinned, token, per_layer, chosen, loads, nl, evicted, nv, kept, nk):
    """A copy enters its pool (evicting; ``chosen``: ``_pre_admit``'s victim). ``tid >= 0``: the transfer that serves
    a use now (``Decider._admit``: in use, its victim logged; used once and not kept where it takes no slot).
    ``tid < 0``: a copy ahead of its use (``Decider._copy_ahead``: a prefetch, ``pinned`` until its layer, or a copy
    behind the CPU), a new transfer, logged; nothing copied where it takes no slot. (The slot it took or -1, the new
    row counts of ``loads``, ``evicted`` and ``kept``; the caller counts the copy's bytes.) One function for every
    copy that enters, so that each call site holds the admit path once."""
    pool, index, st = ca.pool, ca.index, ca.st
    slot, victim = _admit(ca, layer, e, pr, tid, pinned, per_layer, chosen)
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
            _use(pool, index, ca.rec, st, pr, slot, token)
        kept[nk, 0], kept[nk, 1], kept[nk, 2], kept[nk, 3] = i, layer, e, pr
        nk += 1
    elif tid >= 0:
        _note_use(pool, index, ca.rec, layer, e, pr, token)
    return slot, nl, nv, nk


@njit(cache=True, _nrt=False)
def _split_makespan(device, cpu, n, use_cpu, ratio, order, tmp):
    """The shortest time to compute ``n`` experts split between the device (``device`` seconds each) and the CPU
    (``cpu``), both at once (``sim.bound.split_makespan``; ``bound.pass_bounds``), over scratch arrays of at least
    ``n`` (``ratio``, ``order``, ``tmp``): it allocates nothing."""
    total = 0.0
    for i in range(n):
        total += device[i]
    if not use_cpu or n == 0 or total <= 0.0:
        return total
    return _split_cpu_into(device, cpu, n, total, ratio, order, tmp)


@njit(cache=True)
def _split_cpu(device, cpu, n, total):
    """``_split_makespan`` once the CPU takes part: ``total`` is the device's time for all ``n``. Apart, so that the
    walk's step (``_bound_step``) sums the device's times inline and calls this only where the CPU computes: a call
    with arrays costs their reference counts on every step."""
    return _split_cpu_into(device, cpu, n, total, np.empty(n), np.empty(n, np.int64), np.empty(n, np.int64))


@njit(cache=True, _nrt=False)
def _split_cpu_into(device, cpu, n, total, ratio, order, tmp):
    """``_split_cpu`` over scratch arrays of at least ``n`` (``ratio``, ``order``, ``tmp``)."""
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


def walk_state(
    num_layers,
    num_experts,
    roff,
    per_layer,
    staging,
    log_proto,
    own_state=None,
    own_knobs=None,
    library=None,
    future=False,
    prefetchers=(),
):
    """What the walk carries from one pass to the next (``walk``'s ``state``; ``STATE`` names its items): the pools,
    the policies' and the prefetcher's state, the records, the counters. A walk over passes ``p0:p1`` continues the
    one that ended at ``p0``: the same decisions as one walk over both ranges. ``roff``: the pools' regions
    ([2, L + 1] offsets, ``fast.region_offsets``); each pool's slots are ``roff[:, L]``. Plain Python: it runs once
    per run and allocates, so compiling it (8 s) would buy nothing. ``own_state``: the state builder of a policy whose
    file gives its compiled part (``Compiled.state``; None: it keeps none), called with the space it sizes by and its
    knobs ``own_knobs``, and what it may read of the walk as it goes (``Space``: the counters ``st``, a
    prefetcher's match and ``library``, its normalised activation matrices, and, where ``future`` (the policy needs
    the future), each key's next use). ``prefetchers``: each compiled prefetcher's state builder
    (``CompiledPrefetch.state``; None: it keeps none) and its reference prefetcher, in ``special.prefetchers``' order:
    the run's prefetcher's state, as the others' (built with their defaults: a general copy of the walk types every
    prefetcher's code), is ``State.pf``'s item at its place."""
    L, E = num_layers, num_experts
    roff = roff.copy()  # the walk's own (``walk`` reads the state's)
    size = roff[:, L].copy()
    # a slot's fields side by side; a pool's copies take its slots in order while it has free ones, one per (layer,
    # expert) at most: L * E rows hold them all, whatever the memory (a region of a per-layer pool has its place)
    rows = max(size[0], size[1], 1) if per_layer else max(min(max(size[0], size[1]), L * E), 1)
    pool = np.zeros((2, rows, N_FIELDS), np.int64)
    pool[:, :, LAYER] = -1
    pool[:, :, EXPERT] = -1
    pool[:, :, TRANSFER] = -1
    nfree = np.zeros(2, np.int64)
    match = np.full(1, -1, np.int64)  # a prefetcher's match (``Space.match``, ``PrefetchSpace.match``; -1: none)
    S = pool.shape[1]
    cap = np.zeros((2, L if per_layer else 1), np.int64)  # each region's slots
    for pr in range(2):
        cap[pr] = roff[pr, 1:] - roff[pr, :L] if per_layer else size[pr]
    st = np.zeros(N_ST, np.int64)
    if library is None:
        library = np.zeros((0, L, E))
    fut_cur = np.full(L * E if future else 1, -1, np.int64)  # each key's next use (``_passed``; -1: the walk sets it)
    fut_nu = np.full(L * E if future else 0, NEVER, np.int64)
    space = Space(L, E, S, cap, own_knobs, bool(per_layer), st, match, library, fut_nu)
    own = () if own_state is None else own_state(space)
    pf = tuple(
        () if build is None else build(PrefetchSpace(L, E, prefetcher, st, match)) for build, prefetcher in prefetchers
    )
    # what the walk keeps per (layer, expert), side by side in one row of ``xs`` (the walk is bound by cache misses
    # on its state, and a use reads and writes all of it): its slot in each pool (``index``, -1: none), its record
    # (``rec``), the tokens that used it in this request (``counts``) and its prefetched flag (``prefetched``)
    xs = np.zeros((L, E, 8), np.int32)
    xs[:, :, :2] = -1
    served = np.zeros(6, np.int64)
    mass = np.zeros(3)
    # staged prefetches (insertion order), pins (target layer, pool, layer, expert), prefetched flags
    stg_tid = np.full((L, E), -1, np.int64)  # read only when ``staging`` (nothing is staged otherwise)
    stg_prec = np.zeros((L, E), np.int64)
    stg_list = np.zeros((max(staging, 1), 3), np.int64)  # layer, expert, target; in insertion order
    pins = np.zeros((16, 4), np.int64)
    counts = np.zeros(2, np.int64)  # staged copies (stg_list's rows) and pins (pins' rows)
    dt = log_proto.dtype  # the log tables' buffers (``walk``'s ``tabs``): the walk grows them, a streamed run keeps
    # them from one chunk to the next (its later chunks write into memory the first has mapped, not into new pages)
    logs = Logs(
        np.empty((0, 5), dt),
        np.empty((0, 5), dt),
        np.empty((0, 3), dt),
        np.empty((0, 2), dt),
        np.empty((0, 4), dt),
        np.empty((0, 4), dt),
    )
    return State(
        pool=pool,
        roff=roff,
        nfree=nfree,
        match=match,
        own=own,
        pf=pf,
        xs=xs,
        # its slot per pool, [2, L, E], a view of ``xs`` made here: a transpose in the walk compiles numba's
        # permutation of shapes and strides, which checks its axes with a set and builds an error message (about
        # 1.5 s of the first compile)
        index=xs[:, :, :2].transpose(2, 0, 1),
        st=st,
        served=served,
        mass=mass,
        stg_tid=stg_tid,
        stg_prec=stg_prec,
        stg_list=stg_list,
        pins=pins,
        counts=counts,
        fut_cur=fut_cur,
        fut_nu=fut_nu,
        logs=logs,
    )


class State(NamedTuple):
    """What the walk carries from one pass to the next (``walk_state`` makes it, ``walk`` updates it in place; a
    streamed run replaces ``pins`` and ``logs`` with the grown buffers ``walk`` returns)."""

    pool: Any
    roff: Any
    nfree: Any
    match: Any  # [1]: a prefetcher's match (``Space.match``)
    own: Any  # the state of a policy whose file gives its compiled part (``policies.compiled``; () for the others)
    pf: Any  # each compiled prefetcher's state (``special.prefetchers``' order; () for one that keeps none)
    xs: Any
    index: Any  # [2, L, E]: a view of xs (the slot per pool)
    st: Any
    served: Any
    mass: Any
    stg_tid: Any
    stg_prec: Any
    stg_list: Any
    pins: Any
    counts: Any
    fut_cur: Any  # [L * E] each key's place in its list of next uses (``_passed``; -1: the walk sets it)
    fut_nu: Any  # [L * E] the step there (``Space.next_use``)
    logs: Any


STATE = State._fields


class Routing(NamedTuple):
    """The trace as the walk reads it (``fast.inputs.walk_inputs``): per token, per pass."""

    ids: Any  # [N, L, K] int16: each token's experts per layer
    weights: Any  # [N, L, K]: their gate weights
    pred: Any  # [N, L, D, K] int16: the trace's predictions of later layers (-1: none)
    pred_w: Any  # [N, L, D, K]: their weights
    pass_start: Any  # [P] int64: each pass's first token
    pass_end: Any  # [P] int64: one past its last
    pass_request: Any  # [P] int64: its request
    token_in_request: Any  # [N] int64: each token's place in its request
    top_k: int  # the model's experts per token
    # a window of a longer trace (``fast.stream`` over windows): the per-pass arrays' row 0 is pass ``first_pass``,
    # whose predecessor ran request ``prev_request`` (-1: none); a whole trace is the window from pass 0
    first_pass: int = 0
    prev_request: int = -1
    prev_ids: Any = None  # [T, K] int16: the selections of the last layer of the pass before (``_edge``)


class Rule(NamedTuple):
    """The precision rule (``rule.rule_args``, ``policies.precision``)."""

    hobbit_rule: bool  # HOBBIT's T1/T2 rule, else a uniform precision
    rule_hi: float  # T1
    rule_lo: float  # T2
    mixed: bool  # precision.mode == hobbit
    uniform: int  # the precision of a uniform mode (HIGH or LOW)
    any_prec: bool  # precision.serve_any_cached
    multi_high: bool  # precision.multi_token == high, under the mixed mode


class Place(NamedTuple):
    """Where experts live and what the pools keep."""

    resident: Any  # [L, E] bool: resident on the device (placement)
    cpu_layer: Any  # [L] bool: the layer's experts stay on the CPU
    wide_bypass: bool  # cache.wide_step=bypass on per-layer pools
    offload_at: int  # tokens from which a CPU layer's experts run on the device (op offload)
    per_layer: bool  # cache.per_layer
    per_expert: Any  # [P] int64: tokens per expert of each pass (the bound's CPU share)
    expert_bytes: Any  # [L, 2] int64: a copy's bytes per layer and precision


class Evict(NamedTuple):
    """What the eviction policies read besides the pools."""

    fut_off: Any  # the future uses (``future_csr``) of a policy that needs them (``FUTURE``): offsets per key
    fut_steps: Any  # and the steps


class Prefetch(NamedTuple):
    """The prefetcher and its inputs."""

    kind: int  # the prefetcher: its place in ``special.prefetchers``
    max_depth: int  # prefetch.max_depth
    history: bool  # the history fallback predicts from the request's counts
    prefetch_prec: int  # the precision of a prefetch (-1: the rule's)
    prefetching: bool  # the prefetcher loads ahead (and misses are not all computed on the CPU)
    staging: int  # prefetch.staging_slots
    most: int  # the proposals a step may make beyond max_depth layers' experts (``CompiledPrefetch.most``)


class Cpu(NamedTuple):
    """Misses computed on the CPU (``system.cpu_misses``)."""

    misses: int  # CM_*
    insert: int  # system.cpu_insert: copies kept behind CPU-served misses, at most
    faster: Any  # [2, tokens + 1] bool: computing a miss on the CPU beats loading it
    copy_s: Any  # [2]: a miss's copy seconds per precision (FreeToken's split)
    cpu_s: Any  # [tokens + 1]: its CPU seconds per token count
    split_threshold: float
    split_max_fetch: int


class Bound(NamedTuple):
    """Each pass's bound and the rule's class counts, computed as the walk reads the selections (``stream``)."""

    on: bool  # compute them
    dense: Any  # [P, 2]: the dense part's seconds per pass (a whole CPU layer's in column 1)
    whole: Any  # [L] bool: the layer runs whole on the CPU
    other: Any  # [P]: the rest of a pass
    min_s: Any  # [tokens + 1]: an expert's least device seconds per token count (over the precisions run)
    cpu: Any  # [tokens + 1]: on the CPU
    uses_cpu: bool  # the bound may put experts on the CPU
    out: Any  # [P]: written, each pass's bound
    cls_n: Any  # [3] int64: written, the selections of each class


class Out(NamedTuple):
    """What ``walk`` returns: its passes' log tables (views of the buffers, which the next walk with the same state
    overwrites), the counters (the state's own arrays), the pins' table and the buffers (grown: they replace the
    state's ``pins`` and ``logs``)."""

    loads: Any
    gpu: Any
    cpu: Any
    cancel: Any
    evicted: Any
    kept: Any
    served: Any
    mass: Any
    st: Any
    pins: Any
    logs: Any


class Inputs(NamedTuple):
    """Everything the walk reads and does not carry from one pass to the next (``fast.inputs.walk_inputs``)."""

    routing: Routing
    rule: Rule
    place: Place
    evict: Evict
    prefetch: Prefetch
    cpu: Cpu
    bound: Bound
    log_proto: Any  # an empty array of the log tables' dtype


class Cache(NamedTuple):
    """The pools and what the walk keeps per (layer, expert), as the phases of ``walk`` read them (the state's arrays,
    borrowed)."""

    pool: Any  # [2, slots, N_FIELDS]
    roff: Any  # [2, L + 1]: the pools' regions
    nfree: Any  # [2]: the slots a shared pool has filled
    index: Any  # [2, L, E]: each (layer, expert)'s slot per pool (-1: none)
    rec: Any  # [L, E, 3]: its record (last use, uses, uses at high precision) in this request
    counts: Any  # [L, E]: the tokens that used it in this request
    prefetched: Any  # [L, E]: a prefetch brought its copy, not yet used
    st: Any  # the scalars (CLOCK ..)
    served: Any  # [6]: uses by how they were served (HIGH_HIT ..)
    mass: Any  # [3]: gate mass served at each precision


class Staged(NamedTuple):
    """Prefetches staged outside the cache (``prefetch.staging_slots``)."""

    stg_tid: Any  # [L, E]: its transfer (-1: none)
    stg_prec: Any  # [L, E]: its precision
    stg_list: Any  # [staging, 3]: layer, expert, target, in insertion order


class Logs(NamedTuple):
    """The log tables the walk appends to (borrowed; grown between steps)."""

    loads: Any
    gpu: Any
    cpu: Any
    cancel: Any
    evicted: Any
    kept: Any


class Future(NamedTuple):
    """Each key's next use (``FUTURE``): the lists of its steps (``Evict.fut_off``, ``Evict.fut_steps``), its cursor
    in them and the step there (``State.fut_cur``, ``State.fut_nu``)."""

    fo_b: Any
    fs_b: Any
    cur_b: Any
    nu_b: Any


class Scratch(NamedTuple):
    """One step's working arrays (``_scratch`` makes them once a walk)."""

    need_c: Any  # [E]: the step's need: each expert's class, tokens and gate mass
    need_n: Any
    need_m: Any
    order: Any  # [E]: the experts it needs, in first-appearance order
    on_cpu: Any  # [E]: FreeToken's split sends it to the CPU
    want: Any  # [E]: a prefetcher's wanted precision per expert, and the wanted in order (``Sight``)
    worder: Any
    props: Any  # [.., 3]: proposals: layer, expert, precision
    sink: Any  # [1]: ``Sight.sink``
    m_e: Any  # [E]: FreeToken's misses, their classes and sort keys
    m_c: Any
    m_key: Any
    hist: Any  # [E]: the history fallback's counts
    b_dev: Any  # [E]: the bound's device and CPU seconds of each expert a step needs
    b_cpu: Any
    row: Any  # [K]: the rule's buffers (``_rule_row``)
    rc: Any
    rm: Any


@njit(cache=True)
def _scratch(K, E, max_depth, most):
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
def _next_uses(rt, pl, ca, fu, own_b, i, L):
    """The keys of the step before have passed their next use (``_passed``); at a window's first step, those of the
    window before's last (``_edge``), whose uses this window's lists start after."""
    q = (i - 1) // L
    if q >= rt.first_pass:
        _passed(
            own_b,
            fu.fo_b,
            fu.fs_b,
            fu.cur_b,
            fu.nu_b,
            ca.pool,
            ca.index,
            rt.ids,
            rt.pass_start[q - rt.first_pass],
            rt.pass_end[q - rt.first_pass],
            (i - 1) % L,
            pl.per_layer,
            i,
        )
    else:
        _edge(own_b, ca.pool, ca.index, rt.prev_ids, L - 1, pl.per_layer)


@njit(cache=True, inline="always")
def _least_room(lg, nl, ng, nc, nx, nv, nk):
    """The fewest rows left in any log table (one branch where ``or``'s would be six)."""
    return min(
        lg.loads.shape[0] - nl,
        lg.gpu.shape[0] - ng,
        lg.cpu.shape[0] - nc,
        lg.cancel.shape[0] - nx,
        lg.evicted.shape[0] - nv,
        lg.kept.shape[0] - nk,
    )


@njit(cache=True, inline="always")
def _all_high(sc, n_need):
    """``precision.multi_token=high``: a step of several tokens loads every expert it does not skip at high."""
    for j in range(n_need):
        e = sc.order[j]
        if sc.need_c[e] != SKIP:
            sc.need_c[e] = HIGH


@njit(cache=True, inline="always")
def _forget_need(sc, n_need, layer):
    """The step's need reset for the next."""
    for j in range(n_need):
        e = sc.order[j]
        sc.need_n[e] = 0
        sc.need_c[e] = SKIP
        sc.on_cpu[e] = False


@njit(cache=True, inline="always")
def _copy_in(own_b, pl, ca, lg, i, layer, e, prec, tid, pinned, token, nl, nv, nk):
    """A copy of ``(layer, e)`` at ``prec`` enters the cache (``_enter``'s ``tid``, ``pinned`` and ``token``: a use's
    transfer, or -1 for a copy ahead of its use, pinned when a prefetch): the policy's miss hook and victim
    (``_pre_admit``), the slot and the copy (``_enter``), the policy's insert hook; the slot (-1: none) and the log's
    counters after it. Every copy that enters passes here."""
    pool, roff, index = ca.pool, ca.roff, ca.index
    per_layer = pl.per_layer
    ch = _pre_admit(own_b, pool, roff, ca.nfree, index, layer, e, prec, per_layer) if PICKS_VICTIM else -1
    slot, nl, nv, nk = _enter(
        ca, i, layer, e, prec, tid, pinned, token, per_layer, ch, lg.loads, nl, lg.evicted, nv, lg.kept, nk
    )
    if slot >= 0 and OWN_INSERT:
        _post_admit(own_b, pool, roff, prec, layer, slot, per_layer)
    return slot, nl, nv, nk


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
def _needed(rt, rl, sc, a, b, layer, K, n_high, n_low):
    """``Decider._needed``: the experts the step's tokens select, in first-appearance order (``order``), each with its class (the highest of its selections'), tokens and gate mass; counts the selections of the rule's classes."""
    ids, weights = rt.ids, rt.weights
    hobbit_rule, rule_hi, rule_lo, uniform = rl.hobbit_rule, rl.rule_hi, rl.rule_lo, rl.uniform
    need_c, need_m, need_n, order, rc, rm, row = sc.need_c, sc.need_m, sc.need_n, sc.order, sc.rc, sc.rm, sc.row
    n_need = 0
    for t in range(a, b):
        _rule_row(weights[t, layer], False, hobbit_rule, uniform, rule_hi, rule_lo, row, rc, rm)
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
    if bnd_uses_cpu and nd and dev > 0.0:  # _split_makespan, its CPU part called only where it is needed
        dev = _split_cpu(b_dev, b_cpu, nd, dev)
    b_total += bnd_dense[pw, 1 if bnd_whole[layer] else 0] + dev
    if layer == L - 1:
        bnd_out[pw] = b_total
    return b_total


@njit(cache=True, inline="always")
def _split(rl, pl, cp, ca, sc, n_need, layer, E):
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
def _warm(ca, sc, n_need, layer):
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
def _serve_one(
    rl,
    pl,
    ev,
    pf,
    cp,
    ca,
    lg,
    sg,
    sc,
    own_b,
    i,
    layer,
    e,
    token,
    offload,
    off_miss,
    by_h,
    by_l,
    L,
    E,
    nl,
    ng,
    nc,
    nx,
    nv,
    nk,
    n_stg,
):
    """``Decider._serve_one``: expert ``e`` of the step (class ``c``, ``n`` tokens), from the device's copies, a staged prefetch, the CPU or a demand load, and what enters the cache; the log's counters after it."""
    any_prec, mixed, uniform = rl.any_prec, rl.mixed, rl.uniform
    cpu_layer, expert_bytes, per_layer, resident = pl.cpu_layer, pl.expert_bytes, pl.per_layer, pl.resident
    staging = pf.staging
    cpu_faster, cpu_insert = cp.faster, cp.insert
    cpu_misses = MISSES if MISSES >= 0 else cp.misses
    counts = ca.counts
    index, mass, nfree, pool, prefetched, rec, roff = (
        ca.index,
        ca.mass,
        ca.nfree,
        ca.pool,
        ca.prefetched,
        ca.rec,
        ca.roff,
    )
    served, st = ca.served, ca.st
    cancel, cpu, gpu, loads = lg.cancel, lg.cpu, lg.gpu, lg.loads
    stg_list, stg_prec, stg_tid = sg.stg_list, sg.stg_prec, sg.stg_tid
    need_c, need_m, need_n, on_cpu = sc.need_c, sc.need_m, sc.need_n, sc.on_cpu
    c, n = need_c[e], need_n[e]
    got, a_tid, a_prec, behind = -1, -1, HIGH, 0  # what was served; a copy to admit: its transfer, precision, mode
    noted = False  # the key's records changed (a use by a copy, or by a load not kept)
    if resident[layer, e]:
        served[HIGH_HIT] += 1
        gpu[ng, 0], gpu[ng, 1], gpu[ng, 2], gpu[ng, 3], gpu[ng, 4] = i, -1, HIGH, n, e
        ng += 1
        got = HIGH
    elif cpu_layer[layer] and offload:  # op offload: a demand copy, not kept (``Decider._offload``)
        tid = st[NEXT_TID]
        st[NEXT_TID] += 1
        loads[nl, 0], loads[nl, 1], loads[nl, 2], loads[nl, 3], loads[nl, 4] = i, 1, layer, e, HIGH
        nl += 1
        st[BYTES] += expert_bytes[layer, HIGH]
        served[HIGH_LOAD] += 1
        gpu[ng, 0], gpu[ng, 1], gpu[ng, 2], gpu[ng, 3], gpu[ng, 4] = i, tid, HIGH, n, e
        ng += 1
        got = HIGH
    elif cpu_layer[layer]:
        served[CPU] += 1
        cpu[nc, 0], cpu[nc, 1], cpu[nc, 2] = i, n, e
        nc += 1
        got = HIGH
    need = LOW if c == SKIP else c
    if got < 0:
        hp = -1
        if index[HIGH, layer, e] >= 0:
            hp = HIGH
        elif (need == LOW or any_prec) and index[LOW, layer, e] >= 0:
            hp = LOW
        if hp >= 0:
            slot = index[hp, layer, e]
            _use(pool, index, rec, st, hp, slot, token)
            noted = True
            if OWN_HIT:
                _p_hit(own_b, pool, hp, layer if per_layer else 0, slot)
            if prefetched[layer, e]:
                prefetched[layer, e] = False
                st[USED] += 1
            served[HIGH_HIT if hp == HIGH else LOW_HIT] += 1
            gpu[ng, 0], gpu[ng, 1], gpu[ng, 2], gpu[ng, 3], gpu[ng, 4] = (
                i,
                pool[hp, slot, TRANSFER],
                hp,
                n,
                e,
            )
            ng += 1
            got = hp
    if got < 0 and staging and stg_tid[layer, e] >= 0:
        stid, sprec = stg_tid[layer, e], stg_prec[layer, e]
        stg_tid[layer, e] = -1
        for q in range(n_stg):  # out of the insertion-ordered list
            if stg_list[q, 0] == layer and stg_list[q, 1] == e:
                for y in range(q, n_stg - 1):
                    for x in range(3):
                        stg_list[y, x] = stg_list[y + 1, x]
                n_stg -= 1
                break
        if sprec == HIGH or need == LOW or any_prec:
            st[USED] += 1
            served[HIGH_HIT if sprec == HIGH else LOW_HIT] += 1
            gpu[ng, 0], gpu[ng, 1], gpu[ng, 2], gpu[ng, 3], gpu[ng, 4] = i, stid, sprec, n, e
            ng += 1
            got, a_tid, a_prec = sprec, stid, sprec  # admitted below, as a demand load's copy is
        else:
            cancel[nx, 0], cancel[nx, 1] = i, stid
            nx += 1
    if got < 0 and c == SKIP:
        served[SKIPPED] += 1
        got = SKIP
    if got < 0:
        prec = c if mixed else uniform
        if not off_miss and (cpu_misses == CM_ALWAYS or (cpu_misses == CM_FASTER and cpu_faster[prec, n]) or on_cpu[e]):
            served[CPU] += 1
            cpu[nc, 0], cpu[nc, 1], cpu[nc, 2] = i, n, e
            nc += 1
            # a copy behind the CPU, admitted below: 1, cpu_insert's; 2, an empty slot filled (faster)
            if st[INSERTS] < cpu_insert:
                behind = 1
            elif cpu_misses == CM_FASTER:
                if per_layer:
                    r0, r1 = _region(roff, prec, per_layer, layer)
                    for s in range(r0, r1):
                        if pool[prec, s, LAYER] < 0:
                            behind = 2
                            break
                elif nfree[prec] < roff[prec, L]:
                    behind = 2
            if behind and (by_l if prec == LOW else by_h):  # a wide step's miss: no copy follows it
                behind = 0
            a_prec = prec
            got = HIGH
        else:  # a demand load
            tid = st[NEXT_TID]
            st[NEXT_TID] += 1
            loads[nl, 0], loads[nl, 1], loads[nl, 2], loads[nl, 3], loads[nl, 4] = i, 1, layer, e, prec
            nl += 1
            st[BYTES] += expert_bytes[layer, prec]
            served[HIGH_LOAD if prec == HIGH else LOW_LOAD] += 1
            gpu[ng, 0], gpu[ng, 1], gpu[ng, 2], gpu[ng, 3], gpu[ng, 4] = i, tid, prec, n, e
            ng += 1
            got = prec
            if off_miss or (by_l if prec == LOW else by_h):  # op offload, a wide step: used once
                _note_use(pool, index, rec, layer, e, prec, token)
                noted = True
            else:
                a_tid, a_prec = tid, prec
    if a_tid >= 0 or behind:  # a staged copy used or a demand load (in use), or a copy behind the CPU: it enters
        noted = noted or a_tid >= 0
        slot, nl, nv, nk = _copy_in(own_b, pl, ca, lg, i, layer, e, a_prec, a_tid, False, token, nl, nv, nk)
        if behind:
            if slot >= 0:
                st[BYTES] += expert_bytes[layer, a_prec]
            if slot >= 0 and behind == 1:
                st[INSERTS] += 1
            if slot >= 0 or behind == 2:
                st[ISSUED] += 1
                st[BEHIND] += 1
    if OWN_RECORDS and noted:  # each pool's copy of the key, once any copy this use brought has entered
        for pr in range(2):
            s = index[pr, layer, e]
            if s >= 0:
                _p_records(own_b, pool, pr, layer if per_layer else 0, s)
    mass[got] += need_m[e]
    counts[layer, e] += n
    return nl, ng, nc, nx, nv, nk, n_stg


@njit(cache=True, inline="always")
def _drop_stale(pl, ev, ca, lg, sg, own_b, pins, i, layer, E, n_pins, n_stg, nx):
    """``Decider._drop_stale``: the pins and staged copies of this layer leave their lists (kept in order)."""
    per_layer = pl.per_layer
    index = ca.index
    pool, prefetched = ca.pool, ca.prefetched
    cancel = lg.cancel
    stg_list, stg_tid = sg.stg_list, sg.stg_tid
    kq = 0
    for q in range(n_pins):
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
    n_pins = kq
    kq = 0
    for q in range(n_stg):
        if stg_list[q, 2] == layer:
            sl, se = stg_list[q, 0], stg_list[q, 1]
            cancel[nx, 0], cancel[nx, 1] = i, stg_tid[sl, se]
            nx += 1
            stg_tid[sl, se] = -1
        else:
            for x in range(3):
                stg_list[kq, x] = stg_list[q, x]
            kq += 1
    n_stg = kq
    return n_pins, n_stg, nx


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
def _issue(pl, ev, pf, cp, ca, lg, sg, sc, fs, own_b, pins, i, layer, pw, n_props, L, E, nl, nv, nk, n_pins, n_stg):
    """``Decider._prefetch``'s copies: each proposal still absent is staged, or admitted pinned until its layer (``_copy_in``); the log's counters after them."""
    expert_bytes, per_expert = pl.expert_bytes, pl.per_expert
    prefetch_prec, staging = pf.prefetch_prec, pf.staging
    cpu_faster = cp.faster
    cpu_misses = MISSES if MISSES >= 0 else cp.misses
    prefetched, st = ca.prefetched, ca.st
    loads = lg.loads
    stg_list, stg_prec, stg_tid = sg.stg_list, sg.stg_prec, sg.stg_tid
    props = sc.props
    for q in range(n_props):
        tl, te = props[q, 0], props[q, 1]
        if _present(fs, tl, te):
            continue
        prec = props[q, 2] if prefetch_prec < 0 else prefetch_prec
        if cpu_misses == CM_FASTER and cpu_faster[prec, per_expert[pw]]:
            continue
        if staging:
            if n_stg >= staging:
                st[DROPPED] += 1
                continue
            tid = st[NEXT_TID]
            st[NEXT_TID] += 1
            loads[nl, 0], loads[nl, 1], loads[nl, 2], loads[nl, 3], loads[nl, 4] = i, 0, tl, te, prec
            nl += 1
            st[BYTES] += expert_bytes[tl, prec]
            stg_tid[tl, te], stg_prec[tl, te] = tid, prec
            stg_list[n_stg, 0], stg_list[n_stg, 1], stg_list[n_stg, 2] = tl, te, tl
            n_stg += 1
        else:
            slot, nl, nv, nk = _copy_in(own_b, pl, ca, lg, i, tl, te, prec, -1, True, 0, nl, nv, nk)
            if slot < 0:
                st[DROPPED] += 1
                continue
            st[BYTES] += expert_bytes[tl, prec]
            pins[n_pins, 0], pins[n_pins, 1], pins[n_pins, 2], pins[n_pins, 3] = tl, prec, tl, te
            n_pins += 1
            prefetched[tl, te] = True
        st[ISSUED] += 1
    return nl, nv, nk, n_pins, n_stg


@njit(cache=True)
def walk(state, inputs, p0, p1):
    """Passes ``p0:p1`` of the walk, continuing ``state`` (``walk_state``, updated in place): their log tables (views
    of the buffers, which the next walk with this state overwrites), the counters, the pins' table and the buffers
    (grown, they replace ``state``'s). ``wide_bypass`` (``cache.wide_step=bypass``, per-layer pools): a step that
    selects more distinct experts than its layer's region of a pool has slots keeps none of its misses there (no
    demand load's copy, nor a copy behind the CPU; prefetches, staged ones included, as ever: ``sim.decide``).

    ``inputs`` (``Inputs``) is what it reads and does not carry, as named records, unpacked here once.

    With ``inputs.bound.on``, it also writes each pass's bound (``bound.pass_bounds``, the same floats: ``Bound``'s
    tables ``dense`` and ``whole``, ``other``, ``min_s``, ``cpu`` and ``uses_cpu``) into ``Bound.out`` (by the pass's row), from the
    experts and token counts each step needs (a bound's expert is one not every selection skips, as here), and
    counts the selections of each class into ``Bound.cls_n`` (with HOBBIT's rule: ``rule.hobbit_counts``), so that a
    run reads the trace's selections once."""
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
    # the inputs and the state as the phases read them: named records of borrowed arrays (``_borrowed_all``: no atomic
    # reference counts where the hot path hands them on); ``state``, ``inputs`` and ``scratch`` hold the arrays
    rt, rl, pl = _borrowed_all(inputs.routing), _borrowed_all(inputs.rule), _borrowed_all(inputs.place)
    ev, pf, cp, bd = (
        _borrowed_all(inputs.evict),
        _borrowed_all(inputs.prefetch),
        _borrowed_all(inputs.cpu),
        _borrowed_all(inputs.bound),
    )
    kind = PREFETCHER if PREFETCHER >= 0 else pf.kind
    misses = MISSES if MISSES >= 0 else cp.misses
    L, K, E = rt.ids.shape[1], rt.ids.shape[2], pl.resident.shape[1]
    scratch = _scratch(K, E, pf.max_depth, pf.most)
    sc, own, pfs, xs = _borrowed_all(scratch), _borrowed_all(state.own), _borrowed_all(state.pf), state.xs
    ca = _borrowed_all(
        Cache(
            state.pool,
            state.roff,
            state.nfree,
            state.index,
            xs[:, :, 2:5],
            xs[:, :, 5],
            xs[:, :, 6],
            state.st,
            state.served,
            state.mass,
        )
    )
    st = ca.st  # the walk's own stores go through a name it keeps live (see ``tabs``)
    sg = _borrowed_all(Staged(state.stg_tid, state.stg_prec, state.stg_list))
    fs = _borrowed_all(_sight(rt, rl, pl, pf, ca, sg, sc))
    fu = _borrowed_all(Future(ev.fut_off, ev.fut_steps, state.fut_cur, state.fut_nu))
    if FUTURE and (fu.cur_b[0] < 0 or p0 == rt.first_pass):  # each key's first use (of the trace, or the window)
        _future_start(fu.fo_b, fu.fs_b, fu.cur_b, fu.nu_b)
    n_stg, n_pins = state.counts[0], state.counts[1]
    n_high = n_low = n_sel = 0  # the selections of the rule's classes HIGH and LOW, and all
    # log tables (``state``'s buffers, written from their first row), each with room for one token's selections per
    # step (up to 2^20 rows; grown as needed), not zeroed. The tables (and the pins') are owned in lists, which a
    # growth changes in place: an owner that a loop reassigned would be copied (its reference count up, then down,
    # atomically) on every path through the step, growing or not, and its count's cache line is cold by then: about
    # 30 ns a step
    est = min(max(1024, (p1 - p0) * L * min(K, E)), 1 << 20)
    # (a list, not a comprehension: numba inlines a comprehension as a closure and then removes dead code, taking
    # with it any store into an array read off a record, ``ca.st[STEP] = i``, whose temporary it thinks unaliased)
    logs = state.logs
    tabs, pins_own = [logs[0], logs[1], logs[2], logs[3], logs[4], logs[5]], [state.pins]
    for x, rows in enumerate((est, est, 256, 64, est, est)):
        if tabs[x].shape[0] < rows:
            tabs[x] = np.empty((rows, tabs[x].shape[1]), inputs.log_proto.dtype)
    lg = _borrowed_all(Logs(tabs[0], tabs[1], tabs[2], tabs[3], tabs[4], tabs[5]))
    pins = _borrowed(pins_own[0])
    nl = ng = nc = nx = nv = nk = 0
    for p in range(p0, p1):
        pw = p - rt.first_pass  # the pass's row of the window's per-pass arrays
        a, b = rt.pass_start[pw], rt.pass_end[pw]
        if p > 0 and rt.pass_request[pw] != (rt.pass_request[pw - 1] if pw > 0 else rt.prev_request):
            _new_request(pl, ca, own, pfs, kind, L)
        token = rt.token_in_request[b - 1] + 1
        st[TOKENS] = token
        T = b - a
        n_sel += T * K * L
        b_total = bd.other[pw] if bd.on else 0.0
        for layer in range(L):
            i = p * L + layer
            st[STEP] = i
            if FUTURE and i > 0:
                _next_uses(rt, pl, ca, fu, own, i, L)
            room = (3 + pf.max_depth) * min(E, T * K) + pf.staging + pf.most + 2  # this step's records, at most
            if room > _least_room(lg, nl, ng, nc, nx, nv, nk):
                for x, n_x in enumerate((nl, ng, nc, nx, nv, nk)):
                    if n_x + room > tabs[x].shape[0]:  # only then: a list's item set to itself would be freed first
                        tabs[x] = _grow(tabs[x], n_x + room, n_x)
                lg = _borrowed_all(Logs(tabs[0], tabs[1], tabs[2], tabs[3], tabs[4], tabs[5]))
            n_need, n_high, n_low = _needed(rt, rl, sc, a, b, layer, K, n_high, n_low)
            if bd.on:
                b_total = _bound_step(bd, sc, n_need, pw, layer, L, b_total)
            if T > 1 and rl.multi_high:
                _all_high(sc, n_need)
            st[INSERTS] = 0
            # offload_min_batch: a pass this wide computes host-side experts on the device, each copied and used once
            offload = pl.offload_at > 0 and T >= pl.offload_at
            off_miss = offload and misses != CM_NEVER
            # wide_step=bypass: a step that selects more experts than its layer's region of a pool has slots keeps
            # none of its misses there (``Decider.run``)
            by_h = pl.wide_bypass and n_need > ca.roff[HIGH, layer + 1] - ca.roff[HIGH, layer]
            by_l = pl.wide_bypass and n_need > ca.roff[LOW, layer + 1] - ca.roff[LOW, layer]
            if misses == CM_SPLIT:
                _split(rl, pl, cp, ca, sc, n_need, layer, E)
            _warm(ca, sc, n_need, layer)
            for j in range(n_need):
                e = sc.order[j]
                nl, ng, nc, nx, nv, nk, n_stg = _serve_one(
                    rl, pl, ev, pf, cp, ca, lg, sg, sc, own, i, layer, e, token, offload, off_miss, by_h,
                    by_l, L, E, nl, ng, nc, nx, nv, nk, n_stg,
                )  # fmt: skip
            _forget_need(sc, n_need, layer)
            n_pins, n_stg, nx = _drop_stale(pl, ev, ca, lg, sg, own, pins, i, layer, E, n_pins, n_stg, nx)
            if not pf.prefetching:
                continue
            n_props = _f_propose(pfs, fs, layer, a, b, kind)
            if n_pins + n_props > pins.shape[0]:  # room for a pin per proposal, here: a check (and the owner's
                # reference count, atomic) once a step, not once a copy
                pins_own[0] = _grow(pins_own[0], n_pins + n_props, n_pins)
                pins = _borrowed(pins_own[0])
            nl, nv, nk, n_pins, n_stg = _issue(
                pl, ev, pf, cp, ca, lg, sg, sc, fs, own, pins, i, layer, pw, n_props, L, E, nl, nv, nk,
                n_pins, n_stg,
            )  # fmt: skip
    if POLICY == OWN:
        st[OVERFLOW] = _p_overflow(own)
    bd.cls_n[HIGH] += n_high
    bd.cls_n[LOW] += n_low
    bd.cls_n[SKIP] += n_sel - n_high - n_low
    state.counts[0], state.counts[1] = n_stg, n_pins
    _keep(scratch)
    return Out(
        loads=tabs[0][:nl],
        gpu=tabs[1][:ng],
        cpu=tabs[2][:nc],
        cancel=tabs[3][:nx],
        evicted=tabs[4][:nv],
        kept=tabs[5][:nk],
        served=state.served,
        mass=state.mass,
        st=state.st,
        pins=pins_own[0],
        logs=Logs(tabs[0], tabs[1], tabs[2], tabs[3], tabs[4], tabs[5]),
    )
