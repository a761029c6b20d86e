"""Prefetchers, one file each; ``sim.policies.registry`` maps names to them."""

from __future__ import annotations

from hobbit.sim.policies.base import SKIP, PrefetchContext, PrefetchRequest


def wanted(ids: list[list[int]], cls: list[list[int]]) -> dict[int, int]:
    """expert -> best (lowest) precision class over a pass's tokens ([T][K] each), skips left out."""
    out: dict[int, int] = {}
    for row_ids, row_cls in zip(ids, cls):
        for e, c in zip(row_ids, row_cls):
            if e >= 0 and c != SKIP and c < out.get(e, SKIP):
                out[e] = c
    return out


def misses(ctx: PrefetchContext, layer: int, want: dict[int, int]) -> list[PrefetchRequest]:
    return [PrefetchRequest(layer, e, c) for e, c in want.items() if not ctx.is_cached(layer, e)]
