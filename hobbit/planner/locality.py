"""Routing locality of a trace, measured, and the synthetic knobs that reproduce it.

``measure`` takes expert ids per token ([T, L, K], one request's tokens in order, or a list of such arrays, one per
request) and returns a ``Locality``: next-token reuse, popularity skew, cross-layer predictability and, where the
trace has gate weights, their concentration. ``fit`` turns a ``Locality`` into the ``SyntheticConfig`` knobs
(``zipf``, ``reuse``, ``cross_layer``, ``weight_concentration``) whose traces measure the same, by simulating the
synthetic process (``simulate``: ``synthetic.generate``'s routing, vectorised over requests) at the trace's own
shape and size. ``real_traces.read_real`` reads the real traces under ``../shared/real-traces`` (each folder's own format,
as its SOURCE.md describes it). benchmarks/routing_fit.py measures them all and writes hobbit/catalogue/data/routing.yaml.

Definitions (T tokens, L layers, K = top-k, E experts):

- ``reuse``: the mean over layers of the fraction of a token's K experts that the previous token of the same
  request used at the same layer (pairs of consecutive tokens pooled over requests, per layer, then averaged over
  layers). This is the definition the real traces' SOURCE.md files use, and the same number as
  ``stats.summarize``'s ``next_token_reuse.all`` (the mean over pairs of the per-layer mean: every pair has all
  layers, so the two orders of averaging agree); ``stats.overlap`` counts the shared experts.
- ``reuse_baseline``: ``stats.summarize``'s baseline, sum_e P(e)^2 / K with P(e) the share of tokens that use
  expert e at the layer: what two independent tokens with the measured load would share.
- ``reuse_excess`` = (reuse - K/E) / (1 - K/E). In ``synthetic.generate`` each of a token's K slots copies, with
  probability ``reuse``, a not yet chosen expert of the previous token; otherwise it draws afresh. Under uniform
  popularity, no cross-layer copying and K = 1 a fresh draw hits the previous token's expert with probability K/E,
  so measured = reuse + (1 - reuse) K/E and ``reuse_excess`` is the knob exactly. With K > 1 (the draws are
  without replacement), a skewed popularity, or cross-layer copying, a fresh draw hits more or less often than
  K/E; ``fit`` then solves for the knob numerically (the difference is in the table benchmarks/routing_fit.py
  prints).
- ``skew``: the share of a layer's expert selections that goes to its top 10 % of experts (the Lorenz curve of the
  per-layer load at 10 % of the experts, interpolated linearly within an expert, so that uniform load gives exactly
  0.1 for every E), averaged over layers. ``zipf`` is the exponent of ``synthetic._popularity`` whose top-K draws
  without replacement (``synthetic._choose``'s fresh draws) give that skew in expectation, popularity alone (no
  reuse, no cross-layer copying, infinitely many tokens); ``fit`` gives the knob with all of these accounted for.
- ``top_expert_share``: the most-used expert's share of a layer's selections, averaged over layers
  (``stats.load_summary``'s ``top_share``).
- ``cross_layer``: how well a token's experts at layer l-1 predict its experts at layer l: for each layer pair, the
  map a -> b that sends each expert a to the expert b it co-occurs with most often (counted on half of the
  requests) predicts the other half's tokens, and ``cross_layer`` is the fraction of a token's K experts at
  layer l that the map of its layer-(l-1) experts names (averaged over both halves, tokens and layer pairs).
  ``synthetic.generate``'s ``cross_layer`` knob is the chance a slot copies a fixed map of the same slot's expert
  at the previous layer. ``cross_layer_baseline`` is the same estimator with the layer-(l-1) experts shuffled
  across tokens (what popularity alone predicts), and ``cross_layer_excess`` the difference, which ``fit`` matches
  (the hit rate itself also rises with popularity skew, and is not monotone in the knob when zipf is high). Needs
  consecutive MoE layers (None otherwise). With a high zipf and a high reuse the knob barely shows (few slots reach
  the cross-layer branch, and a popular expert is predicted either way): its fit is then loose.
- ``weight_hhi``: the mean over tokens and layers of sum_i s_i^2, s the top-K gate weights normalised to sum 1
  (None without weights, or for K = 1). For synthetic's Dirichlet(alpha, ..., alpha) weights it is
  (alpha + 1) / (K alpha + 1), so ``weight_concentration`` = (1 - hhi) / (K hhi - 1).

``fit`` solves for zipf, reuse and cross_layer together (each moves the others' statistics: cross-layer copying
flattens the popularity and carries one token's reuse to the next layer): a finite-difference Jacobian, then
Broyden steps, against ``simulated_stats``, which measures traces simulated at the trace's own E, K, requests and
tokens (so the small-sample bias of skew and of the cross-layer estimator is the trace's too), with the same random
numbers at every step. It simulates at most SIM_LAYERS layers and lets the later ones stand for all the trace's
later layers (``_over_layers``).

Lookahead accuracy (synthetic's ``lookahead_*`` knobs) belongs to a predictor, not to routing: no real trace here
records predictions, so nothing is fitted for it.

Layer: the planner (stdlib, numpy, pyarrow and hobbit.traces only).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from hobbit.traces.stats import overlap

TOP_FRACTION = 0.1  # skew: the share of selections that the top 10 % of a layer's experts take
SIM_TOKENS = 16_000  # fit: tokens a simulated statistic is averaged over (replicates of the trace's shape)
SIM_LAYERS = 6  # fit: layers simulated (the later ones stand for all the trace's later layers)
SIM_MAX_LEN = 64  # fit: longest simulated request (a longer trace's tokens are cut into requests this long)
ZIPF_MAX = 4.0
TRIES = 4  # simulate: rejection draws before an exact fresh draw


# ------------------------------------------------------------------------------------------- statistics


@dataclass(frozen=True)
class Locality:
    """What ``measure`` finds in a trace (module docstring: definitions). None: the trace cannot show it."""

    num_experts: int
    top_k: int
    layers: int
    tokens: int
    requests: int
    pairs: int  # pairs of consecutive tokens of one request
    reuse: float | None
    reuse_uniform: float  # K/E
    reuse_excess: float | None  # (reuse - K/E) / (1 - K/E)
    reuse_baseline: float  # sum_e P(e)^2 / K, as stats.summarize
    skew: float  # top-10 % experts' share of the selections, mean over layers
    zipf: float  # synthetic._popularity exponent with that skew, popularity alone
    top_expert_share: float
    cross_layer: float | None = None
    cross_layer_baseline: float | None = None
    weight_hhi: float | None = None
    reuse_per_layer: tuple[float, ...] = field(default=(), repr=False)
    skew_per_layer: tuple[float, ...] = field(default=(), repr=False)

    @property
    def skew_uniform(self) -> float:
        return TOP_FRACTION

    @property
    def cross_layer_excess(self) -> float | None:
        """cross_layer over its shuffled baseline: what the previous layer predicts beyond popularity."""
        if self.cross_layer is None or self.cross_layer_baseline is None:
            return None
        return self.cross_layer - self.cross_layer_baseline


def _as_sequences(ids: np.ndarray | Sequence[np.ndarray]) -> list[np.ndarray]:
    if isinstance(ids, np.ndarray):
        if ids.ndim == 3:
            return [ids]
        if ids.ndim == 4:  # [requests, T, L, K]
            return list(ids)
        raise ValueError(f"ids must be [T, L, K] (or [R, T, L, K]), got shape {ids.shape}")
    seqs = [np.asarray(s) for s in ids]
    if not seqs:
        raise ValueError("no tokens")
    shapes = {s.shape[1:] for s in seqs}
    if len(shapes) != 1 or any(s.ndim != 3 for s in seqs):
        raise ValueError(f"every request's ids must be [T, L, K] with the same L and K, got {shapes}")
    return seqs


def top_share(counts: np.ndarray, fraction: float = TOP_FRACTION) -> np.ndarray:
    """Share of each row's total taken by its top ``fraction`` of columns (Lorenz curve, linear within a column):
    counts [L, E] -> [L]; uniform rows give ``fraction``."""
    counts = np.asarray(counts, dtype=np.float64)
    E = counts.shape[1]
    s = -np.sort(-counts, axis=1) / counts.sum(axis=1, keepdims=True).clip(min=1e-300)
    x = fraction * E
    n = math.floor(x)
    out = s[:, :n].sum(axis=1)
    if n < E:
        out = out + (x - n) * s[:, n]
    return out


def layer_counts(tokens: np.ndarray, num_experts: int) -> np.ndarray:
    """How many tokens use each (layer, expert): ids [N, L, K] -> [L, E]."""
    _, L, _ = tokens.shape
    flat = (np.arange(L)[None, :, None] * num_experts + tokens.astype(np.int64)).ravel()
    return np.bincount(flat, minlength=L * num_experts).reshape(L, num_experts)


def _reuse_sums(seqs: list[np.ndarray], k: int) -> tuple[np.ndarray, int]:
    L = seqs[0].shape[1]
    total, pairs = np.zeros(L), 0
    for s in seqs:
        if len(s) > 1:
            total += overlap(s[1:], s[:-1]).sum(axis=0) / k
            pairs += len(s) - 1
    return total, pairs


def _cross_hits(
    tokens: np.ndarray, half: np.ndarray, num_experts: int, shuffle: np.random.Generator | None
) -> np.ndarray:
    """The cross-layer estimator (module docstring) per layer pair (l-1, l), l = 1..L-1, over tokens [N, L, K] split
    in two by ``half`` [N] bool; ``shuffle``: first give each token the layer-(l-1) experts of another token of the
    same half (the baseline)."""
    _, L, k = tokens.shape
    E = num_experts
    out = np.zeros(max(L - 1, 0))
    for layer in range(1, L):
        a = tokens[:, layer - 1].astype(np.int64)
        b = tokens[:, layer]
        if shuffle is not None:
            a = a.copy()
            for h in (False, True):
                idx = np.flatnonzero(half == h)
                a[idx] = a[shuffle.permutation(idx)]
        hits, n = 0.0, 0
        for h in (False, True):
            train, test = half == h, half != h
            if not train.any() or not test.any():
                continue
            pair = (a[train][:, :, None] * E + b[train][:, None, :].astype(np.int64)).ravel()
            c = np.bincount(pair, minlength=E * E).reshape(E, E)
            best = np.where(c.max(axis=1) > 0, c.argmax(axis=1), -1)
            hits += float(overlap(b[test], best[a[test]]).sum()) / k
            n += int(test.sum())
        out[layer - 1] = hits / n if n else np.nan
    return out


def _halves(seqs: list[np.ndarray]) -> np.ndarray:
    """The cross-layer estimator's split: odd-numbered requests against even ones (one request: its two halves)."""
    if len(seqs) > 1:
        return np.concatenate([np.full(len(s), i % 2 == 1) for i, s in enumerate(seqs)])
    n = len(seqs[0])
    return np.arange(n) >= n // 2


