"""S3-FIFO (Yang et al., SOSP'23), as libCacheSim implements it (libCacheSim/cache/eviction/S3FIFO.c at 035d832;
checked against its ``libcachesim.S3FIFO`` in tests/test_libcachesim.py).

Three FIFO queues: a small one S (``small_ratio`` of the slots), a main one M (the rest, its size) and a ghost G
of keys evicted from S (``ghost_ratio`` of the slots). A miss whose key is in G enters M, any other S (until the cache first evicts, M when S is full).
A hit adds one to the copy's count. To evict: while M is over its size or S is empty, M's oldest goes
back to M's head with its count min(count, 3) - 1 if it is above 0, else leaves; otherwise S's oldest
moves to M (count reset) if used ``move_threshold`` times or more, else leaves into G.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple

import numpy as np

from hobbit.sim.policies import lists
from hobbit.sim.policies.base import CacheView, Hooked, Key, PolicyInputs, Pool
from hobbit.sim.policies.compiled import EXPERT, LAYER, PINNED, Compiled, Space, kernel


@dataclass(frozen=True)
class S3FIFOKnobs:
    """``system.cache.s3fifo``: S3-FIFO's queue sizes and promotion threshold, at the paper's and libCacheSim's
    defaults (S3FIFO.c DEFAULT_CACHE_PARAMS; the ``libcachesim.S3FIFO`` binding: small 0.1, ghost 0.9, threshold 2)."""

    LIMITS: ClassVar[dict[str, str]] = {"small_ratio": "(0,1)", "ghost_ratio": ">=0", "move_threshold": ">=1"}

    small_ratio: float = 0.1
    """The small FIFO queue S's share of the slots (at least one slot)."""
    ghost_ratio: float = 0.9
    """The ghost queue G's size, in keys, over the slots."""
    move_threshold: int = 2
    """Uses in S (after the one that loaded it) that earn a copy a place in the main queue M."""


@dataclass
class _S3:
    small_cap: int
    main_cap: int
    ghost_cap: int
    small: OrderedDict = field(default_factory=OrderedDict)  # slot -> uses since entering, oldest first
    main: OrderedDict = field(default_factory=OrderedDict)
    ghost: OrderedDict = field(default_factory=OrderedDict)  # key -> None, oldest first
    ghost_hit: bool = False
    has_evicted: bool = False  # until the first eviction, a copy S has no room for enters M


# Compiled: the queues' offsets in ``ends`` (``policies.lists``: head, tail, length each; numpy ints, see there), then
# this miss's ghost hit and whether the region has evicted
SMALL, MAIN, GHOST = np.int64(0), np.int64(3), np.int64(6)
GHOST_HIT, EVICTED = 9, 10
NEXT, PREV, USES = 0, 1, 2  # rows of ``slots``: S's and M's links, a copy's count


class S3State(NamedTuple):
    slots: Any  # [NEXT / PREV / USES, pool, slot] int64
    ends: Any  # [pool, region, 11] int64
    ghosts: Any  # [NEXT / PREV / in G, pool, key] int64: G's links, and whether a key is in it
    knobs: Any  # [3]: small_ratio, ghost_ratio, move_threshold
    experts: int  # E: a key is layer * E + expert


def s3fifo_state(space: Space) -> S3State:
    k = space.knobs or S3FIFOKnobs()
    ends = np.zeros((2, space.capacity.shape[1], 11), np.int64)
    for q in (SMALL, MAIN, GHOST):
        ends[:, :, q + lists.Q_HEAD], ends[:, :, q + lists.Q_TAIL] = -1, -1
    return S3State(
        np.zeros((3, 2, max(space.rows, 1)), np.int64),
        ends,
        np.zeros((3, 2, space.layers * space.experts), np.int64),
        np.array([k.small_ratio, k.ghost_ratio, k.move_threshold], np.float64),
        space.experts,
    )


@kernel
def caps(capacity, knobs):
    small = int(capacity * knobs[0])
    return small, capacity - small, int(capacity * knobs[1])


@kernel
def evict_main(st, pool, pr, g):
    sl, ends = st.slots, st.ends
    pin = pool[pr, :, PINNED]
    for _ in range(4 * ends[pr, g, MAIN + lists.Q_LEN] + 1):  # counts fall to 0 within three rounds
        x = lists.q_first_unpinned(sl[NEXT], ends, pin, pr, g, MAIN)
        if x < 0:
            return -1
        lists.q_remove(sl[NEXT], sl[PREV], ends, pr, g, MAIN, x)
        uses = sl[USES, pr, x]
        if uses < 1:
            return x
        sl[USES, pr, x] = min(uses, 3) - 1
        lists.q_push(sl[NEXT], sl[PREV], ends, pr, g, MAIN, x)
    return -1


@kernel
def evict_small(st, pool, pr, g, capacity):
    sl, ends, gh, knobs = st.slots, st.ends, st.ghosts, st.knobs
    pin = pool[pr, :, PINNED]
    while True:
        x = lists.q_first_unpinned(sl[NEXT], ends, pin, pr, g, SMALL)
        if x < 0:
            return -1
        lists.q_remove(sl[NEXT], sl[PREV], ends, pr, g, SMALL, x)
        if sl[USES, pr, x] >= knobs[2]:  # used enough in S: into M, its count reset
            sl[USES, pr, x] = 0
            lists.q_push(sl[NEXT], sl[PREV], ends, pr, g, MAIN, x)
            continue
        ghost_cap = caps(capacity, knobs)[2]
        if ghost_cap > 0:  # into the ghost, its oldest leaving when it is full
            key = pool[pr, x, LAYER] * st.experts + pool[pr, x, EXPERT]
            if not gh[2, pr, key]:
                if ends[pr, g, GHOST + lists.Q_LEN] >= ghost_cap:
                    old = ends[pr, g, GHOST + lists.Q_HEAD]
                    lists.q_remove(gh[0], gh[1], ends, pr, g, GHOST, old)
                    gh[2, pr, old] = 0
                lists.q_push(gh[0], gh[1], ends, pr, g, GHOST, key)
                gh[2, pr, key] = 1
        return x


