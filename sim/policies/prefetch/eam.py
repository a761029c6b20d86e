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

Compiled (``compiled``): the same match and order over the walk's counts, which keeps each later layer's cosines
until that layer's counts change (``best_match``) and visits each layer's experts by probability (``eam_propose``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import numpy as np

from hobbit.sim.policies import compiled as c
from hobbit.sim.policies.base import PolicyInputs, PrefetchContext, PrefetchRequest
from hobbit.sim.policies.compiled import NOW_STEP, PW_STACK, CompiledPrefetch, PrefetchSpace, kernel

FLOOR = 1e-8  # the floor on a probability (expert_prefetcher.py; eviction.eam_priority reads it too)


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


class EAMState(NamedTuple):
    """The compiled part's state (``eam_state``)."""

    lib: Any  # [M, L, E]: the library's matrices, normalised per layer (``EAMPrefetch._lib_norm``)
    norms: Any  # [M, L]: their norms
    order: Any  # [M, L, E] int32: each matrix's experts per layer by probability, highest first
    per_step: int
    match: Any  # [1] int64: the matched row (``EAMPrefetch.match``; -1: none), which ``Space.match`` shares
    ratios: Any  # [M, L]: each layer's cosines with every matrix (``best_match``)
    stamp: Any  # [L] int64: the pass whose counts they are of (-1: none)
    v: Any  # [per_step]: the kept proposals' scores, negated (lowest first)
    row: Any  # [E] ``best_match``'s buffers
    cur: Any
    todo: Any  # ``pairwise_in``'s stack
    sums: Any


def eam_state(space: PrefetchSpace) -> EAMState:
    p = space.prefetcher
    L, E = space.layers, space.experts
    lib = np.ascontiguousarray(p._lib_norm) if p.library is not None else np.zeros((0, L, E))
    return EAMState(
        lib=lib,
        norms=np.ascontiguousarray(np.linalg.norm(lib, axis=2)),
        order=np.argsort(-lib, axis=2, kind="stable").astype(np.int32),
        per_step=int(p.per_step),
        match=space.match,
        ratios=np.zeros((lib.shape[0], L)),
        stamp=np.full(L, -1, np.int64),
        v=np.zeros(max(int(p.per_step), 1)),
        row=np.zeros(lib.shape[2]),
        cur=np.zeros(lib.shape[2]),
        todo=np.zeros((PW_STACK, 3), np.int64),
        sums=np.zeros(PW_STACK),
    )


def _most(prefetcher: EAMPrefetch, experts: int) -> int:
    return int(prefetcher.per_step)


@kernel
def best_match(counts, layer, pas, lib, norms, ratios, stamp, row, cur, todo, sums):
    """``EAMPrefetch._best_match``: the library's row whose matrix, normalised per layer, is the closest by cosine
    (averaged over the layers after ``layer``) to the request's so far; -1: none. Each layer's cosines with every row
    (``ratios[h, g]``) depend on that layer's counts alone, which change only at that layer's step (or at a new
    request, which begins a pass): those worked out in this pass (``pas``, ``stamp[g]``) are kept, so a step works
    out a layer's cosines once a pass, not once a step. ``row`` and ``cur`` (E floats each), ``todo`` and ``sums``
    (``pairwise_in``'s stack) are the state's buffers, so that it allocates nothing."""
    H, L, E = lib.shape
    if H == 0 or layer + 1 >= L:
        return -1
    Lp = L - layer - 1
    for g in range(layer + 1, L):
        if stamp[g] == pas:
            continue
        for e in range(E):
            row[e] = counts[g, e]
        total = max(c.pairwise_in(row, 0, E, todo, sums), 1e-12)
        for e in range(E):
            cur[e] = row[e] / total
            row[e] = cur[e] * cur[e]
        cur_norm = np.sqrt(c.pairwise_in(row, 0, E, todo, sums))
        for h in range(H):
            for e in range(E):
                row[e] = lib[h, g, e] * cur[e]
            ratios[h, g] = c.pairwise_in(row, 0, E, todo, sums) / (norms[h, g] * cur_norm + 1e-12)
        stamp[g] = pas
    best, best_score = -1, 0.0
    for h in range(H):
        score = c.pairwise_in(ratios[h], layer + 1, Lp, todo, sums) / Lp
        if best < 0 or score > best_score:
            best, best_score = h, score
    return best


@kernel(inline=True)
def earlier(tl, te, props, x):
    """Whether expert ``te`` of layer ``tl`` has an earlier place (layer, then expert) than proposal ``x``."""
    return tl < props[x, 0] or (tl == props[x, 0] and te < props[x, 1])


@kernel(inline=True)
def eam_propose(state, s, layer, a, b):
    """``EAMPrefetch.propose``, compiled: the first ``per_step`` uncached by score, highest first, then by place (a
    stable sort's order), kept sorted in ``props``; each later layer's experts visited by probability, highest first
    (``order``), up to the first that scores below the last kept one: no sort of them all."""
    L, E = s.ids.shape[1], s.resident.shape[1]
    lib, order, per_step, v, props = state.lib, state.order, state.per_step, state.v, s.props
    m = state.match[0] = best_match(
        s.counts, layer, s.now[NOW_STEP] // L, lib, state.norms, state.ratios, state.stamp, state.row, state.cur,
        state.todo, state.sums,
    )  # fmt: skip
    n = 0
    if m < 0:
        return 0
    for j in range(L - layer - 1):
        decay = 1.0 - (j + 1) / (L + 1)
        tl = layer + 1 + j
        for r in range(E):
            te = order[m, tl, r]
            x_v = -((lib[m, tl, te] + FLOOR) * decay)
            if n == per_step:
                if x_v > v[n - 1]:  # and so does every later one of the layer
                    break
                if x_v == v[n - 1] and not earlier(tl, te, props, n - 1):
                    continue
            if c.present(s, tl, te):
                continue
            x = min(n, per_step - 1)  # its place: after every kept one as high or higher, and after each as high
            # whose place is earlier
            while x > 0 and (x_v < v[x - 1] or (x_v == v[x - 1] and earlier(tl, te, props, x - 1))):
                v[x] = v[x - 1]
                props[x, 0], props[x, 1], props[x, 2] = props[x - 1, 0], props[x - 1, 1], props[x - 1, 2]
                x -= 1
            v[x] = x_v
            props[x, 0], props[x, 1], props[x, 2] = tl, te, s.uniform
            n = min(n + 1, per_step)
    return n


@kernel(inline=True)
def eam_begin(state):
    """``EAMPrefetch.end_request``: no match until the next request's first step."""
    state.match[0] = -1


class EAMPrefetch:
    """Prefetch by matching the request's activation matrix against the profiling requests'."""

    name = "eam"
    Knobs = EAMKnobs
    loads_ahead = True
    needs = frozenset({"profile"})  # ctx.counts: the walk's activation matrix of the request
    compiled = CompiledPrefetch(propose=eam_propose, begin=eam_begin, state=eam_state, most=_most)

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
        score = (self.match[later] + FLOOR) * (1.0 - (later - ctx.layer) / (L + 1))[:, None]
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
