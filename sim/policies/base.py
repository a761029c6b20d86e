"""Protocols and values shared by every policy.

Legend: L MoE layers, E experts per layer, K experts per token, D lookahead depth.
An expert is identified by its key ``(layer, expert)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

import numpy as np

HIGH, LOW, SKIP = 0, 1, 2  # precision classes; also the pool index of a cached copy
Key = tuple[int, int]


class Pool:
    """One precision's slots, as lists indexed by slot (layer -1: empty).

    ``last_use``: token index in the request of the last use (0: not used this request),
    ``uses`` / ``high_uses``: uses in this request (at high precision), ``all_uses``: since
    insertion (LFU), ``touched``: access clock at insertion or last use (LRU),
    ``inserted``: access clock at insertion (FIFO), ``transfer``: the copy that brought it.
    Plain lists: a policy scores a few dozen slots per eviction, where numpy's per-call
    cost would dominate.
    """

    FIELDS = ("layer", "expert", "last_use", "uses", "high_uses", "all_uses", "touched", "inserted", "transfer")

    def __init__(self, size: int, precision: int) -> None:
        self.size, self.precision = size, precision
        for name in self.FIELDS:
            setattr(self, name, [-1 if name in ("layer", "expert", "transfer") else 0] * size)
        self.pinned = [False] * size

    def put(self, slot: int, key: Key, clock: int, transfer: int) -> None:
        self.layer[slot], self.expert[slot] = key
        self.last_use[slot] = self.uses[slot] = self.high_uses[slot] = self.all_uses[slot] = 0
        self.touched[slot] = self.inserted[slot] = clock
        self.transfer[slot] = transfer
        self.pinned[slot] = False

    def candidates(self, region: range) -> list[int]:
        """Slots of ``region`` that may be evicted (occupied, not pinned)."""
        layer, pinned = self.layer, self.pinned
        return [s for s in region if layer[s] >= 0 and not pinned[s]]


@dataclass(frozen=True)
class CacheView:
    """What an eviction policy may look at besides the entries."""

    layer: int  # l_i: the layer being filled
    num_layers: int  # L
    tokens: int  # T: tokens so far in the request (>= 1)
    clock: int  # accesses so far (for FIFO / LRU across requests)
    step: int  # index of the (forward pass, layer) being executed, over the whole trace (Belady)


class EvictionPolicy(Protocol):
    """Chooses which slot of a full pool leaves (``to_evict``); evicting is the cache's job."""

    name: str

    def to_evict(self, pool: Pool, view: CacheView, region: range) -> int:
        """The victim slot among ``pool.candidates(region)``, or -1 when there is none (all pinned)."""
        ...


def argmin_then_oldest(score: list[float], pool: Pool, cand: list[int]) -> int:
    """The candidate with the lowest score; ties go to the least recently touched."""
    touched = pool.touched
    return min(cand, key=lambda s: (score[s], touched[s]))


@dataclass(frozen=True)
class PrefetchRequest:
    """Load ``expert`` of ``layer`` ahead, at ``precision`` (HIGH or LOW)."""

    layer: int
    expert: int
    precision: int


class Prefetcher(Protocol):
    """Proposes experts to load ahead, once the router of ``ctx.layer`` ran for a pass."""

    name: str

    def propose(self, ctx: PrefetchContext) -> list[PrefetchRequest]:
        """Experts of later layers worth loading now (the caller drops those already cached)."""
        ...

    def end_request(self) -> None:
        """The request finished (history-based prefetchers learn here)."""
        ...


@dataclass
class PrefetchContext:
    """What a prefetcher sees at one (forward pass, layer).

    ``predict(d)``: predicted experts of layer+d for this pass's tokens, ids [T][K] (-1:
    none) and their precision class [T][K] (the system's rule on the predicted weights), as
    lists; ``future(d)``: the same for the true experts of layer+d (the oracle only); ``counts``:
    [L, E] uses so far in this request (the activation matrix); ``is_cached(layer, expert)``:
    cached or in flight.
    """

    layer: int
    num_layers: int
    predict: Callable[[int], tuple[list, list]]
    future: Callable[[int], tuple[list, list]]
    counts: np.ndarray
    is_cached: Callable[[int, int], bool]
    precision: int  # the system's uniform precision class, for prefetchers without weights
