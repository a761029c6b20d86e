"""HOBBIT's adaptive prefetch (paper §3.3).

From the current layer's router input, predict layer l+1; if every predicted expert is
cached (or on its way), look at l+2, and so on up to p (``max_depth``) layers; prefetch the
predicted misses of the first layer that has any, each at the precision the T1/T2 rule
gives its predicted weight (a predicted skip is not loaded).

Compiled (``compiled``): the same loop over the walk's predictions (``policies.compiled.predicted``).
"""

from __future__ import annotations

from hobbit.sim.policies import compiled as c
from hobbit.sim.policies.base import PolicyInputs, PrefetchContext, PrefetchRequest
from hobbit.sim.policies.compiled import CompiledPrefetch, kernel
from hobbit.sim.policies.prefetch import misses, wanted


@kernel(inline=True)
def hobbit_propose(state, s, layer, a, b):
    """``HobbitPrefetch.propose``, compiled: the predicted misses of the first layer ahead that has any."""
    L = s.ids.shape[1]
    for d in range(1, s.max_depth + 1):
        target = layer + d
        if target >= L:
            break
        n = c.misses(s, target, c.predicted(s, layer, d, a, b), 0)
        if n:
            return n
    return 0


class HobbitPrefetch:
    """Adaptive-depth prefetch of the first layer ahead with predicted misses."""

    name = "hobbit"
    Knobs = None
    loads_ahead = True
    needs = frozenset({"predictions"})
    compiled = CompiledPrefetch(propose=hobbit_propose)

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
