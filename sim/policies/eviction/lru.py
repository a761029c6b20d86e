"""Least recently used (across requests: the access clock, not the per-request records)."""

from __future__ import annotations

from hobbit.sim.policies.base import CacheView, Plain, Pool


class LRU(Plain):
    """Evict the copy used (or inserted) longest ago."""

    name = "lru"

    def to_evict(self, pool: Pool, view: CacheView, region: range) -> int:
        cand = pool.candidates(region)
        return min(cand, key=pool.touched.__getitem__) if cand else -1
