"""A policy registered by a test alone (``test_special``): least recently touched, found by a scan of the region, in
one file with its compiled victim beside its reference class, as a user's policy would be."""

from __future__ import annotations

from numba import njit

from hobbit.sim.policies.base import CacheView, Plain, Pool
from hobbit.sim.policies.compiled import LAYER, PINNED, TOUCHED, Compiled


@njit(cache=True)
def oldest(state, pool, pr, g, r0, r1):
    """``LruScan.to_evict`` compiled: the occupied, unpinned slot of ``r0:r1`` touched first (-1: none)."""
    best, first = -1, 0
    for s in range(r0, r1):
        if pool[pr, s, LAYER] >= 0 and not pool[pr, s, PINNED] and (best < 0 or pool[pr, s, TOUCHED] < first):
            best, first = s, pool[pr, s, TOUCHED]
    return best


class LruScan(Plain):
    """Evict the copy touched least recently."""

    name = "lru_scan"
    compiled = Compiled(evict=oldest)

    def to_evict(self, pool: Pool, view: CacheView, region: range) -> int:
        cand = pool.candidates(region)
        return min(cand, key=pool.touched.__getitem__) if cand else -1
