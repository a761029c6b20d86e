"""HOBBIT's adaptive prefetch (paper §3.3).

From the current layer's router input, predict layer l+1; if every predicted expert is
cached (or on its way), look at l+2, and so on up to p (``max_depth``) layers; prefetch the
predicted misses of the first layer that has any, each at the precision the T1/T2 rule
gives its predicted weight (a predicted skip is not loaded).
"""

from __future__ import annotations

from hobbit.sim.policies.base import PolicyInputs, PrefetchContext, PrefetchRequest
from hobbit.sim.policies.prefetch import misses, wanted


class HobbitPrefetch:
    """Adaptive-depth prefetch of the first layer ahead with predicted misses."""

    name = "hobbit"
    Knobs = None
    loads_ahead = True
    needs = frozenset({"predictions"})

    def __init__(self, knobs: None = None, inputs: PolicyInputs | None = None) -> None:
        self.max_depth = (inputs or PolicyInputs()).depth

    def propose(self, ctx: PrefetchContext) -> list[PrefetchRequest]:
        for d in range(1, self.max_depth + 1):
            target = ctx.layer + d
            if target >= ctx.num_layers:
                break
            out = misses(ctx, target, wanted(*ctx.predict(d)))
            if out:
                return out
        return []

    def end_request(self) -> None:
        pass
