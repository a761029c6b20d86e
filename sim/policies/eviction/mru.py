"""Most recently used: evict the copy used last (the README's worked example of a new policy).

MoE layers run in a loop; where the loop is larger than the cache (LRU's worst case) MRU
keeps more of it: on the bundled trace it hits more often than LRU. Registered in
``hobbit.sim.policies.registry`` by one line; its knobs, if it had any, would be the node
``system.cache.mru``.
"""

from __future__ import annotations

from hobbit.sim.policies.base import CacheView, Plain, Pool
from hobbit.sim.policies.compiled import LAYER, PINNED, TOUCHED, Compiled, kernel


@kernel
def mru_evict(state, pool, pr, g, r0, r1):
    """``MRU.to_evict`` over the compiled walk's pool (``pool[pool, slot, field]``), in the Python numba compiles
    (the walk compiles it: ``sim.fast.special``): of the occupied, unpinned slots ``r0:r1`` of pool ``pr``, the one
    touched last (-1: none). MRU keeps no state of its own (``state`` is empty)."""
    best, last = -1, -1
    for s in range(r0, r1):
        if pool[pr, s, LAYER] >= 0 and not pool[pr, s, PINNED] and pool[pr, s, TOUCHED] > last:
            best, last = s, pool[pr, s, TOUCHED]
    return best


class MRU(Plain):
    """Evict the copy used (or inserted) most recently."""

    name = "mru"
    compiled = Compiled(evict=mru_evict)  # its compiled victim: the compiled walk evicts by it (sim.fast.special)

    def to_evict(self, pool: Pool, view: CacheView, region: range) -> int:
        cand = pool.candidates(region)
        return max(cand, key=pool.touched.__getitem__) if cand else -1