def _core(seqs: list[np.ndarray], num_experts: int, cross: bool) -> dict:
    """Per-layer statistics: reuse [L] (None without pairs), skew [L], cross_layer and cross_layer_excess (over the
    shuffled baseline) [L-1] (None unless ``cross``), and the counts [L, E]."""
    _, L, k = seqs[0].shape
    tokens = np.concatenate(seqs)
    counts = layer_counts(tokens, num_experts)
    reuse_sum, pairs = _reuse_sums(seqs, k)
    hits = base = None
    if cross and L > 1:
        hits = _cross_hits(tokens, _halves(seqs), num_experts, None)
        base = _cross_hits(tokens, _halves(seqs), num_experts, np.random.default_rng(0))
    return {
        "tokens": tokens,
        "pairs": pairs,
        "counts": counts,
        "reuse": reuse_sum / pairs if pairs else None,
        "skew": top_share(counts),
        "cross_layer": hits,
        "cross_layer_baseline": base,
        "cross_layer_excess": None if hits is None or base is None else hits - base,
    }


def measure(
    ids: np.ndarray | Sequence[np.ndarray],
    num_experts: int,
    weights: np.ndarray | Sequence[np.ndarray] | None = None,
    consecutive_layers: bool = True,
) -> Locality:
    """The locality statistics of a trace (module docstring: definitions).

    ids: [T, L, K] expert ids of one request's tokens in order, or a list of such arrays (one per request, same L
    and K), or [R, T, L, K]. weights: the matching gate weights (any scale: each token's top-K weights are
    normalised to sum 1), or None. consecutive_layers: whether the L layers are consecutive MoE layers (the
    cross-layer statistic needs them)."""
    seqs = _as_sequences(ids)
    _, L, k = seqs[0].shape
    c = _core(seqs, num_experts, consecutive_layers)
    uniform = k / num_experts
    reuse = None if c["reuse"] is None else float(c["reuse"].mean())
    counts = c["counts"]
    n_tok = len(c["tokens"])
    base = ((counts / max(n_tok, 1)) ** 2).sum(axis=1) / k
    top = counts.max(axis=1) / counts.sum(axis=1).clip(min=1)
    cross = cross_base = None
    if c["cross_layer"] is not None:
        cross, cross_base = float(c["cross_layer"].mean()), float(c["cross_layer_baseline"].mean())
    hhi = None
    if weights is not None and k > 1:
        w = np.concatenate([np.asarray(x, np.float64) for x in _as_sequences(weights)])
        s = w / w.sum(axis=-1, keepdims=True).clip(min=1e-300)
        hhi = float((s**2).sum(axis=-1).mean())
    skew = float(c["skew"].mean())
    return Locality(
        num_experts=num_experts,
        top_k=k,
        layers=L,
        tokens=n_tok,
        requests=len(seqs),
        pairs=c["pairs"],
        reuse=reuse,
        reuse_uniform=uniform,
        reuse_excess=None if reuse is None or uniform >= 1 else (reuse - uniform) / (1 - uniform),
        reuse_baseline=float(base.mean()),
        skew=skew,
        zipf=zipf_for_skew(skew, num_experts, k),
        top_expert_share=float(top.mean()),
        cross_layer=cross,
        cross_layer_baseline=cross_base,
        weight_hhi=hhi,
        reuse_per_layer=() if c["reuse"] is None else tuple(float(x) for x in c["reuse"]),
        skew_per_layer=tuple(float(x) for x in c["skew"]),
    )


