"""What a policy's compiled part is written against: the compiled walk's pool, the space its own state is sized by,
and the hooks the walk calls. Nothing here imports numba or the compiled core, so a policy's file stays as quick to
import as the reference classes beside it (the command line loads them to check configs).

A policy's compiled part lives in its own file beside its reference class, which names it (``Plain.compiled``, a
``Compiled``): functions in the subset of Python numba compiles, marked ``@kernel`` (the compiled core compiles every
marked function of the file, and of the files it imports them from, where it first runs the policy:
``sim.fast.special``), and a plain function that builds its state. The walk calls, with ``state`` the policy's own
(what ``state`` built: a tuple or named tuple of arrays and numbers), ``pool`` the pools (fields below), ``pr`` the
pool (0: high, 1: low precision), ``g`` the region (a layer under ``cache.per_layer``, else 0) and ``r0:r1`` its
slots:

- ``evict(state, pool, pr, g, r0, r1) -> slot``: the victim among the region's occupied, unpinned slots (-1: none);
  called only when the region has no free slot, and the victim always leaves (its state forgets it here);
- ``miss(state, pool, pr, g, r0, r1, key)``: ``key`` (layer * experts + expert) missed and is about to be admitted;
- ``insert(state, pool, pr, g, r0, r1, slot)``: a copy entered ``slot``;
- ``hit(state, pool, pr, g, slot)``: the copy in ``slot`` served a use (its TOUCHED and ALL_USES already count it);
- ``overflow(state) -> int``: nonzero when its state ran out of room, and the reference walk must decide the run;
- ``unpin(state, pool, pr, g, slot)``: the copy in ``slot``, a prefetch pinned until its layer ran, is let go (an
  eviction may take it again);
- ``renew(state, pool, pr, g, slot)``: for a policy that needs the future (``"future_uses"`` in its ``needs``): the
  key of the copy in ``slot`` may have a new next use (``Space.next_use``), at the start of the step after one that
  selected it.

Each but ``evict`` is optional, as are the policy's hooks in ``base.Hooked``. What a hook may read of the walk besides
the pool (the current step; each key's next use; MoE-Infinity's prefetcher's match and library) comes in ``Space``, for
its state to keep.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar

import numpy as np

# the copy's layer (-1: a free slot) and expert; its record of uses in this request (last use, uses, uses at high
# precision, all uses since it entered); its last touch (a counter, unique: a use or its insertion); the transfer
# that brings it (-1: landed); whether it is pinned (a prefetch waiting for its layer: never a victim)
LAYER, EXPERT, LAST_USE, USES, HIGH_USES, ALL_USES, TOUCHED, TRANSFER, PINNED = range(9)
N_FIELDS = 9

KERNEL = "__hobbit_kernel__"
F = TypeVar("F", bound=Callable[..., Any])


def kernel(fn: F) -> F:
    """Marks ``fn`` as part of a policy's compiled part: the compiled core compiles it with numba (``cache=True``) in
    place in its module, with every other marked function of that module, before the walk first calls a hook. Plain
    Python until then (it runs as written without numba)."""
    setattr(fn, KERNEL, True)
    return fn


NEVER = 1 << 62  # ``Space.next_use`` of a key no later step selects

# ``Space.now``'s items: the current step, pass * L + layer (its layer: ``now[NOW_STEP] % L``), and the requests
# begun (a new request resets the records: ``LAST_USE`` .. ``HIGH_USES`` of every copy)
NOW_STEP, NOW_REQUEST = 3, 13


class Space(NamedTuple):
    """What a policy's state is sized by (``Compiled.state``'s argument), and what of the walk it may read: a policy
    keeps these arrays in its state, and its hooks read them as the walk goes (the compiled counterparts of the
    reference's ``CacheView`` and ``PolicyInputs``)."""

    layers: int  # L
    experts: int  # E: a key is layer * E + expert
    rows: int  # the pools' rows: slots are 0 .. rows - 1 in each pool
    capacity: np.ndarray  # [2, regions] int64: each region's slots per pool (one region unless cache.per_layer)
    knobs: Any  # the policy's knobs (its ``Knobs``), or None: its defaults
    per_layer: bool = False  # a region per layer (cache.per_layer), else one for every layer
    # the walk's counters (int64; read only): ``now[NOW_STEP]`` is the current step (``CacheView.layer``),
    # ``now[NOW_REQUEST]`` the requests begun
    now: Any = None
    # MoE-Infinity's prefetcher (``prefetch.kind=eam``; ``PolicyInputs.prefetcher``): ``match[0]`` is the row of
    # ``library`` its current request matched (-1: none yet, or another prefetcher), ``library`` [M, L, E] float64 its
    # activation matrices, each normalised (``EAMPrefetch._lib_norm``; no rows without EAM). Read only.
    match: Any = None
    library: Any = None
    # each key's next use (``PolicyInputs.future_uses``, for a policy that needs them): ``next_use[key]`` is the first
    # step at or after the current one that selects ``key`` (the walk's cursors in the run's lists of uses; ``NEVER``:
    # none), [L * E] int64 (empty for a policy that does not need them). Read only; moved on as the walk goes.
    next_use: Any = None


class Compiled(NamedTuple):
    """A policy's compiled part (``Plain.compiled``): its hooks, functions of its own file (see the module's text),
    and ``state(space: Space)``, plain Python, that builds its state (None: it keeps none)."""

    evict: Callable[..., int]
    hit: Callable[..., Any] | None = None
    insert: Callable[..., Any] | None = None
    miss: Callable[..., Any] | None = None
    overflow: Callable[..., int] | None = None
    state: Callable[[Space], tuple] | None = None
    unpin: Callable[..., Any] | None = None
    renew: Callable[..., Any] | None = None
