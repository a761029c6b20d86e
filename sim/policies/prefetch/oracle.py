"""Perfect prefetch, for the oracle bound: the true experts of the next ``max_depth`` layers."""

from __future__ import annotations

from hobbit.sim.policies import compiled as c
from hobbit.sim.policies.base import PolicyInputs, PrefetchContext, PrefetchRequest
from hobbit.sim.policies.compiled import CompiledPrefetch, kernel
from hobbit.sim.policies.prefetch import misses, wanted


@kernel(inline=True)
def oracle_propose(state, s, layer, a, b):
    """``OraclePrefetch.propose``, compiled."""
    n = 0
    for d in range(1, s.max_depth + 1):
        if layer + d < s.ids.shape[1]:
            n = c.misses(s, layer + d, c.truth(s, layer + d, a, b), n)
    return n


class OraclePrefetch:
    """Prefetch every true expert of layers l+1 .. l+max_depth that is not cached."""

    name = "oracle"
    Knobs = None
    loads_ahead = True
    needs: frozenset[str] = frozenset()  # ctx.future: the trace itself
    compiled = CompiledPrefetch(propose=oracle_propose)

    def __init__(self, knobs: None = None, inputs: PolicyInputs | None = None) -> None:
        self.max_depth = (inputs or PolicyInputs()).depth

    def propose(self, ctx: PrefetchContext) -> list[PrefetchRequest]:
        out: list[PrefetchRequest] = []
        for d in range(1, self.max_depth + 1):
            if ctx.layer + d < ctx.num_layers:
                out += misses(ctx, ctx.layer + d, wanted(*ctx.future(d)))
        return out

    def end_request(self) -> None:
        pass
