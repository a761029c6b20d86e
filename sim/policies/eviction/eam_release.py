"""MoE-Infinity's cache as its release evicts (EfficientMoE/MoE-Infinity at 350f0dd, ``RemoveCachedSparseNode`` in
core/prefetch/task_scheduler.cpp), where ``eam_priority`` follows its paper.

The cached experts that are prefetch candidates are passed over: ``ReplaceCacheCandidates`` holds every expert of the
current layer on that the matched activation matrix gives a nonzero probability (``prefetch_experts``,
moe_infinity/memory/expert_prefetcher.py), here the system's prefetcher's ``match`` from the current layer on. Of the
rest, the copy visited most since it entered the cache leaves first (``incache_visit_count``, sorted descending,
reset on eviction). The release's sort is not stable, so it leaves ties to chance; here they go to the lowest
(layer, expert), the order its topology lists the experts in. When every copy is a candidate the release evicts
nothing (a prefetch is dropped, a demand load waits); here the same order then runs over every copy.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from hobbit.sim.policies.base import CacheView, PolicyInputs, Pool
from hobbit.sim.policies.compiled import (
    ALL_USES,
    EXPERT,
    LAYER,
    NOW_STEP,
    PINNED,
    Compiled,
    Space,
    kernel,
)


class ReleaseState(NamedTuple):
    """What its compiled victim reads of the walk (``Space``): the current step, the prefetcher's match and library."""

    layers: int
    now: Any
    match: Any
    library: Any


def eam_release_state(space: Space) -> ReleaseState:
    return ReleaseState(space.layers, space.now, space.match, space.library)


@kernel
def eam_release_evict(state, pool, pr, g, r0, r1):
    """``EAMRelease.to_evict`` over the compiled walk's pool: of the evictable copies in ``r0:r1`` that are not the
    match's candidates (from the current layer on, a nonzero probability; none without a match), the most used since
    insertion, then the lowest (layer, expert); every evictable copy when all are candidates. A scan of the region."""
    layer_now, m, lib = state.now[NOW_STEP] % state.layers, state.match[0], state.library
    best, bu, bk = -1, -1, 0
    for every in range(2):
        for s in range(r0, r1):
            if pool[pr, s, LAYER] < 0 or pool[pr, s, PINNED]:
                continue
            lay, e = pool[pr, s, LAYER], pool[pr, s, EXPERT]
            if every == 0 and m >= 0 and lay >= layer_now and lib[m, lay, e] > 0.0:
                continue
            u, k = pool[pr, s, ALL_USES], lay * lib.shape[2] + e
            if best < 0 or u > bu or (u == bu and k < bk):
                best, bu, bk = s, u, k
        if best >= 0:
            break
    return best


class EAMRelease:
    """Evict the most visited copy since its insertion, passing over the prefetcher's candidates."""

    name = "eam_release"
    Knobs = None
    needs = frozenset({"prefetcher"})
    compiled = Compiled(evict=eam_release_evict, state=eam_release_state)

    def __init__(self, knobs: None = None, inputs: PolicyInputs | None = None) -> None:
        self.advisor = inputs.prefetcher if inputs else None

    def to_evict(self, pool: Pool, view: CacheView, region: range) -> int:
        cand = pool.candidates(region)
        if not cand:
            return -1
        match = getattr(self.advisor, "match", None)
        if match is not None:
            others = [s for s in cand if not (pool.layer[s] >= view.layer and match[pool.layer[s], pool.expert[s]] > 0)]
            cand = others or cand
        return min(cand, key=lambda s: (-pool.all_uses[s], pool.layer[s], pool.expert[s]))
