"""Belady's optimal replacement: evict the copy whose next use is farthest in the future.

It needs the future: ``uses[key]`` lists the (pass, layer) steps, in execution order, at
which each expert is needed. Only the oracle bound uses it.

Compiled (``BeladyState``), each region keeps its occupied, unpinned slots in a binary heap with the victim at its
root: the copy whose next use (the walk's ``Space.next_use`` of its key when it entered the heap, or when that moved
on: ``renew``) is latest, then the least recently touched (``TOUCHED`` is unique, so the order is total and the root
is the reference's victim, however the heap is laid out). A use moves the copy down (its touch is the newest), a pin
keeps it out, the end of the pin puts it back.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Any, NamedTuple

import numpy as np

from hobbit.sim.policies.base import CacheView, Key, PolicyInputs, Pool
from hobbit.sim.policies.compiled import EXPERT, LAYER, NEVER, PINNED, TOUCHED, Compiled, Space, kernel


class BeladyState(NamedTuple):
    """The compiled part's state: the walk's next use of each key (``Space.next_use``) and each region's heap."""

    experts: int  # E: a key is layer * E + expert
    next_use: Any  # [L * E] int64, the walk's (read only)
    heap: Any  # [2, H] int64: region g's heap at ``start[pr, g]`` .. + ``n[pr, g]``, slots
    pos: Any  # [2, rows] int64: a slot's place in its region's heap (-1: not in it)
    nu: Any  # [2, rows] int64: a slot's next use as its place in the heap has it
    n: Any  # [2, regions] int64
    start: Any  # [2, regions] int64


def belady_state(space: Space) -> BeladyState:
    cap = np.asarray(space.capacity, np.int64)
    start = np.zeros_like(cap)
    start[:, 1:] = np.cumsum(cap, axis=1)[:, :-1]
    size = max(int(cap.sum(axis=1).max()), space.rows, 1)
    pos = np.full((2, max(space.rows, 1)), -1, np.int64)
    return BeladyState(
        space.experts,
        space.next_use,
        np.zeros((2, size), np.int64),
        pos,
        np.zeros_like(pos),
        np.zeros_like(cap),
        start,
    )


@kernel
def _before(state, pool, pr, s, t):
    """Whether slot ``s`` goes before slot ``t``: needed later, or as late and touched earlier."""
    a, b = state.nu[pr, s], state.nu[pr, t]
    return a > b or (a == b and pool[pr, s, TOUCHED] < pool[pr, t, TOUCHED])


@kernel
def _place(state, pr, r0, i, s):
    state.heap[pr, r0 + i] = s
    state.pos[pr, s] = i


@kernel
def _up(state, pool, pr, g, i):
    """The slot at place ``i`` of region ``g``'s heap moved up to where its order puts it."""
    r0 = state.start[pr, g]
    s = state.heap[pr, r0 + i]
    while i > 0:
        j = (i - 1) // 2
        t = state.heap[pr, r0 + j]
        if not _before(state, pool, pr, s, t):
            break
        _place(state, pr, r0, i, t)
        i = j
    _place(state, pr, r0, i, s)


@kernel
def _down(state, pool, pr, g, i):
    """The slot at place ``i`` of region ``g``'s heap moved down to where its order puts it."""
    r0, n = state.start[pr, g], state.n[pr, g]
    s = state.heap[pr, r0 + i]
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        t = state.heap[pr, r0 + c]
        if c + 1 < n:
            u = state.heap[pr, r0 + c + 1]
            if _before(state, pool, pr, u, t):
                c, t = c + 1, u
        if not _before(state, pool, pr, t, s):
            break
        _place(state, pr, r0, i, t)
        i = c
    _place(state, pr, r0, i, s)


@kernel
def _key(state, pool, pr, slot):
    return pool[pr, slot, LAYER] * state.experts + pool[pr, slot, EXPERT]


@kernel
def _push(state, pool, pr, g, slot):
    """``slot`` (occupied, unpinned, not in the heap) enters region ``g``'s heap at its key's next use."""
    state.nu[pr, slot] = state.next_use[_key(state, pool, pr, slot)]
    n = state.n[pr, g]
    _place(state, pr, state.start[pr, g], n, slot)
    state.n[pr, g] = n + 1
    _up(state, pool, pr, g, n)


@kernel
def belady_evict(state, pool, pr, g, r0, r1):
    """``Belady.to_evict``: the root of the region's heap. It keeps its place there for the copy that takes its slot
    at once (the walk fills a victim's slot with the copy it evicted for, then calls ``insert``), which moves it down
    from the root: one pass down the heap, not a removal and an insertion."""
    return state.heap[pr, state.start[pr, g]] if state.n[pr, g] else -1


@kernel
def belady_insert(state, pool, pr, g, r0, r1, slot):
    """A copy took ``slot``: into the heap at its next use, unless it is pinned (a prefetch, out until its layer). In
    a victim's slot, still in the heap (``evict``), the copy takes the victim's place and moves to where its next use
    and touch put it, or, pinned, leaves the heap (its last slot takes the place)."""
    i = state.pos[pr, slot]
    if i < 0:
        if not pool[pr, slot, PINNED]:
            _push(state, pool, pr, g, slot)
        return
    state.nu[pr, slot] = state.next_use[_key(state, pool, pr, slot)]
    if pool[pr, slot, PINNED]:
        n = state.n[pr, g] - 1
        state.n[pr, g] = n
        state.pos[pr, slot] = -1
        if i == n:
            return
        slot = state.heap[pr, state.start[pr, g] + n]
        _place(state, pr, state.start[pr, g], i, slot)
    _up(state, pool, pr, g, i)
    _down(state, pool, pr, g, state.pos[pr, slot])


@kernel
def belady_hit(state, pool, pr, g, slot):
    """A use: the copy is the most recently touched, so it moves down."""
    if state.pos[pr, slot] >= 0:
        _down(state, pool, pr, g, state.pos[pr, slot])


@kernel
def belady_unpin(state, pool, pr, g, slot):
    """The pin is let go: back into its region's heap."""
    if state.pos[pr, slot] < 0:
        _push(state, pool, pr, g, slot)


@kernel
def belady_renew(state, pool, pr, g, slot):
    """The copy's key has a new next use (it passed the one before, or a window's lists begin): later, so it moves
    up."""
    i = state.pos[pr, slot]
    if i >= 0:
        nu = state.next_use[_key(state, pool, pr, slot)]
        if state.nu[pr, slot] != nu:
            state.nu[pr, slot] = nu
            _up(state, pool, pr, g, i)


class Belady:
    """Evict the copy needed again last (or never); ties go to the least recently used."""

    name = "belady"
    Knobs = None
    needs = frozenset({"future_uses"})
    compiled = Compiled(
        evict=belady_evict,
        hit=belady_hit,
        insert=belady_insert,
        unpin=belady_unpin,
        renew=belady_renew,
        state=belady_state,
    )

    def __init__(self, knobs: None = None, inputs: PolicyInputs | None = None) -> None:
        self.uses: dict[Key, list[int]] = (inputs.future_uses if inputs else None) or {}

    def next_use(self, key: Key, step: int) -> int:
        steps = self.uses.get(key, ())
        i = bisect_left(steps, step)
        return steps[i] if i < len(steps) else NEVER

    def to_evict(self, pool: Pool, view: CacheView, region: range) -> int:
        lay, exp, touched = pool.layer, pool.expert, pool.touched
        cand = pool.candidates(region)
        if not cand:
            return -1
        return max(cand, key=lambda s: (self.next_use((lay[s], exp[s]), view.step), -touched[s]))
