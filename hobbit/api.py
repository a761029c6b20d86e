"""The Python API: the same jobs as the CLI, as plain functions for notebooks and scripts.

    import hobbit
    trace = hobbit.read_trace()                       # the bundled trace (or a path)
    r = hobbit.simulate(trace, model="mixtral-8x7b", hardware="rtx4090-pcie4", system="hobbit",
                        system__precision__t1=0.5)   # any knob: its path with "__" for "."
    r.decode_ms_per_token, r.hit_rate, r.passes      # typed results
    table = hobbit.sweep(trace, {"system.precision.t1": [0.4, 0.6], "system": ["hobbit", "on-demand"]})

Configs are composed by Hydra from conf/ exactly as ``hobbit sim`` composes them, so a
name here means what it means on the command line.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import tempfile
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
from tqdm import tqdm

from hobbit.analysis.aggregate import flatten
from hobbit.plumbing.glue import compose, with_overrides
from hobbit.plumbing.guard import guard
from hobbit.plumbing.results_io import write_results
from hobbit.sim.checks import check_run
from hobbit.sim.config import ConfigError, HardwareConfig, ModelConfig, SimConfig, SystemConfig
from hobbit.sim.memory import check_placement, fit
from hobbit.sim.results import Results
from hobbit.sim.run import lay_out
from hobbit.sim.run import simulate as simulate_configs
from hobbit.sim.sizing import size_cache
from hobbit.sim.walk_copies import GENERAL
from hobbit.sim.windowed import check_whole_read, simulate_file
from hobbit.sim.workload import split_requests
from hobbit.traces import io as trace_io
from hobbit.traces.capture import CaptureConfig
from hobbit.traces.capture import capture as capture_trace
from hobbit.traces.io import Trace, atomic_write_text
from hobbit.traces.knobs import check_knobs
from hobbit.traces.synthetic import SyntheticConfig, generate
from hobbit.traces.tiny import bundled_trace
from hobbit.traces.window import TraceFile, held_apart

if TYPE_CHECKING:  # pandas loads with a sweep's table or a run's tables, not with the API
    import pandas as pd

GROUPS = {"model": ModelConfig, "hardware": HardwareConfig, "system": SystemConfig}


_READ: OrderedDict[tuple, Trace] = OrderedDict()  # the last few traces read, by file and version
PRELOAD_REQUESTS = 8  # the first requests of the trace that ``preload`` simulates, so that the engine's code loads


SYNTHETIC = "synthetic"  # trace=synthetic: routing drawn for the model's topology (traces.synthetic)
SYNTHETIC_SHAPE = {"requests": 8, "prompt_tokens": 64, "decode_tokens": 64}  # what a synthetic trace holds


def trace_file(trace: str | None, model: ModelConfig, seed: int = 0) -> Path:
    """The trace file a command replays: ``trace``; None: the bundled model's; ``synthetic``: routing drawn for
    ``model``'s topology (Zipf-skewed popularity, reuse across tokens and layers: ``traces.synthetic`` at its
    defaults, ``SYNTHETIC_SHAPE``, ``seed``), written once per topology and seed to a folder of the system's
    temporary directory."""
    if trace is None:
        return bundled_trace()
    if trace != SYNTHETIC:
        return Path(trace)
    return synthetic_file(model, SYNTHETIC_SHAPE, seed)


def synthetic_file(model: ModelConfig, knobs: Mapping[str, Any], seed: int = 0, tag: str = "") -> Path:
    """A synthetic trace of ``model``'s topology drawn with SyntheticConfig's ``knobs`` (its shape and statistics)
    and ``seed``, written once to a folder of the system's temporary directory; ``tag`` names the knobs in the file's
    name (one file per topology, tag and seed)."""
    folder = Path(tempfile.gettempdir()) / "hobbit-synthetic"
    name = f"synthetic-{model.name}"
    path = folder / f"{name}-L{model.num_layers}-E{model.num_experts}-k{model.top_k}{tag}-s{seed}.parquet"
    if not path.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        cfg = SyntheticConfig(
            name=name,
            num_layers=model.num_layers,
            num_experts=model.num_experts,
            top_k=model.top_k,
            seed=seed,
            **knobs,
        )
        trace_io.write_trace(path, *generate(cfg))
    return path


def read_trace(path: str | Path | None = None) -> Trace:
    """A schema-v1 trace, validated; None: the bundled model's trace. A file read before in this process
    and unchanged since (same size and modification time) is not read again: a sweep's jobs in one worker
    share the trace object, and with it its layout for replay (``sim.run.prepare``)."""
    p = Path(bundled_trace() if path is None else path)
    try:
        st = p.resolve().stat()
        key = (str(p.resolve()), st.st_mtime_ns, st.st_size)
    except OSError:
        return trace_io.read_trace(p)  # the reader names what is wrong
    if key in _READ:
        _READ.move_to_end(key)
        return _READ[key]
    tr = _READ[key] = trace_io.read_trace(p)
    while len(_READ) > 2:
        _READ.popitem(last=False)
    return tr


def trace_of(path: str | Path | None, window_tokens: int) -> Trace | TraceFile:
    """The trace at ``path`` (None: the bundled one) as a command that runs many simulations takes it: read whole
    (refused, with the fix, where its run would not fit the memory available: ``sim.windowed.check_whole_read``), or,
    with ``window_tokens``, a ``TraceFile`` that each run reads that many tokens at a time."""
    file = Path(path) if path is not None else bundled_trace()
    if window_tokens:
        return TraceFile.open(file, window_tokens)
    check_whole_read(file)
    return read_trace(file)


def _knob(key: str, value: Any) -> str:
    """``system__precision__t1=0.5`` -> the Hydra override ``system.precision.t1=0.5``."""
    if isinstance(value, (list, tuple)):
        value = "[" + ",".join(map(str, value)) + "]"
    return f"{key.replace('__', '.')}={'null' if value is None else value}"


def configure(
    model: str | ModelConfig | None = None,
    hardware: str | HardwareConfig | None = None,
    system: str | SystemConfig | None = None,
    *,
    overrides: Sequence[str] = (),
    **knobs: Any,
) -> SimConfig:
    """The typed ``SimConfig`` of a run: group names (conf/model, conf/hardware, conf/system) or
    typed configs, plus knobs by path (``system__cache__high_fraction=0.5``, ``engine="simpy"``)
    and Hydra ``overrides`` as the command line takes them."""
    given = {"model": model, "hardware": hardware, "system": system}
    names = [f"{g}={v}" for g, v in given.items() if isinstance(v, str)]
    plain = [
        _knob(k, v)
        for k, v in knobs.items()
        if not any(k.startswith(g + "__") and not isinstance(given[g], (str, type(None))) for g in GROUPS)
    ]
    cfg = compose("sim", SimConfig, ["out_dir=.", *names, *plain, *overrides])
    for group, value in given.items():
        if value is None or isinstance(value, str):
            continue
        if not isinstance(value, GROUPS[group]):
            raise ConfigError(f"{group}={value!r} must be a name in conf/{group}/ or a {GROUPS[group].__name__}")
        mine = [_knob(k[len(group) + 2 :], v) for k, v in knobs.items() if k.startswith(group + "__")]
        cfg = dataclasses.replace(cfg, **{group: with_overrides(value, mine)})
    return cfg


def simulate(
    trace: Trace | str | Path | None = None,
    model: str | ModelConfig | None = None,
    hardware: str | HardwareConfig | None = None,
    system: str | SystemConfig | None = None,
    *,
    keep_log: bool = False,
    keep_decisions: bool = True,
    walks: str | None = None,
    **knobs: Any,
) -> Results:
    """Simulate ``system`` replaying ``trace`` for ``model`` on ``hardware`` (defaults: conf/sim.yaml's:
    mixtral-8x7b, rtx4090-pcie4, hobbit). No files are written. ``keep_decisions=False`` streams the run (the same
    results, in the trace's memory and little more, without ``Results.decisions.steps``). ``walks``: which compiled copy
    of the policy's walk runs (``hobbit.sim.walk_copies``: the same decisions; ``general`` for many runs)."""
    tr = trace if isinstance(trace, Trace) else read_trace(trace)
    cfg = configure(model, hardware, system, **knobs)
    return simulate_config(tr, cfg, keep_log=keep_log, keep_decisions=keep_decisions, walks=walks)


def simulate_config(
    trace: Trace,
    cfg: SimConfig,
    keep_log: bool = False,
    keep_decisions: bool = True,
    progress: Callable[[int, int], None] | None = None,
    walks: str | None = None,
) -> Results:
    """One run of a composed ``SimConfig`` (what ``hobbit sim`` runs); no files are written. ``keep_decisions=False``:
    the run streams (``hobbit.sim.run.simulate``): the same results in the trace's memory and little more, without
    the decisions' records. ``walks``: ``simulate``'s."""
    profile = read_trace(cfg.profile_trace) if cfg.profile_trace else None
    return simulate_configs(
        trace,
        cfg.model,
        cfg.hardware,
        cfg.system,
        np.random.default_rng(cfg.seed),
        cfg.engine,
        keep_log=keep_log,
        profile=profile,
        profile_share=cfg.profile_share,
        keep_decisions=keep_decisions,
        progress=progress,
        context=cfg.context,
        walks=walks,
    )


def simulate_file_config(
    path: str | Path,
    cfg: SimConfig,
    progress: Callable[[int, int], None] | None = None,
    walks: str | None = None,
) -> Results:
    """One run of a composed ``SimConfig`` over the trace file at ``path``, read ``cfg.window_tokens`` tokens at a time
    (``hobbit.sim.windowed``: the memory a window's, not the trace's); no files are written. ``walks``:
    ``simulate``'s."""
    return simulate_file(
        path,
        cfg.model,
        cfg.hardware,
        cfg.system,
        np.random.default_rng(cfg.seed),
        profile=cfg.profile_trace,
        profile_share=cfg.profile_share,
        window_tokens=cfg.window_tokens,
        progress=progress,
        context=cfg.context,
        engine=cfg.engine,
        walks=walks,
    )


def check(
    trace: Trace | TraceFile,
    model: ModelConfig,
    hardware: HardwareConfig,
    system: SystemConfig,
    profile: Trace | TraceFile | None = None,
    profile_share: float = 0.25,
    context: int = 0,
    engine: str = "fast",
) -> None:
    """The checks ``simulate`` makes of its inputs (``hobbit.sim.run.simulate``'s arguments), without the run: every
    check a run makes before its work, in its order (``hobbit.sim.checks.check_run``: the knobs, the engine, the
    trace's topology against the model's, gate weights where the system's rule reads them, a calibrated profile's
    tables, a windowed run's system), then whether the model fits the machine's memory. Raises ``ConfigError`` naming
    the first problem and its fix. A command that runs many simulations (``hobbit compare``, ``hobbit tune``) checks
    each configuration here before the first starts, so bad input stops it before any work. A ``TraceFile`` (a trace
    read a window at a time) is checked from its scan, without reading its rows."""
    windowed = trace.window_tokens if isinstance(trace, TraceFile) else None
    system = check_run(model, hardware, system, trace, profile, engine=engine, window_tokens=windowed).system
    if isinstance(trace, TraceFile):
        held = 0 if profile is not None else held_apart(len(trace.scan.requests), profile_share)
        context += int(trace.scan.request_context[held:].max())
    else:
        timed = trace if profile is not None else split_requests(trace, profile_share)[1]
        position = timed.arrays.position
        context += int(position.max()) + 1 if len(position) else 1
    share = len(trace.meta.layers) / max(trace.meta.model.num_layers, 1)
    memory = fit(model, hardware, system, context, share)
    size_cache(model, hardware, system, context, share, memory)
    check_placement(memory, model, hardware, system, len(trace.meta.layers))


def preload(cfg: SimConfig, walks: str | None = None) -> None:
    """What ``simulate_config(read_trace(cfg.trace), cfg)`` loads, without the run: the trace (and ``cfg.profile_trace``)
    read, laid out for replay as the run lays it out, and the engine's compiled code loaded by a run of ``cfg`` over the
    trace's first ``PRELOAD_REQUESTS`` requests. A process that then forks workers (a sweep's launcher,
    ``hobbit.plumbing.launcher``) hands them all of it, so they neither read, lay out nor load it again: one copy of the trace's
    arrays for every worker (shared, copy-on-write). ``walks``: the copy of the policy's walk the workers run
    (``simulate``'s)."""
    if cfg.window_tokens:  # a trace read a window at a time is never held whole: each worker reads its own windows
        return
    trace = read_trace(trace_file(cfg.trace, cfg.model, cfg.seed))
    profile = read_trace(cfg.profile_trace) if cfg.profile_trace else None
    lay_out(trace, cfg.system, np.random.default_rng(cfg.seed), profile, cfg.profile_share)
    req = trace.arrays.request_id
    ids = np.unique(req)
    if len(ids) > PRELOAD_REQUESTS:
        trace = Trace(trace.meta, trace.arrays.take(np.flatnonzero(req < ids[PRELOAD_REQUESTS])), trace.path)
    simulate_config(trace, cfg, keep_decisions=False, walks=walks)


def grid_points(grid: Mapping[str, Sequence[Any]]) -> list[list[str]]:
    """Every combination of a grid ``{override path: values}`` as lists of Hydra overrides."""
    keys = list(grid)
    return [[_knob(k, v) for k, v in zip(keys, combo)] for combo in itertools.product(*(grid[k] for k in keys))]


def _point(trace: Trace | Path, cfg: SimConfig, out: Path | None, overrides: list[str], walks: str) -> dict[str, Any]:
    """One sweep point (in a joblib worker): simulate (a trace file a window at a time, ``cfg.window_tokens``) with
    the ``walks`` copies of the walk; with ``out``, write its run directory."""
    if cfg.window_tokens:
        file = trace.path if isinstance(trace, Trace) else trace
        if file is None:
            raise ConfigError(f"window_tokens={cfg.window_tokens} reads a trace file; this trace was made in memory")
        res = simulate_file_config(file, cfg, walks=walks)
    else:
        tr = trace if isinstance(trace, Trace) else read_trace(trace)
        res = simulate_config(tr, cfg, keep_decisions=False, walks=walks)
    if out is not None:
        write_results(res, out)
        atomic_write_text(out / ".hydra" / "overrides.yaml", "".join(f"- {o}\n" for o in overrides))
    return res.summary


def _points(
    trace: Trace | Path, items: list[tuple[SimConfig, Path | None, list[str]]], walks: str
) -> list[dict[str, Any]]:
    """A chunk of sweep points in one worker: the trace arrives and is laid out once for all of them."""
    return [_point(trace, cfg, out, over, walks) for cfg, out, over in items]


def sweep(
    trace: Trace | str | Path | None,
    grid: Mapping[str, Sequence[Any]],
    *,
    n_jobs: int = 1,
    out: str | Path | None = None,
    progress: bool = True,
    **base: Any,
) -> pd.DataFrame:
    """Simulate every point of ``grid`` (``{override path: values}``, e.g. ``{"system.precision.t1":
    [0.4, 0.6], "system": ["hobbit", "on-demand"]}``) over ``base`` knobs (as ``configure`` takes them,
    default engine fast). One row per point: its knobs (``knob.<path>``) and results.json flattened.
    With ``out``, each point's run directory (``out/<i>``) is written for ``hobbit report``. With ``window_tokens=N``
    in ``base``, each point reads the trace file (``trace``: its path) N tokens at a time (``simulate_file_config``)."""
    windowed = bool(base.get("window_tokens")) and not isinstance(trace, Trace)
    if windowed:
        tr: Trace | Path = bundled_trace() if trace is None else Path(cast("str | Path", trace))
    else:
        tr = trace if isinstance(trace, Trace) else read_trace(trace)
    base = {"engine": "fast", **base}
    names = {g: base.pop(g, None) for g in GROUPS}
    points = grid_points(grid)
    cfgs = []
    for over in points:  # a grid over a whole group (system=...) replaces the base's choice
        groups = {g: v for g, v in names.items() if not any(o.startswith(g + "=") for o in over)}
        cfgs.append(configure(**groups, overrides=over, **base))
    root = Path(out) if out is not None else None
    items = [(c, None if root is None else root / str(i), over) for i, (c, over) in enumerate(zip(cfgs, points))]
    workers = max(n_jobs if n_jobs > 0 else (os.cpu_count() or 1), 1)
    size = max(1, -(-len(items) // (4 * workers)))  # four chunks per worker: one trace layout per chunk
    chunks = [items[i : i + size] for i in range(0, len(items), size)]
    from joblib import Parallel, delayed  # here: a command that runs no sweep does not pay for its import

    # many runs: each policy's general copy of the walk (``hobbit.sim.walk_copies``), compiled once for all the points
    walks = GENERAL if len(cfgs) > 1 else None
    summaries: list[dict[str, Any]] = []
    jobs = Parallel(n_jobs=n_jobs, return_as="generator")(delayed(_points)(tr, chunk, walks) for chunk in chunks)
    done = cast("Iterable[list[dict[str, Any]]]", jobs)  # return_as="generator": each chunk's summaries, in order
    with tqdm(total=len(points), desc="sweep", unit="run", disable=not progress) as bar:
        for part in done:
            summaries += part
            bar.update(len(part))
    rows = [
        {**{f"knob.{o.partition('=')[0]}": o.partition("=")[2] for o in over}, **flatten(s)}
        for s, over in zip(summaries, points)
    ]
    import pandas as pd

    return pd.DataFrame(rows)


def capture(out: str | Path = "trace.parquet", **knobs: Any) -> Path:
    """Record a routing trace from a Hugging Face MoE model's live inference (default: the bundled
    tiny model on its held-out prompts); knobs as ``hobbit capture`` takes them. Returns the file."""
    cfg = guard(CaptureConfig(out=str(out), **knobs), Path.cwd(), say=lambda _: None)
    check_knobs(cfg)
    return capture_trace(cfg).path
