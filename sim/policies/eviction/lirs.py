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

from hobbit.sim.policies.base import CacheView, Hooked, Key, Pool

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


class LIRS(Hooked):
    """Evict Q's oldest resident HIR copy, after libCacheSim's LIR/HIR bookkeeping for the request."""

    name = "lirs"

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
