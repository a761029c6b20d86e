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
from typing import Any, NamedTuple

import numpy as np

from hobbit.sim.policies import lists
from hobbit.sim.policies.base import CacheView, Hooked, Key, Pool, first_evictable
from hobbit.sim.policies.compiled import EXPERT, LAYER, PINNED, Compiled, Space, kernel

# Compiled: the lists' offsets in ``ends`` (``policies.lists``: head, tail, length each; numpy ints, see there): L1
# and L2 of slots, B1 and B2 of keys; and this miss's ghost hit (1: in B1, 2: in B2)
L1, L2, B1, B2 = np.int64(0), np.int64(3), np.int64(6), np.int64(9)
GHOST_HIT = 12
NEXT, PREV, LIST = 0, 1, 2  # rows of ``slots`` and of ``ghosts``: links, the list a slot (L1 / L2) or key (1 / 2) is in


class ARCState(NamedTuple):
    slots: Any  # [NEXT / PREV / LIST, pool, slot] int64
    ends: Any  # [pool, region, 13] int64
    ghosts: Any  # [NEXT / PREV / LIST, pool, key] int64
    p: Any  # [pool, region]: the target size of L1
    capacity: Any  # [pool, region] int64
    experts: int  # E: a key is layer * E + expert


def arc_state(space: Space) -> ARCState:
    ends = np.zeros((2, space.capacity.shape[1], 13), np.int64)
    for q in (L1, L2, B1, B2):
        ends[:, :, q + lists.Q_HEAD], ends[:, :, q + lists.Q_TAIL] = -1, -1
    return ARCState(
        np.zeros((3, 2, max(space.rows, 1)), np.int64),
        ends,
        np.zeros((3, 2, space.layers * space.experts), np.int64),
        np.zeros(space.capacity.shape),
        space.capacity.astype(np.int64),
        space.experts,
    )


@kernel
def arc_miss(st, pool, pr, g, r0, r1, key):
    """``ARC.on_miss``: a key found in a ghost list moves the target p (B1 up, B2 down) and leaves the list."""
    ends, gh, p = st.ends, st.ghosts, st.p
    ends[pr, g, GHOST_HIT] = gh[LIST, pr, key]
    n1, n2 = ends[pr, g, B1 + lists.Q_LEN], ends[pr, g, B2 + lists.Q_LEN]
    if gh[LIST, pr, key] == 1:
        p[pr, g] = min(p[pr, g] + max(n2 / n1, 1.0), st.capacity[pr, g])
        lists.q_remove(gh[NEXT], gh[PREV], ends, pr, g, B1, key)
    elif gh[LIST, pr, key] == 2:
        p[pr, g] = max(p[pr, g] - max(n1 / n2, 1.0), 0.0)
        lists.q_remove(gh[NEXT], gh[PREV], ends, pr, g, B2, key)
    gh[LIST, pr, key] = 0


@kernel
def arc_insert(st, pool, pr, g, r0, r1, slot):
    sl, ends = st.slots, st.ends
    which = L2 if ends[pr, g, GHOST_HIT] else L1
    sl[LIST, pr, slot] = which
    lists.q_push(sl[NEXT], sl[PREV], ends, pr, g, which, slot)
    ends[pr, g, GHOST_HIT] = 0


@kernel
def arc_hit(st, pool, pr, g, slot):
    """``ARC.on_hit``: the copy moves to L2's newest end (from L1, or within L2)."""
    sl, ends = st.slots, st.ends
    lists.q_remove(sl[NEXT], sl[PREV], ends, pr, g, sl[LIST, pr, slot], slot)
    sl[LIST, pr, slot] = L2
    lists.q_push(sl[NEXT], sl[PREV], ends, pr, g, L2, slot)


@kernel
def evict_from(st, pool, pr, g, which, ghost):
    """``ARC._evict_from``: the oldest unpinned copy of list ``which`` leaves it (-1: none), its key entering the
    ghost list ``ghost`` (1: B1, 2: B2, 0: none)."""
    sl, ends, gh = st.slots, st.ends, st.ghosts
    x = lists.q_first_unpinned(sl[NEXT], ends, pool[pr, :, PINNED], pr, g, which)
    if x >= 0:
        lists.q_remove(sl[NEXT], sl[PREV], ends, pr, g, which, x)
        if ghost:
            key = pool[pr, x, LAYER] * st.experts + pool[pr, x, EXPERT]
            lists.q_push(gh[NEXT], gh[PREV], ends, pr, g, B1 if ghost == 1 else B2, key)
            gh[LIST, pr, key] = ghost
    return x


@kernel
def arc_evict(st, pool, pr, g, r0, r1):
    """``ARC.to_evict``: case IV's trim of the ghosts on a miss in no list, then REPLACE."""
    ends, gh = st.ends, st.ghosts
    cap = st.capacity[pr, g]
    n_l1, n_b1 = ends[pr, g, L1 + lists.Q_LEN], ends[pr, g, B1 + lists.Q_LEN]
    n_l2, n_b2 = ends[pr, g, L2 + lists.Q_LEN], ends[pr, g, B2 + lists.Q_LEN]
    if not ends[pr, g, GHOST_HIT]:
        if n_l1 + n_b1 + 1 > cap:
            if n_b1:
                old = ends[pr, g, B1 + lists.Q_HEAD]
                lists.q_remove(gh[NEXT], gh[PREV], ends, pr, g, B1, old)
                gh[LIST, pr, old] = 0
            else:
                x = evict_from(st, pool, pr, g, L1, 0)
                if x >= 0:
                    return x
        elif n_l1 + n_b1 + n_l2 + n_b2 >= 2 * cap and n_b2:
            old = ends[pr, g, B2 + lists.Q_HEAD]
            lists.q_remove(gh[NEXT], gh[PREV], ends, pr, g, B2, old)
            gh[LIST, pr, old] = 0
    n1 = ends[pr, g, L1 + lists.Q_LEN]
    p = st.p[pr, g]
    from_l1 = (n1 > 0 and (n1 > p or (n1 == p and ends[pr, g, GHOST_HIT] == 2))) or ends[pr, g, L2 + lists.Q_LEN] == 0
    first, second = (L1, L2) if from_l1 else (L2, L1)
    x = evict_from(st, pool, pr, g, first, 1 if first == L1 else 2)
    if x >= 0:
        return x
    return evict_from(st, pool, pr, g, second, 1 if second == L1 else 2)


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
    compiled = Compiled(evict=arc_evict, insert=arc_insert, hit=arc_hit, miss=arc_miss, state=arc_state)

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
