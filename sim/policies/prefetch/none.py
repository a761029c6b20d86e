"""No prefetch: every miss is a demand load."""

from __future__ import annotations

from hobbit.sim.policies.base import Plain, PrefetchContext, PrefetchRequest
from hobbit.sim.policies.compiled import CompiledPrefetch, kernel


@kernel(inline=True)
def none_propose(state, s, layer, a, b):
    """``NoPrefetch.propose``, compiled."""
    return 0


class NoPrefetch(Plain):
    """Proposes nothing."""

    name = "none"
    loads_ahead = False  # no staging slots are set aside for it
    compiled = CompiledPrefetch(propose=none_propose)

    def propose(self, ctx: PrefetchContext) -> list[PrefetchRequest]:
        return []

    def end_request(self) -> None:
        pass
