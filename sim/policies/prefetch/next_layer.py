"""MoE-Offloading's speculative prefetch: apply the next layer's gate to the current
hidden state and load its predicted experts (arXiv:2312.17238)."""

from __future__ import annotations

from hobbit.sim.policies import compiled as c
from hobbit.sim.policies.base import Plain, PrefetchContext, PrefetchRequest
from hobbit.sim.policies.compiled import CompiledPrefetch, kernel
from hobbit.sim.policies.prefetch import misses, wanted


@kernel(inline=True)
def next_layer_propose(state, s, layer, a, b):
    """``NextLayerPrefetch.propose``, compiled."""
    if layer + 1 >= s.ids.shape[1]:
        return 0
    return c.misses(s, layer + 1, c.predicted(s, layer, 1, a, b), 0)


class NextLayerPrefetch(Plain):
    """Prefetch the predicted misses of layer l+1 only."""

    name = "next_layer"
    loads_ahead = True
    needs = frozenset({"predictions"})
    compiled = CompiledPrefetch(propose=next_layer_propose)

    def propose(self, ctx: PrefetchContext) -> list[PrefetchRequest]:
        if ctx.layer + 1 >= ctx.num_layers:
            return []
        return misses(ctx, ctx.layer + 1, wanted(*ctx.predict(1)))

    def end_request(self) -> None:
        pass
