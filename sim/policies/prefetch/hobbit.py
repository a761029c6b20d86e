"""HOBBIT's adaptive prefetch (paper §3.3).

From the current layer's router input, predict layer l+1; if every predicted expert is
cached (or on its way), look at l+2, and so on up to ``max_depth`` layers; prefetch the
predicted misses of the first layer that has any, each at the precision the T1/T2 rule
gives its predicted weight (a predicted skip is not loaded).
"""

from __future__ import annotations

from sim.policies.base import PrefetchContext, PrefetchRequest
from sim.policies.prefetch import misses, wanted


class HobbitPrefetch:
    """Adaptive-depth prefetch of the first layer ahead with predicted misses."""

    name = "hobbit"

    def __init__(self, max_depth: int = 2) -> None:
        self.max_depth = max_depth

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