def measure_counts(counts: np.ndarray, top_k: int, tokens: int) -> Locality:
    """Popularity only, from selection counts [L, E] (each row: one layer's top-K selections of ``tokens`` tokens):
    the skew and its zipf; no reuse (None)."""
    counts = np.asarray(counts, dtype=np.float64)
    L, E = counts.shape
    skew = top_share(counts)
    base = ((counts / max(tokens, 1)) ** 2).sum(axis=1) / top_k
    return Locality(
        num_experts=E,
        top_k=top_k,
        layers=L,
        tokens=tokens,
        requests=0,
        pairs=0,
        reuse=None,
        reuse_uniform=top_k / E,
        reuse_excess=None,
        reuse_baseline=float(base.mean()),
        skew=float(skew.mean()),
        zipf=zipf_for_skew(float(skew.mean()), E, top_k),
        top_expert_share=float((counts.max(axis=1) / counts.sum(axis=1).clip(min=1)).mean()),
        skew_per_layer=tuple(float(x) for x in skew),
    )


# ------------------------------------------------------------------------------------------- popularity


@lru_cache(maxsize=32)
def _gumbel(num_experts: int, draws: int = 8000) -> np.ndarray:
    return np.random.default_rng(12345).gumbel(size=(draws, num_experts))


def expected_skew(zipf: float, num_experts: int, top_k: int) -> float:
    """The skew of synthetic._popularity(zipf)'s top-K draws without replacement, infinitely many tokens.

    K = 1: the Zipf shares themselves. K > 1: the inclusion shares of successive sampling (Gumbel top-K, 8,000 fixed
    draws: the same draws for every zipf, so the result is monotone in zipf)."""
    E, k = num_experts, top_k
    ranks = np.arange(1, E + 1, dtype=np.float64)
    p = ranks**-zipf
    p /= p.sum()
    if k == 1:
        share = p
    elif k >= E:
        share = np.full(E, 1.0 / E)
    else:
        keys = np.log(p)[None, :] + _gumbel(E)
        top = np.argpartition(-keys, k - 1, axis=1)[:, :k]
        share = np.bincount(top.ravel(), minlength=E) / top.size
    return float(top_share(share[None, :])[0])  # shares in rank order are sorted up to noise; top_share sorts


