"""No prefetch: every miss is a demand load."""

from __future__ import annotations

from hobbit.sim.policies.base import Plain, PrefetchContext, PrefetchRequest


class NoPrefetch(Plain):
    """Proposes nothing."""

    name = "none"
    loads_ahead = False  # no staging slots are set aside for it

    def propose(self, ctx: PrefetchContext) -> list[PrefetchRequest]:
        return []

    def end_request(self) -> None:
        pass
