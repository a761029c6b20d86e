"""The compiled core: the decision walk and the timing of ``sim.decide`` / ``sim.plain`` in numba.

``engine=fast`` (the default) runs a simulation here: ``decide`` makes the decisions of
``sim.decide.Decider`` and ``time_decisions`` the times of ``sim.plain.replay``, exactly (the
differential tests, tests/test_fast.py, hold every registered system to the reference's
decisions and to its times within 1e-9 relative). What the compiled walk does not implement
(``unsupported`` names it: a kept log, a policy registered but not written here) is decided by
the reference walk and timed here. The log comes out as tables (``DecisionTables``);
``Decisions.steps`` lays them out as ``LayerStep`` records on first use, for the simpy engine,
the executor and the timelines.
"""

from __future__ import annotations

import hashlib
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import numba
import numpy as np
from numba.core import event as numba_event

try:
    import fcntl
except ImportError:  # not POSIX: no lock, every process compiles for itself (as numba alone does)
    fcntl = None

from hobbit.sim.config import SystemConfig, policy_knobs
from hobbit.sim.cost import CostModel
from hobbit.sim.decide import Decider, Decisions, DecisionTables, Placement, log_dtype, tables_from_steps
from hobbit.sim.fast import bound, rule, timing, walk
from hobbit.sim.fast.rule import frozen
from hobbit.sim.policies.base import HIGH, LOW, SKIP, PolicyInputs
from hobbit.sim.policies.precision import EPS
from hobbit.sim.policies.registry import eviction_class, prefetcher_class
from hobbit.sim.timeline import Timeline
from hobbit.sim.workload import Workload


class CompileNotice(numba_event.Listener):
    """Says on stderr when the compiled core is being compiled, not loaded from numba's on-disk cache: once per
    machine and version, minutes on a small machine, silent otherwise. Numba fires ``numba:compile`` only on a cache
    miss; the notice names the entry points (``ENTRY``), not the helpers they compile on the way."""

    def __init__(self, entry: tuple[Callable, ...], out=None) -> None:
        self.entry, self.out, self.started = entry, out, {}

    def _say(self, text: str) -> None:
        print(f"hobbit: {text}", file=self.out or sys.stderr, flush=True)

    def on_start(self, event: numba_event.Event) -> None:
        d = event.data["dispatcher"]
        if d not in self.entry:
            return
        if not self.started:
            self._say(f"compiling the simulator's core ({d.py_func.__name__} first): once for this machine and "
                      f"version, a few minutes on two cores; later runs load it from numba's cache")
        self.started[d] = time.perf_counter()

    def on_end(self, event: numba_event.Event) -> None:
        d = event.data["dispatcher"]
        if d in self.started:
            self._say(f"compiled {d.py_func.__name__} in {time.perf_counter() - self.started[d]:.0f} s")


ENTRY = (walk.walk, timing.replay, timing.replay_shared, bound.pass_bounds)
numba_event.register("numba:compile", CompileNotice(ENTRY))


WAITED: list[str] = []  # the entry points this process waited on another's compilation for (said once)


def lock_path() -> Path:
    """The file whose lock the processes compiling this copy of the core take: one per source directory, numba
    version and cache directory (``first_use``)."""
    key = f"{Path(__file__).resolve().parent}|{numba.__version__}|{numba.config.CACHE_DIR}"
    return Path(tempfile.gettempdir()) / f"hobbit-core-{hashlib.sha1(key.encode()).hexdigest()[:16]}.lock"


def _in_cache(d) -> bool:
    """Whether numba's on-disk cache holds compiled code of dispatcher ``d`` for its current source (read from
    the cache's index; anything unexpected reads as no)."""
    try:
        return bool(d._cache._cache_file._load_index())
    except Exception:  # noqa: BLE001 - numba's cache internals: when they differ, the lock is simply taken
        return False


