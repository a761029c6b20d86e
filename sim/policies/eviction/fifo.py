"""First in, first out.

Compiled, it keeps LRU's list (``lru.list_state``) and never moves a copy in it: the oldest end is the first
inserted."""

from __future__ import annotations

from hobbit.sim.policies.base import CacheView, Plain, Pool
from hobbit.sim.policies.compiled import Compiled
from hobbit.sim.policies.eviction.lru import lru_evict, lru_insert, lru_state


class FIFO(Plain):
    """Evict the copy loaded longest ago, however much it was used."""

    name = "fifo"
    compiled = Compiled(evict=lru_evict, insert=lru_insert, state=lru_state)

    def to_evict(self, pool: Pool, view: CacheView, region: range) -> int:
        cand = pool.candidates(region)
        return min(cand, key=pool.inserted.__getitem__) if cand else -1
