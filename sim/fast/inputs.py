"""What the compiled walk, the timing and the bound read, laid out from a workload, a system and a cost model:
the walk's records (``walk_inputs``), the per-pass cost tables (``per_pass``, ``timing_inputs``, ``bound_inputs``),
Belady's lists (``future_csr``) and the precision rule's arguments (``rule_args``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from hobbit.sim.config import SystemConfig, offload_tokens, policy_knobs
from hobbit.sim.cost import CostModel
from hobbit.sim.decide import (
    Placement,
    cache_slots,
    layer_bytes,
    layer_regions,
    log_dtype,
)
from hobbit.sim.fast import bound, rule, special, state
from hobbit.sim.fast.records import CPU_MISSES, Bound, Cpu, Evict, Inputs, Place, Prefetch, Routing, Rule
from hobbit.sim.fast.rule import frozen
from hobbit.sim.policies.base import HIGH, LOW, SKIP, PolicyInputs
from hobbit.sim.policies.compiled import NEVER
from hobbit.sim.policies.precision import EPS
from hobbit.sim.policies.registry import eviction_class, prefetcher_class
from hobbit.sim.workload import Workload


def unsupported(system: SystemConfig, keep_log: bool = False) -> str | None:
    """Why the compiled walk cannot decide for ``system`` (the reference walk then does), or None."""
    if keep_log:
        return "a kept decision log (keep_log)"
    if not special.compiled(system.cache.policy):
        return f"cache policy {system.cache.policy}"
    if special.prefetch_part(system.prefetch.kind) is None:
        return f"prefetcher {system.prefetch.kind}"
    return None


def future_csr(wl: Workload) -> tuple[np.ndarray, np.ndarray]:
    """``Workload.future_uses`` as CSR arrays: key layer * E + expert -> its (pass, layer) steps in order
    (``walk.future_uses``)."""
    pa = wl.pass_arrays()
    return state.future_uses(np.ascontiguousarray(wl.ids), pa.start, pa.end, wl.num_experts)


def window_future(wl: Workload, first_pass: int, after: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Belady's lists (``future_csr``) for a window of a longer trace whose first pass is the trace's ``first_pass``:
    each key's steps in the window (the trace's numbers), then its first use after the window (``after``, per key;
    ``NEVER`` for none), so that the walk's cursors never run past what the window knows."""
    off, steps = future_csr(wl)
    counts = np.diff(off)
    keys = len(counts)
    new_off = np.zeros(keys + 1, np.int64)
    new_off[1:] = np.cumsum(counts + 1)
    out = np.empty(new_off[-1], np.int64)
    out[np.arange(len(steps)) + np.repeat(np.arange(keys), counts)] = steps + first_pass * wl.num_layers
    out[new_off[1:] - 1] = after
    return new_off, out


def first_uses(wl: Workload, first_pass: int) -> np.ndarray:
    """Each key's (layer * E + expert) first step in ``wl``, a window whose first pass is the trace's ``first_pass``
    (``NEVER`` for a key it never selects)."""
    off, steps = future_csr(wl)
    out = np.full(len(off) - 1, NEVER, np.int64)
    has = off[1:] > off[:-1]
    out[has] = steps[off[:-1][has]] + first_pass * wl.num_layers
    return out


def rule_args(mode: str, t1: float, t2: float) -> tuple[bool, float, float]:
    """The precision rule as the compiled code takes it (``walk._rule_row``): HOBBIT's or not, T1 and T2 + EPS."""
    return mode == "hobbit", float(t1) + EPS, float(t2) + EPS


def rule_mix(wl: Workload, t1: float, t2: float, counts: np.ndarray | None = None) -> dict[str, float]:
    """``policies.precision.rule_mix`` of HOBBIT's classes of ``wl``'s selections at T1 / T2, counted in one pass
    (once per workload and thresholds), or ``counts`` when a walk with HOBBIT's rule counted them (``stream``)."""
    n = wl.derived(
        ("mix", t1, t2),
        lambda: (
            counts
            if counts is not None
            else rule.hobbit_counts(wl.weights.reshape(-1, wl.top_k), float(t1) + EPS, float(t2) + EPS)
        ),
    )
    return mix_of(n)