@contextmanager
def first_use(d, out=None) -> Iterator[None]:
    """Around the first call of a compiled entry point in a process: when numba would have to compile it (neither
    this process nor the on-disk cache has it), one process at a time goes on (an exclusive lock on
    ``lock_path()``). A sweep's workers all start at once; without the lock each of them compiles the walk for
    itself, about 100 s and 700 MB each on a fresh machine, with the lock one compiles and the others then load its
    code from the cache in under a second. A process that dies releases the lock."""
    if fcntl is None or d.overloads or _in_cache(d):
        yield
        return
    try:
        f = open(lock_path(), "a")  # noqa: SIM115 - held to the end of the block
    except OSError:
        yield
        return
    with f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not WAITED:
                print("hobbit: another process is compiling the simulator's core; waiting for it, then loading its "
                      "code from numba's cache", file=out or sys.stderr, flush=True)
            WAITED.append(d.py_func.__name__)
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def unsupported(system: SystemConfig, keep_log: bool = False) -> str | None:
    """Why the compiled walk cannot decide for ``system`` (the reference walk then does), or None."""
    if keep_log:
        return "a kept decision log (keep_log)"
    if system.cache.policy not in walk.POLICIES:
        return f"cache policy {system.cache.policy}"
    if system.prefetch.kind not in walk.PREFETCHERS:
        return f"prefetcher {system.prefetch.kind}"
    return None


def future_csr(wl: Workload) -> tuple[np.ndarray, np.ndarray]:
    """``Workload.future_uses`` as CSR arrays: key layer * E + expert -> its (pass, layer) steps in order."""
    L, E = wl.num_layers, wl.num_experts
    n_steps = len(wl.pass_start) * L
    pass_of = np.repeat(np.arange(len(wl.pass_start)), np.asarray(wl.pass_end) - np.asarray(wl.pass_start))
    step = (pass_of[:, None] * L + np.arange(L)[None, :])[:, :, None]
    key = np.arange(L)[None, :, None] * E + wl.ids
    code = np.unique((key * n_steps + step).ravel())
    keys, steps = code // n_steps, code % n_steps
    off = np.searchsorted(keys, np.arange(L * E + 1))
    return off.astype(np.int64), steps.astype(np.int64)


def rule_args(mode: str, t1: float, t2: float) -> tuple[bool, float, float]:
    """The precision rule as the compiled code takes it (``walk._rule_row``): HOBBIT's or not, T1 and T2 + EPS."""
    return mode == "hobbit", float(t1) + EPS, float(t2) + EPS


def rule_mix(wl: Workload, t1: float, t2: float) -> dict[str, float]:
    """``policies.precision.rule_mix`` of HOBBIT's classes of ``wl``'s selections at T1 / T2, counted in one pass
    (once per workload and thresholds)."""
    n = wl.derived(("mix", t1, t2), lambda: rule.hobbit_counts(wl.weights.reshape(-1, wl.top_k), float(t1) + EPS,
                                                                float(t2) + EPS))
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


def _tables(wl: Workload) -> tuple[int, np.ndarray]:
    """(the most tokens one expert can serve in a pass: the size of the per-token-count cost tables, each pass's tokens)."""
    sizes = np.asarray(wl.pass_end, np.int64) - np.asarray(wl.pass_start, np.int64)
    return (int(sizes.max()) if len(sizes) else 1) * wl.top_k, sizes


