"""Most recently used: evict the copy used last (the README's worked example of a new policy).

MoE layers run in a loop; where the loop is larger than the cache (LRU's worst case) MRU
keeps more of it: on the bundled trace it hits more often than LRU. Registered in
``hobbit.sim.policies.registry`` by one line; its knobs, if it had any, would be the node
``system.cache.mru``.
"""

from __future__ import annotations

from hobbit.sim.policies.base import CacheView, Plain, Pool


class MRU(Plain):
    """Evict the copy used (or inserted) most recently."""

    name = "mru"

    def to_evict(self, pool: Pool, view: CacheView, region: range) -> int:
        cand = pool.candidates(region)
        return max(cand, key=pool.touched.__getitem__) if cand else -1