def zipf_for_skew(skew: float, num_experts: int, top_k: int) -> float:
    """The zipf exponent whose ``expected_skew`` is ``skew`` (bisection; 0 at or below uniform, ZIPF_MAX at most)."""
    lo, hi = 0.0, ZIPF_MAX
    if skew <= expected_skew(lo, num_experts, top_k):
        return 0.0
    if skew >= expected_skew(hi, num_experts, top_k):
        return hi
    for _ in range(40):
        mid = (lo + hi) / 2
        if expected_skew(mid, num_experts, top_k) < skew:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-4:
            break
    return (lo + hi) / 2


def concentration_for_hhi(hhi: float, top_k: int) -> float | None:
    """Dirichlet alpha with E[sum s_i^2] = hhi for K symmetric shares: (1 - hhi) / (K hhi - 1); None if out of range."""
    if top_k < 2 or not 1.0 / top_k < hhi < 1.0:
        return None
    return (1.0 - hhi) / (top_k * hhi - 1.0)


# ------------------------------------------------------------------------------------------- simulation


def _alias(p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Walker's alias table of the distribution ``p`` (Vose's construction): (accept [E], alias [E])."""
    E = len(p)
    scaled = np.asarray(p, np.float64) * E / p.sum()
    accept, alias = np.ones(E), np.arange(E)
    small = [i for i in range(E) if scaled[i] < 1.0]
    large = [i for i in range(E) if scaled[i] >= 1.0]
    while small and large:
        s, g = small.pop(), large.pop()
        accept[s], alias[s] = scaled[s], g
        scaled[g] -= 1.0 - scaled[s]
        (small if scaled[g] < 1.0 else large).append(g)
    return accept, alias


def _draw_tables(
    rng: np.random.Generator, E: int, rows: int, zipf: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Each (group, layer) row's Zipf popularity over a permutation of the experts, its cross-layer map (a
    permutation) and the popularity's alias tables, [rows, E] each, drawn in that order."""
    p = np.arange(1, E + 1, dtype=np.float64) ** -zipf
    p /= p.sum()
    pop = np.empty((rows, E))  # row g * L + layer
    for row in range(rows):
        pop[row, rng.permutation(E)] = p
    xmap = np.stack([rng.permutation(E) for _ in range(rows)])
    tables = [_alias(pop[row]) for row in range(rows)]
    return pop, xmap, np.stack([a for a, _ in tables]), np.stack([b for _, b in tables])


