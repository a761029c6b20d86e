"""First in, first out."""

from __future__ import annotations

from hobbit.sim.policies.base import CacheView, Plain, Pool


class FIFO(Plain):
    """Evict the copy loaded longest ago, however much it was used."""

    name = "fifo"

    def to_evict(self, pool: Pool, view: CacheView, region: range) -> int:
        cand = pool.candidates(region)
        return min(cand, key=pool.inserted.__getitem__) if cand else -1
