"""The compiled core: the decision walk and the timing of ``sim.decide`` / ``sim.plain`` in numba.

``engine=fast`` (the default) runs a simulation here: ``decide`` makes the decisions of
``sim.decide.Decider`` and ``time_decisions`` the times of ``sim.plain.replay``, exactly (the
differential tests, tests/test_fast.py, hold every registered system to the reference's
decisions and to its times within 1e-9 relative). What the compiled walk does not implement
(``unsupported`` names it: a kept log, a policy registered but not written here) is decided by
the reference walk and timed here. The log comes out as tables (``DecisionTables``);
``Decisions.steps`` lays them out as ``LayerStep`` records on first use, for the simpy engine,
the executor and the timelines. ``stream`` runs both a chunk of passes at a time, dropping each
chunk's log once it is timed: what ``hobbit sim``, sweeps, tuning and comparisons run (they read
only the results), in the trace's memory plus per-pass results and O(cache + chunk) state.
"""

from __future__ import annotations

import hashlib
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any, NamedTuple

import numba
import numpy as np
from numba.core import event as numba_event

try:
    import fcntl
except ImportError:  # not POSIX: no lock, every process compiles for itself (as numba alone does)
    fcntl = None

from hobbit.sim.config import SystemConfig, offload_tokens, policy_knobs
from hobbit.sim.cost import CostModel
from hobbit.sim.decide import (
    Decider,
    Decisions,
    DecisionTables,
    NotKept,
    Placement,
    cache_slots,
    layer_bytes,
    layer_regions,
    log_dtype,
    tables_from_steps,
)
from hobbit.sim.fast import bound, rule, special, timing, walk
from hobbit.sim.fast.jit import quick_inlining
from hobbit.sim.fast.rule import frozen
from hobbit.sim.policies.base import HIGH, LOW, SKIP, PolicyInputs
from hobbit.sim.policies.precision import EPS
from hobbit.sim.policies.registry import eviction_class, prefetcher_class
from hobbit.sim.timeline import Timeline
from hobbit.sim.walk_copies import walk_copies
from hobbit.sim.workload import Workload

# Seconds (low, high) numba takes to compile each entry point, measured on a 2-core VM (numba compiles on one core,
# so more cores do not shorten it; a faster core does; benchmarks/first_compile.py). The walk is most of it: one
# large function with its helpers, a walk per eviction policy (``special``), or per policy and settings, 21-28 s
# each in a quiet hour, up to 45 s when the VM is slow (docs/performance-log.md, 2026-12-06), the first a run
# compiles the longest (the helpers its policy shares with the others compile with it); the replay 4.2-4.5 s.
COMPILE_S: dict[str, tuple[float, float]] = {
    "walk": (20.0, 45.0),
    "replay": (3.0, 6.0),
    "replay_shared": (3.0, 6.0),
    "pass_bounds": (1.0, 2.0),
}
COMPILE_S_OTHER = (1.0, 5.0)  # an entry point not listed above
COMPILE_MACHINE = "a 2-core VM"  # where COMPILE_S was measured
TICK_S = 15.0  # while an entry point compiles, a line of progress this often


def compile_estimate(names: list[str]) -> str:
    """How long compiling the entry points ``names`` takes, as a range a person reads: ``about 1-2 minutes``."""
    lo = sum(COMPILE_S.get(n, COMPILE_S_OTHER)[0] for n in names)
    hi = sum(COMPILE_S.get(n, COMPILE_S_OTHER)[1] for n in names)
    if hi < 90:
        return f"about {lo:.0f}-{hi:.0f} s"
    return f"about {max(round(lo / 60), 1)}-{max(round(hi / 60), 1)} minutes"