def simulate(
    num_experts: int,
    top_k: int,
    num_layers: int,
    requests: int,
    tokens: int,
    zipf: float,
    reuse: float,
    cross_layer: float,
    seed: int = 0,
    traces: int = 1,
) -> np.ndarray:
    """Expert ids [requests, tokens, L, K] drawn by synthetic.generate's process (synthetic._choose, slot by slot:
    reuse of the previous token's experts with probability ``reuse``, else the cross-layer map of the same slot's
    expert at the previous layer with probability ``cross_layer``, else a fresh draw from the layer's Zipf
    popularity without the experts already chosen), vectorised over requests: the same distribution as
    ``generate``, not the same random draws. Random numbers are drawn in a fixed pattern whatever the knobs, so two
    calls with one seed share them (smooth statistics in the knobs, which ``fit`` relies on).

    traces: the requests are split into this many equal groups (``requests`` a multiple of it), each with its own
    popularity permutations and cross-layer maps, as if drawn by that many ``generate`` calls with other seeds."""
    E, k, L, R, T = num_experts, top_k, num_layers, requests, tokens
    if traces < 1 or R % traces:
        raise ValueError(f"requests ({R}) must be a multiple of traces ({traces})")
    rng = np.random.default_rng(seed)
    G = traces
    pop, xmap, accept, alias = _draw_tables(rng, E, G * L, zipf)
    group = np.arange(R) // (R // G) * L  # a request's first row in pop, xmap, accept, alias
    ids = np.zeros((R, T, L, k), np.int64)  # zeros: the cells not drawn yet are read (and unused) as expert 0
    # (t, layer) depends on (t-1, layer) and (t, layer-1) only: the cells of one anti-diagonal t + layer = d are
    # drawn together, slot by slot, for all requests at once
    for d in range(T + L - 1):
        ts = np.arange(max(0, d - L + 1), min(d, T - 1) + 1)
        rr = np.repeat(np.arange(R), len(ts))
        tt = np.tile(ts, R)
        ll = d - tt
        gl = group[rr] + ll
        M = len(rr)
        rows = np.arange(M)
        has_prev, has_below = tt > 0, ll > 0
        prev = ids[rr, np.maximum(tt - 1, 0), ll]  # [M, K]; rows without a previous token: unused
        chosen = np.zeros((M, E), bool)
        for slot in range(k):
            u = rng.random(M)
            keys = rng.random((M, k))
            tries = rng.random((M, TRIES))
            u_fresh = rng.random(M)
            pick = np.full(M, -1)
            # reuse: one of the previous token's experts not chosen yet (one always is), uniformly
            keys[chosen[rows[:, None], prev]] = -1.0
            use = has_prev & (u < reuse)
            pick[use] = prev[rows, keys.argmax(axis=1)][use]
            # cross-layer (synthetic._choose's elif: also taken below reuse + cross_layer when there is no
            # previous token): the layer's map of the same slot's expert at the previous layer, if not chosen
            e = xmap[gl, ids[rr, tt, np.maximum(ll - 1, 0), slot]]
            ok = has_below & ~use & (u < reuse + cross_layer) & ~chosen[rows, e]
            pick[ok] = e[ok]
            # fresh: the first of TRIES draws from the layer's popularity that is not chosen (rejection sampling),
            # else (rarely) an exact draw from the popularity without the chosen experts
            x = tries * E
            col = np.minimum(x.astype(np.int64), E - 1)
            cand = np.where(x - col < accept[gl[:, None], col], col, alias[gl[:, None], col])
            free = ~chosen[rows[:, None], cand]
            got = cand[rows, free.argmax(axis=1)]
            fresh = pick < 0
            miss = fresh & ~free.any(axis=1)
            if miss.any():
                w = np.where(chosen[miss], 0.0, pop[gl[miss]])
                cum = np.cumsum(w, axis=1)
                got[miss] = np.minimum((cum <= (u_fresh[miss] * cum[:, -1])[:, None]).sum(axis=1), E - 1)
            pick[fresh] = got[fresh]
            chosen[rows, pick] = True
            ids[rr, tt, ll, slot] = pick
    return ids


