"""First in, first out."""

from __future__ import annotations

from sim.policies.base import CacheView, Pool


class FIFO:
    """Evict the copy loaded longest ago, however much it was used."""

    name = "fifo"

    def to_evict(self, pool: Pool, view: CacheView, region: range) -> int:
        inserted = pool.inserted
        return min(pool.candidates(region), key=inserted.__getitem__)
