"""What the compiled walk carries from one pass to the next, made once a run (``walk_state``), and the future uses a
policy that needs them reads (``future_uses``)."""

from __future__ import annotations

import numpy as np
from numba import njit

from hobbit.sim.fast.records import N_ST, Logs, State
from hobbit.sim.policies.compiled import EXPERT, LAYER, N_FIELDS, NEVER, TRANSFER, PrefetchSpace, Space


def walk_state(
    num_layers,
    num_experts,
    roff,
    per_layer,
    staging,
    log_proto,
    own_state=None,
    own_knobs=None,
    library=None,
    future=False,
    prefetchers=(),
):
    """What the walk carries from one pass to the next (``walk``'s ``state``; ``STATE`` names its items): the pools,
    the policies' and the prefetcher's state, the records, the counters. A walk over passes ``p0:p1`` continues the
    one that ended at ``p0``: the same decisions as one walk over both ranges. ``roff``: the pools' regions
    ([2, L + 1] offsets, ``fast.region_offsets``); each pool's slots are ``roff[:, L]``. Plain Python: it runs once
    per run and allocates, so compiling it (8 s) would buy nothing. ``own_state``: the state builder of a policy whose
    file gives its compiled part (``Compiled.state``; None: it keeps none), called with the space it sizes by and its
    knobs ``own_knobs``, and what it may read of the walk as it goes (``Space``: the counters ``st``, a
    prefetcher's match and ``library``, its normalised activation matrices, and, where ``future`` (the policy needs
    the future), each key's next use). ``prefetchers``: each compiled prefetcher's state builder
    (``CompiledPrefetch.state``; None: it keeps none) and its reference prefetcher, in ``special.prefetchers``' order:
    the run's prefetcher's state, as the others' (built with their defaults: a general copy of the walk types every
    prefetcher's code), is ``State.pf``'s item at its place."""
    L, E = num_layers, num_experts
    roff = roff.copy()  # the walk's own (``walk`` reads the state's)
    pool, cap = _pools(L, E, roff, per_layer)
    st = np.zeros(N_ST, np.int64)
    match = np.full(1, -1, np.int64)  # a prefetcher's match (``Space.match``, ``PrefetchSpace.match``; -1: none)
    if library is None:
        library = np.zeros((0, L, E))
    fut_cur = np.full(L * E if future else 1, -1, np.int64)  # each key's next use (``_passed``; -1: the walk sets it)
    fut_nu = np.full(L * E if future else 0, NEVER, np.int64)
    space = Space(L, E, pool.shape[1], cap, own_knobs, bool(per_layer), st, match, library, fut_nu)
    own = () if own_state is None else own_state(space)
    pf = tuple(
        () if build is None else build(PrefetchSpace(L, E, prefetcher, st, match)) for build, prefetcher in prefetchers
    )
    # what the walk keeps per (layer, expert), side by side in one row of ``xs`` (the walk is bound by cache misses
    # on its state, and a use reads and writes all of it): its slot in each pool (``index``, -1: none), its record
    # (``rec``), the tokens that used it in this request (``counts``) and its prefetched flag (``prefetched``)
    xs = np.zeros((L, E, 8), np.int32)
    xs[:, :, :2] = -1
    return State(
        pool=pool,
        roff=roff,
        nfree=np.zeros(2, np.int64),
        match=match,
        own=own,
        pf=pf,
        xs=xs,
        # its slot per pool, [2, L, E], a view of ``xs`` made here: a transpose in the walk compiles numba's
        # permutation of shapes and strides, which checks its axes with a set and builds an error message (about
        # 1.5 s of the first compile)
        index=xs[:, :, :2].transpose(2, 0, 1),
        st=st,
        served=np.zeros(6, np.int64),
        mass=np.zeros(3),
        # staged prefetches (insertion order), pins (target layer, pool, layer, expert)
        stg_tid=np.full((L, E), -1, np.int64),  # read only when ``staging`` (nothing is staged otherwise)
        stg_prec=np.zeros((L, E), np.int64),
        stg_list=np.zeros((max(staging, 1), 3), np.int64),  # layer, expert, target; in insertion order
        pins=np.zeros((16, 4), np.int64),
        counts=np.zeros(2, np.int64),  # staged copies (stg_list's rows) and pins (pins' rows)
        fut_cur=fut_cur,
        fut_nu=fut_nu,
        logs=_logs(log_proto.dtype),
    )


def _pools(L, E, roff, per_layer):
    """The two pools (``pool[precision, slot, field]``, empty) and each region's slots (``cap``)."""
    size = roff[:, L].copy()
    # a slot's fields side by side; a pool's copies take its slots in order while it has free ones, one per (layer,
    # expert) at most: L * E rows hold them all, whatever the memory (a region of a per-layer pool has its place)
    rows = max(size[0], size[1], 1) if per_layer else max(min(max(size[0], size[1]), L * E), 1)
    pool = np.zeros((2, rows, N_FIELDS), np.int64)
    pool[:, :, LAYER] = -1
    pool[:, :, EXPERT] = -1
    pool[:, :, TRANSFER] = -1
    cap = np.zeros((2, L if per_layer else 1), np.int64)  # each region's slots
    for pr in range(2):
        cap[pr] = roff[pr, 1:] - roff[pr, :L] if per_layer else size[pr]
    return pool, cap


def _logs(dt):
    """The log tables' buffers, empty (``walk``'s ``tabs``): the walk grows them, a streamed run keeps them from one
    chunk to the next (its later chunks write into memory the first has mapped, not into new pages)."""
    return Logs(
        np.empty((0, 5), dt),
        np.empty((0, 5), dt),
        np.empty((0, 3), dt),
        np.empty((0, 2), dt),
        np.empty((0, 4), dt),
        np.empty((0, 4), dt),
    )


@njit(cache=True)
def future_uses(ids, pass_start, pass_end, num_experts):
    """``Workload.future_uses`` as CSR arrays (``fast.future_csr``): key layer * E + expert -> the (pass, layer) steps
    that select it, in order, each once. A counting sort over the selections in step order: two passes over ``ids``
    ([tokens, L, K]), no sort."""
    L, K = ids.shape[1], ids.shape[2]
    off = np.zeros(L * num_experts + 1, np.int64)
    seen = np.full(L * num_experts, -1, np.int64)  # the last step that counted each key
    for q in range(2):  # 0: count each key's steps; 1: write them
        if q == 1:
            for x in range(L * num_experts):
                off[x + 1] += off[x]
            at = off[:-1].copy()
            steps = np.empty(off[-1], np.int64)
            seen[:] = -1
        for p in range(pass_start.shape[0]):
            for layer in range(L):
                step = p * L + layer
                for t in range(pass_start[p], pass_end[p]):
                    for k in range(K):
                        key = layer * num_experts + ids[t, layer, k]
                        if seen[key] == step:
                            continue
                        seen[key] = step
                        if q == 0:
                            off[key + 1] += 1
                        else:
                            steps[at[key]] = step
                            at[key] += 1
    return off, steps
