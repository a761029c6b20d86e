"""First in, first out."""

from __future__ import annotations

from sim.policies.base import CacheView, Pool


class FIFO:
    """Evict the copy loaded longest ago, however much it was used."""

    name = "fifo"

    def to_evict(self, pool: Pool, view: CacheView, region: range) -> int:
        cand = pool.candidates(region)
        return min(cand, key=pool.inserted.__getitem__) if cand else -1
