"""MoE-Infinity's cache priority (arXiv:2401.14361): layer proximity x matched activation
probability x frequency, the paper's combination (``priority_score`` in its Python code).

Proximity is MoE-Infinity's own layer decay (``prefetch.eam.decay``: 1 - distance / (L + 1)),
not HOBBIT's FLD; the probabilities come from the activation-matrix prefetcher's current
match (the system's prefetcher's ``match``, [L, E]), without one every expert counts the same;
frequency is the expert's uses in this request. The released C++ cache evicts by visit count
alone (task_scheduler.cpp at 350f0dd; LFU at HEAD): this follows the paper.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from hobbit.sim.policies.base import CacheView, PolicyInputs, Pool
from hobbit.sim.policies.compiled import (
    EXPERT,
    LAYER,
    NOW_REQUEST,
    NOW_STEP,
    PINNED,
    TOUCHED,
    USES,
    Compiled,
    Space,
    kernel,
)
from hobbit.sim.policies.prefetch.eam import decay

PROB_FLOOR = 1e-8  # the prefetcher's own floor on a probability

# Compiled (``PriorityState``), a shared pool's victim is found without scoring every copy (``evict``'s text). A scan
# keeps the ``CANDIDATES`` lowest copies; ``cand`` holds them: whether they hold, for which pool, match, current layer
# and request, the last victim (-1: none) and its touch, the bound (its score's float bits and its touch), how many,
# then their slots.
CANDIDATES = 32
VALID, PR, MATCH, AT_LAYER, PREV, PREV_T, TH_V, TH_T, N, REQUEST, SLOTS = range(11)


class PriorityState(NamedTuple):
    """The compiled part's state: what it reads of the walk (``Space``), its candidates, its scratch, and each
    layer's copies of a shared pool (a list per pool and layer, in the order they entered)."""

    layers: int
    shared: bool  # one region for every layer (not cache.per_layer): the layer lists and the candidates
    now: Any  # the walk's counters (``Space.now``)
    match: Any  # the EAM prefetcher's match (``Space.match``) and its library
    library: Any
    cand: Any  # [SLOTS + CANDIDATES] int64 (the fields above)
    decay: Any  # [L]: each layer's decay at the current layer
    scan_i: Any  # [2, CANDIDATES + 1]: a scan's lowest copies' slots and touches, and their scores
    scan_v: Any
    slots: Any  # [pool, layer, i]: the layer's copies, ``n`` of them; ``pos``: a slot's place in its layer's list
    n: Any
    pos: Any


def eam_priority_state(space: Space) -> PriorityState:
    L, rows = space.layers, max(space.rows, 1)
    shared = not space.per_layer
    cand = np.full(SLOTS + CANDIDATES, -1, np.int64)
    cand[VALID] = 0
    per = min(rows, space.experts) if shared else 1  # a layer's list holds at most its E experts
    return PriorityState(
        L,
        shared,
        space.now,
        space.match,
        space.library,
        cand,
        np.zeros(L),
        np.zeros((2, CANDIDATES + 1), np.int64),
        np.zeros(CANDIDATES + 1),
        np.zeros((2, L if shared else 1, per), np.int64),
        np.zeros((2, L if shared else 1), np.int64),
        np.zeros((2, rows if shared else 1), np.int64),
    )


@kernel
def before(v, t, bv, bt):
    """Whether (score ``v``, last touch ``t``) goes before (``bv``, ``bt``) in the order."""
    return v < bv or (v == bv and t < bt)


@kernel
def free(pool, pr, s):
    """Whether slot ``s`` holds a copy an eviction may take: occupied and not pinned."""
    return pool[pr, s, LAYER] >= 0 and not pool[pr, s, PINNED]


@kernel
def score(pool, pr, s, decays, lib, m):
    """``EAMPriority.priority`` of slot ``s``'s copy: decay x (probability + floor) x (1 + uses), where every
    probability is 1 without a match (``m`` < 0)."""
    lay = pool[pr, s, LAYER]
    prob = 1.0 if m < 0 else lib[m, lay, pool[pr, s, EXPERT]]
    return decays[lay] * (prob + PROB_FLOOR) * (1 + pool[pr, s, USES])


@kernel
def set_decays(decays, layer_now):
    """Each layer's decay while ``layer_now`` is the current layer (``prefetch.eam.decay``), the same floats."""
    L = decays.shape[0]
    for x in range(L):
        decays[x] = 1.0 - ((x - layer_now) % L) / (L + 1)


