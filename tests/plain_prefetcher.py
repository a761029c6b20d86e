"""A prefetcher registered by a test alone (``test_special``): the predicted misses of the layer two ahead, in one
file with its compiled part beside its reference class, as a user's prefetcher would be."""

from __future__ import annotations

from hobbit.sim.policies import compiled as c
from hobbit.sim.policies.base import Plain, PrefetchContext, PrefetchRequest
from hobbit.sim.policies.compiled import CompiledPrefetch, kernel
from hobbit.sim.policies.prefetch import misses, wanted


@kernel(inline=True)
def two_ahead(state, s, layer, a, b):
    """``TwoAhead.propose``, compiled."""
    if layer + 2 >= s.ids.shape[1]:
        return 0
    return c.misses(s, layer + 2, c.predicted(s, layer, 2, a, b), 0)


class TwoAhead(Plain):
    """Prefetch the predicted misses of layer l+2 only."""

    name = "two_ahead"
    loads_ahead = True
    needs = frozenset({"predictions"})
    compiled = CompiledPrefetch(propose=two_ahead)

    def propose(self, ctx: PrefetchContext) -> list[PrefetchRequest]:
        if ctx.layer + 2 >= ctx.num_layers:
            return []
        return misses(ctx, ctx.layer + 2, wanted(*ctx.predict(2)))

    def end_request(self) -> None:
        pass
