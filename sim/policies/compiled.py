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
  selected it;
- ``records(state, pool, pr, g, slot)``: the copy's records of this request (``LAST_USE``, ``USES``, ``HIGH_USES``)
  changed: its key was used, served by this copy or another (called for each pool's copy, once the use is served
  and any copy it brought has entered);
- ``begin(state, pool)``: a new request began; every copy's records are 0 again.

Each but ``evict`` is optional, as are the policy's hooks in ``base.Hooked``. What a hook may read of the walk besides
the pool (the current step; each key's next use; MoE-Infinity's prefetcher's match and library) comes in ``Space``, for
its state to keep.

A prefetcher's compiled part (``CompiledPrefetch``, below) is written the same way, against ``Sight``; and the sums
and the precision rule the walk and every part share (``pairwise``, ``rule_row``) are kernels here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar, overload

import numpy as np

# the copy's layer (-1: a free slot) and expert; its record of uses in this request (last use, uses, uses at high
# precision, all uses since it entered); its last touch (a counter, unique: a use or its insertion); the transfer
# that brings it (-1: landed); whether it is pinned (a prefetch waiting for its layer: never a victim)
LAYER, EXPERT, LAST_USE, USES, HIGH_USES, ALL_USES, TOUCHED, TRANSFER, PINNED = range(9)
N_FIELDS = 9

KERNEL = "__hobbit_kernel__"
PLAIN, INLINE, NRT = 1, 2, 3  # how a kernel is compiled (``kernel``'s marks)
F = TypeVar("F", bound=Callable[..., Any])


@overload
def kernel(fn: F, *, inline: bool = False, nrt: bool = False) -> F: ...
@overload
def kernel(fn: None = None, *, inline: bool = False, nrt: bool = False) -> Callable[[F], F]: ...
def kernel(fn: F | None = None, *, inline: bool = False, nrt: bool = False) -> F | Callable[[F], F]:
    """Marks ``fn`` as part of a policy's compiled part: the compiled core compiles it with numba (``cache=True``) in
    place in its module, with every other marked function of that module, before the walk first calls a hook. Plain
    Python until then (it runs as written without numba). Compiled without reference counts, so it allocates nothing
    (``nrt``: with them, it may), or, ``inline``, inlined into its callers' code (a hook the walk calls on every step,
    whose arguments would cost more to pass than its work)."""

    def mark(f: F) -> F:
        setattr(f, KERNEL, INLINE if inline else (NRT if nrt else PLAIN))
        return f

    return mark(fn) if fn is not None else mark


NEVER = 1 << 62  # ``Space.next_use`` of a key no later step selects

# ``Space.now``'s items: the tokens so far in the request (T), the current step, pass * L + layer (its layer:
# ``now[NOW_STEP] % L``), and the requests begun (a new request resets the records: ``LAST_USE`` .. ``HIGH_USES`` of
# every copy)
NOW_TOKENS, NOW_STEP, NOW_REQUEST = 2, 3, 13


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

    evict: Callable[..., Any]  # -> the victim slot (an int)
    hit: Callable[..., Any] | None = None
    insert: Callable[..., Any] | None = None
    miss: Callable[..., Any] | None = None
    overflow: Callable[..., int] | None = None
    state: Callable[[Space], tuple] | None = None
    unpin: Callable[..., Any] | None = None
    renew: Callable[..., Any] | None = None
    records: Callable[..., Any] | None = None
    begin: Callable[..., Any] | None = None


# The sums and the precision rule every compiled part and the walk share: numpy's pairwise sum (for the same floats
# as the reference's numpy sums) and HOBBIT's T1/T2 rule over one token's selections.
HIGH, LOW, SKIP = 0, 1, 2  # ``policies.base.Precision``
PW_STACK = 128  # ``pairwise_in``'s stack: two more entries a halving, at most 1 + 2 x 56 for 2^63 elements


@kernel
def pairwise_block(a, lo, n):
    """numpy's pairwise sum of a block of at most 128 (PW_BLOCKSIZE): eight running sums, then the rest."""
    if n < 8:
        res = 0.0
        for i in range(lo, lo + n):
            res += a[i]
        return res
    r0, r1, r2, r3 = a[lo], a[lo + 1], a[lo + 2], a[lo + 3]
    r4, r5, r6, r7 = a[lo + 4], a[lo + 5], a[lo + 6], a[lo + 7]
    i = 8
    while i < n - (n % 8):
        r0 += a[lo + i]
        r1 += a[lo + i + 1]
        r2 += a[lo + i + 2]
        r3 += a[lo + i + 3]
        r4 += a[lo + i + 4]
        r5 += a[lo + i + 5]
        r6 += a[lo + i + 6]
        r7 += a[lo + i + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += a[lo + i]
        i += 1
    return res


@kernel
def pairwise_in(a, lo, n, todo, sums):
    """``pairwise`` with its stack given (``todo``: PW_STACK x 3 int64, lo, n and whether its halves are pushed;
    ``sums``: PW_STACK floats), so that a kernel without reference counts may call it."""
    if n <= 128:
        return pairwise_block(a, lo, n)
    nt, ns = 1, 0
    todo[0, 0], todo[0, 1], todo[0, 2] = lo, n, 0
    while nt:
        nt -= 1
        tlo, tn, split = todo[nt, 0], todo[nt, 1], todo[nt, 2]
        if tn <= 128:
            sums[ns] = pairwise_block(a, tlo, tn)
            ns += 1
        elif split:
            sums[ns - 2] = sums[ns - 2] + sums[ns - 1]  # left + right
            ns -= 1
        else:
            n2 = tn // 2
            n2 -= n2 % 8
            todo[nt, 0], todo[nt, 1], todo[nt, 2] = tlo, tn, 1
            todo[nt + 1, 0], todo[nt + 1, 1], todo[nt + 1, 2] = tlo + n2, tn - n2, 0  # right, after the left
            todo[nt + 2, 0], todo[nt + 2, 1], todo[nt + 2, 2] = tlo, n2, 0
            nt += 3
    return sums[0]


@kernel(nrt=True)
def pairwise(a, lo, n):
    """numpy's pairwise sum of ``a[lo:lo + n]`` (its add.reduce over a contiguous axis), for the same floats: blocks
    of at most 128, halves (cut to a multiple of 8) added as numpy's recursion adds them; here with a stack
    (``pairwise_in``)."""
    if n <= 128:
        return pairwise_block(a, lo, n)
    return pairwise_in(a, lo, n, np.empty((PW_STACK, 3), np.int64), np.empty(PW_STACK))


@kernel(inline=True)
def rule_row(w, nan_zero, hobbit, uniform, hi, lo, row, cls_out, wn_out):
    """One token's K selections: the gate mass normalised (the reference's, numpy's pairwise sum) into ``wn_out`` and
    the class into ``cls_out``: HOBBIT's rule (``policies.precision.hobbit_classes``, ``hi`` / ``lo`` = T1 / T2 +
    EPS) or ``uniform``. ``nan_zero``: NaN weights count as 0 (predictions, as the workload's fill leaves them)."""
    K = w.shape[0]
    small = 0.0  # numpy's pairwise sum below 8 values is this running sum (``pairwise_block``), kept here: no call
    for k in range(K):
        x = w[k]
        row[k] = 0.0 if nan_zero and np.isnan(x) else x
        small += row[k]
    total = max(small if K < 8 else (pairwise_block(row, 0, K) if K <= 128 else pairwise(row, 0, K)), 1e-30)
    c = 0.0
    for k in range(K):
        x = row[k] / total
        wn_out[k] = x
        if hobbit:
            c += x
            above = 0.0 if k == 0 else c - x
            cls_out[k] = HIGH if above <= hi else (LOW if above <= lo else SKIP)
        else:
            cls_out[k] = uniform
    if hobbit:
        cls_out[0] = HIGH


# A prefetcher's compiled part (``CompiledPrefetch``) is, like an eviction policy's, functions of its own file
# marked ``@kernel`` and a plain function that builds its state. Once the router of ``layer`` has run for the tokens
# ``a:b`` of a pass, the walk calls ``propose(state, sight, layer, a, b) -> n``: it writes its proposals (layer,
# expert, precision) into the first ``n`` rows of ``sight.props``, in the reference's ``propose`` order (the walk
# drops those present by the time it copies them, as the reference's caller does). ``begin(state)``, optional, runs
# at a new request (the reference's ``end_request`` of the one before). ``sight`` (``Sight``) is what it may read of
# the walk (the compiled counterpart of ``PrefetchContext``), with the walk's buffers it may write; the kernels below
# are ``PrefetchContext``'s services. A ``propose`` runs once a step: mark it ``inline``, so the walk passes it no
# arguments.


class Sight(NamedTuple):
    """What a prefetcher's compiled part reads of the walk at a step, and the buffers it writes (borrowed arrays)."""

    ids: Any  # [N, L, K] int16: the trace's experts (``PrefetchContext.future``: the oracle's)
    weights: Any  # [N, L, K]: their gate weights
    pred: Any  # [N, L, D, K] int16: the trace's predictions of later layers (``predict``; -1: none)
    pred_w: Any  # [N, L, D, K]: their weights
    top_k: int  # the model's experts per token
    depth: int  # D: the prediction depths the trace has, up to max_depth
    max_depth: int  # system.prefetch.max_depth (``PolicyInputs.depth``)
    history: bool  # past D, ``predict`` falls back to the request's counts (prefetch.fallback == history)
    hobbit_rule: bool  # the precision rule (``rule_row``): HOBBIT's T1/T2, else ``uniform`` for all
    uniform: int
    rule_hi: float
    rule_lo: float
    resident: Any  # [L, E] bool: resident on the device
    cpu_layer: Any  # [L] bool: the layer's experts stay on the CPU
    index: Any  # [2, L, E]: each (layer, expert)'s slot per pool (-1: none)
    staging: int  # prefetch.staging_slots
    stg_tid: Any  # [L, E]: its staged transfer (-1: none)
    counts: Any  # [L, E]: the tokens that used each expert in this request (``PrefetchContext.counts``)
    now: Any  # the walk's counters (``Space.now``)
    want: Any  # [E] buffers: each expert's wanted class (SKIP between uses), the wanted in order, counts
    worder: Any
    hist: Any
    row: Any  # [K]: ``rule_row``'s buffers
    rc: Any
    rm: Any
    props: Any  # [most + 1, 3] int64: written, the proposals: layer, expert, precision
    sink: Any  # [1] int64: written, loads the walk must not drop


class PrefetchSpace(NamedTuple):
    """What a prefetcher's state is built from (``CompiledPrefetch.state``'s argument)."""

    layers: int  # L
    experts: int  # E
    prefetcher: Any  # the reference prefetcher, as the run builds it (its knobs and inputs applied)
    now: Any  # the walk's counters (``Space.now``)
    # [1] int64: the row of a profiling library the current request matched (``Space.match``, which an eviction
    # policy may read; -1: none)
    match: Any


class CompiledPrefetch(NamedTuple):
    """A prefetcher's compiled part (its class's ``compiled``): ``propose`` and ``begin`` (above), ``state(space:
    PrefetchSpace)``, plain Python, that builds its state (None: it keeps none), and ``most(prefetcher, E) -> int``,
    the most proposals it makes at a step (None: ``max_depth`` layers' experts)."""

    propose: Callable[..., int]
    begin: Callable[..., Any] | None = None
    state: Callable[[PrefetchSpace], Any] | None = None
    most: Callable[[Any, int], int] | None = None


@kernel(inline=True)
def present(s, layer, e):
    """``Decider._present`` (``PrefetchContext.is_cached``): ``(layer, e)`` needs no copy (resident, on the CPU,
    cached or staged)."""
    return (
        (s.staging and s.stg_tid[layer, e] >= 0)
        or s.resident[layer, e]
        or s.cpu_layer[layer]
        or s.index[HIGH, layer, e] >= 0
        or s.index[LOW, layer, e] >= 0
    )


@kernel(nrt=True)
def wanted(ids, w, nan_zero, hobbit, uniform, hi, lo, rows, row, rc, rm, want, order):
    """``policies.prefetch.wanted`` over ``rows`` ([T, K] ids and weights, classed by the rule, ``rule_row``):
    experts in first-appearance order into ``order``, their best class into ``want`` (SKIP for each before); the
    count."""
    n = 0
    for t in range(rows):
        rule_row(w[t], nan_zero, hobbit, uniform, hi, lo, row, rc, rm)
        for k in range(ids.shape[1]):
            e, c = ids[t, k], rc[k]
            if e >= 0 and c != SKIP and c < want[e]:
                if want[e] == SKIP:
                    order[n] = e
                    n += 1
                want[e] = c
    return n


@kernel(inline=True)
def predicted(s, layer, d, a, b):
    """``PrefetchContext.predict(d)``'s wanted experts of layer ``layer + d`` (``wanted``: into ``s.worder`` and
    ``s.want``; the count): the trace's predictions, or past its depth the history fallback's ``top_k`` experts the
    request used most in that layer (none before it used any)."""
    target = layer + d
    if d <= s.depth:
        return wanted(
            s.pred[a:b, layer, d - 1], s.pred_w[a:b, layer, d - 1], True, s.hobbit_rule, s.uniform, s.rule_hi,
            s.rule_lo, b - a, s.row, s.rc, s.rm, s.want, s.worder,
        )  # fmt: skip
    nw = 0
    if s.history and s.counts[target].max() > 0:
        E = s.counts.shape[1]
        hist, want, worder, uniform = s.hist, s.want, s.worder, s.uniform
        hist[:] = s.counts[target]
        for _ in range(min(s.top_k, E)):  # argsort(-counts, stable)[:top_k]
            best = 0
            for x in range(1, E):
                if hist[x] > hist[best]:
                    best = x
            if uniform < want[best]:
                if want[best] == SKIP:
                    worder[nw] = best
                    nw += 1
                want[best] = uniform
            hist[best] = -1
    return nw


@kernel(inline=True)
def truth(s, target, a, b):
    """``PrefetchContext.future``'s wanted experts of layer ``target`` (``wanted`` of the trace's own selections)."""
    return wanted(
        s.ids[a:b, target], s.weights[a:b, target], False, s.hobbit_rule, s.uniform, s.rule_hi, s.rule_lo, b - a,
        s.row, s.rc, s.rm, s.want, s.worder,
    )  # fmt: skip


@kernel(inline=True)
def misses(s, target, nw, n):
    """``policies.prefetch.misses``: the ``nw`` wanted experts of layer ``target`` (``s.worder``, ``s.want``) not
    present, appended to the proposals from row ``n`` at their class; the wanted reset to SKIP. The new count."""
    index, want, worder, props = s.index, s.want, s.worder, s.props
    warm = 0
    for q in range(nw):  # the rows the check below reads, loaded side by side (as before serving)
        warm += index[HIGH, target, worder[q]]
    s.sink[0] = warm
    for q in range(nw):
        e = worder[q]
        if not present(s, target, e):
            props[n, 0], props[n, 1], props[n, 2] = target, e, want[e]
            n += 1
        want[e] = SKIP
    return n
