"""MoE-Offloading's speculative prefetch: apply the next layer's gate to the current
hidden state and load its predicted experts (arXiv:2312.17238)."""

from __future__ import annotations

from hobbit.sim.policies.base import Plain, PrefetchContext, PrefetchRequest
from hobbit.sim.policies.prefetch import misses, wanted


class NextLayerPrefetch(Plain):
    """Prefetch the predicted misses of layer l+1 only."""

    name = "next_layer"
    loads_ahead = True
    needs = frozenset({"predictions"})

    def propose(self, ctx: PrefetchContext) -> list[PrefetchRequest]:
        if ctx.layer + 1 >= ctx.num_layers:
            return []
        return misses(ctx, ctx.layer + 1, wanted(*ctx.predict(1)))

    def end_request(self) -> None:
        pass
