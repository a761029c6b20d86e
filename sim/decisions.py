"""What the walk decides (``sim.decide.Decider``), as the timing engines, the executor and the results read it: each
(pass, layer) step's copies, computations and evictions (``LayerStep``), how each selection was served (``Served``),
the static placement (``Placement``), the decision log as tables (``DecisionTables``, the compiled walk's) and the
run's counters (``Decisions``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, ClassVar, NamedTuple

import numpy as np

from hobbit.sim.policies.base import HIGH, LOW, Precision


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
