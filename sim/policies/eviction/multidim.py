"""HOBBIT's multi-dimensional cache priority (paper §3.4, Eq. 3).

p = w_lru * R/T + w_lfu * F/T + w_lhu * H/T + w_fld * (1 - ((l_t - l_i + L) mod L) / L)

R: token index of the copy's last use in this request, F: its uses in this request, H: its
high-precision uses, T: tokens so far, l_t: the copy's layer, l_i: the layer being filled,
L: layers. The lowest p leaves; ties go to the least recently used. Weights are
normalised to sum 1.

Compiled (``compiled``): the same victim, by a scan of the region (``scan``), or, in a pool of at least
``PRUNE_MIN_SLOTS`` slots shared by every layer, from lists of the pool's slots per layer pruned by bounds
(``pruned_evict``), which its hooks keep as copies enter, leave, are used, unpinned and a request begins.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import numpy as np

from hobbit.sim.policies.base import CacheView, PolicyInputs, Pool
from hobbit.sim.policies.compiled import (
    HIGH_USES,
    LAST_USE,
    LAYER,
    NOW_STEP,
    NOW_TOKENS,
    PINNED,
    TOUCHED,
    USES,
    Compiled,
    Space,
    kernel,
)


def fld(layer: int, current: int, num_layers: int) -> float:
    """Forward layer distance term: 1 for the layer being filled, 1/L for the one just passed."""
    return 1.0 - ((layer - current + num_layers) % num_layers) / num_layers


@dataclass(frozen=True)
class MultiDimKnobs:
    """``system.cache.multidim``: the four weights of Eq. 3, >= 0 with a positive sum (normalised).
    The paper tunes them and does not publish them; conf/system/hobbit.yaml says how these were chosen."""

    LIMITS: ClassVar[dict[str, str]] = {"w_lru": ">=0", "w_lfu": ">=0", "w_lhu": ">=0", "w_fld": ">=0"}

    w_lru: float = 0.25
    """Weight of the recency term R/T: the token index of the copy's last use in this request over the tokens so far
    (paper §3.4, Eq. 3)."""
    w_lfu: float = 0.25
    """Weight of the frequency term F/T: the copy's uses in this request over the tokens so far (paper §3.4, Eq. 3)."""
    w_lhu: float = 0.0
    """Weight of the high-precision term H/T: the copy's high-precision uses in this request over the tokens so far
    (paper §3.4, Eq. 3)."""
    w_fld: float = 0.5
    """Weight of the forward layer distance term: 1 for the layer being filled, down to 1/L for the one just passed
    (paper §3.4, Eq. 3)."""

    def problems(self) -> list[str]:
        """What the ranges (``LIMITS``) cannot say; [] when nothing is wrong."""
        if self.w_lru + self.w_lfu + self.w_lhu + self.w_fld > 0:
            return []
        return ["w_lru + w_lfu + w_lhu + w_fld must be > 0"]


PRUNE_MIN_SLOTS = 512  # pools of at least this many slots (shared by every layer) evict layer by layer (pruned_evict)


def fld_table(w_fld: float, num_layers: int) -> np.ndarray:
    """``[current, layer] -> w_fld * fld(layer, current, L)``, the reference's ``_fld_weights`` for every layer being
    filled, with the same operations (so the same bits), as a writable copy (numba compiles a read-only array
    apart)."""
    return _fld_table(w_fld, num_layers).copy()


@functools.lru_cache(maxsize=8)
def _fld_table(w_fld: float, num_layers: int) -> np.ndarray:
    x = np.arange(num_layers)
    return w_fld * (1.0 - ((x[None, :] - x[:, None] + num_layers) % num_layers) / num_layers)


class MultiDimState(NamedTuple):
    """The compiled part's state (``multidim_state``): the weights, the FLD table, and per pool its layer lists
    (``on``: whether the pool keeps them; ``pruned_evict``)."""

    w: Any  # [4]: the normalised weights
    fw: Any  # [L, L]: w_fld * FLD by the layer being filled and the copy's layer (``fld_table``)
    on: Any  # [2] bool: the pool evicts from its layer lists
    slots: Any  # [2, L, E]: each layer's listed slots
    n: Any  # [2, L]: how many
    pos: Any  # [2, rows]: each slot's place in its layer's list
    qlb: Any  # [GC_ROWS + 2 NC, L]: the bounds and the kept victims (below)
    key: Any  # [2, L, E]: each listed slot's record part, in the list's order (+inf while pinned)
    now: Any  # the walk's counters (``Space.now``)