# ------------------------------------------------------------------------------------------- fit

KNOBS = ("zipf", "reuse", "cross_layer")


def _shape(loc: Locality) -> tuple[int, int, int, int]:
    """(requests, tokens per request, layers, replicates) of the simulated traces that stand in for ``loc``'s trace:
    its tokens cut into requests of its mean length (at most SIM_MAX_LEN), at most SIM_LAYERS layers, and enough
    replicates for SIM_TOKENS tokens."""
    T = min(max(2, round(loc.tokens / max(loc.requests, 1))), SIM_MAX_LEN)
    R = max(1, round(loc.tokens / T))
    return R, T, min(loc.layers, SIM_LAYERS), max(1, math.ceil(SIM_TOKENS / (R * T)))


def _over_layers(per_layer: np.ndarray, n: int, first: int) -> float:
    """The mean over ``n`` layers of a statistic simulated for fewer: the ``first`` layers as simulated (they differ:
    no cross-layer input at layer 0), every later one as the mean of the simulated later ones."""
    if len(per_layer) >= n or len(per_layer) <= first:
        return float(per_layer.mean())
    return float((per_layer[:first].sum() + (n - first) * per_layer[first:].mean()) / n)


def simulated_stats(
    knobs: dict[str, float],
    loc: Locality,
    seed: int = 0,
    stats: Sequence[str] = ("skew", "reuse", "cross_layer", "cross_layer_excess"),
) -> dict[str, float]:
    """The statistics of traces simulated with ``knobs`` at ``loc``'s shape (``_shape``), averaged over the
    replicates; each replicate is measured at the trace's own size, so the small-sample bias of skew and of the
    cross-layer estimator matches the trace's. Where fewer layers are simulated than the trace has, the layer means
    stand for all of them (``_over_layers``)."""
    R, T, L, reps = _shape(loc)  # one trace's shape, ``reps`` traces (each its own permutations)
    ids = simulate(
        loc.num_experts,
        loc.top_k,
        L,
        R * reps,
        T,
        knobs["zipf"],
        knobs["reuse"],
        knobs.get("cross_layer", 0.0),
        seed,
        traces=reps,
    )
    first = {"skew": 2, "reuse": 2, "cross_layer": 1, "cross_layer_excess": 1}
    acc: dict[str, list[float]] = {s: [] for s in stats}
    for r in range(reps):
        c = _core(list(ids[r * R : (r + 1) * R]), loc.num_experts, any(s.startswith("cross") for s in stats))
        for s in stats:
            n = loc.layers - 1 if s.startswith("cross") else loc.layers
            acc[s].append(_over_layers(c[s], n, first[s]))
    return {s: float(np.mean(v)) for s, v in acc.items()}


