"""MoE-Infinity's activation-matrix prefetch (arXiv:2401.14361).

Each request builds an expert activation matrix (EAM, layers x experts counts). At layer
l the partial matrix (layers 0..l) is matched, by cosine similarity over those layers, to
the matrices of past requests; the best match's rows l+1 .. l+depth, normalised, are the
predicted activation probabilities, and the ``experts_per_layer`` most likely experts of each
are prefetched. ``match`` is the current prediction, which the priority cache consults.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from hobbit.sim.policies.base import PolicyInputs, PrefetchContext, PrefetchRequest


@dataclass(frozen=True)
class EAMKnobs:
    """``system.prefetch.eam``."""

    LIMITS: ClassVar[dict[str, str]] = {"history": ">=1", "experts_per_layer": ">=1"}

    history: int = 32  # past requests' matrices kept for matching
    experts_per_layer: int = 2  # experts prefetched per future layer


class EAMPrefetch:
    """Prefetch by matching the request's activation matrix against past requests'."""

    name = "eam"
    Knobs = EAMKnobs
    loads_ahead = True
    needs: frozenset[str] = frozenset()  # ctx.counts: the walk's activation matrix

    def __init__(self, knobs: EAMKnobs | None = None, inputs: PolicyInputs | None = None) -> None:
        k = knobs or EAMKnobs()
        self.max_depth = (inputs or PolicyInputs()).depth
        self.per_layer = k.experts_per_layer
        self.library: deque[np.ndarray] = deque(maxlen=k.history)
        self.match: np.ndarray | None = None  # [L, E] probabilities of the best match
        self._last: np.ndarray | None = None

    def _best_match(self, counts: np.ndarray, layer: int) -> np.ndarray | None:
        if not self.library:
            return None
        cur = counts[: layer + 1].ravel().astype(np.float64)
        lib = np.stack(self.library)  # [H, L, E]
        past = lib[:, : layer + 1].reshape(len(lib), -1)
        sim = past @ cur / (np.linalg.norm(past, axis=1) * np.linalg.norm(cur) + 1e-12)
        best = lib[int(np.argmax(sim))]
        return best / np.clip(best.sum(axis=1, keepdims=True), 1e-12, None)

    def propose(self, ctx: PrefetchContext) -> list[PrefetchRequest]:
        self._last = ctx.counts
        self.match = self._best_match(ctx.counts, ctx.layer)
        if self.match is None:
            return []
        out = []
        for d in range(1, self.max_depth + 1):
            target = ctx.layer + d
            if target >= ctx.num_layers:
                break
            for e in np.argsort(-self.match[target], kind="stable")[: self.per_layer].tolist():
                if self.match[target, e] > 0 and not ctx.is_cached(target, e):
                    out.append(PrefetchRequest(target, e, ctx.precision))
        return out

    def end_request(self) -> None:
        if self._last is not None and self._last.sum() > 0:
            self.library.append(self._last.copy())
        self.match = self._last = None