def multidim_state(space: Space) -> MultiDimState:
    L, E = space.layers, space.experts
    pol = MultiDim(space.knobs, PolicyInputs(num_layers=L))
    on = np.zeros(2, np.bool_)
    for pr in range(2):
        size = int(space.capacity[pr].sum())
        on[pr] = not space.per_layer and size >= PRUNE_MIN_SLOTS and size > 0
    rows = space.rows if on.any() else 1
    width = min(rows, E)  # a layer's list holds at most its E experts: a slot per (layer, expert) and pool
    qlb = np.zeros((GC_ROWS + 2 * NC, L))
    forget(qlb)
    return MultiDimState(
        w=np.array(pol.w, np.float64),
        fw=fld_table(pol.w[3], L),
        on=on,
        slots=np.zeros((2, L, width), np.int64),
        n=np.zeros((2, L), np.int64),
        pos=np.zeros((2, rows), np.int64),
        qlb=qlb,
        key=np.zeros((2, L, width)),
        now=space.now,
    )


@kernel
def scan(pool, pr, r0, r1, w, fw, tokens, layer_now):
    """``MultiDim.to_evict``: the victim among the region's occupied, unpinned slots (-1: none), by a scan of the
    region (per-layer regions, and pools under ``PRUNE_MIN_SLOTS``; larger ones: ``pruned_evict``)."""
    best = -1
    inv_t = 1.0 / max(tokens, 1)
    a, b, c = w[0] * inv_t, w[1] * inv_t, w[2] * inv_t
    bs, bt = 0.0, 0
    for s in range(r0, r1):
        if pool[pr, s, LAYER] < 0 or pool[pr, s, PINNED]:
            continue
        k = (
            a * pool[pr, s, LAST_USE]
            + b * pool[pr, s, USES]
            + c * pool[pr, s, HIGH_USES]
            + fw[layer_now, pool[pr, s, LAYER]]
        )
        if best < 0 or k < bs or (k == bs and pool[pr, s, TOUCHED] < bt):
            best, bs, bt = s, k, pool[pr, s, TOUCHED]
    return best


# On a large pool (``PRUNE_MIN_SLOTS``): slots are listed per layer of their expert, and each layer keeps a lower
# bound on w_lru * R + w_lfu * F + w_lhu * H over its slots (records only grow within a request; a new copy lowers
# it to its own). An eviction scans the layers in order of their bound on the score, bound * (1/T) + w_fld * FLD
# (with a 1e-9 relative margin, far above the rounding of sums of non-negative terms), and stops at the first whose
# bound exceeds the best score found: the same victim as the scan of every slot, from a few layers. ``key`` holds
# each listed slot's record part in the list's order (``part``), written wherever a record changes, +inf while the
# slot is pinned (no eviction may take it; its part and its layer's bound are set when the pin drops). Each scanned
# layer's own victim (its lowest score, then earliest touch) is kept in ``qlb``'s rows from ``GC_ROWS`` (``NC`` per
# pool: ``C_*``) with the 1/T and FLD term it was scored under, until the layer's list changes (``changed``: a use,
# a copy entering or leaving, a pin dropped, records reset): a later eviction under the same 1/T and term reads it
# instead of scanning the layer again. The victim of the pool is the lowest of the layers' own victims (scores,
# then touches, order every slot), so it is the same. Without an FLD term (w_fld = 0) the bounds of many layers tie
# (every copy unused since a request began has record part 0), and an eviction visits a third of the layers; their
# victims stay until a new token.
MARGIN = 1.0 - 1e-9
GC_ROWS, NC = 3, 6
C_INV_T, C_F, C_K, C_T, C_SLOT, C_NEXT = range(NC)


@kernel(inline=True)
def changed(qlb, pr, layer):
    """Layer ``layer``'s list of pool ``pr`` changed: its kept victim no longer holds."""
    qlb[GC_ROWS + pr * NC + C_INV_T, layer] = -1.0


