"""MoE-Infinity's cache priority (arXiv:2401.14361): layer proximity x matched activation
probability x frequency, the paper's combination (``priority_score`` in its Python code).

Proximity is MoE-Infinity's own layer decay (``prefetch.eam.decay``: 1 - distance / (L + 1)),
not HOBBIT's FLD; the probabilities come from the activation-matrix prefetcher's current
match (the system's prefetcher's ``match``, [L, E]), without one every expert counts the same;
frequency is the expert's uses in this request. The released C++ cache evicts by visit count
alone (task_scheduler.cpp at 350f0dd; LFU at HEAD): this follows the paper.
"""

from __future__ import annotations

from hobbit.sim.policies.base import CacheView, PolicyInputs, Pool
from hobbit.sim.policies.prefetch.eam import decay

PROB_FLOOR = 1e-8  # the prefetcher's own floor on a probability


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
        return decay(layer, view.layer, view.num_layers) * (prob + PROB_FLOOR) * (1 + pool.uses[slot])

    def to_evict(self, pool: Pool, view: CacheView, region: range) -> int:
        touched, cand = pool.touched, pool.candidates(region)
        return min(cand, key=lambda s: (self.priority(pool, s, view), touched[s])) if cand else -1