@kernel
def fresh(state):
    """A new request resets every use count, so scores fell: the candidates kept before it no longer hold."""
    cand, req = state.cand, state.now[NOW_REQUEST]
    if cand[REQUEST] != req:
        cand[VALID] = 0
        cand[REQUEST] = req


@kernel
def enter(cand, fv, pool, pr, s, decays, lib, m, K):
    """A copy the candidates have not seen (it entered the last victim's slot): it joins them when it is evictable
    and goes before the bound; when they are ``K`` already, the one that goes last leaves, and the bound becomes the
    lower of it and the bound (every copy that is no candidate goes after the bound)."""
    if not free(pool, pr, s):
        return
    if not before(score(pool, pr, s, decays, lib, m), pool[pr, s, TOUCHED], fv[TH_V], cand[TH_T]):
        return
    n = cand[N]
    if n < K:
        cand[SLOTS + n] = s
        cand[N] = n + 1
        return
    w, wv, wt = -1, 0.0, 0
    for i in range(n):
        c = cand[SLOTS + i]
        if not free(pool, pr, c):  # not evictable now: it bounds nothing
            w = i
            break
        cv = score(pool, pr, c, decays, lib, m)
        if w < 0 or before(wv, wt, cv, pool[pr, c, TOUCHED]):
            w, wv, wt = i, cv, pool[pr, c, TOUCHED]
    if free(pool, pr, cand[SLOTS + w]) and before(wv, wt, fv[TH_V], cand[TH_T]):
        fv[TH_V], cand[TH_T] = wv, wt
    cand[SLOTS + w] = s


@kernel
def passed_layers(state, fv, pool, pr, first, passed, m, K):
    """The candidates carried past ``passed`` layers (``first`` the one they were kept at): those layers' copies now
    score lower (their distance to the current layer grew past the others'), every other copy higher, so the bound
    still holds for the others. The candidates of the passed layers leave, and every copy of those layers enters again
    under the new scores (``enter``: it joins the candidates when it goes before the bound), but the one in the last
    victim's slot, which enters as such."""
    cand, L = state.cand, state.layers
    k = 0
    for i in range(cand[N]):
        c = cand[SLOTS + i]
        if (pool[pr, c, LAYER] - first) % L >= passed:
            cand[SLOTS + k] = c
            k += 1
    cand[N] = k
    pv = cand[PREV]
    for d in range(passed):
        x = (first + d) % L
        for j in range(state.n[pr, x]):  # the layer's copies (its list)
            s = state.slots[pr, x, j]
            if s != pv:
                enter(cand, fv, pool, pr, s, state.decay, state.library, m, K)


@kernel
def eam_priority_to_evict(state, pool, pr, r0, r1):
    """``EAMPriority.to_evict`` over the compiled walk's pool: the lowest decay x (probability + floor) x (1 + uses),
    then the least recently touched (the match: ``match[0]``, -1: none). The order is total (a touch is unique), so any
    search that finds the least copy finds the reference scan's victim.

    Without a match every probability is 1, so a layer's copies all score at least its decay x (1 + floor), and a
    layer's decay grows as it nears the current one: a shared pool is then searched layer by layer from the farthest,
    through each layer's list of its copies, until a layer's least score is above the best found (usually after a layer
    or two). (With a match the least probability of a layer is 0 or near it, and bounds nothing.)

    With a match, a scan of a shared pool keeps its lowest copies (``CANDIDATES``) and the next one's (score, touch)
    as a bound: every other copy then goes after the bound. Until the match or the request changes, or a victim is
    found otherwise (without a match), no copy's score falls but those of the layers the current one passes, which
    enter again (``passed_layers``): a use raises its count and its touch, and a pinned copy let go enters (``unpin``).
    The one copy that enters without being seen, into the last victim's slot, is scored at the next eviction and joins
    the candidates when it goes before the bound (``enter``). The least candidate is the victim when it goes before
    the bound; when none is left that does, the pool is scanned again."""
    cand, decays, lib = state.cand, state.decay, state.library
    L = state.layers
    layer_now, m = state.now[NOW_STEP] % L, state.match[0]
    set_decays(decays, layer_now)  # each layer's, the same floats as per slot, without a division and a modulo per slot
    if not state.shared or m < 0:  # its victim's slot takes a copy the candidates do not see
        cand[VALID] = 0
    if state.shared and m < 0:
        return _by_layer(state, pool, pr, decays, layer_now)
    if not state.shared:
        return _least(pool, pr, r0, r1, decays, lib, m)
    best = _from_candidates(state, pool, pr, r1 - r0, layer_now, m)
    if best >= 0:
        return best
    return _scan(state, pool, pr, r0, r1, layer_now, m)


