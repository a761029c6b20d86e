"""MoE-Infinity's activation-matrix prefetch (arXiv:2401.14361).

Each request builds an expert activation matrix (EAM, layers x experts counts). At layer
l the partial matrix (layers 0..l) is matched, by cosine similarity over those layers, to
the matrices of past requests; the best match's rows l+1 .. l+depth, normalised, are the
predicted activation probabilities, and the ``per_layer`` most likely experts of each are
prefetched. ``prob`` exposes the current prediction to the priority cache.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from sim.policies.base import PrefetchContext, PrefetchRequest


class EAMPrefetch:
    """Prefetch by matching the request's activation matrix against past requests'."""

    name = "eam"

    def __init__(self, max_depth: int = 2, history: int = 32, per_layer: int = 2) -> None:
        self.max_depth = max_depth
        self.per_layer = per_layer
        self.library: deque[np.ndarray] = deque(maxlen=history)
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

    def prob(self, layer: int, expert: int) -> float:
        return 1.0 if self.match is None else float(self.match[layer, expert])

    def end_request(self) -> None:
        if self._last is not None and self._last.sum() > 0:
            self.library.append(self._last.copy())
        self.match = self._last = None