def _solve(
    f: Callable[[np.ndarray], np.ndarray],
    x0: np.ndarray,
    target: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    step: np.ndarray,
    tol: float,
    iters: int = 12,
) -> tuple[np.ndarray, np.ndarray]:
    """x in [lo, hi] with f(x) ~ target: a finite-difference Jacobian at x0, then Broyden steps."""
    x = np.clip(x0, lo, hi)
    y = f(x)
    J = np.empty((len(target), len(x)))
    for i in range(len(x)):
        h = step[i] if x[i] + step[i] <= hi[i] else -step[i]
        xi = x.copy()
        xi[i] += h
        J[:, i] = (f(xi) - y) / h
    best = (float(np.abs(y - target).max()), x, y)
    for _ in range(iters):
        if best[0] < tol:
            break
        dx = np.linalg.lstsq(J, target - y, rcond=None)[0]
        x_new = np.clip(x + dx, lo, hi)
        dx = x_new - x
        if not np.any(dx):
            break
        y_new = f(x_new)
        J += np.outer((y_new - y) - J @ dx, dx) / float(dx @ dx)
        x, y = x_new, y_new
        err = float(np.abs(y - target).max())
        if err < best[0]:
            best = (err, x, y)
    return best[1], best[2]


def fit(loc: Locality, num_experts: int, top_k: int, seed: int = 0, tol: float = 1e-3) -> dict[str, float]:
    """``SyntheticConfig`` knobs that reproduce ``loc``: zipf (skew), reuse (reuse) and cross_layer (the cross-layer
    statistic over its shuffled baseline, ``cross_layer_excess``, where measured; else held at 0), solved jointly against ``simulated_stats`` at the trace's shape;
    weight_concentration from ``weight_hhi`` (closed form) where measured. A trace with popularity only (no reuse)
    gives zipf alone, from ``zipf_for_skew``."""
    if (num_experts, top_k) != (loc.num_experts, loc.top_k):
        raise ValueError(f"loc is E={loc.num_experts}, K={loc.top_k}; asked for E={num_experts}, K={top_k}")
    out: dict[str, float] = {}
    if loc.reuse is None:
        out["zipf"] = loc.zipf
    else:
        names = ["zipf", "reuse"] + (["cross_layer"] if loc.cross_layer is not None else [])
        stat_of = {"zipf": "skew", "reuse": "reuse", "cross_layer": "cross_layer_excess"}
        stats = [stat_of[n] for n in names]
        target = np.array([getattr(loc, s) for s in stats])
        x0 = [loc.zipf, min(max(loc.reuse_excess or 0.0, 0.0), 1.0)]
        if loc.cross_layer is not None:
            base = loc.cross_layer_baseline or 0.0
            x0.append(min(max((loc.cross_layer - base) / max(1 - base, 1e-9), 0.0), 1.0))

        def f(x: np.ndarray) -> np.ndarray:
            knobs = dict(zip(names, (float(v) for v in x)))
            got = simulated_stats(knobs, loc, seed, stats)
            return np.array([got[s] for s in stats])

        n = len(names)
        lo, hi = np.zeros(n), np.array([ZIPF_MAX] + [1.0] * (n - 1))
        x, _ = _solve(f, np.array(x0), target, lo, hi, np.array([0.1] + [0.05] * (n - 1)), tol)
        out.update({k: float(v) for k, v in zip(names, x)})
        out.setdefault("cross_layer", 0.0)
    if loc.weight_hhi is not None:
        a = concentration_for_hhi(loc.weight_hhi, top_k)
        if a is not None:
            out["weight_concentration"] = a
    return out
