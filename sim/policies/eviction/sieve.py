"""SIEVE (Zhang et al., NSDI'24), as libCacheSim implements it (libCacheSim/cache/eviction/Sieve.c;
checked against its ``libcachesim.Sieve`` in tests/test_libcachesim.py).

One FIFO queue, new copies at its head, and a hand that starts at the tail and moves towards the head,
wrapping to the tail. A hit sets the copy's visited bit. To evict, the hand clears the bit of every
visited copy it passes and stops at the first unvisited one, which leaves; the hand stays where that
copy was (at the next newer copy). Copies are never moved, so a hit costs one bit.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hobbit.sim.policies.base import CacheView, Hooked, Pool


@dataclass
class _Sieve:
    newer: dict = field(default_factory=dict)  # slot -> the next newer slot (None: the head)
    older: dict = field(default_factory=dict)  # slot -> the next older slot (None: the tail)
    visited: dict = field(default_factory=dict)
    head: int | None = None  # newest
    tail: int | None = None  # oldest
    hand: int | None = None  # None: start from the tail

    def push(self, slot: int) -> None:
        self.newer[slot], self.older[slot] = None, self.head
        if self.head is not None:
            self.newer[self.head] = slot
        self.head = slot
        if self.tail is None:
            self.tail = slot
        self.visited[slot] = False

    def unlink(self, slot: int) -> None:
        n, o = self.newer.pop(slot), self.older.pop(slot)
        del self.visited[slot]
        if n is None:
            self.head = o
        else:
            self.older[n] = o
        if o is None:
            self.tail = n
        else:
            self.newer[o] = n


class Sieve(Hooked):
    """Evict the first unvisited copy at or after the hand."""

    name = "sieve"

    def new_state(self, capacity: int) -> _Sieve:
        return _Sieve()

    def on_insert(self, pool: Pool, region: range, slot: int) -> None:
        self.state(pool, region).push(slot)

    def on_hit(self, pool: Pool, region: range, slot: int) -> None:
        self.state(pool, region).visited[slot] = True

    def slots(self, pool: Pool, region: range) -> set[int]:
        return set(self.state(pool, region).visited)

    def to_evict(self, pool: Pool, view: CacheView, region: range) -> int:
        st, pinned = self.state(pool, region), pool.pinned
        if st.tail is None or all(pinned[s] for s in st.visited):
            return -1
        s = st.tail if st.hand is None else st.hand
        while st.visited[s] or pinned[s]:  # a pinned copy is passed over, its bit kept
            if not pinned[s]:
                st.visited[s] = False
            s = st.newer[s]
            if s is None:
                s = st.tail
        st.hand = st.newer[s]
        st.unlink(s)
        return s
