"""MoE-Infinity's activation-matrix prefetch (arXiv:2401.14361; EfficientMoE/MoE-Infinity at 350f0dd,
the last release before HOBBIT).

Each request has an expert activation matrix (EAM: layers x experts, tokens routed). The
library is built offline from profiling requests (``ExpertTracer.load_trace``; the code never
adds replayed requests: ``finish_entry`` has no caller), at most ``capacity`` of them
(``trace_capacity``, 1000). At layer l the request's matrix so far, normalised per layer, is
matched to each library entry by cosine similarity per layer over the layers not yet run
(l+1 ..), averaged (``find_most_similar``); the best entry, normalised per layer, gives the
probabilities p. Every expert of every later layer is then queued in order of
(p + 1e-8) x (1 - (l' - l) / (L + 1)) (``expert_prefetcher.py``), and the queue is cleared at the
next layer, so at batch 1 only its head is ever copied: the ``per_step`` best uncached
experts are proposed. ``match`` is the current p, which MoE-Infinity's cache priority reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from hobbit.sim.policies.base import PolicyInputs, PrefetchContext, PrefetchRequest


@dataclass(frozen=True)
class EAMKnobs:
    """``system.prefetch.eam``: MoE-Infinity's activation-matrix prefetch (arXiv:2401.14361)."""

    LIMITS: ClassVar[dict[str, str]] = {"capacity": ">=1", "per_step": ">=1"}

    capacity: int = 1000
    """Profiling requests the activation-matrix library holds at most (MoE-Infinity's trace_capacity,
    moe_infinity/utils/config.py)."""
    per_step: int = 1
    """Copies proposed per layer step, best score first. The queue is cleared when the next layer predicts and only
    the copy in flight survives (task_scheduler.cpp): one per step at batch 1, where a copy outlasts a layer."""


def decay(layer: int, current: int, num_layers: int) -> float:
    """MoE-Infinity's layer decay: 1 - (layer - current) / (L + 1) for a later layer, counted around the
    loop for one already run (expert_prefetcher.py)."""
    return 1.0 - ((layer - current) % num_layers) / (num_layers + 1)


class EAMPrefetch:
    """Prefetch by matching the request's activation matrix against the profiling requests'."""

    name = "eam"
    Knobs = EAMKnobs
    loads_ahead = True
    needs = frozenset({"profile"})  # ctx.counts: the walk's activation matrix of the request

    def __init__(self, knobs: EAMKnobs | None = None, inputs: PolicyInputs | None = None) -> None:
        k = knobs or EAMKnobs()
        self.per_step = k.per_step
        lib = list((inputs or PolicyInputs()).profile or [])[: k.capacity]
        self.library = np.stack(lib).astype(np.float64) if lib else None  # [H, L, E]
        if self.library is not None:
            self._lib_norm = self.library / np.clip(self.library.sum(axis=2, keepdims=True), 1e-12, None)
        self.match: np.ndarray | None = None  # [L, E] probabilities of the best match

    def _best_match(self, counts: np.ndarray, layer: int) -> np.ndarray | None:
        if self.library is None or layer + 1 >= counts.shape[0]:
            return None
        cur = counts[layer + 1 :].astype(np.float64)
        cur = cur / np.clip(cur.sum(axis=1, keepdims=True), 1e-12, None)
        past = self._lib_norm[:, layer + 1 :]  # [H, L', E]
        num = (past * cur[None]).sum(axis=2)
        den = np.linalg.norm(past, axis=2) * np.linalg.norm(cur, axis=1)[None] + 1e-12
        return self._lib_norm[int(np.argmax((num / den).mean(axis=1)))]

    def propose(self, ctx: PrefetchContext) -> list[PrefetchRequest]:
        self.match = self._best_match(ctx.counts, ctx.layer)
        if self.match is None:
            return []
        L, E = self.match.shape
        later = np.arange(ctx.layer + 1, L)
        score = (self.match[later] + 1e-8) * (1.0 - (later - ctx.layer) / (L + 1))[:, None]
        out = []
        for i in np.argsort(-score.ravel(), kind="stable").tolist():
            target, e = int(later[i // E]), i % E
            if not ctx.is_cached(target, e):
                out.append(PrefetchRequest(target, e, ctx.precision))
                if len(out) == self.per_step:
                    break
        return out

    def end_request(self) -> None:
        self.match = None
