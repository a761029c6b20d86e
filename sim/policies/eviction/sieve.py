"""SIEVE (Zhang et al., NSDI'24), as libCacheSim implements it (libCacheSim/cache/eviction/Sieve.c;
checked against its ``libcachesim.Sieve`` in tests/test_libcachesim.py).

One FIFO queue, new copies at its head, and a hand that starts at the tail and moves towards the head,
wrapping to the tail. A hit sets the copy's visited bit. To evict, the hand clears the bit of every
visited copy it passes and stops at the first unvisited one, which leaves; the hand stays where that
copy was (at the next newer copy). Copies are never moved, so a hit costs one bit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from hobbit.sim.policies import lists
from hobbit.sim.policies.base import CacheView, Hooked, Pool
from hobbit.sim.policies.compiled import LAYER, PINNED, Compiled, Space, kernel

HAND = 2  # a field of ``ends`` after HEAD and TAIL (-1: start from the tail)


class SieveState(NamedTuple):
    """The compiled queue: a list per region (``policies.lists``), new copies at HEAD; each slot's visited bit."""

    links: Any  # [NEWER / OLDER, pool, slot] int64
    ends: Any  # [pool, region, HEAD / TAIL / HAND] int64
    visited: Any  # [pool, slot] int64


def sieve_state(space: Space) -> SieveState:
    rows = max(space.rows, 1)
    ends = np.full((2, space.capacity.shape[1], 3), -1, np.int64)
    return SieveState(np.zeros((2, 2, rows), np.int64), ends, np.zeros((2, rows), np.int64))


@kernel
def sieve_insert(st, pool, pr, g, r0, r1, slot):
    """``_Sieve.push``: at the head, unvisited."""
    lists.push(st.links, st.ends, pr, g, slot)
    st.visited[pr, slot] = 0


@kernel
def sieve_hit(st, pool, pr, g, slot):
    st.visited[pr, slot] = 1


@kernel
def sieve_evict(st, pool, pr, g, r0, r1):
    """``Sieve.to_evict`` over region ``g`` (slots r0:r1); the victim leaves the queue."""
    links, ends, visited = st.links, st.ends, st.visited
    tail = ends[pr, g, lists.TAIL]
    movable = False
    for s in range(r0, r1):
        if pool[pr, s, LAYER] >= 0 and not pool[pr, s, PINNED]:
            movable = True
            break
    if tail < 0 or not movable:
        return -1
    s = tail if ends[pr, g, HAND] < 0 else ends[pr, g, HAND]
    while visited[pr, s] or pool[pr, s, PINNED]:  # a pinned copy is passed over, its bit kept
        if not pool[pr, s, PINNED]:
            visited[pr, s] = 0
        s = links[lists.NEWER, pr, s]
        if s < 0:
            s = ends[pr, g, lists.TAIL]
    ends[pr, g, HAND] = links[lists.NEWER, pr, s]
    lists.unlink(links, ends, pr, g, s)  # _Sieve.unlink
    return s


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
    compiled = Compiled(evict=sieve_evict, insert=sieve_insert, hit=sieve_hit, state=sieve_state)

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