@kernel(inline=True)
def forget(qlb):
    """No layer's victim is kept, in either pool (a new walk, or records reset)."""
    for pr in range(2):
        qlb[GC_ROWS + pr * NC + C_INV_T] = -1.0


@kernel(inline=True)
def kept(qlb, pr, g, inv_t, f):
    """Whether layer ``g`` of pool ``pr`` keeps a victim scored under 1/T ``inv_t`` and FLD term ``f``."""
    cb = GC_ROWS + pr * NC
    return qlb[cb + C_INV_T, g] == inv_t and qlb[cb + C_F, g] == f


@kernel(inline=True)
def part(w, pool, pr, s):
    """The record part w_lru * R + w_lfu * F + w_lhu * H of the copy in slot ``s`` (its entry in ``key``, and its
    share of its layer's bound)."""
    return w[0] * pool[pr, s, LAST_USE] + w[1] * pool[pr, s, USES] + w[2] * pool[pr, s, HIGH_USES]


@kernel
def beaten(bk, f, t):
    """The record part above which a slot of a layer whose FLD term is ``f`` scores above ``bk`` however its score
    rounds (``t``: the tokens T; every term is >= 0, and 1e-9 is far above the rounding of a sum of a few)."""
    return (bk * (1.0 + 1e-9) - f) * t * (1.0 + 1e-9)


@kernel(inline=True)
def layer_victim(pool, slots, n, key, qlb, pr, a, b, c, inv_t, t, f, g):
    """Layer ``g``'s own victim in pool ``pr`` (``pruned_evict``'s scan of one layer): (its slot, -1 when every
    copy is pinned; its score; its touch; the layer's lowest record part once it has left), kept from an earlier
    eviction under the same 1/T and FLD term ``f`` when the layer has not changed since, else scanned and kept.
    The scan finds the lowest record part, scores its slot, then the slots whose part is within ``beaten``'s
    threshold of the best score (ties), and sets the layer's bound to its lowest part (exact then)."""
    cb = GC_ROWS + pr * NC
    if kept(qlb, pr, g, inv_t, f):
        return np.int64(qlb[cb + C_SLOT, g]), qlb[cb + C_K, g], qlb[cb + C_T, g], qlb[cb + C_NEXT, g]
    m = n[pr, g]
    q1, q2, j1 = np.inf, np.inf, -1
    for j in range(m):
        q = key[pr, g, j]
        if q < q2:
            if q < q1:
                q1, q2, j1 = q, q1, j
            else:
                q2 = q
    qlb[pr, g] = q1
    ls, lk, lt, nxt = np.int64(-1), 0.0, 0.0, np.inf
    if j1 >= 0:  # an unpinned slot
        s = slots[pr, g, j1]
        ls, lk, lt, nxt = (
            s,
            a * pool[pr, s, LAST_USE] + b * pool[pr, s, USES] + c * pool[pr, s, HIGH_USES] + f,
            float(pool[pr, s, TOUCHED]),
            q2,
        )
        thr = beaten(lk, f, t)
        if q2 <= thr:
            for j in range(m):
                q = key[pr, g, j]
                if q > thr or j == j1:
                    continue
                s = slots[pr, g, j]
                k = a * pool[pr, s, LAST_USE] + b * pool[pr, s, USES] + c * pool[pr, s, HIGH_USES] + f
                if k < lk or (k == lk and pool[pr, s, TOUCHED] < lt):
                    ls, lk, lt, nxt = s, k, float(pool[pr, s, TOUCHED]), q1
                    thr = beaten(lk, f, t)
    qlb[cb + C_INV_T, g], qlb[cb + C_F, g], qlb[cb + C_K, g], qlb[cb + C_T, g] = inv_t, f, lk, lt
    qlb[cb + C_SLOT, g], qlb[cb + C_NEXT, g] = ls, nxt
    return ls, lk, lt, nxt


