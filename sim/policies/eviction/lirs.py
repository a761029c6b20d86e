"""LIRS, Low Inter-reference Recency Set (Jiang and Zhang, SIGMETRICS'02), as libCacheSim implements it
(libCacheSim/cache/eviction/LIRS.c; checked against its ``libcachesim.LIRS`` in tests/test_libcachesim.py).

Copies are LIR (low inter-reference recency: kept) or HIR (high: the first to leave). The stack S holds
the LIR copies and HIR keys, resident or not, by recency; the queue Q the resident HIR copies, of which
at most ``hirs_limit`` (1 % of the slots, at least one) are kept; the rest of the slots hold LIR copies.
A key whose recency in S is below the oldest LIR's becomes LIR when used again, demoting the oldest LIR
to Q; the copy that leaves the cache is always Q's oldest; S is pruned so that it ends in a LIR copy,
and holds at most twice the slots (the oldest non-resident keys leave first). libCacheSim's order of
these steps is followed step by step, so the same requests give the same hits.

Departures, only where libCacheSim has no counterpart: Q's oldest unpinned copy leaves when its oldest
is a pinned prefetch, and where Q has none, S's oldest unpinned LIR copy.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from hobbit.sim.policies import lists
from hobbit.sim.policies.base import CacheView, Hooked, Key, Pool
from hobbit.sim.policies.compiled import EXPERT, LAYER, PINNED, Compiled, Space, kernel

LIR, RESIDENT = 0, 1  # flags of an S entry


@dataclass
class _LIRS:
    capacity: int
    hirs_limit: int
    lirs_limit: int
    s: OrderedDict = field(default_factory=OrderedDict)  # key -> [is LIR, resident], oldest first
    q: OrderedDict = field(default_factory=OrderedDict)  # resident HIR keys, oldest first
    nh: OrderedDict = field(default_factory=OrderedDict)  # non-resident HIR keys of S, oldest first
    lirs: int = 0
    hirs: int = 0
    slot_of: dict = field(default_factory=dict)  # resident key -> slot
    victims: list = field(default_factory=list)  # keys it counted out that the cache still holds, oldest first
    pinned: list[int] = field(default_factory=list)  # the pool's pinned list, while an event is handled

    def is_pinned(self, key: Key) -> bool:
        slot = self.slot_of.get(key)
        return slot is not None and bool(self.pinned[slot])


# Compiled: per key (``lk[field, pool, key]``): its ordered lists S, Q, NH (non-resident HIR keys of S) and H (the keys
# it holds, in the order ``slot_of`` got them), each a next and a previous link; S's flags, the lists a key is in
# (IN_V: how many times it is in V), its slot (-1: none). ``victims`` (V) may hold a key more than once: its entries
# (``ve[key / next / previous, pool, entry]``) come from a free list per pool (``ve_free``: its heads, then a flag set
# when it ran out: the reference walk then decides, ``lirs_overflow``). Per region (``lr``): each list's head,
# tail and length (``policies.lists``), its LIR and HIR counts, capacity and limits.
S_NXT, S_PRV, Q_NXT, Q_PRV, N_NXT, N_PRV, H_NXT, H_PRV, V_NXT, V_PRV = range(10)
IN_S, S_LIR, S_RES, IN_Q, IN_N, SLOT_OF, IN_V = range(10, 17)
N_LK = 17
L_S, L_Q, L_N, L_H, L_V = np.int64(0), np.int64(3), np.int64(6), np.int64(9), np.int64(12)
L_LIRS, L_HIRS, L_CAP, L_HLIM, L_LLIM = 15, 16, 17, 18, 19
N_LR = 20
# V's entries per (layer, expert) key: beyond, the compiled walk hands the run to the reference walk (``overflow``;
# V may hold a key more than once; no trace here has come near)
VICTIMS_PER_KEY = 4


class LIRSState(NamedTuple):
    lk: Any  # [N_LK, pool, key] int64
    lr: Any  # [pool, region, N_LR] int64
    ve: Any  # [3, pool, entry] int64
    ve_free: Any  # [3] int64
    experts: int  # E: a key is layer * E + expert


def lirs_state(space: Space) -> LIRSState:
    keys = space.layers * space.experts
    lk = np.zeros((N_LK, 2, keys), np.int64)
    lk[SLOT_OF] = -1
    n_ve = max(VICTIMS_PER_KEY * keys, 1)
    ve = np.zeros((3, 2, n_ve), np.int64)
    ve[1, :, :-1] = np.arange(1, n_ve)
    ve[1, :, -1] = -1
    cap = space.capacity
    lr = np.zeros((2, cap.shape[1], N_LR), np.int64)
    for x in (L_S, L_Q, L_N, L_H, L_V):
        lr[:, :, x + lists.Q_HEAD], lr[:, :, x + lists.Q_TAIL] = -1, -1
    lr[:, :, L_CAP] = cap
    for pr in range(2):
        for g in range(cap.shape[1]):
            lr[pr, g, L_HLIM] = max(1, int(0.01 * cap[pr, g]))
            lr[pr, g, L_LLIM] = cap[pr, g] - lr[pr, g, L_HLIM]
    return LIRSState(lk, lr, ve, np.zeros(3, np.int64), space.experts)


@kernel
def _l_add(lk, lr, pr, g, lst, x):
    """Key ``x`` at the newest end of LIRS list ``lst`` (its L_* offset; links 2 * lst // 3, membership flag)."""
    lists.q_push(lk[2 * (lst // 3)], lk[2 * (lst // 3) + 1], lr, pr, g, lst, x)


@kernel
def _l_del(lk, lr, pr, g, lst, x):
    lists.q_remove(lk[2 * (lst // 3)], lk[2 * (lst // 3) + 1], lr, pr, g, lst, x)


@kernel
def _l_pinned(lk, pin, pr, key):
    s = lk[SLOT_OF, pr, key]
    return s >= 0 and pin[s] != 0


@kernel
def _l_s_del(lk, lr, pr, g, key):
    _l_del(lk, lr, pr, g, L_S, key)
    lk[IN_S, pr, key] = 0


@kernel
def _l_s_add(lk, lr, pr, g, key, lir):
    _l_add(lk, lr, pr, g, L_S, key)
    lk[IN_S, pr, key], lk[S_LIR, pr, key], lk[S_RES, pr, key] = 1, lir, 1


@kernel
def _l_prune(lk, lr, pr, g):
    while lr[pr, g, L_S + lists.Q_LEN] > 1:
        key = lr[pr, g, L_S + lists.Q_HEAD]
        if lk[S_LIR, pr, key]:
            break
        if not lk[S_RES, pr, key] and lk[IN_N, pr, key]:
            _l_del(lk, lr, pr, g, L_N, key)
            lk[IN_N, pr, key] = 0
        _l_s_del(lk, lr, pr, g, key)


@kernel
def _v_append(st, pr, g, key):
    """``victims.append(key)``: an entry from the pool's free list at V's newest end (none left: the flag)."""
    ve, free = st.ve, st.ve_free
    x = free[pr]
    if x < 0:
        free[2] = 1
        return
    free[pr] = ve[1, pr, x]
    ve[0, pr, x] = key
    lists.q_push(ve[1], ve[2], st.lr, pr, g, L_V, x)
    st.lk[IN_V, pr, key] += 1


@kernel
def _v_drop(st, pr, g, x):
    """Entry ``x`` leaves V, back to the free list."""
    ve, free = st.ve, st.ve_free
    lists.q_remove(ve[1], ve[2], st.lr, pr, g, L_V, x)
    st.lk[IN_V, pr, ve[0, pr, x]] -= 1
    ve[1, pr, x] = free[pr]
    free[pr] = x


@kernel
def _l_evict_hir(st, lk, lr, pin, pr, g):
    key = lr[pr, g, L_Q + lists.Q_HEAD]
    while key >= 0 and _l_pinned(lk, pin, pr, key):
        key = lk[Q_NXT, pr, key]
    if key < 0:
        return False
    _l_del(lk, lr, pr, g, L_Q, key)
    lk[IN_Q, pr, key] = 0
    lr[pr, g, L_HIRS] -= 1
    if lk[IN_S, pr, key]:
        lk[S_RES, pr, key] = 0
        if not lk[IN_N, pr, key]:
            _l_add(lk, lr, pr, g, L_N, key)
            lk[IN_N, pr, key] = 1
    _v_append(st, pr, g, key)
    return True


@kernel
def _l_evict_lir(st, lk, lr, pin, pr, g):
    if lr[pr, g, L_S + lists.Q_LEN] == 0:
        return False
    key = lr[pr, g, L_S + lists.Q_HEAD]  # S's bottom
    _l_s_del(lk, lr, pr, g, key)
    lr[pr, g, L_LIRS] -= 1
    while lr[pr, g, L_HIRS] + 1 > lr[pr, g, L_HLIM]:
        if not _l_evict_hir(st, lk, lr, pin, pr, g):
            break
    if not lk[IN_Q, pr, key]:  # a resident HIR at S's bottom is in Q already, and keeps its place there
        _l_add(lk, lr, pr, g, L_Q, key)
        lk[IN_Q, pr, key] = 1
    lr[pr, g, L_HIRS] += 1
    _l_prune(lk, lr, pr, g)
    return True


@kernel
def _l_limit_stack(lk, lr, pr, g):
    while lr[pr, g, L_S + lists.Q_LEN] > 2 * lr[pr, g, L_CAP] and lr[pr, g, L_N + lists.Q_LEN]:
        key = lr[pr, g, L_N + lists.Q_HEAD]
        _l_del(lk, lr, pr, g, L_N, key)
        lk[IN_N, pr, key] = 0
        if lk[IN_S, pr, key]:
            _l_s_del(lk, lr, pr, g, key)


@kernel
def _l_find(st, lk, lr, pin, pr, g, key):
    """``LIRS._find``: True on a hit."""
    in_s, in_q = lk[IN_S, pr, key], lk[IN_Q, pr, key]
    if in_s:
        _l_del(lk, lr, pr, g, L_S, key)
        _l_add(lk, lr, pr, g, L_S, key)
    if in_q:
        _l_del(lk, lr, pr, g, L_Q, key)
        _l_add(lk, lr, pr, g, L_Q, key)
    if in_s:
        if lk[S_LIR, pr, key]:
            _l_prune(lk, lr, pr, g)
            return True
        if not lk[S_RES, pr, key]:
            return False
        if in_q:  # hit_RD_HIRinS: a resident HIR in S becomes LIR
            _l_del(lk, lr, pr, g, L_Q, key)
            lk[IN_Q, pr, key] = 0
            lr[pr, g, L_HIRS] -= 1
        while lr[pr, g, L_LIRS] + 1 > lr[pr, g, L_LLIM]:
            if not _l_evict_lir(st, lk, lr, pin, pr, g):
                break
        lk[S_LIR, pr, key] = 1
        lr[pr, g, L_LIRS] += 1
        return True
    if in_q:  # hit_RD_HIRinQ: back on S as a resident HIR
        while lr[pr, g, L_LIRS] + 1 > lr[pr, g, L_LLIM]:
            if not _l_evict_lir(st, lk, lr, pin, pr, g):
                break
        if lk[IN_S, pr, key]:
            lk[S_LIR, pr, key], lk[S_RES, pr, key] = 0, 1
        else:
            _l_s_add(lk, lr, pr, g, key, 0)
        return True
    return False


@kernel
def _l_make_room(st, lk, lr, pin, pr, g, key):
    """``LIRS._make_room``: LIRS_can_insert, then LIRS_evict while the cache is full."""
    was_in_s = lk[IN_S, pr, key]
    nonresident = was_in_s and not lk[S_LIR, pr, key] and not lk[S_RES, pr, key]
    if nonresident:
        while lr[pr, g, L_LIRS] + 1 > lr[pr, g, L_LLIM]:
            if not _l_evict_lir(st, lk, lr, pin, pr, g):
                break
        if lk[IN_N, pr, key]:
            _l_del(lk, lr, pr, g, L_N, key)
            lk[IN_N, pr, key] = 0
    elif (
        not was_in_s
        and not lk[IN_Q, pr, key]
        and lr[pr, g, L_LIRS] + 1 > lr[pr, g, L_LLIM]
        and lr[pr, g, L_HIRS] + 1 > lr[pr, g, L_HLIM]
    ):
        while lr[pr, g, L_HIRS] + 1 > lr[pr, g, L_HLIM]:
            if not _l_evict_hir(st, lk, lr, pin, pr, g):
                break
    while lr[pr, g, L_LIRS] + lr[pr, g, L_HIRS] + 1 > lr[pr, g, L_CAP]:
        before = lr[pr, g, L_LIRS] + lr[pr, g, L_HIRS]
        if nonresident:
            while lr[pr, g, L_HIRS] >= lr[pr, g, L_HLIM]:
                if not _l_evict_hir(st, lk, lr, pin, pr, g):
                    break
            _l_evict_lir(st, lk, lr, pin, pr, g)
        elif (
            not was_in_s
            and not lk[IN_Q, pr, key]
            and lr[pr, g, L_LIRS] + 1 > lr[pr, g, L_LLIM]
            and lr[pr, g, L_HIRS] + 1 > lr[pr, g, L_HLIM]
        ):
            _l_evict_hir(st, lk, lr, pin, pr, g)
        if lr[pr, g, L_LIRS] + lr[pr, g, L_HIRS] >= before:  # nothing could leave (every copy pinned)
            break


@kernel
def _l_insert(st, lk, lr, pr, g, key):
    if lk[IN_V, pr, key]:  # victims.remove(key): its first entry
        x = lr[pr, g, L_V + lists.Q_HEAD]
        while st.ve[0, pr, x] != key:
            x = st.ve[1, pr, x]
        _v_drop(st, pr, g, x)
    if lk[IN_S, pr, key]:
        if not lk[S_LIR, pr, key] and not lk[S_RES, pr, key]:
            lk[S_LIR, pr, key], lk[S_RES, pr, key] = 1, 1
            lr[pr, g, L_LIRS] += 1
    elif not lk[IN_Q, pr, key]:
        if lr[pr, g, L_LIRS] + 1 <= lr[pr, g, L_LLIM]:
            _l_s_add(lk, lr, pr, g, key, 1)
            lr[pr, g, L_LIRS] += 1
        else:
            _l_s_add(lk, lr, pr, g, key, 0)
            _l_add(lk, lr, pr, g, L_Q, key)
            lk[IN_Q, pr, key] = 1
            lr[pr, g, L_HIRS] += 1


@kernel
def _l_forget(lk, lr, pr, g, key):
    """``LIRS._forget`` (LIRS_remove): ``key`` leaves the cache and the policy."""
    if lk[IN_S, pr, key]:
        lir, res = lk[S_LIR, pr, key], lk[S_RES, pr, key]
        _l_s_del(lk, lr, pr, g, key)
        if lir:
            lr[pr, g, L_LIRS] -= 1
            _l_prune(lk, lr, pr, g)
        elif not res and lk[IN_N, pr, key]:
            _l_del(lk, lr, pr, g, L_N, key)
            lk[IN_N, pr, key] = 0
    if lk[IN_Q, pr, key]:
        _l_del(lk, lr, pr, g, L_Q, key)
        lk[IN_Q, pr, key] = 0
        lr[pr, g, L_HIRS] -= 1
    if lk[SLOT_OF, pr, key] >= 0:
        _l_del(lk, lr, pr, g, L_H, key)
        lk[SLOT_OF, pr, key] = -1


@kernel
def lirs_miss(st, pool, pr, g, r0, r1, key):
    lk, lr, pin = st.lk, st.lr, pool[pr, :, PINNED]
    if _l_find(st, lk, lr, pin, pr, g, key):  # resident here but not in the cache (a copy it could not keep)
        _l_forget(lk, lr, pr, g, key)
    _l_make_room(st, lk, lr, pin, pr, g, key)


@kernel
def lirs_insert(st, pool, pr, g, r0, r1, slot):
    lk, lr = st.lk, st.lr
    key = pool[pr, slot, LAYER] * st.experts + pool[pr, slot, EXPERT]
    if lk[SLOT_OF, pr, key] < 0:
        _l_add(lk, lr, pr, g, L_H, key)
    lk[SLOT_OF, pr, key] = slot
    _l_insert(st, lk, lr, pr, g, key)
    _l_limit_stack(lk, lr, pr, g)


@kernel
def lirs_hit(st, pool, pr, g, slot):
    lk, lr, pin = st.lk, st.lr, pool[pr, :, PINNED]
    key = pool[pr, slot, LAYER] * st.experts + pool[pr, slot, EXPERT]
    if not _l_find(st, lk, lr, pin, pr, g, key):  # a copy it had counted out: back in, as a miss would bring it
        _l_make_room(st, lk, lr, pin, pr, g, key)
        _l_insert(st, lk, lr, pr, g, key)
    _l_limit_stack(lk, lr, pr, g)


@kernel
def lirs_evict(st, pool, pr, g, r0, r1):
    """``LIRS.to_evict``: the oldest counted-out copy the cache still holds, else its own choice (Q's oldest held, S's
    oldest held LIR, the oldest held), forgotten."""
    lk, lr, pin = st.lk, st.lr, pool[pr, :, PINNED]
    x = lr[pr, g, L_V + lists.Q_HEAD]
    while x >= 0:
        key = st.ve[0, pr, x]
        slot = lk[SLOT_OF, pr, key]
        if slot >= 0 and not pin[slot]:
            _v_drop(st, pr, g, x)
            _l_del(lk, lr, pr, g, L_H, key)
            lk[SLOT_OF, pr, key] = -1
            return slot
        x = st.ve[1, pr, x]
    key = lr[pr, g, L_Q + lists.Q_HEAD]
    while key >= 0 and (lk[SLOT_OF, pr, key] < 0 or pin[lk[SLOT_OF, pr, key]]):
        key = lk[Q_NXT, pr, key]
    if key < 0:
        key = lr[pr, g, L_S + lists.Q_HEAD]
        while key >= 0 and not (lk[S_LIR, pr, key] and lk[SLOT_OF, pr, key] >= 0 and not pin[lk[SLOT_OF, pr, key]]):
            key = lk[S_NXT, pr, key]
    if key < 0:
        key = lr[pr, g, L_H + lists.Q_HEAD]
        while key >= 0 and pin[lk[SLOT_OF, pr, key]]:
            key = lk[H_NXT, pr, key]
    if key < 0:
        return -1
    slot = lk[SLOT_OF, pr, key]
    _l_forget(lk, lr, pr, g, key)
    return slot


@kernel
def lirs_overflow(st):
    """Whether V ran out of entries (the reference walk then decides the run)."""
    return st.ve_free[2]


class LIRS(Hooked):
    """Evict Q's oldest resident HIR copy, after libCacheSim's LIR/HIR bookkeeping for the request."""

    name = "lirs"
    compiled = Compiled(
        evict=lirs_evict,
        insert=lirs_insert,
        hit=lirs_hit,
        miss=lirs_miss,
        overflow=lirs_overflow,
        state=lirs_state,
    )

    def new_state(self, capacity: int) -> _LIRS:
        hirs = max(1, int(0.01 * capacity))
        return _LIRS(capacity, hirs, capacity - hirs)

    # --------------------------------------------------------------- libCacheSim's internal steps

    def _prune(self, st: _LIRS) -> None:
        while len(st.s) > 1:
            key, flags = next(iter(st.s.items()))
            if flags[LIR]:
                break
            if not flags[RESIDENT]:
                st.nh.pop(key, None)
            del st.s[key]

    def _evict_hir(self, st: _LIRS) -> bool:
        key = next((k for k in st.q if not st.is_pinned(k)), None)
        if key is None:
            return False
        del st.q[key]
        st.hirs -= 1
        flags = st.s.get(key)
        if flags is not None:
            flags[RESIDENT] = False
            st.nh[key] = None
        st.victims.append(key)
        return True

    def _evict_lir(self, st: _LIRS) -> bool:
        if not st.s:
            return False
        key = next(iter(st.s))  # S's bottom
        del st.s[key]
        st.lirs -= 1
        while st.hirs + 1 > st.hirs_limit:
            if not self._evict_hir(st):
                break
        st.q[key] = None
        st.hirs += 1
        self._prune(st)
        return True

    def _limit_stack(self, st: _LIRS) -> None:
        while len(st.s) > 2 * st.capacity and st.nh:
            key, _ = st.nh.popitem(last=False)
            st.s.pop(key, None)

    def _find(self, st: _LIRS, key: Key) -> bool:
        """LIRS_find with updates: True on a hit."""
        in_s, in_q = key in st.s, key in st.q
        if in_s:
            st.s.move_to_end(key)
        if in_q:
            st.q.move_to_end(key)
        if in_s:
            flags = st.s[key]
            if flags[LIR]:
                self._prune(st)
                return True
            if not flags[RESIDENT]:
                return False
            if in_q:  # hit_RD_HIRinS: a resident HIR in S becomes LIR
                del st.q[key]
                st.hirs -= 1
            while st.lirs + 1 > st.lirs_limit:
                if not self._evict_lir(st):
                    break
            flags[LIR] = True
            st.lirs += 1
            return True
        if in_q:  # hit_RD_HIRinQ: back on S as a resident HIR
            while st.lirs + 1 > st.lirs_limit:
                if not self._evict_lir(st):
                    break
            st.s[key] = [False, True]
            return True
        return False

    def _make_room(self, st: _LIRS, key: Key) -> None:
        """LIRS_can_insert, then LIRS_evict while the cache is full."""
        flags = st.s.get(key)
        nonresident = flags is not None and not flags[LIR] and not flags[RESIDENT]
        if nonresident:
            while st.lirs + 1 > st.lirs_limit:
                if not self._evict_lir(st):
                    break
            st.nh.pop(key, None)
        elif flags is None and key not in st.q and st.lirs + 1 > st.lirs_limit and st.hirs + 1 > st.hirs_limit:
            while st.hirs + 1 > st.hirs_limit:
                if not self._evict_hir(st):
                    break
        while st.lirs + st.hirs + 1 > st.capacity:
            before = st.lirs + st.hirs
            if nonresident:
                while st.hirs >= st.hirs_limit:
                    if not self._evict_hir(st):
                        break
                self._evict_lir(st)
            elif flags is None and key not in st.q and st.lirs + 1 > st.lirs_limit and st.hirs + 1 > st.hirs_limit:
                self._evict_hir(st)
            if st.lirs + st.hirs >= before:  # nothing could leave (every copy pinned)
                break

    def _insert(self, st: _LIRS, key: Key) -> None:
        if key in st.victims:
            st.victims.remove(key)
        flags = st.s.get(key)
        if flags is not None and not flags[LIR] and not flags[RESIDENT]:
            flags[LIR] = flags[RESIDENT] = True
            st.lirs += 1
        elif flags is None and key not in st.q:
            if st.lirs + 1 <= st.lirs_limit:
                st.s[key] = [True, True]
                st.lirs += 1
            else:
                st.s[key] = [False, True]
                st.q[key] = None
                st.hirs += 1

    # --------------------------------------------------------------- the cache's events

    def on_miss(self, pool: Pool, region: range, key: Key) -> None:
        st = self.state(pool, region)
        st.pinned = pool.pinned
        if self._find(st, key):  # resident here but not in the cache (a copy it could not keep): forget it
            self._forget(st, key)
        self._make_room(st, key)

    def on_insert(self, pool: Pool, region: range, slot: int) -> None:
        st = self.state(pool, region)
        key = (pool.layer[slot], pool.expert[slot])
        st.slot_of[key] = slot
        self._insert(st, key)
        self._limit_stack(st)

    def on_hit(self, pool: Pool, region: range, slot: int) -> None:
        st = self.state(pool, region)
        st.pinned = pool.pinned
        key = (pool.layer[slot], pool.expert[slot])
        if not self._find(st, key):  # a copy it had counted out: back in, as a miss would bring it
            self._make_room(st, key)
            self._insert(st, key)
        self._limit_stack(st)

    def _forget(self, st: _LIRS, key: Key) -> None:
        """LIRS_remove: ``key`` leaves the cache and the policy."""
        flags = st.s.pop(key, None)
        if flags is not None and flags[LIR]:
            st.lirs -= 1
            self._prune(st)
        elif flags is not None and not flags[RESIDENT]:
            st.nh.pop(key, None)
        if key in st.q:
            del st.q[key]
            st.hirs -= 1
        st.slot_of.pop(key, None)

    def slots(self, pool: Pool, region: range) -> set[int]:
        return set(self.state(pool, region).slot_of.values())

    def to_evict(self, pool: Pool, view: CacheView, region: range) -> int:
        st = self.state(pool, region)
        st.pinned = pool.pinned
        for i, key in enumerate(st.victims):
            slot = st.slot_of.get(key)
            if slot is not None and not pool.pinned[slot]:
                del st.victims[i]
                del st.slot_of[key]
                return slot
        # the policy counted a slot free that the cache has not (copies it could not keep): its own choice
        held = st.slot_of
        key = next((k for k in st.q if k in held and not st.is_pinned(k)), None)
        if key is None:
            key = next((k for k, f in st.s.items() if f[LIR] and k in held and not st.is_pinned(k)), None)
        if key is None:
            key = next((k for k in held if not st.is_pinned(k)), None)
        if key is None:
            return -1
        slot = st.slot_of[key]
        self._forget(st, key)
        return slot
