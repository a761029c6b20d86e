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
from typing import ClassVar

from hobbit.sim.policies.base import CacheView, Hooked, Key, PolicyInputs, Pool


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


class S3FIFO(Hooked):
    """Evict S's oldest unused copy into the ghost, or M's oldest unused one (CLOCK-like, counts to 3)."""

    name = "s3fifo"
    Knobs = S3FIFOKnobs

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
