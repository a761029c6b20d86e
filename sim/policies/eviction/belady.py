"""Belady's optimal replacement: evict the copy whose next use is farthest in the future.

It needs the future: ``uses[key]`` lists the (pass, layer) steps, in execution order, at
which each expert is needed. Only the oracle bound uses it.
"""

from __future__ import annotations

from bisect import bisect_left

from hobbit.sim.policies.base import CacheView, Key, PolicyInputs, Pool

NEVER = 1 << 62


class Belady:
    """Evict the copy needed again last (or never); ties go to the least recently used."""

    name = "belady"
    Knobs = None
    needs = frozenset({"future_uses"})

    def __init__(self, knobs: None = None, inputs: PolicyInputs | None = None) -> None:
        self.uses: dict[Key, list[int]] = (inputs.future_uses if inputs else None) or {}

    def next_use(self, key: Key, step: int) -> int:
        steps = self.uses.get(key, ())
        i = bisect_left(steps, step)
        return steps[i] if i < len(steps) else NEVER

    def to_evict(self, pool: Pool, view: CacheView, region: range) -> int:
        lay, exp, touched = pool.layer, pool.expert, pool.touched
        cand = pool.candidates(region)
        if not cand:
            return -1
        return max(cand, key=lambda s: (self.next_use((lay[s], exp[s]), view.step), -touched[s]))