class CompileNotice(numba_event.Listener):
    """Says on stderr when the compiled core is being compiled, not loaded from numba's on-disk cache: once per
    machine and version, a minute or two on a small machine, silent otherwise. Numba fires ``numba:compile`` only
    on a cache miss, so a process that loads the core from the cache runs none of this. The first compilation
    announces itself with an estimate for the entry points (``ENTRY``) still to compile; while one compiles, a
    line every ``tick`` seconds names it, its place among them (``walk, 1 of 4``), the time so far and the helper
    numba is on; each ends with its time. The lines come from a thread that lives only while an entry point
    compiles (``tick=None``: no thread; ``progress()`` writes the line)."""

    def __init__(
        self,
        entry: tuple[Callable, ...],
        out=None,
        tick: float | None = TICK_S,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.entry, self.out, self.tick, self.clock = entry, out, tick, clock
        self.started: dict = {}  # entry point -> when it started compiling
        self.order: list = []  # the entry points compiled or to compile, in the order they started
        self.pending = 0  # how many entry points this process is expected to compile (the N of "n of N")
        self.current = None  # the entry point compiling now, and the helper numba is on inside it
        self.helper: str | None = None
        self._stop: threading.Event | None = None
        self._thread: threading.Thread | None = None

    def _say(self, text: str) -> None:
        print(f"hobbit: {text}", file=self.out or sys.stderr, flush=True)

    def _place(self, d) -> str:
        return f"{self.order.index(d) + 1} of {max(self.pending, len(self.order))}"

    def on_start(self, event: numba_event.Event) -> None:
        d = event.data["dispatcher"]
        if d not in self.entry:
            f = getattr(d, "py_func", None)
            if self.current is not None and getattr(f, "__module__", "").startswith(__name__):  # ours, not numba's
                self.helper = getattr(f, "__name__", None)
            return
        if d not in self.order:
            if not self.order:
                todo = [e for e in self.entry if e is d or not (e.overloads or _in_cache(e))]
                self.pending = len(todo)
                self.order.append(d)
                self._say(
                    f"compiling the simulator's core ({d.py_func.__name__} first): "
                    f"{f'up to {len(todo)} functions' if len(todo) > 1 else 'one function'}, once for this machine "
                    f"and version, "
                    f"{compile_estimate([e.py_func.__name__ for e in todo])} on {COMPILE_MACHINE}; later runs load "
                    f"it from numba's cache"
                )
            else:
                self.order.append(d)
        self.started[d] = self.clock()
        self.current, self.helper = d, None
        if self.tick:
            self._stop = threading.Event()
            self._thread = threading.Thread(target=self._ticker, args=(self._stop,), name="hobbit-compile", daemon=True)
            self._thread.start()

    def progress(self) -> None:
        """One line on the entry point compiling now: which, its place, the seconds so far, the helper it is on."""
        d = self.current
        if d is None:
            return
        on = f"; now on {self.helper}" if self.helper else ""
        self._say(
            f"compiling {d.py_func.__name__} ({self._place(d)}): {self.clock() - self.started[d]:.0f} s so far{on}"
        )

    def _ticker(self, stop: threading.Event) -> None:
        while not stop.wait(self.tick):
            self.progress()

    def on_end(self, event: numba_event.Event) -> None:
        d = event.data["dispatcher"]
        if d not in self.started:
            return
        if self._stop is not None and self._thread is not None:
            self._stop.set()
            self._thread.join()  # gone before the caller goes on: a sweep's launcher forks only without threads
            self._stop = self._thread = None
        self.current, self.helper = None, None
        self._say(f"compiled {d.py_func.__name__} in {self.clock() - self.started[d]:.0f} s ({self._place(d)})")


ENTRY = (timing.replay, timing.replay_shared, bound.pass_bounds)  # and each policy's walk, as a run asks for it
NOTICE = CompileNotice(ENTRY)
numba_event.register("numba:compile", NOTICE)


def _compiled(d) -> bool:
    return bool(getattr(d, "overloads", None)) or _in_cache(d)


def policy_walk(policy: str, variant: special.Variant | None = None) -> Callable:
    """The walk compiled for eviction policy ``policy`` (``special.core``) for a run of settings ``variant`` (None:
    the policy's general copy), as ``walk_copies`` chooses; an entry point ``NOTICE`` announces. Every copy decides
    alike; a specialised one compiles about a fifth less code than the general one."""
    mode = walk_copies()
    if variant is None or mode == "general":
        d = special.core(policy).walk
    else:
        d = special.core(policy, variant).walk
        if mode == "auto" and not _compiled(d) and _compiled(general := special.core(policy).walk):
            d = general
    if d not in NOTICE.entry:
        NOTICE.entry = (*NOTICE.entry, d)
    return d


WAITED: list[str] = []  # the entry points this process waited on another's compilation for (said once)


def lock_path(d) -> Path:
    """The file whose lock the processes compiling entry point ``d`` take (``first_use``): one per entry point's
    source file and name, numba version and cache directory, so that two policies' walks compile side by side."""
    f = d.py_func
    where = f"{Path(f.__code__.co_filename).resolve()}:{f.__qualname__}"
    key = f"{Path(__file__).resolve().parent}|{where}|{numba.__version__}|{numba.config.CACHE_DIR}"
    return Path(tempfile.gettempdir()) / f"hobbit-core-{hashlib.sha1(key.encode()).hexdigest()[:16]}.lock"


def _in_cache(d) -> bool:
    """Whether numba's on-disk cache holds compiled code of dispatcher ``d`` for its current source (read from
    the cache's index; anything unexpected reads as no)."""
    try:
        return bool(d._cache._cache_file._load_index())
    except Exception:  # noqa: BLE001 - numba's cache internals: when they differ, the lock is simply taken
        return False


NO_WAIT = nullcontext()


def first_use(d, out=None) -> AbstractContextManager[Any]:
    """Around a call of compiled entry point ``d``: before its first compilation in this process, ``_one_at_a_time``
    with numba's inliner as ``jit.quick_inlining`` makes it; once compiled, nothing (a streamed run calls each
    entry point once a chunk, a few hundred times a run)."""
    if getattr(d, "overloads", None):
        return NO_WAIT
    return _first_compile(d, out)


@contextmanager
def _first_compile(d, out=None) -> Iterator[None]:
    with quick_inlining(), _one_at_a_time(d, out):
        yield


@contextmanager
def _one_at_a_time(d, out=None) -> Iterator[None]:
    """Around the first call of a compiled entry point in a process: when numba would have to compile it (neither
    this process nor the on-disk cache has it), one process at a time goes on (an exclusive lock on
    ``lock_path(d)``). A sweep's workers all start at once; without the lock each of them compiles the walk for
    itself (each taking the whole compilation's time and most of a GB), with the lock one compiles and the others
    then load its code from the cache. A process that dies releases the lock."""
    if (
        fcntl is None or not hasattr(d, "overloads") or d.overloads or _in_cache(d)
    ):  # (a function under NUMBA_DISABLE_JIT)
        yield
        return
    try:
        f = open(lock_path(d), "a")  # noqa: SIM115 - held to the end of the block
    except OSError:
        yield
        return
    with f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not WAITED:
                print(
                    "hobbit: another process is compiling the simulator's core; waiting for it, then loading its "
                    "code from numba's cache",
                    file=out or sys.stderr,
                    flush=True,
                )
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
    if not special.compiled(system.cache.policy):
        return f"cache policy {system.cache.policy}"
    if special.prefetch_part(system.prefetch.kind) is None:
        return f"prefetcher {system.prefetch.kind}"
    return None


def future_csr(wl: Workload) -> tuple[np.ndarray, np.ndarray]:
    """``Workload.future_uses`` as CSR arrays: key layer * E + expert -> its (pass, layer) steps in order
    (``walk.future_uses``)."""
    pa = wl.pass_arrays()
    return walk.future_uses(np.ascontiguousarray(wl.ids), pa.start, pa.end, wl.num_experts)


def window_future(wl: Workload, first_pass: int, after: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Belady's lists (``future_csr``) for a window of a longer trace whose first pass is the trace's ``first_pass``:
    each key's steps in the window (the trace's numbers), then its first use after the window (``after``, per key;
    ``walk.NEVER`` for none), so that the walk's cursors never run past what the window knows."""
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
    (``walk.NEVER`` for a key it never selects)."""
    off, steps = future_csr(wl)
    out = np.full(len(off) - 1, walk.NEVER, np.int64)
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


def _tables(wl: Workload) -> tuple[int, np.ndarray]:
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
    return wl.derived(("pass_kinds",), lambda: pass_kinds(_tables(wl)[1], wl.pass_arrays().context))


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


def _walk_inputs(
    wl: Workload,
    system: SystemConfig,
    slots: Any,
    expert_bytes: Any,
    placement: Placement | None,
    cpu_faster: Callable[[int, int], bool] | None,
    miss_costs: Callable[[int, int], tuple[float, float]] | None,
    profile: list[np.ndarray] | None,
    bound_inputs: tuple | None = None,
    window: tuple[int, int] = (0, -1),
    records: int | None = None,
    future: tuple[np.ndarray, np.ndarray] | None = None,
    prev_ids: np.ndarray | None = None,
) -> tuple[dict[str, Any], walk.Inputs]:
    """(``walk.walk_state``'s arguments by name, the walk's ``inputs``) for ``system``; with ``bound_inputs``
    (``_bound_inputs``) the walk also writes each pass's bound into ``inputs.bound.out`` and counts the selections of
    each class into ``inputs.bound.cls_n``. ``wl`` is a window of a longer trace when ``window`` = (the trace's
    number of its first pass, the request of the pass before it) says so (``Window``), and then ``future`` is
    Belady's lists for it (``Window.future``) and ``prev_ids`` the selections of the last layer of the pass before;
    ``records``: the run's most steps and records in any log table, which picks the tables' type (``wl``'s, by
    default)."""
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
    future_uses = "future_uses" in ev_cls.needs  # Belady's: the walk moves each key's next use on (``Space.next_use``)
    if not future_uses:
        fut_off, fut_steps = np.zeros(1, np.int64), np.zeros(1, np.int64)
    elif future is not None:
        fut_off, fut_steps = future
    else:
        fut_off, fut_steps = wl.derived(("future",), lambda: future_csr(wl))
    # the prefetchers' compiled parts build their state from the reference prefetchers: the run's as it runs, each
    # other with its defaults (``walk.walk_state``)
    prefetcher = pf_cls(policy_knobs(pf, pf.kind), PolicyInputs(num_layers=L, depth=depth, profile=profile))
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
    room = L * int(np.sum((3 + depth) * np.minimum(E, sizes * wl.top_k) + pf.staging_slots + most + 2))
    # the log tables' type: int32 when it numbers all
    log = np.zeros(0, log_dtype(records if records is not None else max(room, len(wl.pass_start) * L)))
    roff = region_offsets(slots, L, bool(ev.per_layer))
    state_args = {
        "num_layers": L,
        "num_experts": E,
        "roff": roff,
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
    pa = wl.pass_arrays()
    routing = walk.Routing(
        ids=narrow(wl.ids, "expert_ids"),
        weights=frozen(wl.weights),
        pred=pred,
        pred_w=pred_w,
        pass_start=pa.start,
        pass_end=pa.end,
        pass_request=pa.request,
        token_in_request=np.asarray(wl.token_in_request, np.int64),
        top_k=wl.top_k,
        first_pass=int(window[0]),
        prev_request=int(window[1]),
        prev_ids=narrow(prev_ids if prev_ids is not None else np.zeros((0, wl.top_k), np.int16), "expert_ids"),
    )
    hobbit_rule, rule_hi, rule_lo = rule_args(p.mode, p.t1, p.t2)
    rule_in = walk.Rule(
        hobbit_rule=hobbit_rule,
        rule_hi=rule_hi,
        rule_lo=rule_lo,
        mixed=mixed,
        uniform=int(uniform),
        any_prec=bool(p.serve_any_cached),
        multi_high=p.multi_token == "high" and mixed,
    )
    place = walk.Place(
        resident=resident,
        cpu_layer=cpu_layer,
        wide_bypass=bool(ev.per_layer and ev.wide_step == "bypass"),
        offload_at=offload_tokens(system, wl.num_experts, wl.top_k),
        per_layer=bool(ev.per_layer),
        per_expert=per_expert,
        # [L, 2]: a copy charges its layer's bytes (read-only whatever it was given as: one compiled walk)
        expert_bytes=frozen(layer_bytes(expert_bytes, wl.num_layers)),
    )
    evict = walk.Evict(fut_off=fut_off, fut_steps=fut_steps)
    prefetch = walk.Prefetch(
        kind=special.prefetchers().index(pf.kind),
        max_depth=depth,
        history=pf.fallback == "history",
        prefetch_prec=int(prefetch_prec),
        prefetching=bool(prefetching),
        staging=int(pf.staging_slots),
        most=int(most),
    )
    cpu = walk.Cpu(
        misses=walk.CPU_MISSES.index(system.cpu_misses),
        insert=int(system.cpu_insert),
        faster=faster,
        copy_s=copy_s,
        cpu_s=cpu_s,
        split_threshold=float(system.split_threshold),
        split_max_fetch=int(system.split_max_fetch),
    )
    if bound_inputs is None:
        bnd = walk.Bound(
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
    else:
        bnd = walk.Bound(True, *bound_inputs, out=np.zeros(len(wl.pass_start)), cls_n=np.zeros(3, np.int64))
    return state_args, walk.Inputs(routing, rule_in, place, evict, prefetch, cpu, bnd, log)


def _decisions(
    st: np.ndarray,
    served: np.ndarray,
    mass: np.ndarray,
    slots: Any,
    system: SystemConfig,
    steps,
    tables: DecisionTables | None,
    per_layer: tuple[np.ndarray, np.ndarray] | None = None,
) -> Decisions:
    pf = system.prefetch
    prefetching = prefetcher_class(pf.kind).loads_ahead and system.cpu_misses != "always"
    return Decisions(
        steps=steps,
        served=served,
        prefetch_issued=int(st[walk.ISSUED]),
        prefetch_used=int(st[walk.USED]),
        copies_behind=int(st[walk.BEHIND]),
        bytes_requested=int(st[walk.BYTES]),
        mass=mass,
        evictions=int(st[walk.EVICTIONS]),
        slots=cache_slots(slots),
        staging=int(pf.staging_slots) if prefetching else 0,
        prefetch_dropped=int(st[walk.DROPPED]),
        tables=tables,
        per_layer=per_layer,
    )


def decide(
    wl: Workload,
    system: SystemConfig,
    slots: Any,
    expert_bytes: Any,
    placement: Placement | None = None,
    cpu_faster: Callable[[int, int], bool] | None = None,
    miss_costs: Callable[[int, int], tuple[float, float]] | None = None,
    profile: list[np.ndarray] | None = None,
) -> Decisions:
    """``Decider(...).run()`` for a system ``unsupported`` does not refuse, compiled (each policy and prefetcher by
    the compiled part its own file gives)."""
    state_args, inputs = _walk_inputs(wl, system, slots, expert_bytes, placement, cpu_faster, miss_costs, profile)
    state = walk.walk_state(**state_args)
    walk_of = policy_walk(system.cache.policy, special.Variant.of(inputs))
    with first_use(walk_of):
        out = walk_of(state, inputs, 0, len(wl.pass_start))
    logs, served, mass, st = (
        [out.loads, out.gpu, out.cpu, out.cancel, out.evicted, out.kept],
        out.served,
        out.mass,
        out.st,
    )
    held = [len(buffer) for buffer in out.logs]  # each table's buffer's rows
    # the views now hold the buffers, alone. A buffer's rows past its table's end were never written (``walk._grow``),
    # nor their pages touched; a table is copied to its length (and its buffer let go) only where they are more than
    # an eighth of it, as a copy of every table costs its bytes again (a tenth of a plain run's time)
    del out, state
    for x in range(6):
        if held[x] > len(logs[x]) * 9 // 8:
            logs[x] = logs[x].copy()
    loads, gpu, cpu, cancel, evicted, kept = logs
    if st[walk.OVERFLOW]:  # LIRS counted out more copies than its entries hold: the reference decides
        return Decider(
            wl, system, slots, expert_bytes, placement, cpu_faster=cpu_faster, miss_costs=miss_costs, profile=profile
        ).run()
    tables = DecisionTables(
        num_layers=wl.num_layers,
        n_steps=len(wl.pass_start) * wl.num_layers,
        expert_bytes=expert_bytes,
        loads=loads,
        gpu=gpu,
        cpu=cpu,
        cancel=cancel,
        evicted=evicted,
        kept=kept,
    )
    return _decisions(st, served, mass, slots, system, tables.steps(), tables)


def decide_or_refer(
    wl: Workload,
    system: SystemConfig,
    slots: Any,
    expert_bytes: Any,
    placement: Placement | None = None,
    keep_log: bool = False,
    **kw,
) -> Decisions:
    """The compiled walk where it implements ``system``, else the reference's (same decisions either way)."""
    if unsupported(system, keep_log) is None:
        return decide(
            wl, system, slots, expert_bytes, placement, kw.get("cpu_faster"), kw.get("miss_costs"), kw.get("profile")
        )
    return Decider(wl, system, slots, expert_bytes, placement, keep_log=keep_log, **kw).run()


def _timing_inputs(wl: Workload, cost: CostModel, expert_bytes: Any, top: int) -> tuple:
    """(dense seconds per pass, head seconds per pass, expert seconds [precision, tokens], CPU expert seconds
    [tokens], copy seconds [layer, precision], bytes over the link [layer, precision]) for tokens up to ``top``."""
    _, sizes = _tables(wl)
    dense, other = per_pass(cost, sizes, wl.pass_arrays().context, workload_kinds(wl))
    expert = np.zeros((2, top + 1))
    cpu_s = np.zeros(top + 1)
    for n in range(1, top + 1):
        expert[HIGH, n], expert[LOW, n] = cost.cached("expert_s", HIGH, n), cost.cached("expert_s", LOW, n)
    nbytes_of = layer_bytes(expert_bytes, wl.num_layers)
    dur_of = np.array([[cost.cached("transfer_s", int(b)) for b in row] for row in nbytes_of.tolist()]).reshape(-1, 2)
    return dense, other, expert, cpu_s, dur_of, cost.link_bytes(nbytes_of)


def _fill_cpu(cost: CostModel, cpu_s: np.ndarray) -> None:
    cpu_s[1:] = [cost.cached("cpu_expert_s", n) for n in range(1, len(cpu_s))]


def _replay(
    wl: Workload,
    cost: CostModel,
    shared: bool | None,
    p0: int,
    p1: int,
    tables: tuple,
    per_tid: tuple,
    inputs: tuple,
    demand_first: bool,
    link: tuple,
    base: int,
    out: tuple,
    first_pass: int = 0,
) -> None:
    """The timing of passes ``p0:p1`` (``timing.replay`` or, with contention, ``replay_shared``); ``wl``'s passes,
    the per-pass ``inputs`` and ``out`` start at pass ``first_pass`` (a window's, ``stream``)."""
    f = cost.contention
    dense, other, expert, cpu_s = inputs[:4]
    args = (
        p0,
        p1,
        wl.num_layers,
        *tables,
        *per_tid,
        dense,
        whole_layers(cost, wl.num_layers),
        other,
        expert,
        cpu_s,
        float(cost.issue_s()),
        bool(demand_first),
        bool(cost.serial_copies),
        bool(cost.clear_queue),
        link,
        base,
        first_pass,
        *out,
    )
    if shared if shared is not None else f.active:
        with first_use(timing.replay_shared):
            timing.replay_shared(*args, float(f.link), float(f.dense), float(f.high), float(f.low))
    else:
        with first_use(timing.replay):
            timing.replay(*args)


def time_decisions(
    wl: Workload, dec: Decisions, cost: CostModel, demand_first: bool = True, shared: bool | None = None
) -> Timeline:
    """``sim.plain.replay`` compiled: the same times (``shared``: as there)."""
    tab = dec.tables if dec.tables is not None else tables_from_steps(dec.steps, wl.num_layers)
    max_t, _ = _tables(wl)
    top = max(max_t, int(tab.gpu[:, 3].max(initial=0)), int(tab.cpu[:, 1].max(initial=0)))
    inputs = _timing_inputs(wl, cost, tab.expert_bytes, top)
    if len(tab.cpu):
        _fill_cpu(cost, inputs[3])
    layer, prec = tab.loads[:, 2], tab.loads[:, 4]
    P = len(wl.pass_start)
    out = (np.zeros(P), np.zeros(P), np.zeros(tab.n_steps), np.zeros(tab.n_steps))
    with first_use(timing.link_state):
        link = timing.link_state(tab.loads)
    _replay(
        wl,
        cost,
        shared,
        0,
        P,
        (tab.loads, tab.gpu, tab.cpu, tab.cancel),
        (inputs[4][layer, prec], inputs[5][layer, prec]),
        inputs,
        demand_first,
        link,
        0,
        out,
    )
    started, done, fs, ls = link[3], link[4], link[5], link[6]
    tl = Timeline(
        *out,
        link_busy_s=float(fs[timing.BUSY]),
        bytes_moved=int(ls[timing.MOVED]),
        cancelled=int(ls[timing.CANCELLED]),
        late=int(ls[timing.LATE]),
    )
    tl.transfer_start, tl.transfer_done = Times(started), Times(done)
    return tl


class Streamed(NamedTuple):
    """A streamed run (``stream``): its decisions and timeline, each pass's bound (``pass_bounds``), and the
    selections' counts per class of HOBBIT's rule (``rule_mix``; None when the system does not apply it)."""

    decisions: Decisions
    timeline: Timeline
    bound: np.ndarray
    classes: np.ndarray | None


class Window(NamedTuple):
    """Consecutive whole passes of a trace, laid out for replay (``stream_windows``): ``wl`` holds them, its tokens
    numbered from 0 (``Workload.token_in_request`` counts from each request's first token in the trace); ``first_pass``
    is the trace's number of its first pass, ``prev_request`` the request of the pass before it (-1: none)."""

    wl: Workload
    first_pass: int = 0
    prev_request: int = -1
    future: tuple[np.ndarray, np.ndarray] | None = None  # Belady's lists of the window (``window_future``)


class Chunk(NamedTuple):
    """A chunk of a streamed run's passes once timed (``stream_windows``' ``on_chunk``): the trace's passes
    ``p0:p1``, the window they belong to, and their start and end times, stalls and bounds in seconds (views, valid
    during the call)."""

    p0: int
    p1: int
    window: Window
    start: np.ndarray
    end: np.ndarray
    stall: np.ndarray
    bound: np.ndarray


class Totals(NamedTuple):
    """What a streamed run counted beyond its chunks (``stream_windows``): its decisions (``Decisions.steps`` not
    kept), the link's busy seconds, bytes and counts of copies cancelled and landing late, each layer's stall over
    the run and over decode passes (``Timeline.stall_sums``), and the selections' counts per class of HOBBIT's rule
    (None when the system does not apply it)."""

    decisions: Decisions
    link_busy_s: float
    bytes_moved: int
    cancelled: int
    late: int
    layer_stall: np.ndarray
    decode_stall: np.ndarray
    classes: np.ndarray | None

    def timeline(self, start: np.ndarray, end: np.ndarray, stall: np.ndarray) -> Timeline:
        """The run's ``Timeline`` from its passes' start and end times and stalls (seconds), the copies' not kept."""
        return Timeline(
            start,
            end,
            np.zeros(0),
            np.zeros(0),
            link_busy_s=self.link_busy_s,
            bytes_moved=self.bytes_moved,
            cancelled=self.cancelled,
            late=self.late,
            stall_sums=(stall, self.layer_stall, self.decode_stall),
        )


CHUNK_STEPS = 1 << 14  # a streamed run (``stream``) walks and times this many steps at a time (whole passes, >= 1)


def stream(
    wl: Workload,
    system: SystemConfig,
    slots: Any,
    expert_bytes: Any,
    cost: CostModel,
    demand_first: bool = True,
    placement: Placement | None = None,
    cpu_faster: Callable[[int, int], bool] | None = None,
    miss_costs: Callable[[int, int], tuple[float, float]] | None = None,
    profile: list[np.ndarray] | None = None,
    chunk_steps: int | None = None,
    shared: bool | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Streamed | None:
    """``decide`` then ``time_decisions``, a chunk of ``chunk_steps`` steps (``CHUNK_STEPS``; whole passes) at a time: each chunk's
    log is timed, counted and dropped, so a run holds the trace, its per-pass and per-step times and O(cache +
    chunk) state, not its log. The same decisions and times as the two in turn; ``Decisions.steps`` and the
    timeline's copy times are not kept (``decide_or_refer`` and ``time_decisions`` for those). None when LIRS runs
    out of its counted-out entries (``decide`` hands such a run to the reference).

    ``stream_windows`` with the whole trace as one window; its results laid out per pass. ``progress(passes done,
    passes)`` is called after each chunk.

    The walk also computes each pass's bound (``pass_bounds``' floats) and, under HOBBIT's rule, the mix of the
    selections' classes (``rule_mix``'s counts) as it reads the selections (``Streamed``)."""
    P = len(wl.pass_start)
    ps, pe, pass_stall, bnd = np.zeros(P), np.zeros(P), np.zeros(P), np.zeros(P)

    def keep(c: Chunk) -> None:
        ps[c.p0 : c.p1], pe[c.p0 : c.p1], pass_stall[c.p0 : c.p1], bnd[c.p0 : c.p1] = c.start, c.end, c.stall, c.bound
        if progress is not None:
            progress(c.p1, P)

    totals = stream_windows(
        [Window(wl)],
        system,
        slots,
        expert_bytes,
        cost,
        keep,
        demand_first,
        placement,
        cpu_faster,
        miss_costs,
        profile,
        chunk_steps,
        shared,
    )
    if totals is None:
        return None
    return Streamed(totals.decisions, totals.timeline(ps, pe, pass_stall), bnd, totals.classes)


def stream_windows(
    windows: Iterable[Window],
    system: SystemConfig,
    slots: Any,
    expert_bytes: Any,
    cost: CostModel,
    on_chunk: Callable[[Chunk], None],
    demand_first: bool = True,
    placement: Placement | None = None,
    cpu_faster: Callable[[int, int], bool] | None = None,
    miss_costs: Callable[[int, int], tuple[float, float]] | None = None,
    profile: list[np.ndarray] | None = None,
    chunk_steps: int | None = None,
    shared: bool | None = None,
    records: int | None = None,
) -> Totals | None:
    """The walk and its timing over ``windows``, the trace's passes in order a window at a time (``Window``), a chunk
    of ``chunk_steps`` steps of a window at a time: each chunk's log is timed, counted and dropped, and its per-pass
    results handed to ``on_chunk`` (``Chunk``), so a run holds one window, O(cache + chunk) state and what
    ``on_chunk`` keeps. The cache, the link and the clock carry from one window to the next: the same decisions and
    times however the trace is cut into windows. ``records``: the run's most steps and records in any log table (the
    tables' integer type; the first window's when None, right for a single window). None when LIRS runs out of its
    counted-out entries (``decide`` hands such a run to the reference).

    The timing numbers copies afresh for each chunk: the copies a later step can still name (held in a slot,
    staged, queued or on the link when the chunk starts) first, in order, then the chunk's own loads, so its
    per-copy arrays hold those and no others."""
    state = walk_of = None
    fs, ls = np.zeros(6), np.zeros(6, np.int64)
    ls[timing.CUR] = -1
    space = np.zeros(0, np.int64)  # the transfer ids the timing's arrays are indexed by (sorted): the previous chunk's
    demand = dropped = np.zeros(0, np.bool_)
    gone = np.zeros(0, np.int8)
    started = done = dur = np.zeros(0)
    nbytes = np.zeros(0, np.int64)
    waiting = np.zeros(0, np.int64)  # the link's queue and the copy on it, as transfer ids
    layer_stall = decode_stall = demand_n = prefetch_n = classes = None
    n_passes = 0
    prev_ids = None  # the selections of the last layer of the last pass walked
    for window in windows:
        wl, first = window.wl, window.first_pass
        L, P = wl.num_layers, len(wl.pass_start)
        if first > 0 and window.future is None and "future_uses" in eviction_class(system.cache.policy).needs:
            raise ValueError(
                f"eviction policy {system.cache.policy} over a window needs the window's lists of next uses "
                "(Window.future)"
            )
        max_t, _ = _tables(wl)
        inputs = _timing_inputs(wl, cost, expert_bytes, max_t)
        state_args, walk_in = _walk_inputs(
            wl,
            system,
            slots,
            expert_bytes,
            placement,
            cpu_faster,
            miss_costs,
            profile,
            _bound_inputs(wl, cost, system, inputs[:2]),
            window=(first, window.prev_request),
            records=records,
            future=window.future,
            prev_ids=prev_ids,
        )
        if state is None:
            state = walk.walk_state(**state_args)
            walk_of = policy_walk(system.cache.policy, special.Variant.of(walk_in))
            layer_stall, decode_stall = np.zeros(L), np.zeros(L)
            demand_n, prefetch_n = np.zeros(L, np.int64), np.zeros(L, np.int64)
            classes = np.zeros(3, np.int64)
        assert walk_of is not None and layer_stall is not None and decode_stall is not None
        assert demand_n is not None and prefetch_n is not None and classes is not None
        cpu_known = False  # the window's CPU expert times, looked up once a chunk computes experts there
        n_passes += P
        dur_of, nbytes_of = inputs[4], inputs[5]
        decode = wl.pass_arrays().phase == 1
        ps, pe = np.zeros(P), np.zeros(P)
        pool, stg_tid, st = state.pool, state.stg_tid, state.st
        per = max(1, (chunk_steps or CHUNK_STEPS) // max(L, 1))  # passes per chunk
        for p0 in range(first, first + P, per):
            p1 = min(first + P, p0 + per)
            tid0 = int(st[walk.NEXT_TID])
            held = np.concatenate([pool[:, :, walk.TRANSFER].ravel(), stg_tid.ravel(), waiting])
            live = np.unique(held[held >= 0])
            with first_use(walk_of):
                out = walk_of(state, walk_in, p0, p1)
            loads, gpu, cpu, cancel = out.loads, out.gpu, out.cpu, out.cancel  # views of the buffers, out.logs
            state = state._replace(pins=out.pins, logs=out.logs)
            del out
            if st[walk.OVERFLOW]:
                return None
            with first_use(timing.carry):
                ok, space, demand, dur, nbytes, started, done, gone = timing.carry(
                    space, live, tid0, loads, dur_of, nbytes_of, demand, dur, nbytes, started, done, gone
                )
            if not ok:
                raise AssertionError("a copy the timing must still know of is not in its arrays")
            n_new = len(loads)
            dropped = np.zeros(len(space) + 1, np.bool_)
            n_wait = len(waiting) - (ls[timing.CUR] >= 0)
            q = np.zeros(n_wait + n_new + len(space) + 1, np.int64)  # a copy dropped comes back once at most
            q[:n_wait] = np.searchsorted(space, waiting[:n_wait])
            ls[timing.HEAD], ls[timing.TAIL] = 0, n_wait
            if ls[timing.CUR] >= 0:
                ls[timing.CUR] = np.searchsorted(space, waiting[-1])
            for t in (gpu, cancel):  # transfer ids -> the chunk's numbering (-1: resident, stays)
                if not timing.renumber(t, live, tid0, len(live)):
                    raise AssertionError("a step names a copy the timing was not told to keep")
            if len(cpu) and not cpu_known:
                _fill_cpu(cost, inputs[3])
                cpu_known = True
            link = (demand, q, dropped, started, done, fs, ls, gone)
            n = (p1 - p0) * L
            stall = np.zeros(n)
            _replay(
                wl,
                cost,
                shared,
                p0,
                p1,
                (loads, gpu, cpu, cancel),
                (dur, nbytes),
                inputs,
                demand_first,
                link,
                len(live),
                (ps, pe, stall, np.zeros(n)),
                first,
            )
            w0, w1 = p0 - first, p1 - first
            with first_use(timing.tally):
                timing.tally(loads, L, stall, decode[w0:w1], demand_n, prefetch_n, layer_stall, decode_stall)
            waiting = space[q[ls[timing.HEAD] : ls[timing.TAIL]]]
            if ls[timing.CUR] >= 0:
                waiting = np.append(waiting, space[ls[timing.CUR]])
            on_chunk(
                Chunk(p0, p1, window, ps[w0:w1], pe[w0:w1], stall.reshape(-1, L).sum(axis=1), walk_in.bound.out[w0:w1])
            )
        classes += walk_in.bound.cls_n
        prev_ids = np.array(wl.ids[wl.pass_start[-1] : wl.pass_end[-1], L - 1], np.int16)
    if state is None:
        raise ValueError("a streamed run needs at least one window of passes")
    assert layer_stall is not None and decode_stall is not None
    dec = _decisions(
        state.st,
        state.served,
        state.mass,
        slots,
        system,
        NotKept(n_passes * len(layer_stall)),
        None,
        (demand_n, prefetch_n),
    )
    return Totals(
        dec,
        float(fs[timing.BUSY]),
        int(ls[timing.MOVED]),
        int(ls[timing.CANCELLED]),
        int(ls[timing.LATE]),
        layer_stall,
        decode_stall,
        classes if system.precision.mode == "hobbit" else None,
    )


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


def _bound_inputs(
    wl: Workload, cost: CostModel, system: SystemConfig, per_pass_s: tuple[np.ndarray, np.ndarray] | None = None
) -> tuple:
    """``bound.pass_bounds``'s tables (the walk's too, ``_walk_inputs``): (dense seconds per pass [P, 2] and the layers
    run whole on the CPU (``per_pass``, ``whole_layers``), head seconds per pass (``per_pass_s`` when given), the cheapest device seconds of an expert per token count, its CPU seconds,
    whether the CPU computes)."""
    precisions = {"hobbit": (HIGH, LOW), "high": (HIGH,), "low": (LOW,)}[system.precision.mode]
    uses_cpu = system.cpu_misses != "never" or system.placement == "static"
    max_t, sizes = _tables(wl)
    expert_min, cpu_s = np.zeros(max_t + 1), np.zeros(max_t + 1)
    for n in range(1, max_t + 1):
        expert_min[n] = min(cost.cached("expert_s", q, n) for q in precisions)
        if uses_cpu:
            cpu_s[n] = cost.cached("cpu_expert_s", n)
    dense, other = (
        per_pass_s if per_pass_s is not None else per_pass(cost, sizes, wl.pass_arrays().context, workload_kinds(wl))
    )
    return dense, whole_layers(cost, wl.num_layers), other, expert_min, cpu_s, uses_cpu


def pass_bounds(wl: Workload, cost: CostModel, system: SystemConfig) -> np.ndarray:
    """``sim.bound.pass_bounds`` compiled: the same bound."""
    p = system.precision
    dense, whole, other, expert_min, cpu_s, uses_cpu = _bound_inputs(wl, cost, system)
    with first_use(bound.pass_bounds):
        return bound.pass_bounds(
            narrow(wl.ids, "expert_ids"),
            frozen(wl.weights),
            *rule_args(p.mode, p.t1, p.t2),
            wl.pass_arrays().start,
            wl.pass_arrays().end,
            dense,
            whole,
            other,
            expert_min,
            cpu_s,
            wl.num_experts,
            uses_cpu,
        )
