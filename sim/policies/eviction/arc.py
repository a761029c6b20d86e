"""ARC, the Adaptive Replacement Cache (Megiddo and Modha, FAST'03), as libCacheSim implements it
(libCacheSim/cache/eviction/ARC.c; checked against its ``libcachesim.ARC`` in tests/test_libcachesim.py).

Two LRU lists of cached copies, L1 (seen once since it entered) and L2 (seen again), and two ghost
lists of the keys they evicted, B1 and B2, each up to the cache's size. A miss found in B1 moves the
target ``p`` (L1's share) up by max(|B2| / |B1|, 1), one found in B2 moves it down by max(|B1| / |B2|,
1); the copy then enters L2, any other miss enters L1, and a hit moves the copy to L2's head.
REPLACE evicts L1's tail into B1 when L1 is non-empty and larger than ``p`` (or equal to it on a B2
miss), or when L2 is empty; otherwise L2's tail into B2. A miss in no list first trims the ghosts
(paper case IV): L1 + B1 full, B1's oldest leaves (or, B1 empty, L1's tail leaves without a ghost);
all four lists at twice the size, B2's oldest leaves.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from hobbit.sim.policies.base import CacheView, Hooked, Key, Pool, first_evictable


@dataclass
class _ARC:
    capacity: int
    p: float = 0.0
    l1: OrderedDict = field(default_factory=OrderedDict)  # slot -> None, oldest first
    l2: OrderedDict = field(default_factory=OrderedDict)
    b1: OrderedDict = field(default_factory=OrderedDict)  # key -> None, oldest first
    b2: OrderedDict = field(default_factory=OrderedDict)
    ghost_hit: int = 0  # 1: this miss was in B1, 2: in B2, 0: in neither


class ARC(Hooked):
    """Evict by ARC's REPLACE: the tail of L1 or of L2, whichever ``p`` says is over its share."""

    name = "arc"

    def new_state(self, capacity: int) -> _ARC:
        return _ARC(capacity)

    def on_miss(self, pool: Pool, region: range, key: Key) -> None:
        st = self.state(pool, region)
        st.ghost_hit = 0
        if key in st.b1:
            st.ghost_hit = 1
            st.p = min(st.p + max(len(st.b2) / len(st.b1), 1.0), st.capacity)
            del st.b1[key]
        elif key in st.b2:
            st.ghost_hit = 2
            st.p = max(st.p - max(len(st.b1) / len(st.b2), 1.0), 0.0)
            del st.b2[key]

    def on_insert(self, pool: Pool, region: range, slot: int) -> None:
        st = self.state(pool, region)
        (st.l2 if st.ghost_hit else st.l1)[slot] = None
        st.ghost_hit = 0

    def on_hit(self, pool: Pool, region: range, slot: int) -> None:
        st = self.state(pool, region)
        if slot in st.l1:
            del st.l1[slot]
            st.l2[slot] = None
        else:
            st.l2.move_to_end(slot)

    def _evict_from(self, pool: Pool, lst: OrderedDict, ghost: OrderedDict | None) -> int:
        slot = first_evictable(lst, pool)
        if slot >= 0:
            del lst[slot]
            if ghost is not None:
                ghost[(pool.layer[slot], pool.expert[slot])] = None
        return slot

    def _replace(self, pool: Pool, st: _ARC) -> int:
        n1 = len(st.l1)
        from_l1 = (n1 > 0 and (n1 > st.p or (n1 == st.p and st.ghost_hit == 2))) or not st.l2
        first, second = ((st.l1, st.b1), (st.l2, st.b2)) if from_l1 else ((st.l2, st.b2), (st.l1, st.b1))
        slot = self._evict_from(pool, *first)
        return slot if slot >= 0 else self._evict_from(pool, *second)  # every copy of that list pinned

    def slots(self, pool: Pool, region: range) -> set[int]:
        st = self.state(pool, region)
        return set(st.l1) | set(st.l2)

    def to_evict(self, pool: Pool, view: CacheView, region: range) -> int:
        st = self.state(pool, region)
        if not st.ghost_hit:  # case IV: trim the ghosts
            if len(st.l1) + len(st.b1) + 1 > st.capacity:
                if st.b1:
                    st.b1.popitem(last=False)
                else:
                    slot = self._evict_from(pool, st.l1, None)
                    if slot >= 0:
                        return slot
            elif len(st.l1) + len(st.b1) + len(st.l2) + len(st.b2) >= 2 * st.capacity and st.b2:
                st.b2.popitem(last=False)
        return self._replace(pool, st)
