"""Walk a trace through the policies: every hit, load, prefetch, skip and eviction.

Decisions do not depend on time, so they are made once here and replayed by the timing
engines (``sim.engine`` with simpy, ``sim.plain`` without) and by the executor, which
therefore all see the same decisions.

Rules (paper §3.2-3.4, docs/design.md): an expert whose precision score is above T2 is skipped
only on a miss; a cached copy of either precision serves it. Records (R, F, H) are kept per
(layer, expert) for the request (``policies.cache``). A prefetched expert enters its pool
when the prefetch is issued (evicting then), pinned until its target layer has run; with
``prefetch.staging_slots`` > 0 it waits instead in one of that many staging slots (carved
from the high pool's memory), enters the cache only when used there, and is dropped
unused, a copy that has not started then being cancelled by the timing engine.
With ``cache.per_layer`` and ``cache.wide_step=bypass``, a (pass, layer) whose tokens select more distinct
experts than the layer's region of a pool has slots (a prefill) keeps none of its misses in that pool: each
is used once and not kept (no eviction, no hook hears of it), as a copy that finds no slot is, and no copy
follows a CPU-computed miss (``cpu_insert``, nor ``cpu_misses=faster``'s fill of an empty slot). Its hits
are hits. Prefetches, staged copies included, are not misses of the step: they enter as ever.
The walk names no policy: it gives each what its class ``needs`` (``policies.base.NEEDS``).
Legend: N tokens, L layers, K top-k, D lookahead depth, E experts, T tokens in a forward pass.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, ClassVar, NamedTuple

import numpy as np

from hobbit.sim.config import SystemConfig, offload_tokens, policy_knobs
from hobbit.sim.policies.base import HIGH, LOW, SKIP, PolicyInputs, Precision, PrefetchContext
from hobbit.sim.policies.cache import ExpertCache
from hobbit.sim.policies.precision import classes_for
from hobbit.sim.policies.registry import eviction_class, prefetcher_class
from hobbit.sim.workload import Workload


# served kinds (results.json served_mix)
class Served(IntEnum):
    """How a selection was served (the index of ``Decisions.served``; results.json ``served_mix``)."""

    HIGH_HIT = 0
    LOW_HIT = 1
    HIGH_LOAD = 2
    LOW_LOAD = 3
    SKIPPED = 4
    CPU = 5


HIGH_HIT, LOW_HIT, HIGH_LOAD, LOW_LOAD, SKIPPED, CPU = Served
PRECISION = tuple(Precision)  # a class index -> its enum member, without the enum's slower constructor
SERVED_NAMES = tuple(s.name.lower() for s in Served)


class Load(NamedTuple):
    """A copy the decisions issue when the router has run."""

    tid: int  # transfer id
    nbytes: int
    demand: bool  # a computation of this step waits for it (else a prefetch)


class Compute(NamedTuple):
    """An expert computed on the device."""

    tid: int  # the transfer it waits for; -1 when the copy is resident
    precision: Precision
    tokens: int


class LogEntry(NamedTuple):
    """One action of the decision log (``Decisions.log``), as the executor's replay logs what it executes."""

    pass_index: int
    layer: int
    expert: int
    action: str  # hit | cpu | skip | load | prefetch | evict (the replay: load | prefetch | compute | evict)
    precision: Precision


class CopyKey(NamedTuple):
    """A copy of an expert: what a ``Load`` copies, or what the cache evicted or kept."""

    layer: int
    expert: int
    precision: Precision


@dataclass
class LayerStep:
    """One MoE layer of one forward pass, as the timing engines replay it.

    ``loads``: the copies (``Load``) issued when the router has run, in order; ``gpu``: the
    experts computed on the device (``Compute``: the transfer to wait for or -1, precision,
    tokens); ``cpu``: tokens of each expert computed on the host CPU; ``cancel``: transfer ids
    of prefetches found useless here (dropped from the link queue if not started). For the
    executor, parallel lists name the experts: ``load_keys`` (``CopyKey``) of each load,
    ``gpu_keys`` / ``cpu_keys`` (layer, expert) of each computation, and ``evicted`` the copies
    this step pushed out of the cache. Named records, so that the engines, the executor and
    the timelines read fields by name; precisions are ``Precision``, served kinds ``Served``.
    """

    pass_index: int
    layer: int
    loads: list[Load] = field(default_factory=list)
    gpu: list[Compute] = field(default_factory=list)
    cpu: list[int] = field(default_factory=list)
    cancel: list[int] = field(default_factory=list)
    load_keys: list[CopyKey] = field(default_factory=list)
    gpu_keys: list[tuple[int, int]] = field(default_factory=list)
    cpu_keys: list[tuple[int, int]] = field(default_factory=list)
    evicted: list[CopyKey] = field(default_factory=list)
    kept: list[CopyKey] = field(default_factory=list)  # copies the cache took in this step


