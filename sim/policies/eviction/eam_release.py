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

from hobbit.sim.policies.base import CacheView, PolicyInputs, Pool


class EAMRelease:
    """Evict the most visited copy since its insertion, passing over the prefetcher's candidates."""

    name = "eam_release"
    Knobs = None
    needs = frozenset({"prefetcher"})

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
