"""No prefetch: every miss is a demand load."""

from __future__ import annotations

from sim.policies.base import PrefetchContext, PrefetchRequest


class NoPrefetch:
    """Proposes nothing."""

    name = "none"

    def propose(self, ctx: PrefetchContext) -> list[PrefetchRequest]:
        return []

    def end_request(self) -> None:
        pass