@dataclass(frozen=True)
class Placement:
    """Experts that never move: ``resident`` keys stay on the device, ``cpu_layers`` run on the CPU;
    ``static``: the placement is the whole device memory, no expert cache is left."""

    resident: frozenset = frozenset()
    cpu_layers: frozenset = frozenset()
    static: bool = False


LOG32_MAX = 2**31 - 1  # the most steps and records per table the log numbers in int32; beyond, int64


def log_dtype(records: int) -> type:
    """The log tables' integer type for a run of at most ``records`` steps and records in any table."""
    return np.int32 if records <= LOG32_MAX else np.int64


class DecisionTables:
    """The decision log as tables of int32 (int64 past ``LOG32_MAX`` records), one row per record in the order the
    walk made it, steps ascending (the compiled walk's output, ``sim.fast``). A column by name:
    ``tables.column("loads", "layer")``.

    ``loads`` (row = transfer id): step, demand (1) or prefetch (0), layer, expert, precision;
    ``gpu``: step, tid (-1: resident), precision, tokens, expert; ``cpu``: step, tokens, expert;
    ``cancel``: step, tid; ``evicted`` and ``kept``: step, layer, expert, precision.
    """

    COLUMNS: ClassVar[dict[str, tuple[str, ...]]] = {
        "loads": ("step", "demand", "layer", "expert", "precision"),
        "gpu": ("step", "tid", "precision", "tokens", "expert"),
        "cpu": ("step", "tokens", "expert"),
        "cancel": ("step", "tid"),
        "evicted": ("step", "layer", "expert", "precision"),
        "kept": ("step", "layer", "expert", "precision"),
    }
    # the tables of COLUMNS, set by name in __init__
    loads: np.ndarray
    gpu: np.ndarray
    cpu: np.ndarray
    cancel: np.ndarray
    evicted: np.ndarray
    kept: np.ndarray

    def __init__(self, num_layers: int, n_steps: int, expert_bytes: Any, **tables: np.ndarray) -> None:
        self.num_layers, self.n_steps = num_layers, n_steps
        self.expert_bytes = layer_bytes(expert_bytes, num_layers)  # [L, 2]
        for name, cols in self.COLUMNS.items():
            t = tables.get(name)
            setattr(self, name, t if t is not None else np.zeros((0, len(cols)), np.int32))

    def column(self, table: str, name: str) -> np.ndarray:
        return getattr(self, table)[:, self.COLUMNS[table].index(name)]

    def per_step(self, table: str) -> np.ndarray:
        """Rows of ``table`` in each step: [n_steps]."""
        return np.bincount(getattr(self, table)[:, 0], minlength=self.n_steps)

    def steps(self) -> Steps:
        return Steps(self)

    def rows(self, table: str, start: int, stop: int) -> tuple[int, np.ndarray]:
        """The rows of ``table`` in steps ``start`` to ``stop`` - 1, and the index of the first (rows are in step
        order)."""
        t = getattr(self, table)
        lo, hi = np.searchsorted(t[:, 0], [start, stop], side="left")
        return int(lo), t[lo:hi]

    def layer_steps(self, start: int = 0, stop: int | None = None) -> list[LayerStep]:
        """The tables as ``LayerStep`` records (what the reference walk builds): every step, or steps ``start`` to
        ``stop`` - 1."""
        L, eb = self.num_layers, self.expert_bytes
        n = self.n_steps if stop is None else min(stop, self.n_steps)
        out = [LayerStep(i // L, i % L) for i in range(start, n)]
        first, loads = self.rows("loads", start, n)
        for tid, (i, demand, layer, e, prec) in enumerate(loads.tolist(), start=first):
            s = out[i - start]
            s.loads.append(Load(tid, int(eb[layer, prec]), bool(demand)))
            s.load_keys.append(CopyKey(layer, e, PRECISION[prec]))
        for i, tid, prec, k, e in self.rows("gpu", start, n)[1].tolist():
            out[i - start].gpu.append(Compute(tid, PRECISION[prec], k))
            out[i - start].gpu_keys.append((i % L, e))
        for i, k, e in self.rows("cpu", start, n)[1].tolist():
            out[i - start].cpu.append(k)
            out[i - start].cpu_keys.append((i % L, e))
        for i, tid in self.rows("cancel", start, n)[1].tolist():
            out[i - start].cancel.append(tid)
        for i, layer, e, prec in self.rows("evicted", start, n)[1].tolist():
            out[i - start].evicted.append(CopyKey(layer, e, PRECISION[prec]))
        for i, layer, e, prec in self.rows("kept", start, n)[1].tolist():
            out[i - start].kept.append(CopyKey(layer, e, PRECISION[prec]))
        return out


class Steps(Sequence):
    """``Decisions.steps`` of a compiled walk: its tables, laid out as ``LayerStep`` records on first use, as far
    as asked (a timeline of a run's first passes lays out those and not the run's million others)."""

    MIN_RUN = 1024  # steps laid out at a time, at least

    def __init__(self, tables: DecisionTables) -> None:
        self.tables, self._steps = tables, []

    def laid_out(self) -> int:
        """How many steps, from the first, are laid out as records so far."""
        return len(self._steps)

    def _upto(self, n: int) -> list[LayerStep]:
        """The records, at least the first ``n`` laid out (the next ones are laid out in runs at least as long as
        those before them and ``MIN_RUN``: few runs when the steps are read in order)."""
        have = len(self._steps)
        if n > have:
            self._steps += self.tables.layer_steps(have, max(n, 2 * have, self.MIN_RUN))
        return self._steps

    def __len__(self) -> int:
        return self.tables.n_steps

    def __getitem__(self, i):
        if isinstance(i, slice):
            return self._upto(self.tables.n_steps)[i]
        n = self.tables.n_steps
        j = i + n if i < 0 else i
        if not 0 <= j < n:
            raise IndexError(f"step {i} out of range for {n} steps")
        return self._upto(j + 1)[j]

    def __iter__(self):
        return iter(self._upto(self.tables.n_steps))

    def __eq__(self, other: object) -> bool:
        return list(self) == list(other) if isinstance(other, Sequence) else NotImplemented

    __hash__: ClassVar[None] = None


class NotKept(Sequence):
    """``Decisions.steps`` of a streamed run (``sim.fast.stream``): the log was timed a chunk of passes at a time
    and dropped, so its records cannot be read back. Its length is the run's step count."""

    def __init__(self, n_steps: int) -> None:
        self.n_steps = n_steps

    def __len__(self) -> int:
        return self.n_steps

    def __getitem__(self, i):
        raise LookupError(
            "this run streamed its decisions and kept none (simulate(..., keep_decisions=False)); "
            "run it with keep_decisions=True to read them"
        )


def layer_bytes(expert_bytes: Any, num_layers: int) -> np.ndarray:
    """One expert's bytes per layer and precision, [L, 2] int64: a (high, low) pair for every layer alike, or a
    table of each layer's (a model file's layers differ: a Q4_K_M stores some layers' down projections as Q6_K)."""
    eb = np.asarray(expert_bytes, np.int64)
    # a new array whatever it was given: ascontiguousarray would hand back broadcast_to's read-only view of a table
    # already [L, 2], and compiled code then sees another type (and compiles again) for a model file's layers
    return np.array(np.broadcast_to(eb.reshape(-1, 2), (num_layers, 2)))


def cache_slots(slots: Any) -> tuple[int, int]:
    """The pools' slots (high, low) of a walk's ``slots``: a (high, low) pair, or each pool's slots in each layer
    ([2, L], a per-layer cache's regions: their sums)."""
    a = np.asarray(slots, np.int64)
    if a.ndim == 2:
        return int(a[HIGH].sum()), int(a[LOW].sum())
    return int(a[HIGH]), int(a[LOW])


def layer_regions(slots: Any, num_layers: int) -> np.ndarray:
    """Each pool's slots in each layer of a per-layer cache, [2, L] int64: ``slots`` as given when it is per layer
    ([2, L]), else a (high, low) pair split evenly (every layer the pool's slots // L; the rest unused)."""
    a = np.asarray(slots, np.int64)
    if a.ndim == 2:
        if a.shape != (2, num_layers) or (a < 0).any():
            raise ValueError(f"slots per layer: [2, {num_layers}] counts >= 0, got shape {a.shape}")
        return a.copy()
    return np.repeat((a // max(num_layers, 1))[:, None], num_layers, axis=1)


def tables_from_steps(steps: Sequence[LayerStep], num_layers: int) -> DecisionTables:
    """The reference walk's ``LayerStep`` records as ``DecisionTables`` (for the compiled timing)."""
    if isinstance(steps, Steps):
        return steps.tables
    rows: dict[str, list] = {name: [] for name in DecisionTables.COLUMNS}
    eb = np.zeros((num_layers, 2), np.int64)
    for i, s in enumerate(steps):
        for ld, k in zip(s.loads, s.load_keys):
            rows["loads"].append((i, int(ld.demand), k.layer, k.expert, int(k.precision)))
            eb[k.layer, int(k.precision)] = ld.nbytes
        rows["gpu"] += [(i, g.tid, int(g.precision), g.tokens, e) for g, (_, e) in zip(s.gpu, s.gpu_keys)]
        rows["cpu"] += [(i, n, e) for n, (_, e) in zip(s.cpu, s.cpu_keys)]
        rows["cancel"] += [(i, tid) for tid in s.cancel]
        rows["evicted"] += [(i, k.layer, k.expert, int(k.precision)) for k in s.evicted]
        rows["kept"] += [(i, k.layer, k.expert, int(k.precision)) for k in s.kept]
    dtype = log_dtype(max(len(steps), *(len(r) for r in rows.values())))
    arrays = {name: np.array(r, dtype).reshape(-1, len(DecisionTables.COLUMNS[name])) for name, r in rows.items()}
    return DecisionTables(num_layers, len(steps), eb, **arrays)


@dataclass
class Decisions:
    """Everything the policies decided, plus counters for results.json."""

    steps: Sequence[LayerStep]  # a list, or the compiled walk's tables laid out on first use (``Steps``)
    served: np.ndarray  # [6] counts by served kind
    prefetch_issued: int = 0  # copies ahead of their use: prefetches, and copies behind a CPU-served miss
    prefetch_used: int = 0  # prefetches that served a use of the layer they were fetched for
    copies_behind: int = 0  # of prefetch_issued, copies behind a CPU-served miss (``cpu_insert``, an empty slot filled)
    bytes_requested: int = 0  # demand + prefetch copies decided (cancelled ones included)
    mass: np.ndarray = field(default_factory=lambda: np.zeros(3))  # gate mass served [high, low, skipped]
    evictions: int = 0
    log: list[LogEntry] | None = None  # when asked for
    slots: tuple[int, int] = (0, 0)  # the cache's pools, in experts (high, low)
    staging: int = 0  # staging slots for prefetched experts, carved from the high pool's memory
    prefetch_dropped: int = 0  # prefetches not issued: no slot (every one pinned) or no free staging slot
    tables: DecisionTables | None = None  # the log as tables (the compiled walk's; None from the reference walk)
    per_layer: tuple[np.ndarray, np.ndarray] | None = None  # a streamed run's (demand loads, prefetches) per layer

    def loads_per_layer(self, num_layers: int) -> tuple[np.ndarray, np.ndarray]:
        """(demand loads, prefetches) issued at each layer over the run."""
        if self.per_layer is not None:
            return self.per_layer
        demand, ahead = self.loads_per_step()
        return demand.reshape(-1, num_layers).sum(axis=0), ahead.reshape(-1, num_layers).sum(axis=0)

    def loads_per_step(self) -> tuple[np.ndarray, np.ndarray]:
        """(demand loads, prefetches) issued in each step (not kept by a streamed run: ``loads_per_layer``)."""
        if self.tables is not None:
            demand = self.tables.column("loads", "demand")
            steps = self.tables.column("loads", "step")
            n = self.tables.n_steps
            return (np.bincount(steps[demand == 1], minlength=n), np.bincount(steps[demand == 0], minlength=n))
        return (
            np.array([sum(1 for x in s.loads if x.demand) for s in self.steps], np.int64),
            np.array([sum(1 for x in s.loads if not x.demand) for s in self.steps], np.int64),
        )


@dataclass
class _Staged:
    tid: int
    precision: int
    target: int  # layer it was fetched for


class Decider:
    """Applies one system's policies to a workload; ``run`` returns the decisions."""

    def __init__(
        self,
        wl: Workload,
        system: SystemConfig,
        slots: Any,
        expert_bytes: Any,
        placement: Placement | None = None,
        keep_log: bool = False,
        cpu_faster: Callable[[int, int], bool] | None = None,
        profile: list | None = None,
        miss_costs: Callable[[int, int], tuple[float, float]] | None = None,
    ) -> None:
        """``slots``: the pools' slots (high, low), or with ``cache.per_layer`` each pool's slots in each layer ([2, L],
        ``layer_regions``); ``cpu_faster(precision, tokens)``: whether a miss is better computed on the CPU (for
        ``system.cpu_misses=faster``); ``profile``: the profiling requests' activation matrices;
        ``miss_costs(precision, tokens)``: a miss's copy time and CPU time (``cpu_misses=split``)."""
        self.wl, self.system = wl, system
        self.expert_bytes = layer_bytes(expert_bytes, wl.num_layers).tolist()  # [L][2]: a copy charges its layer's
        p = system.precision
        self.mixed = p.mode == "hobbit"
        self.uniform = LOW if p.mode == "low" else HIGH
        self.ids = wl.ids.tolist()  # [N][L][K]
        w = wl.weights.astype(np.float64)
        self.wn = (w / np.clip(w.sum(axis=-1, keepdims=True), 1e-30, None)).tolist()  # gate mass per token
        self.cls = classes_for(wl.weights, p.mode, p.t1, p.t2).tolist()
        self.pred: list | None = None  # set together with pred_cls
        self.pred_cls: list | None = None
        pf, ev = system.prefetch, system.cache
        depth = pf.max_depth
        pf_cls, ev_cls = prefetcher_class(pf.kind), eviction_class(ev.policy)
        needs = pf_cls.needs | ev_cls.needs
        if wl.pred_ids is not None and "predictions" in needs:
            assert wl.pred_weights is not None  # laid out with the ids
            self.pred = wl.pred_ids[:, :, :depth].tolist()  # [N][L][D][K]
            self.pred_cls = classes_for(
                np.nan_to_num(wl.pred_weights[:, :, :depth], nan=0.0), p.mode, p.t1, p.t2
            ).tolist()  # a missing prediction's weight counts as 0
        inputs = PolicyInputs(
            num_layers=wl.num_layers,
            depth=depth,
            future_uses=wl.future_uses() if "future_uses" in needs else None,
            profile=profile if "profile" in needs else None,
        )
        self.prefetcher = pf_cls(policy_knobs(pf, pf.kind), inputs)
        if "prefetcher" in needs:
            inputs = dataclasses.replace(inputs, prefetcher=self.prefetcher)
        self.cache = ExpertCache(
            *cache_slots(slots),
            ev_cls(policy_knobs(ev, ev.policy), inputs),
            wl.num_layers,
            per_layer=ev.per_layer,
            regions=layer_regions(slots, wl.num_layers).tolist() if ev.per_layer else None,
        )
        self.wide = ev.per_layer and ev.wide_step == "bypass"  # a wide step's misses are not kept (``run``)
        self.bypass = (False, False)  # per pool: this step's misses are not kept there
        self.offload_at = offload_tokens(system, wl.num_experts, wl.top_k)  # a pass this wide copies host experts
        self.offload = False  # this pass computes host-side experts on the device (``offload_min_batch``)
        placement = placement or Placement()
        self.resident, self.cpu_layers = placement.resident, placement.cpu_layers
        self.counts = np.zeros((wl.num_layers, wl.num_experts), np.int64)  # activation matrix of the request
        self.staged: dict[tuple[int, int], _Staged] = {}  # staging mode: prefetched copies waiting for their layer
        self.staging = pf.staging_slots
        self.pins: dict[int, list[tuple[int, tuple[int, int]]]] = {}  # target layer -> (pool, key) pinned for it
        self.prefetched: dict[tuple[int, int], int] = {}  # key -> target layer, until used or its layer ran
        self.next_tid = 0
        self.cpu_misses, self.cpu_faster = system.cpu_misses, cpu_faster or (lambda prec, n: True)
        self.miss_costs = miss_costs or (lambda prec, n: (1.0, 1.0))
        self.on_cpu: set[int] = set()  # split: this layer's misses the CPU computes
        self.inserts = 0  # cpu_insert: copies behind CPU-computed misses in this layer step
        self.prefetching = pf_cls.loads_ahead and system.cpu_misses != "always"
        # None: the precision the rule gives the predicted weights; else one class for every prefetch
        self.prefetch_prec = {"high": HIGH, "low": LOW}.get(pf.precision) if self.mixed else self.uniform
        self.steps: list[LayerStep] = []  # the walk's records, in order (``self.out.steps``)
        self.out = Decisions(
            steps=self.steps,
            served=np.zeros(6, np.int64),
            log=[] if keep_log else None,
            slots=cache_slots(slots),
            staging=self.staging if self.prefetching else 0,
        )
        self.any_prec = p.serve_any_cached
        self._span = (0, 0)
        self.ctx = PrefetchContext(
            layer=0,
            num_layers=wl.num_layers,
            predict=self._predict,
            future=self._future,
            counts=self.counts,
            is_cached=self._present,
            precision=self.uniform,
        )

    def _log(self, p: int, layer: int, e: int, action: str, prec: int) -> None:
        if self.out.log is not None:
            self.out.log.append(LogEntry(p, layer, e, action, PRECISION[prec]))

    def _transfer(self, step: LayerStep, key: tuple[int, int], prec: int, demand: bool) -> int:
        tid = self.next_tid
        self.next_tid += 1
        nbytes = self.expert_bytes[key[0]][prec]
        step.loads.append(Load(tid, nbytes, demand))
        step.load_keys.append(CopyKey(key[0], key[1], PRECISION[prec]))
        self.out.bytes_requested += nbytes
        return tid

    def _admit(
        self, p: int, key: tuple[int, int], prec: int, layer_now: int, tid: int, token: int, step: LayerStep
    ) -> None:
        slot, victim = self.cache.admit(key, prec, layer_now, tid)
        if victim is not None:
            self.out.evictions += 1
            step.evicted.append(CopyKey(victim[0], victim[1], PRECISION[prec]))
            self._log(p, victim[0], victim[1], "evict", prec)
        if slot >= 0:
            self.cache.use(prec, slot, token, hit=False)
            step.kept.append(CopyKey(key[0], key[1], PRECISION[prec]))
        else:  # used once, not kept: the request's records still count it
            self.cache.note_use(key, prec, token)

    # ------------------------------------------------------------------ serving one layer

    def _needed(self, a: int, b: int, layer: int) -> dict[int, list]:
        """expert -> [best precision class, tokens that select it, their gate mass] over the pass's
        tokens (mass: weights normalised per token). The class is SKIP only when every token scores
        it above T2; served at all, an expert computes every token that selected it."""
        ids, cls, wn = self.ids, self.cls, self.wn
        if b - a == 1:
            return {e: [c, 1, w] for e, c, w in zip(ids[a][layer], cls[a][layer], wn[a][layer])}
        need: dict[int, list] = {}
        for t in range(a, b):
            for e, c, w in zip(ids[t][layer], cls[t][layer], wn[t][layer]):
                cur = need.setdefault(e, [SKIP, 0, 0.0])
                cur[0] = min(cur[0], c)
                cur[1] += 1
                cur[2] += w
        if b - a > 1 and self.system.precision.multi_token == "high" and self.mixed:  # HOBBIT's rule only
            for v in need.values():
                v[0] = SKIP if v[0] == SKIP else HIGH
        return need

    def _serve_one(self, p: int, layer: int, e: int, c: int, n: int, step: LayerStep, token: int) -> int:
        """Serve one expert for its ``n`` tokens; returns the precision they got (HIGH, LOW or SKIP).
        A SKIP class is served by any copy on the device (skip only on a miss, paper §3.2)."""
        key = (layer, e)
        if key in self.resident:
            self.out.served[HIGH_HIT] += 1
            step.gpu.append(Compute(-1, HIGH, n))
            step.gpu_keys.append(key)
            self._log(p, layer, e, "hit", HIGH)
            return HIGH
        if layer in self.cpu_layers and self.offload:  # op offload: copied for this pass, used once
            return self._offload(p, layer, e, n, step)
        if layer in self.cpu_layers:
            self.out.served[CPU] += 1
            step.cpu.append(n)
            step.cpu_keys.append(key)
            self._log(p, layer, e, "cpu", HIGH)
            return HIGH
        need = LOW if c == SKIP else c  # either precision serves a selection that would be skipped
        hit = self.cache.lookup(key, need, self.any_prec)
        if hit is not None:
            pool, slot = hit
            self.cache.use(pool, slot, token)
            if self.prefetched.pop(key, None) is not None:
                self.out.prefetch_used += 1
            self.out.served[HIGH_HIT if pool == HIGH else LOW_HIT] += 1
            step.gpu.append(Compute(self.cache.transfer(pool, slot), PRECISION[pool], n))
            step.gpu_keys.append(key)
            self._log(p, layer, e, "hit", pool)
            return pool
        staged = self.staged.pop(key, None)
        if staged is not None and (staged.precision == HIGH or need == LOW or self.any_prec):
            self.out.prefetch_used += 1
            self.out.served[HIGH_HIT if staged.precision == HIGH else LOW_HIT] += 1
            step.gpu.append(Compute(staged.tid, PRECISION[staged.precision], n))
            step.gpu_keys.append(key)
            self._log(p, layer, e, "hit", staged.precision)
            self._admit(p, key, staged.precision, layer, staged.tid, token, step)
            return staged.precision
        if staged is not None:  # staged at low precision, high needed: useless
            step.cancel.append(staged.tid)
        if c == SKIP:
            self.out.served[SKIPPED] += 1
            self._log(p, layer, e, "skip", SKIP)
            return SKIP
        prec = c if self.mixed else self.uniform
        if self.offload and self.cpu_misses != "never":  # op offload: the CPU's misses copied, used once
            return self._offload(p, layer, e, n, step, prec, token)
        if (
            self.cpu_misses == "always"
            or (self.cpu_misses == "faster" and self.cpu_faster(prec, n))
            or (e in self.on_cpu)
        ):
            self.out.served[CPU] += 1
            step.cpu.append(n)
            step.cpu_keys.append(key)
            self._log(p, layer, e, "cpu", HIGH)
            bypass = self.bypass[prec]  # a wide step's miss: no copy follows it
            if self.inserts < self.system.cpu_insert:  # copied behind the CPU's computation, evicting
                if not bypass and self._copy_ahead(p, layer, key, prec, step, pinned=False):
                    self.inserts += 1
                    self.out.prefetch_issued += 1
                    self.out.copies_behind += 1
                    self._log(p, layer, e, "prefetch", prec)
            elif self.cpu_misses == "faster" and not bypass and self.cache.has_free(prec, layer):
                # an empty slot costs nothing to fill: the copy follows in the background, behind demand loads,
                # so the cache warms up although the CPU served this use
                self._copy_ahead(p, layer, key, prec, step, pinned=False)
                self.out.prefetch_issued += 1
                self.out.copies_behind += 1
                self._log(p, layer, e, "prefetch", prec)
            return HIGH
        tid = self._transfer(step, key, prec, True)
        self.out.served[HIGH_LOAD if prec == HIGH else LOW_LOAD] += 1
        self._log(p, layer, e, "load", prec)
        step.gpu.append(Compute(tid, PRECISION[prec], n))
        step.gpu_keys.append(key)
        if self.bypass[prec]:  # a wide step's miss (wide_step=bypass): used once, not kept
            self.cache.note_use(key, prec, token)
        else:
            self._admit(p, key, prec, layer, tid, token, step)
        return prec

    def _offload(self, p: int, layer: int, e: int, n: int, step: LayerStep, prec: int = HIGH, token: int = 0) -> int:
        """A host-side expert computed on the device in a pass of ``offload_min_batch`` tokens or more: a demand copy,
        used once and not kept (a miss's use is still recorded, ``token`` > 0)."""
        key = (layer, e)
        tid = self._transfer(step, key, prec, True)
        self.out.served[HIGH_LOAD if prec == HIGH else LOW_LOAD] += 1
        self._log(p, layer, e, "load", prec)
        step.gpu.append(Compute(tid, PRECISION[prec], n))
        step.gpu_keys.append(key)
        if token:
            self.cache.note_use(key, prec, token)
        return prec

    def _copy_ahead(self, p: int, layer: int, key: tuple[int, int], prec: int, step: LayerStep, pinned: bool) -> bool:
        """A copy of ``key`` ahead of its use: a slot of its pool (evicting for it, ``layer`` being executed),
        then the transfer into it; False, and nothing copied, when the pool has no slot to give."""
        slot, victim = self.cache.admit(key, prec, layer, -1, pinned=pinned)
        if slot < 0:
            return False
        self.cache.pools[prec].transfer[slot] = self._transfer(step, key, prec, False)
        if victim is not None:
            self.out.evictions += 1
            step.evicted.append(CopyKey(victim[0], victim[1], PRECISION[prec]))
            self._log(p, victim[0], victim[1], "evict", prec)
        step.kept.append(CopyKey(key[0], key[1], PRECISION[prec]))
        return True

    def _drop_stale(self, p: int, layer: int, step: LayerStep) -> None:
        """``layer`` has run: its pinned prefetches become evictable (used or not; an unused one stays
        cached); those it did not use leave their staging slots."""
        for pool, key in self.pins.pop(layer, ()):
            self.cache.unpin(pool, key)
            self.prefetched.pop(key, None)
        if not self.staged:
            return
        for key in [k for k, s in self.staged.items() if s.target == layer]:
            s = self.staged.pop(key)
            step.cancel.append(s.tid)
            self._log(p, key[0], key[1], "discard", s.precision)

    def _split(self, need: dict[int, list], layer: int) -> set[int]:
        """FreeToken's hybrid backend (FlashML-org/FreeToken moe/offload_kernels.py, engine/engine.py): of a
        layer's M misses, F are copied and the rest computed on the CPU, with frac = link bandwidth / CPU
        bandwidth (here the CPU's time for an expert over its copy's) and F the one of floor(frac x M) and
        the next integer with the lower max(F x (1 - frac), (M - F) x frac); the most recently used (in this
        request; ties to the lower id) are the ones copied. Where frac is at least 1 / ``split_threshold``
        (the CPU under twice the link's bandwidth) its auto backend copies every miss."""
        misses = []
        for e, (c, n, _) in need.items():
            key = (layer, e)
            if c == SKIP or key in self.resident or self.cache.lookup(key, c, self.any_prec) is not None:
                continue
            misses.append((e, c if self.mixed else self.uniform, n))
        if not misses:
            return set()
        copy_s, cpu_s = self.miss_costs(misses[0][1], max(n for _, _, n in misses))
        frac = cpu_s / copy_s if copy_s > 0 else 1.0
        if frac * self.system.split_threshold >= 1.0:
            return set()
        M = len(misses)
        lo = int(M * frac)
        F = min((lo, lo + 1), key=lambda f: max(f * (1 - frac), (M - f) * frac))
        if self.system.split_max_fetch >= 0:
            F = min(F, self.system.split_max_fetch)
        misses.sort(key=lambda m: (-self.cache.record((layer, m[0]))[0], m[0]))  # most recently used first
        return {e for e, _, _ in misses[F:]}

    # ------------------------------------------------------------------ prefetch

    def _present(self, layer: int, e: int) -> bool:
        key = (layer, e)
        return key in self.staged or key in self.resident or layer in self.cpu_layers or self.cache.contains(key)

    def _predict(self, d: int) -> tuple[list, list]:
        a, b, layer = self._span[0], self._span[1], self.ctx.layer
        pred, pred_cls = self.pred, self.pred_cls
        if pred is not None and pred_cls is not None and d <= len(pred[a][layer]):
            if b - a == 1:
                return [pred[a][layer][d - 1]], [pred_cls[a][layer][d - 1]]
            return (
                [pred[t][layer][d - 1] for t in range(a, b)],
                [pred_cls[t][layer][d - 1] for t in range(a, b)],
            )
        if self.system.prefetch.fallback == "history" and self.counts[layer + d].any():
            top = np.argsort(-self.counts[layer + d], kind="stable")[: self.wl.top_k].tolist()
            return [top], [[self.uniform] * len(top)]
        return [], []

    def _future(self, d: int) -> tuple[list, list]:
        a, b, layer = self._span[0], self._span[1], self.ctx.layer
        return [self.ids[t][layer + d] for t in range(a, b)], [self.cls[t][layer + d] for t in range(a, b)]

    def _prefetch(self, p: int, layer: int, step: LayerStep, a: int, b: int) -> None:
        self._span = (a, b)
        self.ctx.layer = layer
        per_expert = max(1, round((b - a) * self.wl.top_k / self.wl.num_experts))  # tokens an expert serves, expected
        for req in self.prefetcher.propose(self.ctx):
            key = (req.layer, req.expert)
            if self._present(*key):
                continue
            prec = req.precision if self.prefetch_prec is None else self.prefetch_prec
            if self.cpu_misses == "faster" and self.cpu_faster(prec, per_expert):
                continue  # the CPU would compute it sooner than the copy lands: nothing to prefetch
            if self.staging:
                if len(self.staged) >= self.staging:  # no free staging slot
                    self.out.prefetch_dropped += 1
                    continue
                tid = self._transfer(step, key, prec, False)
                self.staged[key] = _Staged(tid, prec, req.layer)
            else:  # into its pool, pinned until its layer has run
                if not self._copy_ahead(p, layer, key, prec, step, pinned=True):
                    self.out.prefetch_dropped += 1  # no slot to take: every one pinned, or no pool
                    continue
                self.pins.setdefault(req.layer, []).append((prec, key))
                self.prefetched[key] = req.layer
            self.out.prefetch_issued += 1
            self._log(p, req.layer, req.expert, "prefetch", prec)

    # ------------------------------------------------------------------ the walk

    def run(self) -> Decisions:
        wl, L = self.wl, self.wl.num_layers
        for p, (req, a, b) in enumerate(zip(wl.pass_request, wl.pass_start, wl.pass_end)):
            if p > 0 and req != wl.pass_request[p - 1]:
                self.prefetcher.end_request()
                self.cache.new_request()
                self.counts[:] = 0
            token = int(wl.token_in_request[b - 1]) + 1
            self.cache.tokens = token
            self.offload = 0 < self.offload_at <= b - a
            for layer in range(L):
                self.cache.step = p * L + layer
                step = LayerStep(p, layer)
                need = self._needed(a, b, layer)
                if self.wide:  # more experts than a pool's region holds: none of the step's misses kept there
                    self.bypass = (
                        len(need) > self.cache.region_slots(HIGH, layer),
                        len(need) > self.cache.region_slots(LOW, layer),
                    )
                self.inserts = 0
                if self.cpu_misses == "split":
                    self.on_cpu = self._split(need, layer)
                for e, (c, n, mass) in need.items():
                    self.out.mass[self._serve_one(p, layer, e, c, n, step, token)] += mass
                    self.counts[layer, e] += n
                self._drop_stale(p, layer, step)
                if self.prefetching:
                    self._prefetch(p, layer, step, a, b)
                self.steps.append(step)
        self.prefetcher.end_request()
        return self.out
