"""Protocols and values shared by every policy.

Legend: L MoE layers, E experts per layer, K experts per token, D lookahead depth.
An expert is identified by its key ``(layer, expert)``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, ClassVar, Protocol

import numpy as np

from hobbit.sim.policies.compiled import Compiled, CompiledPrefetch


class Precision(IntEnum):
    """A selection's precision class; HIGH and LOW are also the pool index of a cached copy."""

    HIGH = 0
    LOW = 1
    SKIP = 2


HIGH, LOW, SKIP = Precision.HIGH, Precision.LOW, Precision.SKIP
Key = tuple[int, int]


class Pool:
    """One precision's slots, as lists indexed by slot (layer -1: empty).

    ``last_use``, ``uses``, ``high_uses``: the request's records of the slot's expert (paper
    §3.4: token index of its last use, 0 if none; its uses; those served at high precision),
    kept per (layer, expert) by the cache whether or not the expert is cached, so they
    survive eviction and reset per request; ``all_uses``: uses since insertion (LFU),
    ``touched``: access clock at insertion or last use (LRU), ``inserted``: access clock at
    insertion (FIFO), ``transfer``: the copy that brought it; ``pinned``: a prefetched copy
    waiting for its layer, which no policy may evict.
    Plain lists: a policy scores a few dozen slots per eviction, where numpy's per-call
    cost would dominate.
    """

    FIELDS = (
        "layer",
        "expert",
        "last_use",
        "uses",
        "high_uses",
        "all_uses",
        "touched",
        "inserted",
        "transfer",
        "pinned",
    )
    layer: list[int]
    expert: list[int]
    last_use: list[int]
    uses: list[int]
    high_uses: list[int]
    all_uses: list[int]
    touched: list[int]
    inserted: list[int]
    transfer: list[int]
    pinned: list[int]

    def __init__(self, size: int, precision: int) -> None:
        self.size, self.precision = size, precision
        for name in self.FIELDS:
            setattr(self, name, [-1 if name in ("layer", "expert", "transfer") else 0] * size)

    def put(
        self,
        slot: int,
        key: Key,
        clock: int,
        transfer: int,
        record: tuple[int, int, int] = (0, 0, 0),
        pinned: bool = False,
    ) -> None:
        """``key`` into ``slot`` with its request ``record`` (last use, uses, high-precision uses)."""
        self.layer[slot], self.expert[slot] = key
        self.last_use[slot], self.uses[slot], self.high_uses[slot] = record
        self.all_uses[slot] = 0
        self.touched[slot] = self.inserted[slot] = clock
        self.transfer[slot] = transfer
        self.pinned[slot] = int(pinned)

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
    """Chooses which slot of a full pool leaves (``to_evict``); evicting is the cache's job.

    Built as ``Policy(knobs, inputs)``: ``knobs`` an instance of its ``Knobs`` dataclass (its own
    config node, ``system.cache.<name>``; None when it has none), ``inputs`` what it ``needs``.
    """

    name: str
    Knobs: type | None
    needs: frozenset[str]  # of NEEDS
    compiled: ClassVar[Compiled | None]  # its compiled part (``policies.compiled``; None: the reference walk decides)

    def __init__(self, knobs: Any = None, inputs: PolicyInputs | None = None) -> None: ...

    def to_evict(self, pool: Pool, view: CacheView, region: range) -> int:
        """The victim slot among ``pool.candidates(region)``, or -1 when there is none."""
        ...


NEEDS = {
    "predictions": "the trace's predicted experts of later layers (ctx.predict)",
    "future_uses": "every expert's future (pass, layer) steps (inputs.future_uses)",
    "prefetcher": "the system's prefetcher, to consult its state (inputs.prefetcher)",
    "profile": "activation matrices [L, E] of the profiling requests, held apart from the timed ones (inputs.profile)",
}


@dataclass(frozen=True)
class PolicyInputs:
    """What the walk gives a policy beyond its knobs; a field is set only when the policy needs it."""

    num_layers: int = 1  # L
    depth: int = 2  # p: layers a prefetcher may look ahead (system.prefetch.max_depth)
    future_uses: dict[Key, list[int]] | None = None  # "future_uses"
    prefetcher: object | None = None  # "prefetcher"
    profile: list[np.ndarray] | None = None  # "profile"


class Plain:
    """Defaults for a policy with no knobs and no needs (``Policy()`` or ``Policy(None, inputs)``).

    ``compiled``: the policy's compiled part (``policies.compiled.Compiled``): functions of its own file, in the
    Python numba compiles, that decide as its reference methods do over the compiled walk's pool and a state of its
    own (its victim, and the hooks ``Hooked`` has); with it the compiled walk runs the policy (``sim.fast.special``),
    without it the reference walk does."""

    Knobs = None
    needs: frozenset[str] = frozenset()
    compiled: ClassVar[Compiled | CompiledPrefetch | None] = None

    def __init__(self, knobs: None = None, inputs: PolicyInputs | None = None) -> None:
        pass


class Hooked(Plain):
    """A policy that keeps its own order of the entries (queues, ghost lists, a hand), as the policies
    of the cache literature do: the cache tells it every event of a region (``ExpertCache.region``: a
    pool, or a layer's part of it), and its ``to_evict`` is the eviction (the cache always evicts the
    slot it returns), so it updates its state there. State is kept per (pool, region) by
    ``state(pool, region)``, built by ``new_state(capacity)``.

    Pinned copies (prefetches waiting for their layer) and slots outside the region are never
    returned: where the policy's choice is one of them, it takes the next in its own order.
    """

    hooked = True

    def __init__(self, knobs: object = None, inputs: PolicyInputs | None = None) -> None:
        self._states: dict[tuple[int, int], object] = {}

    def new_state(self, capacity: int) -> object:
        raise NotImplementedError

    def state(self, pool: Pool, region: range) -> Any:  # the subclass's state type
        key = (pool.precision, region.start)
        st = self._states.get(key)
        if st is None:
            st = self._states[key] = self.new_state(len(region))
        return st

    def on_miss(self, pool: Pool, region: range, key: Key) -> None:
        """``key`` missed and is about to be admitted (an eviction, then ``on_insert``, follow)."""

    def on_insert(self, pool: Pool, region: range, slot: int) -> None:
        """A copy entered ``slot``."""

    def on_hit(self, pool: Pool, region: range, slot: int) -> None:
        """The copy in ``slot`` served a use."""

    def slots(self, pool: Pool, region: range) -> set[int]:
        """The slots it holds in order: exactly the region's occupied ones (the invariant tests check)."""
        raise NotImplementedError


def first_evictable(order, pool: Pool) -> int:
    """The first slot of ``order`` (an iterable of slots) that is not pinned, or -1."""
    pinned = pool.pinned
    for s in order:
        if not pinned[s]:
            return s
    return -1


def argmin_then_oldest(score: Sequence[float], pool: Pool, cand: list[int]) -> int:
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
    """Proposes experts to load ahead, once the router of ``ctx.layer`` ran for a pass.

    Built as ``Prefetcher(knobs, inputs)`` like an ``EvictionPolicy`` (its node:
    ``system.prefetch.<name>``); ``needs`` "predictions" makes the walk lay out the trace's
    predicted experts for ``ctx.predict``.
    """

    name: str
    Knobs: type | None
    needs: frozenset[str]  # of NEEDS
    loads_ahead: bool  # False: it never proposes, so no staging slots are set aside

    def __init__(self, knobs: Any = None, inputs: PolicyInputs | None = None) -> None: ...

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
