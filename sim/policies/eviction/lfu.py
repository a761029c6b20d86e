"""Least frequently used since insertion; ties go to the least recently used."""

from __future__ import annotations

from hobbit.sim.policies.base import CacheView, Plain, Pool, argmin_then_oldest


class LFU(Plain):
    """Evict the copy with the fewest uses since it was loaded."""

    name = "lfu"

    def to_evict(self, pool: Pool, view: CacheView, region: range) -> int:
        cand = pool.candidates(region)
        return argmin_then_oldest(pool.all_uses, pool, cand) if cand else -1
