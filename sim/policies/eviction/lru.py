"""Least recently used (across requests: the access clock, not the per-request records).

Compiled (``compiled``), it keeps each region's copies in a list in order of last touch and evicts from its oldest
end, without scanning the region: a copy enters the list newest (``insert``) and moves to the newest end when it
serves a use (``hit``). FIFO keeps the same list without the moves.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from hobbit.sim.policies import lists
from hobbit.sim.policies.base import CacheView, Plain, Pool
from hobbit.sim.policies.compiled import PINNED, Compiled, Space, kernel


class ListState(NamedTuple):
    """A list of slots per region (``policies.lists``), newest at HEAD."""

    links: Any  # [NEWER / OLDER, pool, slot] int64
    ends: Any  # [pool, region, HEAD / TAIL] int64 (-1: empty)


def lru_state(space: Space) -> ListState:
    ends = np.full((2, space.capacity.shape[1], 2), -1, np.int64)
    return ListState(np.zeros((2, 2, max(space.rows, 1)), np.int64), ends)


@kernel
def lru_evict(state, pool, pr, g, r0, r1):
    """The oldest unpinned copy of the list (TAIL is the oldest), which leaves it; -1 when every copy is pinned."""
    links, ends = state.links, state.ends
    s = ends[pr, g, lists.TAIL]
    while s >= 0 and pool[pr, s, PINNED]:
        s = links[lists.NEWER, pr, s]
    if s >= 0:
        lists.unlink(links, ends, pr, g, s)
    return s


@kernel
def lru_insert(state, pool, pr, g, r0, r1, slot):
    """A copy that took ``slot`` enters the list newest."""
    lists.push(state.links, state.ends, pr, g, slot)


@kernel
def lru_hit(state, pool, pr, g, slot):
    """The copy in ``slot`` served a use: it moves to the list's newest end (its TOUCHED is now the newest)."""
    if state.ends[pr, g, lists.HEAD] != slot:
        lists.unlink(state.links, state.ends, pr, g, slot)
        lists.push(state.links, state.ends, pr, g, slot)


class LRU(Plain):
    """Evict the copy used (or inserted) longest ago."""

    name = "lru"
    compiled = Compiled(evict=lru_evict, insert=lru_insert, hit=lru_hit, state=lru_state)

    def to_evict(self, pool: Pool, view: CacheView, region: range) -> int:
        cand = pool.candidates(region)
        return min(cand, key=pool.touched.__getitem__) if cand else -1
