"""Perfect prefetch, for the oracle bound: the true experts of the next ``max_depth`` layers."""

from __future__ import annotations

from hobbit.sim.policies.base import PolicyInputs, PrefetchContext, PrefetchRequest
from hobbit.sim.policies.prefetch import misses, wanted


class OraclePrefetch:
    """Prefetch every true expert of layers l+1 .. l+max_depth that is not cached."""

    name = "oracle"
    Knobs = None
    loads_ahead = True
    needs: frozenset[str] = frozenset()  # ctx.future: the trace itself

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