@kernel
def _by_layer(state, pool, pr, decays, layer_now):
    """``eam_priority_to_evict`` of a shared pool without a match: layer by layer from the farthest, through each layer's list of its
    copies, until a layer's least score (its decay x (1 + floor)) is above the best found."""
    L = state.layers
    least = 1.0 + PROB_FLOOR
    best, bv, bt = -1, 0.0, 0
    for dist in range(L - 1, -1, -1):
        x = (layer_now + dist) % L
        if best >= 0 and decays[x] * least > bv:  # so is every later layer's
            return best
        for j in range(state.n[pr, x]):
            s = state.slots[pr, x, j]
            if pool[pr, s, PINNED]:
                continue
            v = decays[x] * least * (1 + pool[pr, s, USES])
            if best < 0 or v < bv or (v == bv and pool[pr, s, TOUCHED] < bt):
                best, bv, bt = s, v, pool[pr, s, TOUCHED]
    return best


@kernel
def _least(pool, pr, r0, r1, decays, lib, m):
    """``eam_priority_to_evict`` of a layer's own region: the least copy of slots ``r0:r1``, by a scan."""
    best, bv, bt = -1, 0.0, 0
    for s in range(r0, r1):
        if not free(pool, pr, s):
            continue
        v = score(pool, pr, s, decays, lib, m)
        if best < 0 or before(v, pool[pr, s, TOUCHED], bv, bt):
            best, bv, bt = s, v, pool[pr, s, TOUCHED]
    return best


@kernel
def _from_candidates(state, pool, pr, slots, layer_now, m):
    """``eam_priority_to_evict`` of a shared pool with match ``m`` from the candidates the last scan kept (``slots``: the pool's
    size), brought up to date (the layers passed since, the last victim's slot): the least of them when it goes before
    the bound, which leaves them; -1 when none does (a scan is due)."""
    cand, decays, lib = state.cand, state.decay, state.library
    L, E = state.layers, lib.shape[2]
    fv = cand.view(np.float64)
    K = cand.shape[0] - SLOTS
    if cand[VALID] and cand[PR] == pr and cand[MATCH] == m and cand[AT_LAYER] != layer_now:
        passed = (layer_now - cand[AT_LAYER]) % L
        if passed * E <= slots:  # a few layers passed (as many copies as their experts, at most); past that, a scan
            passed_layers(state, fv, pool, pr, cand[AT_LAYER], passed, m, K)
            cand[AT_LAYER] = layer_now
    if cand[VALID] and cand[PR] == pr and cand[MATCH] == m and cand[AT_LAYER] == layer_now:
        pv = cand[PREV]
        cand[PREV] = -1
        if pv >= 0 and pool[pr, pv, TOUCHED] <= cand[PREV_T]:  # no copy entered the last victim's slot: start over
            cand[VALID] = 0
        elif pv >= 0:
            enter(cand, fv, pool, pr, pv, decays, lib, m, K)
    if not (cand[VALID] and cand[PR] == pr and cand[MATCH] == m and cand[AT_LAYER] == layer_now):
        return -1
    best, bv, bt, bi = -1, 0.0, 0, -1
    for i in range(cand[N]):
        s = cand[SLOTS + i]
        if not free(pool, pr, s):
            continue
        v = score(pool, pr, s, decays, lib, m)
        if best < 0 or before(v, pool[pr, s, TOUCHED], bv, bt):
            best, bv, bt, bi = s, v, pool[pr, s, TOUCHED], i
    if best >= 0 and before(bv, bt, fv[TH_V], cand[TH_T]):
        n = cand[N] - 1
        cand[SLOTS + bi] = cand[SLOTS + n]
        cand[N] = n
        cand[PREV], cand[PREV_T] = best, bt
        return best
    return -1