@kernel
def pruned_evict(pool, slots, n, key, qlb, pr, a, b, c, inv_t, fw, layer_now, num_layers):
    """``scan``'s victim over the whole pool, visiting layers by their bound. One pass computes the bounds, the lowest
    and the second lowest; most evictions end after the first layer (``layer_victim``: its own victim, kept or
    scanned). Otherwise every other layer whose bound is not above the best score so far is visited, first those
    whose victim is kept (they lower the best score at no scan), then the others, each skipped once its bound is
    above the best score; the lowest of the visited layers' victims is the pool's. The record parts are read from
    ``key`` (``part`` of each slot, side by side in the order of the layer's list; +inf for a pinned slot, which no
    eviction may take), so a layer's scan reads one short run of memory and visits the pool for about one slot.
    ``qlb`` rows 0 and 1 hold each pool's bounds (each scanned layer's lowest record part after the eviction: exact
    then), row 2 the bounds of this eviction, the rows from ``GC_ROWS`` the kept victims."""
    t = 1.0 / inv_t
    lb = qlb[2]
    for g in range(num_layers):  # the bounds apart from the search below: a loop without branches (vectorised)
        lb[g] = np.inf if n[pr, g] == 0 else (qlb[pr, g] * inv_t + fw[layer_now, g]) * MARGIN
    g1, lb1, lb2 = -1, np.inf, np.inf
    for g in range(num_layers):
        v = lb[g]
        if v < lb1:
            g1, lb1, lb2 = g, v, lb1
        elif v < lb2:
            lb2 = v
    if g1 < 0:
        return -1
    lb[g1] = np.inf
    best, bk, bt, best_next = layer_victim(pool, slots, n, key, qlb, pr, a, b, c, inv_t, t, fw[layer_now, g1], g1)
    best_g = g1 if best >= 0 else -1
    if not (lb2 == np.inf or (best >= 0 and lb2 > bk)):  # the second lowest bound, from the first pass, is not above
        # the best score: every other layer whose bound is not above it (the best so far), first those whose
        # victim is kept (no scan: they lower the best score, so fewer layers are scanned), then the others
        for keep in (True, False):
            for g in range(num_layers):
                if lb[g] == np.inf or (best >= 0 and lb[g] > bk):
                    continue
                f = fw[layer_now, g]
                if kept(qlb, pr, g, inv_t, f) != keep:
                    continue
                lb[g] = np.inf
                ls, lk, lt, nxt = layer_victim(pool, slots, n, key, qlb, pr, a, b, c, inv_t, t, f, g)
                if ls >= 0 and (best < 0 or lk < bk or (lk == bk and lt < bt)):
                    best, bk, bt, best_g, best_next = ls, lk, lt, g, nxt
    if best_g >= 0:  # the victim leaves its layer: the layer's bound is the lowest record part of the others
        qlb[pr, best_g] = best_next
    return best


@kernel(inline=True)
def multidim_evict(state, pool, pr, g, r0, r1):
    """The victim (``scan``, or ``pruned_evict`` on a pool with layer lists, which the victim leaves here)."""
    tokens = state.now[NOW_TOKENS]
    L = state.fw.shape[0]
    layer_now = state.now[NOW_STEP] % L
    w = state.w
    if not state.on[pr]:
        return scan(pool, pr, r0, r1, w, state.fw, tokens, layer_now)
    inv_t = 1.0 / max(tokens, 1)
    slots, n, pos, key, qlb = state.slots, state.n, state.pos, state.key, state.qlb
    s = pruned_evict(
        pool, slots, n, key, qlb, pr, w[0] * inv_t, w[1] * inv_t, w[2] * inv_t, inv_t, state.fw, layer_now, L
    )
    if s >= 0:  # out of its layer's list: the last takes its place
        old = pool[pr, s, LAYER]
        changed(qlb, pr, old)
        i, last = pos[pr, s], n[pr, old] - 1
        moved = slots[pr, old, last]
        slots[pr, old, i] = moved
        key[pr, old, i] = key[pr, old, last]
        pos[pr, moved] = i
        n[pr, old] = last
    return s


@kernel(inline=True)
def multidim_insert(state, pool, pr, g, r0, r1, slot):
    """A copy entered ``slot``: onto its layer's list, with its record part (+inf while pinned)."""
    if state.on[pr]:
        layer = pool[pr, slot, LAYER]
        slots, n, pos, key, qlb = state.slots, state.n, state.pos, state.key, state.qlb
        slots[pr, layer, n[pr, layer]] = slot
        pos[pr, slot] = n[pr, layer]
        n[pr, layer] += 1
        changed(qlb, pr, layer)
        if pool[pr, slot, PINNED]:  # no eviction takes it while it is pinned: its part is +inf till then
            key[pr, layer, pos[pr, slot]] = np.inf
        else:
            q = part(state.w, pool, pr, slot)
            key[pr, layer, pos[pr, slot]] = q
            qlb[pr, layer] = min(qlb[pr, layer], q)