def mix_of(n: np.ndarray) -> dict[str, float]:
    """``rule_mix``'s shares from the selections' counts per class."""
    total = max(int(n.sum()), 1)
    return {"high": float(n[HIGH] / total), "low": float(n[LOW] / total), "skip": float(n[SKIP] / total)}


def narrow(a: np.ndarray | None, what: str) -> np.ndarray | None:
    """Expert ids as int16 (the trace's own dtype: no copy then), read-only (``frozen``), so that one compiled
    version serves every run."""
    if a is None:
        return a
    if a.dtype != np.int16:
        if a.size and int(a.max()) > np.iinfo(np.int16).max:
            raise ValueError(f"{what}: expert ids above {np.iinfo(np.int16).max} (the trace schema's int16)")
        a = a.astype(np.int16)
    return frozen(a)


def pass_tokens(wl: Workload) -> tuple[int, np.ndarray]:
    """(the most tokens one expert can serve in a pass: the size of the per-token-count cost tables, each pass's tokens)."""
    pa = wl.pass_arrays()
    sizes = pa.end - pa.start
    return (int(sizes.max()) if len(sizes) else 1) * wl.top_k, sizes


class PassKinds(NamedTuple):
    """The distinct kinds of pass of a workload (``pass_kinds``): each distinct (tokens, context) pair, each pass's
    pair, each distinct token count and each pass's."""

    tokens: np.ndarray
    context: np.ndarray
    pair_of: np.ndarray
    sizes: np.ndarray
    size_of: np.ndarray


def pass_kinds(sizes: np.ndarray, context: np.ndarray) -> PassKinds:
    """``PassKinds`` of passes of ``sizes`` tokens at ``context``: a sort of every pass (a few tens of ms for a long
    trace's passes), which ``workload_kinds`` makes once per workload."""
    n = np.asarray(sizes, np.int64)
    c = np.asarray(context, np.int64)
    if not len(n):
        empty = np.zeros(0, np.int64)
        return PassKinds(empty, empty, empty, empty, empty)
    span = int(c.max()) + 1
    pair, at = np.unique(n * span + c, return_inverse=True)
    tokens, ctx = np.divmod(pair, span)
    own, at_n = np.unique(n, return_inverse=True)
    return PassKinds(tokens, ctx, at.ravel(), own, at_n.ravel())


def workload_kinds(wl: Workload) -> PassKinds:
    """``pass_kinds`` of the workload's passes, made once for it (every run of a sweep asks, twice a run)."""
    return wl.derived(("pass_kinds",), lambda: pass_kinds(pass_tokens(wl)[1], wl.pass_arrays().context))