@kernel
def s3fifo_evict(st, pool, pr, g, r0, r1):
    """``S3FIFO.to_evict``: M's oldest unused copy while M is over its size or S is empty, else S's oldest unused."""
    ends = st.ends
    ends[pr, g, EVICTED] = 1
    capacity = r1 - r0
    main_cap = caps(capacity, st.knobs)[1]
    if ends[pr, g, MAIN + lists.Q_LEN] > main_cap or ends[pr, g, SMALL + lists.Q_LEN] == 0:
        x = evict_main(st, pool, pr, g)
        return x if x >= 0 else evict_small(st, pool, pr, g, capacity)
    x = evict_small(st, pool, pr, g, capacity)
    return x if x >= 0 else evict_main(st, pool, pr, g)


@kernel
def s3fifo_miss(st, pool, pr, g, r0, r1, key):
    ends, gh = st.ends, st.ghosts
    ends[pr, g, GHOST_HIT] = gh[2, pr, key]
    if gh[2, pr, key]:
        lists.q_remove(gh[0], gh[1], ends, pr, g, GHOST, key)
        gh[2, pr, key] = 0


@kernel
def s3fifo_insert(st, pool, pr, g, r0, r1, slot):
    sl, ends = st.slots, st.ends
    small_cap = caps(r1 - r0, st.knobs)[0]
    to_main = ends[pr, g, GHOST_HIT] != 0 or (
        ends[pr, g, EVICTED] == 0 and ends[pr, g, SMALL + lists.Q_LEN] >= small_cap
    )
    which = MAIN if to_main else SMALL
    sl[USES, pr, slot] = 0
    lists.q_push(sl[NEXT], sl[PREV], ends, pr, g, which, slot)
    ends[pr, g, GHOST_HIT] = 0


@kernel
def s3fifo_hit(st, pool, pr, g, slot):
    st.slots[USES, pr, slot] += 1


class S3FIFO(Hooked):
    """Evict S's oldest unused copy into the ghost, or M's oldest unused one (CLOCK-like, counts to 3)."""

    name = "s3fifo"
    Knobs = S3FIFOKnobs
    compiled = Compiled(evict=s3fifo_evict, insert=s3fifo_insert, hit=s3fifo_hit, miss=s3fifo_miss, state=s3fifo_state)

    def __init__(self, knobs: S3FIFOKnobs | None = None, inputs: PolicyInputs | None = None) -> None:
        super().__init__(knobs, inputs)
        self.k = knobs or S3FIFOKnobs()

    def new_state(self, capacity: int) -> _S3:
        # M's size as libCacheSim sets it. libCacheSim also refuses a copy S cannot hold (S under 2 slots, a
        # cache under 20): it would keep nothing. Here S is never refused, so a small cache still works.
        small = int(capacity * self.k.small_ratio)
        return _S3(small, capacity - small, int(capacity * self.k.ghost_ratio))

    def on_miss(self, pool: Pool, region: range, key: Key) -> None:
        st = self.state(pool, region)
        st.ghost_hit = key in st.ghost
        if st.ghost_hit:
            del st.ghost[key]

    def on_insert(self, pool: Pool, region: range, slot: int) -> None:
        st = self.state(pool, region)
        to_main = st.ghost_hit or (not st.has_evicted and len(st.small) >= st.small_cap)
        (st.main if to_main else st.small)[slot] = 0
        st.ghost_hit = False

    def on_hit(self, pool: Pool, region: range, slot: int) -> None:
        st = self.state(pool, region)
        q = st.small if slot in st.small else st.main
        q[slot] += 1

    def _to_ghost(self, pool: Pool, st: _S3, slot: int) -> None:
        if st.ghost_cap <= 0:
            return
        key = (pool.layer[slot], pool.expert[slot])
        if key not in st.ghost:
            if len(st.ghost) >= st.ghost_cap:
                st.ghost.popitem(last=False)
            st.ghost[key] = None

    def _evict_main(self, pool: Pool, st: _S3) -> int:
        pinned, main = pool.pinned, st.main
        for _ in range(4 * len(main) + 1):  # counts fall to 0 within three rounds
            slot = next((s for s in main if not pinned[s]), -1)
            if slot < 0:
                return -1
            uses = main.pop(slot)
            if uses < 1:
                return slot
            main[slot] = min(uses, 3) - 1
        return -1

    def _evict_small(self, pool: Pool, st: _S3) -> int:
        pinned, small = pool.pinned, st.small
        while True:
            slot = next((s for s in small if not pinned[s]), -1)
            if slot < 0:
                return -1
            uses = small.pop(slot)
            if uses >= self.k.move_threshold:
                st.main[slot] = 0
                continue
            self._to_ghost(pool, st, slot)
            return slot

    def slots(self, pool: Pool, region: range) -> set[int]:
        st = self.state(pool, region)
        return set(st.small) | set(st.main)

    def to_evict(self, pool: Pool, view: CacheView, region: range) -> int:
        st = self.state(pool, region)
        st.has_evicted = True
        if len(st.main) > st.main_cap or not st.small:
            slot = self._evict_main(pool, st)
            return slot if slot >= 0 else self._evict_small(pool, st)
        slot = self._evict_small(pool, st)  # -1: S emptied into M (or is all pinned): M evicts
        return slot if slot >= 0 else self._evict_main(pool, st)