@kernel(inline=True)
def multidim_records(state, pool, pr, g, slot):
    """The copy's records changed (a use of its key): its part, unless pinned; its layer's kept victim goes."""
    if state.on[pr]:
        layer = pool[pr, slot, LAYER]
        changed(state.qlb, pr, layer)
        if not pool[pr, slot, PINNED]:  # a pinned slot's part stays +inf until it is unpinned
            state.key[pr, layer, state.pos[pr, slot]] = part(state.w, pool, pr, slot)


@kernel(inline=True)
def multidim_unpin(state, pool, pr, g, slot):
    """A prefetch's pin dropped: its record part enters its layer's list and bound."""
    if state.on[pr]:
        layer = pool[pr, slot, LAYER]
        qlb = state.qlb
        changed(qlb, pr, layer)
        q = part(state.w, pool, pr, slot)
        state.key[pr, layer, state.pos[pr, slot]] = q
        qlb[pr, layer] = min(qlb[pr, layer], q)


@kernel(inline=True)
def multidim_begin(state, pool):
    """A new request: every record is 0 again, so is every bound and part (+inf for a pinned slot); no kept victim
    holds."""
    qlb, slots, n, key = state.qlb, state.slots, state.n, state.key
    L = qlb.shape[1]
    for pr in range(2):
        for g in range(L):
            qlb[pr, g] = 0.0
    forget(qlb)
    for pr in range(2):
        if state.on[pr]:
            for g in range(L):
                for j in range(n[pr, g]):
                    key[pr, g, j] = np.inf if pool[pr, slots[pr, g, j], PINNED] else 0.0


class MultiDim:
    """Evict the lowest multi-dimensional priority."""

    name = "multidim"
    Knobs = MultiDimKnobs
    needs: frozenset[str] = frozenset()
    compiled = Compiled(
        evict=multidim_evict,
        insert=multidim_insert,
        unpin=multidim_unpin,
        records=multidim_records,
        begin=multidim_begin,
        state=multidim_state,
    )

    def __init__(self, knobs: MultiDimKnobs | None = None, inputs: PolicyInputs | None = None) -> None:
        k = knobs or MultiDimKnobs()
        if k.problems() or min(k.w_lru, k.w_lfu, k.w_lhu, k.w_fld) < 0:
            raise ValueError("cache weights must be >= 0 with a positive sum")
        w = (k.w_lru, k.w_lfu, k.w_lhu, k.w_fld)
        self.w = tuple(x / sum(w) for x in w)
        self._fld: dict[tuple[int, int], list[float]] = {}

    def priority(self, pool: Pool, slot: int, view: CacheView) -> float:
        a, b, c, d = self.w
        rec = (a * pool.last_use[slot] + b * pool.uses[slot] + c * pool.high_uses[slot]) / max(view.tokens, 1)
        return rec + d * fld(pool.layer[slot], view.layer, view.num_layers)

    def _fld_weights(self, current: int, num_layers: int) -> list[float]:
        """w_fld * FLD by the copy's layer, for one layer being filled (memoised)."""
        key = (current, num_layers)
        if key not in self._fld:
            self._fld[key] = [self.w[3] * fld(x, current, num_layers) for x in range(num_layers)]
        return self._fld[key]

    def to_evict(self, pool: Pool, view: CacheView, region: range) -> int:
        a, b, c, _ = self.w
        inv_t = 1.0 / max(view.tokens, 1)
        a, b, c = a * inv_t, b * inv_t, c * inv_t
        fw = self._fld_weights(view.layer, view.num_layers)
        lu, us, hu, lay, touched, pinned = (
            pool.last_use,
            pool.uses,
            pool.high_uses,
            pool.layer,
            pool.touched,
            pool.pinned,
        )
        best, best_key = -1, None
        for s in region:  # one pass: candidates, score, ties to the least recently used
            if lay[s] < 0 or pinned[s]:
                continue
            k = (a * lu[s] + b * us[s] + c * hu[s] + fw[lay[s]], touched[s])
            if best_key is None or k < best_key:
                best, best_key = s, k
        return best