def per_pass(
    cost: CostModel, sizes: np.ndarray, context: np.ndarray, kinds: PassKinds | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(dense seconds [P, 2]: of a layer on the device, of one run whole on the CPU (``whole_layers``); head seconds
    [P]) of each pass, ``cost`` asked once per distinct (tokens, context): a decode pass each token, a million passes,
    take a few thousand distinct pairs, and the same values. ``kinds``: ``pass_kinds(sizes, context)`` when made
    already."""
    k = kinds if kinds is not None else pass_kinds(sizes, context)
    if not len(k.pair_of):
        return np.zeros((0, 2)), np.zeros(0)
    cpu_layer = min(cost.cpu_dense_layers, default=-1)
    dense = np.array(
        [
            (cost.cached("dense_s", int(a), int(b)), cost.cached("layer_dense_s", cpu_layer, int(a), int(b)))
            for a, b in zip(k.tokens, k.context)
        ]
    ).reshape(-1, 2)
    other = np.array([cost.cached("other_s", int(a)) for a in k.sizes])
    return dense[k.pair_of], other[k.size_of]


def whole_layers(cost: CostModel, num_layers: int) -> np.ndarray:
    """[L] whether each layer runs whole on the CPU (``CostModel.cpu_dense_layers``): its dense part is ``per_pass``'s
    second column."""
    whole = np.zeros(num_layers, np.bool_)
    whole[[i for i in cost.cpu_dense_layers if i < num_layers]] = True
    return whole


def region_offsets(slots: Any, num_layers: int, per_layer: bool) -> np.ndarray:
    """The pools' regions as the compiled walk takes them (``walk._region``), [2, L + 1] int64: with ``per_layer``,
    layer l's region of pool p is slots ``roff[p, l]`` .. ``roff[p, l + 1]`` - 1 (``decide.layer_regions``); without,
    ``roff[p, L]`` is the pool's slots, every other entry 0 (a copy of any layer may take any slot)."""
    roff = np.zeros((2, num_layers + 1), np.int64)
    if per_layer:
        roff[:, 1:] = np.cumsum(layer_regions(slots, num_layers), axis=1)
    else:
        roff[:, num_layers] = cache_slots(slots)
    return roff


class Run(NamedTuple):
    """What the compiled walk decides by, besides the trace: the system, the cache's slots (``decide.cache_slots``'
    argument) and each copy's bytes, and what ``sim.decide.Decider`` also takes: the placement, whether the CPU
    computes a miss faster than a copy (``cpu_faster(precision, tokens)``), a miss's copy and CPU seconds
    (``miss_costs``: FreeToken's split) and the prefetchers' profile; and which copy of the walk decides (``walks``:
    every copy decides alike)."""

    system: SystemConfig
    slots: Any
    expert_bytes: Any
    placement: Placement | None = None
    cpu_faster: Callable[[int, int], bool] | None = None
    miss_costs: Callable[[int, int], tuple[float, float]] | None = None
    profile: list[np.ndarray] | None = None
    walks: str = "auto"  # which compiled copy of the policy's walk runs (``compiling.policy_walk``)


class Window(NamedTuple):
    """Consecutive whole passes of a trace, laid out for replay (``stream_windows``): ``wl`` holds them, its tokens
    numbered from 0 (``Workload.token_in_request`` counts from each request's first token in the trace); ``first_pass``
    is the trace's number of its first pass, ``prev_request`` the request of the pass before it (-1: none)."""

    wl: Workload
    first_pass: int = 0
    prev_request: int = -1
    future: tuple[np.ndarray, np.ndarray] | None = None  # Belady's lists of the window (``window_future``)


def walk_inputs(
    window: Window,
    run: Run,
    bounds: bound.Tables | None = None,
    records: int | None = None,
    prev_ids: np.ndarray | None = None,
) -> tuple[dict[str, Any], Inputs]:
    """(``walk.walk_state``'s arguments by name, the walk's ``inputs``) for ``run`` over the passes of ``window``
    (``Window``: a whole trace, or a window of a longer one, and then ``prev_ids`` the selections of the last layer of
    the pass before); with ``bounds`` (``bound_inputs``) the walk also writes each pass's bound into
    ``inputs.bound.out`` and counts the selections of each class into ``inputs.bound.cls_n``. ``records``: the run's
    most steps and records in any log table, which picks the tables' type (the window's, by default)."""
    wl, system = window.wl, run.system
    why = unsupported(system)
    if why is not None:
        raise ValueError(f"the compiled walk does not implement {why}")
    pf, ev = system.prefetch, system.cache
    L, E = wl.num_layers, wl.num_experts
    sizes = pass_tokens(wl)[1]
    pf_cls, ev_cls = prefetcher_class(pf.kind), eviction_class(ev.policy)
    future_uses = "future_uses" in ev_cls.needs  # Belady's: the walk moves each key's next use on (``Space.next_use``)
    most, prefetchers, eam_lib = _prefetchers(wl, system, run.profile)
    room = L * int(np.sum((3 + pf.max_depth) * np.minimum(E, sizes * wl.top_k) + pf.staging_slots + most + 2))
    # the log tables' type: int32 when it numbers all
    log = np.zeros(0, log_dtype(records if records is not None else max(room, len(wl.pass_start) * L)))
    state_args = {
        "num_layers": L,
        "num_experts": E,
        "roff": region_offsets(run.slots, L, bool(ev.per_layer)),
        "per_layer": bool(ev.per_layer),
        "staging": int(pf.staging_slots),
        "log_proto": log,
        # a policy whose file gives its compiled part builds its own state (``policies.compiled``)
        "own_state": own.state if (own := special.own_part(ev.policy)) is not None else None,
        "own_knobs": policy_knobs(ev, ev.policy),
        "library": eam_lib,  # what a policy's compiled part may read of the EAM prefetcher (``Space.library``)
        "future": future_uses,
        "prefetchers": prefetchers,
    }
    inputs = Inputs(
        _routing(window, pf_cls.needs | ev_cls.needs, prev_ids),
        _rule(system),
        _place(wl, run),
        _evict(window, future_uses),
        _prefetch(system, pf_cls, most),
        _cpu(system, pass_tokens(wl)[0], run),
        _bound(wl, bounds),
        log,
    )
    return state_args, inputs


def _prefetchers(wl: Workload, system: SystemConfig, profile: list[np.ndarray] | None) -> tuple:
    """(the proposals a step may make beyond ``max_depth`` layers' (``CompiledPrefetch.most``),
    each compiled prefetcher's (state builder, reference prefetcher), MoE-Infinity's library normalised per layer).
    The prefetchers' compiled parts build their state from the reference prefetchers: the run's as it runs, each other
    with its defaults (``walk.walk_state``)."""
    pf, L, E = system.prefetch, wl.num_layers, wl.num_experts
    depth = pf.max_depth
    prefetcher = prefetcher_class(pf.kind)(
        policy_knobs(pf, pf.kind), PolicyInputs(num_layers=L, depth=depth, profile=profile)
    )
    pf_part = special.prefetch_part(pf.kind)
    most = pf_part.most(prefetcher, E) if pf_part is not None and pf_part.most is not None else 0
    prefetchers = []
    for name in special.prefetchers():
        part = special.prefetch_part(name)
        ref = prefetcher if name == pf.kind else prefetcher_class(name)(None, PolicyInputs(num_layers=L, depth=depth))
        prefetchers.append((part.state if part is not None else None, ref))
    eam_lib = np.zeros((0, L, E))  # MoE-Infinity's library, normalised per layer, as ``Space.library``
    if pf.kind == "eam" and getattr(prefetcher, "library", None) is not None:
        eam_lib = np.ascontiguousarray(prefetcher._lib_norm)  # pyright: ignore[reportAttributeAccessIssue]
    return most, prefetchers, eam_lib


def _routing(window: Window, needs: Any, prev_ids: np.ndarray | None) -> Routing:
    """The trace as the walk reads it: ``window``'s, with the trace's predictions where the policies need them."""
    wl = window.wl
    if wl.pred_ids is not None and "predictions" in needs:  # the trace's own arrays (the walk reads depth of them)
        pred, pred_w = narrow(wl.pred_ids, "pred_ids"), frozen(wl.pred_weights)
    else:
        pred, pred_w = frozen(np.zeros((1, 1, 0, 1), np.int16)), frozen(np.zeros((1, 1, 0, 1), wl.weights.dtype))
    pa = wl.pass_arrays()
    return Routing(
        ids=narrow(wl.ids, "expert_ids"),
        weights=frozen(wl.weights),
        pred=pred,
        pred_w=pred_w,
        pass_start=pa.start,
        pass_end=pa.end,
        pass_request=pa.request,
        token_in_request=np.asarray(wl.token_in_request, np.int64),
        top_k=wl.top_k,
        first_pass=int(window.first_pass),
        prev_request=int(window.prev_request),
        prev_ids=narrow(prev_ids if prev_ids is not None else np.zeros((0, wl.top_k), np.int16), "expert_ids"),
    )


def _rule(system: SystemConfig) -> Rule:
    """The precision rule as the walk takes it."""
    p = system.precision
    mixed = p.mode == "hobbit"
    hobbit_rule, rule_hi, rule_lo = rule_args(p.mode, p.t1, p.t2)
    return Rule(
        hobbit_rule=hobbit_rule,
        rule_hi=rule_hi,
        rule_lo=rule_lo,
        mixed=mixed,
        uniform=int(LOW if p.mode == "low" else HIGH),
        any_prec=bool(p.serve_any_cached),
        multi_high=p.multi_token == "high" and mixed,
    )


def _place(wl: Workload, run: Run) -> Place:
    """Where the experts live (``run.placement``) and what the pools keep."""
    system, ev, L, E = run.system, run.system.cache, wl.num_layers, wl.num_experts
    placement = run.placement or Placement()
    resident = np.zeros((L, E), np.bool_)
    for layer, e in placement.resident:
        resident[layer, e] = True
    cpu_layer = np.zeros(L, np.bool_)
    cpu_layer[list(placement.cpu_layers)] = True
    sizes = pass_tokens(wl)[1]
    return Place(
        resident=resident,
        cpu_layer=cpu_layer,
        wide_bypass=bool(ev.per_layer and ev.wide_step == "bypass"),
        offload_at=offload_tokens(system, wl.num_experts, wl.top_k),
        per_layer=bool(ev.per_layer),
        per_expert=np.maximum(1, np.round(sizes * wl.top_k / wl.num_experts)).astype(np.int64),
        # [L, 2]: a copy charges its layer's bytes (read-only whatever it was given as: one compiled walk)
        expert_bytes=frozen(layer_bytes(run.expert_bytes, wl.num_layers)),
    )


def _evict(window: Window, future_uses: bool) -> Evict:
    """Belady's lists (``future_csr``) where the policy reads each key's next use: the window's own (``Window.future``)
    or the trace's, made once for it."""
    wl = window.wl
    if not future_uses:
        fut_off, fut_steps = np.zeros(1, np.int64), np.zeros(1, np.int64)
    elif window.future is not None:
        fut_off, fut_steps = window.future
    else:
        fut_off, fut_steps = wl.derived(("future",), lambda: future_csr(wl))
    return Evict(fut_off=fut_off, fut_steps=fut_steps)


def _prefetch(system: SystemConfig, pf_cls: Any, most: int) -> Prefetch:
    """The prefetcher as the walk takes it."""
    p, pf = system.precision, system.prefetch
    uniform = LOW if p.mode == "low" else HIGH
    prefetch_prec = {"high": HIGH, "low": LOW}.get(pf.precision, -1) if p.mode == "hobbit" else uniform
    return Prefetch(
        kind=special.prefetchers().index(pf.kind),
        max_depth=pf.max_depth,
        history=pf.fallback == "history",
        prefetch_prec=int(prefetch_prec),
        prefetching=bool(pf_cls.loads_ahead and system.cpu_misses != "always"),
        staging=int(pf.staging_slots),
        most=int(most),
    )


def _cpu(system: SystemConfig, max_t: int, run: Run) -> Cpu:
    """Misses computed on the CPU, with the run's per-token-count tables up to ``max_t`` tokens."""
    cpu_faster = run.cpu_faster or (lambda prec, n: True)
    miss_costs = run.miss_costs or (lambda prec, n: (1.0, 1.0))
    faster = np.zeros((2, max_t + 1), np.bool_)
    copy_s, cpu_s = np.ones(2), np.ones(max_t + 1)
    if system.cpu_misses == "faster":
        for prec in (HIGH, LOW):
            faster[prec, 1:] = [cpu_faster(prec, n) for n in range(1, max_t + 1)]
    if system.cpu_misses == "split":
        copy_s = np.array([miss_costs(prec, 1)[0] for prec in (HIGH, LOW)])
        cpu_s[1:] = [miss_costs(HIGH, n)[1] for n in range(1, max_t + 1)]
    return Cpu(
        misses=CPU_MISSES.index(system.cpu_misses),
        insert=int(system.cpu_insert),
        faster=faster,
        copy_s=copy_s,
        cpu_s=cpu_s,
        split_threshold=float(system.split_threshold),
        split_max_fetch=int(system.split_max_fetch),
    )


def _bound(wl: Workload, bounds: bound.Tables | None) -> Bound:
    """The bound's tables as the walk takes them (``bounds``; None: the walk computes no bound)."""
    if bounds is None:
        return Bound(
            on=False,
            dense=np.zeros((1, 2)),
            whole=np.zeros(1, np.bool_),
            other=np.zeros(1),
            min_s=np.zeros(1),
            cpu=np.zeros(1),
            uses_cpu=False,
            out=np.zeros(1),
            cls_n=np.zeros(3, np.int64),
        )
    return Bound(True, *bounds, out=np.zeros(len(wl.pass_start)), cls_n=np.zeros(3, np.int64))


def timing_inputs(wl: Workload, cost: CostModel, expert_bytes: Any, top: int) -> tuple:
    """(dense seconds per pass, head seconds per pass, expert seconds [precision, tokens], CPU expert seconds
    [tokens], copy seconds [layer, precision], bytes over the link [layer, precision]) for tokens up to ``top``."""
    _, sizes = pass_tokens(wl)
    dense, other = per_pass(cost, sizes, wl.pass_arrays().context, workload_kinds(wl))
    expert = np.zeros((2, top + 1))
    cpu_s = np.zeros(top + 1)
    for n in range(1, top + 1):
        expert[HIGH, n], expert[LOW, n] = cost.cached("expert_s", HIGH, n), cost.cached("expert_s", LOW, n)
    nbytes_of = layer_bytes(expert_bytes, wl.num_layers)
    dur_of = np.array([[cost.cached("transfer_s", int(b)) for b in row] for row in nbytes_of.tolist()]).reshape(-1, 2)
    return dense, other, expert, cpu_s, dur_of, cost.link_bytes(nbytes_of)


def fill_cpu(cost: CostModel, cpu_s: np.ndarray) -> None:
    cpu_s[1:] = [cost.cached("cpu_expert_s", n) for n in range(1, len(cpu_s))]


def bound_inputs(
    wl: Workload, cost: CostModel, system: SystemConfig, per_pass_s: tuple[np.ndarray, np.ndarray] | None = None
) -> bound.Tables:
    """``bound.pass_bounds``'s tables (the walk's too, ``walk_inputs``; ``bound.Tables``): dense seconds per pass
    [P, 2] and the layers run whole on the CPU (``per_pass``, ``whole_layers``), head seconds per pass
    (``per_pass_s`` when given), the cheapest device seconds of an expert per token count, its CPU seconds, whether
    the CPU computes."""
    precisions = {"hobbit": (HIGH, LOW), "high": (HIGH,), "low": (LOW,)}[system.precision.mode]
    uses_cpu = system.cpu_misses != "never" or system.placement == "static"
    max_t, sizes = pass_tokens(wl)
    expert_min, cpu_s = np.zeros(max_t + 1), np.zeros(max_t + 1)
    for n in range(1, max_t + 1):
        expert_min[n] = min(cost.cached("expert_s", q, n) for q in precisions)
        if uses_cpu:
            cpu_s[n] = cost.cached("cpu_expert_s", n)
    dense, other = (
        per_pass_s if per_pass_s is not None else per_pass(cost, sizes, wl.pass_arrays().context, workload_kinds(wl))
    )
    return bound.Tables(dense, whole_layers(cost, wl.num_layers), other, expert_min, cpu_s, uses_cpu)