@kernel
def _scan(state, pool, pr, r0, r1, layer_now, m):
    """``eam_priority_to_evict`` of a shared pool with match ``m`` by a scan of slots ``r0:r1``: its K + 1 lowest copies kept in
    order, the first K as the candidates, the next as the bound; the least is the victim."""
    cand, decays, lib = state.cand, state.decay, state.library
    fv = cand.view(np.float64)
    K = cand.shape[0] - SLOTS
    cand[VALID] = 0
    cs, ct, cv = state.scan_i[0], state.scan_i[1], state.scan_v  # K + 1 each
    nc = 0
    for s in range(r0, r1):
        if not free(pool, pr, s):
            continue
        v = score(pool, pr, s, decays, lib, m)
        t = pool[pr, s, TOUCHED]
        if nc == K + 1 and not before(v, t, cv[K], ct[K]):
            continue
        x = min(nc, K)
        while x > 0 and before(v, t, cv[x - 1], ct[x - 1]):
            cs[x], cv[x], ct[x] = cs[x - 1], cv[x - 1], ct[x - 1]
            x -= 1
        cs[x], cv[x], ct[x] = s, v, t
        nc = min(nc + 1, K + 1)
    if nc == 0:
        return -1
    cand[VALID], cand[PR], cand[MATCH], cand[AT_LAYER] = 1, pr, m, layer_now
    if nc == K + 1:
        fv[TH_V], cand[TH_T] = cv[K], ct[K]
    else:  # every copy is a candidate: nothing else bounds
        fv[TH_V], cand[TH_T] = np.inf, 0
    n = min(nc, K)
    for i in range(1, n):
        cand[SLOTS + i - 1] = cs[i]
    cand[N] = n - 1
    cand[PREV], cand[PREV_T] = cs[0], ct[0]
    return cs[0]


@kernel
def eam_priority_evict(state, pool, pr, g, r0, r1):
    """The victim (``eam_priority_to_evict``), which leaves its layer's list."""
    fresh(state)
    s = eam_priority_to_evict(state, pool, pr, r0, r1)
    if s >= 0 and state.shared:
        lay, n, slots, pos = pool[pr, s, LAYER], state.n, state.slots, state.pos
        i, last = pos[pr, s], n[pr, lay] - 1
        moved = slots[pr, lay, last]
        slots[pr, lay, i] = moved
        pos[pr, moved] = i
        n[pr, lay] = last
    return s


@kernel
def eam_priority_insert(state, pool, pr, g, r0, r1, slot):
    """A copy took ``slot``: it joins its layer's list."""
    if state.shared:
        lay, n = pool[pr, slot, LAYER], state.n
        state.slots[pr, lay, n[pr, lay]] = slot
        state.pos[pr, slot] = n[pr, lay]
        n[pr, lay] += 1


@kernel
def eam_priority_unpin(state, pool, pr, g, slot):
    """A pinned copy let go while its pool's candidates hold: it enters them as it scores at the layer they were kept
    at (``enter``); the one in the last victim's slot enters as such."""
    fresh(state)
    cand = state.cand
    if cand[VALID] and cand[PR] == pr and slot != cand[PREV]:
        set_decays(state.decay, cand[AT_LAYER])
        fv = cand.view(np.float64)
        enter(cand, fv, pool, pr, slot, state.decay, state.library, cand[MATCH], cand.shape[0] - SLOTS)


class EAMPriority:
    """Evict the lowest proximity x probability x (1 + uses)."""

    name = "eam_priority"
    Knobs = None
    needs = frozenset({"prefetcher"})
    compiled = Compiled(
        evict=eam_priority_evict, insert=eam_priority_insert, unpin=eam_priority_unpin, state=eam_priority_state
    )

    def __init__(self, knobs: None = None, inputs: PolicyInputs | None = None) -> None:
        self.advisor = inputs.prefetcher if inputs else None

    def priority(self, pool: Pool, slot: int, view: CacheView) -> float:
        match = getattr(self.advisor, "match", None)
        layer, expert = pool.layer[slot], pool.expert[slot]
        prob = 1.0 if match is None else float(match[layer, expert])
        return decay(layer, view.layer, view.num_layers) * (prob + PROB_FLOOR) * (1 + pool.uses[slot])

    def to_evict(self, pool: Pool, view: CacheView, region: range) -> int:
        touched, cand = pool.touched, pool.candidates(region)
        return min(cand, key=lambda s: (self.priority(pool, s, view), touched[s])) if cand else -1
