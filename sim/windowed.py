"""``simulate_file``: ``simulate`` over a trace file read a window of passes at a time, for traces longer than memory.

A run over a whole trace holds its arrays (a 10^6-token Mixtral trace peaks at 3.3 GB); this one holds one window of
``window_tokens`` tokens (``traces.window``), the cache's state and the per-pass results, so its memory grows with the
trace only by its results (about 45 bytes a pass). The compiled walk and timing carry the cache, the link and the
clock from one window to the next (``sim.fast.stream_windows``): the decisions and times are those of ``simulate`` on
the whole trace. Two rules read the whole trace before the run, and a windowed run reads the file again for them:
Belady's next uses (a first read keeps each window's first use of every key, and each window's lists end with the
key's first use after it: ``_after``, ``fast.window_future``), and a page cache of host RAM replayed over the
trace's reads (``system.host_cache=lru``, experts past RAM: two reads, for the largest expert id and for the reads).
The fallback predictions of a trace
that records none (``prefetch.fallback=oracle``) are drawn window by window: the same distribution as a whole run's,
other draws. ``Results.decisions.steps`` and the timeline's copy times are not kept (as in any streamed run), nor the
whole ``Workload`` (``Results.workload`` is None); passes.parquet holds the same values, its integer columns in the
trace's own widths (request_id, tokens and context int32, phase int8).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Iterator
from typing import ClassVar

import numpy as np

from hobbit.sim import fast
from hobbit.sim.checks import Described, check_run
from hobbit.sim.config import ConfigError, HardwareConfig, ModelConfig, PrefetchConfig, SystemConfig
from hobbit.sim.fast import rule
from hobbit.sim.memory import MemoryFit, pass_keys, replayed_share
from hobbit.sim.policies.compiled import NEVER
from hobbit.sim.policies.precision import EPS
from hobbit.sim.results import Columns, Results, summarise
from hobbit.sim.run import Setup, configure, describe, needs
from hobbit.sim.walk_copies import walk_copies
from hobbit.sim.workload import RequestMatrices, build_workload, chunk_prefill
from hobbit.traces import window
from hobbit.traces.arrays import TraceArrays
from hobbit.traces.io import Trace, read_meta
from hobbit.traces.schema import TraceMeta

# tokens a window holds by default: a Mixtral window takes about 8 kB a token while it is read and laid out, and a
# smaller window runs as fast (benchmarks/long_trace.py)
WINDOW_TOKENS = 1 << 13


# bytes a run over a trace read whole peaks at per row of the file (a token's layer): 3,353 MB for 999,424 Mixtral
# tokens of 32 layers, streamed (benchmarks/long_trace.py, docs/performance-log.md, 2026-12-05)
WHOLE_READ_BYTES_PER_ROW = 105


def free_memory() -> int | None:
    """Bytes of memory this machine has available (Linux's MemAvailable; None where it is not known)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def check_whole_read(path: str | os.PathLike) -> None:
    """Refuse to read the trace at ``path`` whole when its run would not fit the memory available, with the fix."""
    import pyarrow.parquet as pq

    free = free_memory()
    try:
        with pq.ParquetFile(path) as f:
            rows = f.metadata.num_rows
    except (OSError, ValueError):
        return  # the reader names what is wrong with the file
    need = rows * WHOLE_READ_BYTES_PER_ROW
    if free is not None and need > free:
        raise ConfigError(
            f"trace {path} has {rows:,} rows: a run over it read whole takes about {need / 2**30:.1f} GiB, more than "
            f"the {free / 2**30:.1f} GiB this machine has available (fix: window_tokens={WINDOW_TOKENS}, which reads "
            f"it a window at a time)"
        )


class PassColumns:
    """passes.parquet's columns, grown as a run's chunks are timed (``add``), in the trace's widths."""

    DTYPES: ClassVar[dict[str, type]] = {
        "request_id": np.int32,
        "phase": np.int8,
        "tokens": np.int32,
        "context": np.int32,
        "start": np.float64,
        "end": np.float64,
        "stall": np.float64,
        "bound": np.float64,
    }

    def __init__(self, capacity: int) -> None:
        self.n = 0
        self.cols = {k: np.zeros(max(capacity, 1), t) for k, t in self.DTYPES.items()}

    def add(self, c: fast.Chunk) -> None:
        wl = c.window.wl
        w0, w1 = c.p0 - c.window.first_pass, c.p1 - c.window.first_pass
        m = w1 - w0
        if self.n + m > len(self.cols["start"]):
            size = max(self.n + m, len(self.cols["start"]) * 3 // 2)
            for k, a in self.cols.items():
                grown = np.zeros(size, a.dtype)
                grown[: self.n] = a[: self.n]
                self.cols[k] = grown
        at = slice(self.n, self.n + m)
        self.cols["request_id"][at] = wl.pass_request[w0:w1]
        self.cols["phase"][at] = wl.pass_phase[w0:w1]
        self.cols["tokens"][at] = np.subtract(wl.pass_end[w0:w1], wl.pass_start[w0:w1])
        self.cols["context"][at] = wl.pass_context[w0:w1]
        self.cols["start"][at], self.cols["end"][at] = c.start, c.end
        self.cols["stall"][at], self.cols["bound"][at] = c.stall, c.bound
        self.n += m

    def table(self) -> tuple[Columns, np.ndarray, np.ndarray, np.ndarray]:
        """(passes.parquet's columns, each pass's start and end and stall in seconds)."""
        c = {k: a[: self.n] for k, a in self.cols.items()}
        passes = {
            "request_id": c["request_id"],
            "phase": c["phase"],
            "tokens": c["tokens"],
            "context": c["context"],
            "start_ms": c["start"] * 1e3,
            "latency_ms": (c["end"] - c["start"]) * 1e3,
            "stall_ms": c["stall"] * 1e3,
            "bound_ms": c["bound"] * 1e3,
        }
        return passes, c["start"], c["end"], c["stall"]


def uses_profile(system: SystemConfig) -> bool:
    """Whether ``system`` reads the profiling requests (``run.place``, a policy that ``needs`` a profile)."""
    return (
        system.placement == "popular"
        or system.gpu_experts > 0
        or system.cache.layer_pinned > 0
        or "profile" in needs(system)
    )


def log_records(scan: window.Scan, system: SystemConfig, ubatch: int) -> int:
    """An upper bound on a run's steps and log records over ``scan``'s passes (``fast.inputs.walk_inputs``' room, summed
    over the trace), which picks the log tables' integer type."""
    m = scan.meta.model
    L, E, K = len(scan.meta.layers), m.num_experts, m.top_k
    pf = system.prefetch
    per_step = L * E if pf.kind == "eam" else 0  # EAM's proposals per step are at most every expert of every layer
    room = steps = 0
    for (phase, size), n in scan.pass_sizes.items():
        parts = (
            [size] if phase == 1 or not ubatch else [ubatch] * (size // ubatch) + [size % ubatch] * (size % ubatch > 0)
        )
        for t in parts:
            room += n * L * ((3 + pf.max_depth) * min(E, t * K) + pf.staging_slots + per_step + 2)
            steps += n * L
    return max(room, steps)


def simulate_file(
    path: str | os.PathLike,
    model: ModelConfig,
    hw: HardwareConfig,
    system: SystemConfig,
    rng: np.random.Generator | None = None,
    profile: str | os.PathLike | None = None,
    profile_share: float = 0.25,
    window_tokens: int = WINDOW_TOKENS,
    progress: Callable[[int, int], None] | None = None,
    context: int = 0,
    stop_tokens: int | None = None,
    scan: window.Scan | None = None,
    engine: str = "fast",
    walks: str | None = None,
) -> Results:
    """``simulate`` of the trace at ``path`` (and the profiling trace at ``profile``), read ``window_tokens`` tokens
    at a time (the module's docstring: what differs). ``progress(passes timed, passes)`` after each chunk.
    ``stop_tokens``: the trace's first tokens alone (a request's edge, ``traces.window.TraceFile.head``); ``scan``:
    the file's scan of them where the caller has it (a ``TraceFile``'s: its runs read the key columns once);
    ``engine``: fast alone (refused otherwise, as every check of the inputs: ``sim.checks.check_run``); ``walks``:
    which compiled copy of the policy's walk runs (``sim.walk_copies``)."""
    t_wall = time.perf_counter()
    walks = walk_copies(walks)
    file = str(path)
    described = Described(scan.meta if scan is not None else read_meta(file), file)
    profiled = Described(read_meta(profile), str(profile)) if profile is not None else None
    flags = check_run(model, hw, system, described, profiled, engine=engine, window_tokens=window_tokens)
    system = flags.system
    scan = scan if scan is not None else window.scan(file, stop_tokens)
    meta, stop = scan.meta, stop_tokens
    rng = rng if rng is not None else np.random.default_rng(0)
    p = system.prefetch
    # as ``split_requests``: the first requests profile, the rest are timed
    n_prof = window.held_apart(len(scan.requests), profile_share) if profile is None else 0
    skip = int(scan.request_tokens[:n_prof].sum())
    after = _after(file, meta, window_tokens, skip, stop, system.ubatch) if "future_uses" in needs(system) else None
    timed = _windows(file, scan.meta, window_tokens, skip, stop, p, rng, system.ubatch, context, after)
    first = next(timed)
    stand_in = Trace(meta, first[1], file)  # what the results read of the trace: its metadata
    prof = _profile_matrices(system, file, meta, profiled, window_tokens, n_prof, skip)
    wl0 = first[0].wl
    max_context = int(scan.request_context[n_prof:].max()) + context
    host_ram = _host_ram(system, file, meta, window_tokens, skip, stop)
    setup = configure(wl0, meta.layers, model, hw, system, max_context, prof, host_ram)
    totals, columns, mix, n_windows = _stream(_chain(first, timed), system, setup, scan, progress, walks)
    passes, start, end, stall = columns.table()
    res = summarise(
        stand_in,
        wl0,
        totals.decisions,
        totals.timeline(start, end, stall),
        model,
        hw,
        system,
        setup.sizing,
        "fast",
        time.perf_counter() - t_wall,
        mix=mix,
        passes=passes,
    )
    res.summary["windows"] = {"tokens": int(window_tokens), "count": n_windows}
    describe(res, setup, system, flags.unmodelled, wl0.num_layers)
    res.workload, res.cost = None, setup.cost
    return res


def _profile_matrices(
    system: SystemConfig,
    file: str,
    meta: TraceMeta,
    profiled: Described | None,
    tokens: int,
    n_prof: int,
    skip: int,
) -> RequestMatrices | None:
    """The profiling requests' activation matrices, where ``system`` reads them (``uses_profile``): the profiling
    trace's (``profiled``), else the first ``n_prof`` requests (``skip`` tokens) of the trace at ``file``; None
    without either."""
    if not uses_profile(system) or (profiled is None and n_prof <= 0):
        return None
    prof = RequestMatrices()
    source = profiled.path if profiled is not None and profiled.path is not None else file
    pmeta = profiled.meta if profiled is not None else meta  # its metadata alone: no rows are counted
    for a in window.windows(source, pmeta, tokens, 0, skip if profiled is None else None):
        prof.add(build_workload(Trace(pmeta, a, source), "none"))
    return prof


def _host_ram(
    system: SystemConfig, file: str, meta: TraceMeta, tokens: int, skip: int, stop: int | None
) -> Callable[[MemoryFit], MemoryFit]:
    """``configure``'s ``host_ram`` for the timed windows of the trace at ``file``."""

    def host_ram(memory: MemoryFit) -> MemoryFit:
        """``host_ram_share`` over the timed windows: their largest expert id, then (a page cache replayed over their
        reads, ``system.host_cache=lru``) each pass's keys, two reads of the file before the run's."""
        layers = [i for i in memory.host_layers if i < len(meta.layers)]
        if system.host_cache != "lru" or not layers:
            return replayed_share(memory, system, lambda: iter(()), layers, 1)
        E = 1 + max(int(a.expert_ids.max()) for a in window.windows(file, meta, tokens, skip, stop))

        def keys() -> Iterator[np.ndarray]:
            for a in window.windows(file, meta, tokens, skip, stop):
                wl = build_workload(Trace(meta, a, file), "none")
                if system.ubatch:
                    wl = chunk_prefill(wl, system.ubatch)
                yield from pass_keys(wl.ids, zip(wl.pass_start, wl.pass_end), layers, E)

        return replayed_share(memory, system, keys, layers, E)

    return host_ram


def _stream(
    windows: Iterator[tuple[fast.Window, TraceArrays]],
    system: SystemConfig,
    setup: Setup,
    scan: window.Scan,
    progress: Callable[[int, int], None] | None,
    walks: str,
) -> tuple[fast.Totals, PassColumns, dict[str, float], int]:
    """(the walk's and the timing's totals, passes.parquet's columns, the rule's mix, how many windows) of ``system``
    over the timed ``windows``, walked and timed as they are read (``fast.stream_windows``) by the ``walks`` copy of
    its policy's walk (``sim.walk_copies``)."""
    columns = PassColumns(scan.passes)
    total = scan.passes
    counted = system.precision.mode != "hobbit"  # the walk counts HOBBIT's classes only under HOBBIT's rule
    mix_n = np.zeros(3, np.int64)
    n_windows = 0

    def laid_out() -> Iterator[fast.Window]:
        nonlocal n_windows
        for w, _ in windows:
            n_windows += 1
            if counted:
                mix_n[:] += rule.hobbit_counts(
                    w.wl.weights.reshape(-1, w.wl.top_k),
                    float(system.precision.t1) + EPS,
                    float(system.precision.t2) + EPS,
                )
            yield w

    def on_chunk(c: fast.Chunk) -> None:
        columns.add(c)
        if progress is not None:
            progress(columns.n, max(total, columns.n))

    run = fast.Run(
        system,
        setup.slots,
        setup.per_layer,
        setup.placement,
        setup.cpu_faster,
        setup.miss_costs,
        setup.profile_matrices,
        walks,
    )
    totals = fast.stream_windows(
        laid_out(), run, setup.cost, on_chunk, system.demand_first, records=log_records(scan, system, system.ubatch)
    )
    if totals is None:
        raise ConfigError(
            f"system={system.name}'s LIRS ran out of the entries it counts out; a whole trace hands such a run to the "
            f"reference walk (fix: window_tokens=0)"
        )
    return totals, columns, fast.mix_of(totals.classes if totals.classes is not None else mix_n), n_windows


def _chain(first: tuple[fast.Window, TraceArrays], rest: Iterator[tuple[fast.Window, TraceArrays]]):
    yield first
    yield from rest


def _after(file: str, meta: TraceMeta, tokens: int, skip: int, stop: int | None, ubatch: int) -> list[np.ndarray]:
    """Each timed window's keys' (layer * E + expert) first use after it (``walk.NEVER``: none), from a read of the
    windows before the run's (the same windows and passes: ``_windows``' cuts): what Belady's lists of a window end
    with (``fast.window_future``). Held as one array of the keys a window."""
    firsts, first_pass = [], 0
    for a in window.windows(file, meta, tokens, skip, stop):
        wl = build_workload(Trace(meta, a, file), "none")
        if ubatch:
            wl = chunk_prefill(wl, ubatch)
        firsts.append(fast.first_uses(wl, first_pass))
        first_pass += len(wl.pass_start)
    after: list[np.ndarray] = [np.empty(0, np.int64)] * len(firsts)
    nxt = np.full(len(firsts[0]) if firsts else 0, NEVER, np.int64)
    for w in range(len(firsts) - 1, -1, -1):
        after[w] = nxt
        nxt = np.where(firsts[w] != NEVER, firsts[w], nxt)
    return after


def _windows(
    file: str,
    meta: TraceMeta,
    tokens: int,
    skip: int,
    stop: int | None,
    p: PrefetchConfig,
    rng: np.random.Generator,
    ubatch: int,
    context: int,
    after: list[np.ndarray] | None = None,
) -> Iterator[tuple[fast.Window, TraceArrays]]:
    """The timed windows laid out for replay, each with its rows (``fast.Window``, ``TraceArrays``); with ``after``
    (``_after``), each with Belady's lists."""
    L = len(meta.layers)
    first_pass, prev_request = 0, -1
    run_request, run_tokens = -1, 0  # the last request read so far and its tokens read so far
    for n, a in enumerate(window.windows(file, meta, tokens, skip, stop)):
        head, last = int(a.request_id[0]), int(a.request_id[-1])
        before = run_tokens if head == run_request else 0
        wl = build_workload(Trace(meta, a, file), p.fallback, p.fallback_accuracy, p.max_depth, rng, before)
        n_last = int(np.count_nonzero(a.request_id[::L] == last))
        run_tokens, run_request = (before + n_last) if head == last else n_last, last
        if ubatch:
            wl = chunk_prefill(wl, ubatch)
        if context:
            wl = dataclasses.replace(wl, pass_context=[c + context for c in wl.pass_context])
        future = None if after is None else fast.window_future(wl, first_pass, after[n])
        yield fast.Window(wl, first_pass, prev_request, future), a
        first_pass += len(wl.pass_start)
        prev_request = wl.pass_request[-1]