def per_pass(cost: CostModel, sizes: np.ndarray, context: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(dense seconds, head seconds) of each pass, ``cost.cached`` asked once per distinct (tokens, context): a
    decode pass each token, a million passes, take a few thousand distinct pairs, and the same values."""
    n = np.asarray(sizes, np.int64)
    c = np.asarray(context, np.int64)
    if not len(n):
        return np.zeros(0), np.zeros(0)
    span = int(c.max()) + 1
    pair, at = np.unique(n * span + c, return_inverse=True)
    tokens, ctx = np.divmod(pair, span)
    dense = np.array([cost.cached("dense_s", int(a), int(b)) for a, b in zip(tokens, ctx)])
    own, at_n = np.unique(n, return_inverse=True)
    other = np.array([cost.cached("other_s", int(a)) for a in own])
    return dense[at.ravel()], other[at_n.ravel()]


PRUNE_MIN_SLOTS = 512  # multidim: pools of at least this many slots evict layer by layer (walk._pruned_evict)
LIRS_VICTIMS_PER_KEY = 4  # LIRS's list of counted-out copies holds up to this many entries per expert; beyond,
# the reference walk decides (the list may hold a key more than once; no trace here has come near)


def decide(wl: Workload, system: SystemConfig, slots: tuple[int, int], expert_bytes: tuple[int, int],
           placement: Placement | None = None, cpu_faster: Callable[[int, int], bool] | None = None,
           miss_costs: Callable[[int, int], tuple[float, float]] | None = None,
           profile: list[np.ndarray] | None = None) -> Decisions:
    """``Decider(...).run()`` for a system ``unsupported`` does not refuse, compiled. multidim evicts by a scan
    of the pool, or in pools of at least ``PRUNE_MIN_SLOTS`` slots layer by layer, pruned by bounds (the same
    victim; ``walk._pruned_evict``)."""
    why = unsupported(system)
    if why is not None:
        raise ValueError(f"the compiled walk does not implement {why}")
    p, pf, ev = system.precision, system.prefetch, system.cache
    L = wl.num_layers
    E = wl.num_experts
    max_t, sizes = _tables(wl)
    placement = placement or Placement()
    resident = np.zeros((L, E), np.bool_)
    for layer, e in placement.resident:
        resident[layer, e] = True
    cpu_layer = np.zeros(L, np.bool_)
    cpu_layer[list(placement.cpu_layers)] = True
    pf_cls, ev_cls = prefetcher_class(pf.kind), eviction_class(ev.policy)
    needs = pf_cls.needs | ev_cls.needs
    depth = pf.max_depth
    if wl.pred_ids is not None and "predictions" in needs:  # the trace's own arrays (the walk reads depth of them)
        pred, pred_w = narrow(wl.pred_ids, "pred_ids"), frozen(wl.pred_weights)
    else:
        pred, pred_w = frozen(np.zeros((1, 1, 0, 1), np.int16)), frozen(np.zeros((1, 1, 0, 1), wl.weights.dtype))
    policy = walk.POLICIES.index(ev.policy)
    wts, fw = np.zeros(4), np.zeros((1, 1))
    if ev.policy == "s3fifo":  # its knobs ride in the weights' place: S's share, G's ratio, the move threshold
        k = ev_cls(policy_knobs(ev, ev.policy)).k
        wts = np.array([k.small_ratio, k.ghost_ratio, k.move_threshold, 0.0])
    if ev.policy == "multidim":
        pol = ev_cls(policy_knobs(ev, ev.policy), PolicyInputs(num_layers=L, depth=depth))
        wts = np.array(pol.w, np.float64)
        fw = np.array([pol._fld_weights(c, L) for c in range(L)], np.float64)
    fut_off, fut_steps = wl.derived(("future",), lambda: future_csr(wl)) if ev.policy == "belady" else (
        np.zeros(1, np.int64), np.zeros(1, np.int64))
    eam_lib, eam_norms, per_step = np.zeros((0, L, E)), np.zeros((0, L)), 0
    if pf.kind == "eam":  # the profiling requests' matrices, normalised per layer, as the reference prefetcher has them
        eam = pf_cls(policy_knobs(pf, pf.kind), PolicyInputs(num_layers=L, depth=depth, profile=profile))
        per_step = eam.per_step
        if eam.library is not None:
            eam_lib = np.ascontiguousarray(eam._lib_norm)
            eam_norms = np.ascontiguousarray(np.linalg.norm(eam_lib, axis=2))
    mixed = p.mode == "hobbit"
    uniform = LOW if p.mode == "low" else HIGH
    prefetch_prec = {"high": HIGH, "low": LOW}.get(pf.precision, -1) if mixed else uniform
    prefetching = pf_cls.loads_ahead and system.cpu_misses != "always"
    cpu_faster = cpu_faster or (lambda prec, n: True)
    miss_costs = miss_costs or (lambda prec, n: (1.0, 1.0))
    faster = np.zeros((2, max_t + 1), np.bool_)
    copy_s, cpu_s = np.ones(2), np.ones(max_t + 1)
    if system.cpu_misses == "faster":
        for prec in (HIGH, LOW):
            faster[prec, 1:] = [cpu_faster(prec, n) for n in range(1, max_t + 1)]
    if system.cpu_misses == "split":
        copy_s = np.array([miss_costs(prec, 1)[0] for prec in (HIGH, LOW)])
        cpu_s[1:] = [miss_costs(HIGH, n)[1] for n in range(1, max_t + 1)]
    per_expert = np.maximum(1, np.round(sizes * wl.top_k / wl.num_experts)).astype(np.int64)
    room = L * int(np.sum((3 + depth) * np.minimum(E, sizes * wl.top_k) + pf.staging_slots + per_step + 2))
    log = np.zeros(0, log_dtype(max(room, len(wl.pass_start) * L)))  # the log tables' type: int32 when it numbers all
    with first_use(walk.walk):
        out = walk.walk(
            narrow(wl.ids, "expert_ids"), frozen(wl.weights), pred, pred_w, *rule_args(p.mode, p.t1, p.t2), log,
            np.asarray(wl.pass_start, np.int64), np.asarray(wl.pass_end, np.int64),
            np.asarray(wl.pass_request, np.int64), np.asarray(wl.token_in_request, np.int64), resident, cpu_layer,
            np.array(slots, np.int64), bool(ev.per_layer), policy, wts, fw, fut_off, fut_steps, eam_lib, eam_norms,
            int(per_step),
            walk.PREFETCHERS.index(pf.kind), depth, pf.fallback == "history", wl.top_k, mixed, int(uniform),
            bool(p.serve_any_cached), p.multi_token == "high", int(prefetch_prec), bool(prefetching), int(pf.staging_slots),
            walk.CPU_MISSES.index(system.cpu_misses), int(system.cpu_insert), faster, copy_s, cpu_s,
            float(system.split_threshold), int(system.split_max_fetch), per_expert, np.array(expert_bytes, np.int64),
            int(PRUNE_MIN_SLOTS), int(LIRS_VICTIMS_PER_KEY) * L * E)
    loads, gpu, cpu, cancel, evicted, kept, served, mass, st, _ = out
    if st[walk.OVERFLOW]:  # LIRS counted out more copies than its entries hold: the reference decides
        return Decider(wl, system, slots, expert_bytes, placement, cpu_faster=cpu_faster, miss_costs=miss_costs,
                       profile=profile).run()
    tables = DecisionTables(num_layers=L, n_steps=len(wl.pass_start) * L, expert_bytes=tuple(expert_bytes),
                            loads=loads, gpu=gpu, cpu=cpu, cancel=cancel, evicted=evicted, kept=kept)
    return Decisions(steps=tables.steps(), served=served, prefetch_issued=int(st[walk.ISSUED]),
                     prefetch_used=int(st[walk.USED]), bytes_requested=int(st[walk.BYTES]), mass=mass,
                     evictions=int(st[walk.EVICTIONS]), slots=(int(slots[HIGH]), int(slots[LOW])),
                     staging=int(pf.staging_slots) if prefetching else 0, prefetch_dropped=int(st[walk.DROPPED]),
                     tables=tables)


def decide_or_refer(wl: Workload, system: SystemConfig, slots: tuple[int, int], expert_bytes: tuple[int, int],
                    placement: Placement | None = None, keep_log: bool = False, **kw) -> Decisions:
    """The compiled walk where it implements ``system``, else the reference's (same decisions either way)."""
    if unsupported(system, keep_log) is None:
        return decide(wl, system, slots, expert_bytes, placement, kw.get("cpu_faster"), kw.get("miss_costs"),
                      kw.get("profile"))
    return Decider(wl, system, slots, expert_bytes, placement, keep_log=keep_log, **kw).run()


def time_decisions(wl: Workload, dec: Decisions, cost: CostModel, demand_first: bool = True,
                   shared: bool | None = None) -> Timeline:
    """``sim.plain.replay`` compiled: the same times (``shared``: as there)."""
    tab = dec.tables if dec.tables is not None else tables_from_steps(dec.steps, wl.num_layers)
    max_t, sizes = _tables(wl)
    dense, other = per_pass(cost, sizes, wl.pass_context)
    top = max(max_t, int(tab.gpu[:, 3].max(initial=0)), int(tab.cpu[:, 1].max(initial=0)))
    expert = np.zeros((2, top + 1))
    cpu_s = np.zeros(top + 1)
    for n in range(1, top + 1):
        expert[HIGH, n], expert[LOW, n] = cost.cached("expert_s", HIGH, n), cost.cached("expert_s", LOW, n)
    if len(tab.cpu):
        cpu_s[1:] = [cost.cached("cpu_expert_s", n) for n in range(1, top + 1)]
    nbytes_of = np.array(tab.expert_bytes, np.int64)
    prec = tab.loads[:, 4]
    nbytes = nbytes_of[prec]
    dur = np.array([cost.cached("transfer_s", int(b)) for b in nbytes_of])[prec]
    f = cost.contention
    args = (tab.n_steps, wl.num_layers, tab.loads, tab.gpu, tab.cpu, tab.cancel, dur, nbytes, dense, other, expert,
            cpu_s, float(cost.issue_s()), bool(demand_first))
    if shared if shared is not None else f.active:
        with first_use(timing.replay_shared):
            out = timing.replay_shared(*args, float(f.link), float(f.dense), float(f.high), float(f.low))
    else:
        with first_use(timing.replay):
            out = timing.replay(*args)
    ps, pe, stall, end, started, done, busy, moved, cancelled = out
    tl = Timeline(ps, pe, stall, end, link_busy_s=float(busy), bytes_moved=int(moved), cancelled=int(cancelled))
    tl.transfer_start, tl.transfer_done = Times(started), Times(done)
    return tl


class Times(Mapping):
    """transfer id -> seconds, for the copies that ran (``Timeline.transfer_start`` / ``transfer_done``), in the
    order they did; from the compiled timing's array (NaN: never ran), laid out as a dict on first use."""

    def __init__(self, at: np.ndarray) -> None:
        self.at, self._d = at, None

    def _dict(self) -> dict[int, float]:
        if self._d is None:
            ran = np.flatnonzero(~np.isnan(self.at))
            ran = ran[np.argsort(self.at[ran], kind="stable")]
            self._d = dict(zip(ran.tolist(), self.at[ran].tolist()))
        return self._d

    def __getitem__(self, tid: int) -> float:
        return self._dict()[tid]

    def __iter__(self):
        return iter(self._dict())

    def __len__(self) -> int:
        return len(self._dict())


def pass_bounds(wl: Workload, cost: CostModel, system: SystemConfig) -> np.ndarray:
    """``sim.bound.pass_bounds`` compiled: the same bound."""
    p = system.precision
    precisions = {"hobbit": (HIGH, LOW), "high": (HIGH,), "low": (LOW,)}[p.mode]
    uses_cpu = system.cpu_misses != "never" or system.placement == "static"
    max_t, sizes = _tables(wl)
    top = max_t
    expert_min, cpu_s = np.zeros(top + 1), np.zeros(top + 1)
    for n in range(1, top + 1):
        expert_min[n] = min(cost.cached("expert_s", q, n) for q in precisions)
        if uses_cpu:
            cpu_s[n] = cost.cached("cpu_expert_s", n)
    dense, other = per_pass(cost, sizes, wl.pass_context)
    with first_use(bound.pass_bounds):
        return bound.pass_bounds(narrow(wl.ids, "expert_ids"), frozen(wl.weights), *rule_args(p.mode, p.t1, p.t2),
                                 np.asarray(wl.pass_start, np.int64), np.asarray(wl.pass_end, np.int64), dense,
                                 other, expert_min, cpu_s, wl.num_experts, uses_cpu)
