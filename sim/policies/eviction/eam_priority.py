"""MoE-Infinity's cache priority: layer proximity x matched activation probability x frequency.

The probabilities come from the activation-matrix prefetcher's current match
(the system's prefetcher's ``match``, [L, E]); without one every expert counts the same.
"""

from __future__ import annotations

from hobbit.sim.policies.base import CacheView, PolicyInputs, Pool
from hobbit.sim.policies.eviction.multidim import fld

PROB_FLOOR = 1e-3


class EAMPriority:
    """Evict the lowest proximity x probability x (1 + uses)."""

    name = "eam_priority"
    Knobs = None
    needs = frozenset({"prefetcher"})

    def __init__(self, knobs: None = None, inputs: PolicyInputs | None = None) -> None:
        self.advisor = inputs.prefetcher if inputs else None

    def priority(self, pool: Pool, slot: int, view: CacheView) -> float:
        match = getattr(self.advisor, "match", None)
        layer, expert = pool.layer[slot], pool.expert[slot]
        prob = 1.0 if match is None else float(match[layer, expert])
        return fld(layer, view.layer, view.num_layers) * (prob + PROB_FLOOR) * (1 + pool.uses[slot])

    def to_evict(self, pool: Pool, view: CacheView, region: range) -> int:
        touched, cand = pool.touched, pool.candidates(region)
        return min(cand, key=lambda s: (self.priority(pool, s, view), touched[s])) if cand else -1
