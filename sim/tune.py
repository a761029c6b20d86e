"""``hobbit tune``: search T1, T2, the cache split and the four cache weights with Optuna.

TPE, seeded. ``objective=budget`` minimises decode latency with the quality proxy (gate
mass served low or skipped) kept within ``quality_budget`` (Optuna's constraint, so
infeasible trials inform the sampler); ``objective=pareto`` minimises both and keeps the
Pareto set. The study lives in SQLite: run again with the same ``study=PATH`` and it
continues up to ``trials``. The best configuration is written as a ready experiment file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import math
import os
import socket
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
import pandas as pd

from hobbit.sim.config import ConfigError, HardwareConfig, ModelConfig, SystemConfig, policy_knobs
from hobbit.sim.policies.eviction.multidim import MultiDimKnobs
from hobbit.sim.run import simulate
from hobbit.sim.walk_copies import GENERAL
from hobbit.sim.windowed import simulate_file
from hobbit.traces.io import Trace, atomic_write_json, atomic_write_parquet, atomic_write_text, pid_alive
from hobbit.traces.window import TraceFile


@dataclass(frozen=True)
class TuneConfig:
    """Knobs of ``hobbit tune`` (conf/tune.yaml)."""

    LIMITS: ClassVar[dict[str, str]] = {"trials": ">=1", "quality_budget": "[0,1]", "window_tokens": ">=0"}

    # path knobs and their roles (hobbit/plumbing/guard.py)
    PATHS: ClassVar[dict[str, str]] = {"trace": "in", "study": "state", "out_dir": "outdir"}

    trace: str | None = None
    """A schema-v1 routing trace (Parquet); null: the bundled model's trace (traces/tiny/trace.parquet)."""
    model: ModelConfig = field(default_factory=ModelConfig)
    """The model's shapes (config group ``model=NAME``, conf/model/)."""
    hardware: HardwareConfig = field(default_factory=HardwareConfig)
    """The machine (config group ``hardware=NAME``, conf/hardware/)."""
    system: SystemConfig = field(default_factory=SystemConfig)
    """The base the search varies (config group ``system=NAME``): each trial sets its T1, T2, cache split and
    multidim cache weights, with precision.mode=hobbit and cache.policy=multidim."""
    trials: int = 40
    """Trials in all: a study resumed with the same ``study`` continues up to this many."""
    seed: int = 0
    """Seed of the TPE sampler, and of the fallback predictions when the trace has none."""
    objective: str = "budget"
    """budget (the fastest with quality_proxy.degraded_mass at most ``quality_budget``, an Optuna constraint) |
    pareto (decode latency and degraded mass both minimised; the Pareto set kept)."""
    quality_budget: float = 0.25
    """objective=budget: the most gate mass served in low precision or skipped (quality_proxy.degraded_mass)."""
    study: str | None = None
    """The Optuna study's SQLite file, relative to where hobbit runs; run again with it to continue the study;
    null: study.db in the run directory."""
    study_name: str = "hobbit"
    """The study's name in its SQLite file."""
    out_dir: str = "."
    """Where results go (the command's run directory)."""
    window_tokens: int = 0
    """0: the trace is read whole, once, for every trial; N: each trial reads the trace file N tokens at a time
    (``sim.windowed``: the same results, the memory a window's, for traces longer than memory)."""


def suggest(trial: Any, base: SystemConfig) -> SystemConfig:
    """A system from one trial: T1 <= T2 by construction, weights uniform on the simplex."""
    t1 = trial.suggest_float("t1", 0.0, 1.0)
    t2 = t1 + (1.0 - t1) * trial.suggest_float("t2_share", 0.0, 1.0)
    split = trial.suggest_float("high_fraction", 0.1, 0.95)
    raw = [-math.log(max(trial.suggest_float(f"u_{n}", 1e-6, 1.0), 1e-12)) for n in ("lru", "lfu", "lhu", "fld")]
    w = [x / sum(raw) for x in raw]
    return dataclasses.replace(
        base,
        precision=dataclasses.replace(base.precision, mode="hobbit", t1=t1, t2=t2),
        cache=dataclasses.replace(
            base.cache,
            policy="multidim",
            high_fraction=split,
            multidim=MultiDimKnobs(w_lru=w[0], w_lfu=w[1], w_lhu=w[2], w_fld=w[3]),
        ),
    )


def evaluate(trace: Trace | TraceFile, cfg: TuneConfig, system: SystemConfig) -> tuple[float, float]:
    """(decode ms/token, degraded gate mass) of one system, on a trace read whole or a window at a time."""
    rng = np.random.default_rng(cfg.seed)
    if isinstance(trace, TraceFile):
        res = simulate_file(
            trace.path,
            cfg.model,
            cfg.hardware,
            system,
            rng,
            window_tokens=trace.window_tokens,
            stop_tokens=trace.stop_tokens,
            scan=trace.scan,
            walks=GENERAL,  # many trials: each policy's general copy of the walk, compiled once
        )
    else:
        res = simulate(trace, cfg.model, cfg.hardware, system, rng, engine="fast", keep_decisions=False, walks=GENERAL)
    s = res.summary
    return s["decode_ms_per_token"]["mean"], s["quality_proxy"]["degraded_mass"]


def experiment_yaml(system: SystemConfig, note: str) -> str:
    """A ``# @package _global_`` experiment that reproduces ``system`` over conf/system/hobbit."""
    p, c, w = system.precision, system.cache, policy_knobs(system.cache, "multidim")
    return f"""# @package _global_
# {note}
# the system knobs only: run it with the `use:` line hobbit tune printed, which also names the trace, model, hardware and seed
defaults:
  - override /system: hobbit
system:
  name: hobbit-tuned
  precision:
    t1: {p.t1:.6f}
    t2: {p.t2:.6f}
  cache:
    policy: multidim
    high_fraction: {c.high_fraction:.6f}
    multidim:
      w_lru: {w.w_lru:.6f}
      w_lfu: {w.w_lfu:.6f}
      w_lhu: {w.w_lhu:.6f}
      w_fld: {w.w_fld:.6f}
"""


SQLITE_MAGIC = b"SQLite format 3\x00"


OPTUNA_TABLES = frozenset({
    "alembic_version", "studies", "study_directions", "study_user_attributes", "study_system_attributes", "trials",
    "trial_params", "trial_values", "trial_intermediate_values", "trial_user_attributes", "trial_system_attributes",
    "trial_heartbeats", "version_info",
})  # fmt: skip  # optuna/storages/_rdb/models.py's tables (what a study file may hold)


def _foreign_tables(path: Path) -> list[str]:
    """Tables of the SQLite file ``path`` that no Optuna study holds ([] for a study or an empty database)."""
    import sqlite3

    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
            names = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    except sqlite3.Error as exc:
        raise ConfigError(f"study={path} cannot be read as SQLite ({exc}); it was left as it is") from None
    return sorted(n for n in names if n not in OPTUNA_TABLES and not n.startswith("sqlite_"))


def open_study(cfg: TuneConfig, path: Path) -> Any:
    import optuna  # lazy: optuna loads SQLAlchemy and alembic, which only a tuning run needs

    if cfg.objective not in ("budget", "pareto"):
        raise ConfigError(f"objective={cfg.objective} must be budget or pareto")
    constraints = None
    if cfg.objective == "budget" and not hasattr(optuna.trial.Trial, "set_constraint"):  # optuna 4
        constraints = lambda t: [t.user_attrs["degraded_mass"] - cfg.quality_budget]
    sampler = optuna.samplers.TPESampler(seed=cfg.seed, constraints_func=constraints)
    directions: list[Literal["minimize", "maximize"]] = (
        ["minimize"] if cfg.objective == "budget" else ["minimize", "minimize"]
    )
    with _exclusive(path):  # two runs starting one new study at once would both create Optuna's tables
        if path.stat().st_size and path.read_bytes()[:16] != SQLITE_MAGIC:  # empty: new (SQLite's empty database)
            raise ConfigError(
                f"study={path} is not an Optuna study (an SQLite file); it was left as it is (fix: another study=)"
            )
        foreign = _foreign_tables(path)
        if foreign:  # Optuna would add its tables to another program's database
            raise ConfigError(
                f"study={path} is an SQLite database of something else (tables {', '.join(foreign[:5])}), not an "
                f"Optuna study; it was left as it is (fix: another study=, a new file or one hobbit tune wrote)"
            )
        try:
            return optuna.create_study(
                storage=f"sqlite:///{path}",
                study_name=cfg.study_name,
                load_if_exists=True,
                sampler=sampler,
                directions=directions,
            )
        except Exception as exc:  # optuna and SQLAlchemy raise their own kinds for a study they cannot use
            _raise_if_full(exc, path)
            raise ConfigError(
                f"study={path} (study_name={cfg.study_name}) cannot be opened or continued: "
                f"{type(exc).__name__}: {exc}".replace("\n", " ")
            ) from exc


def _raise_if_full(exc: BaseException, path: Path) -> None:
    """A full disk under the study, which SQLite reports as SQLITE_FULL through SQLAlchemy and Optuna's own
    exception kinds, raised as the OSError (ENOSPC) every command names the file and the fix of."""
    seen: BaseException | None = exc
    while seen is not None:
        if "database or disk is full" in str(seen):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path)) from exc
        seen = seen.__cause__ or seen.__context__


@contextlib.contextmanager
def _exclusive(path: Path) -> Iterator[None]:
    """An exclusive ``flock`` on the study file (made, empty, if new) while a study is checked and created or
    loaded: Optuna creates its tables where they are missing, and two processes doing so at once fail ("table
    studies already exists", an IntegrityError on the version row). SQLite's own locks are POSIX record locks,
    which a ``flock`` neither takes nor waits on. A new file that ends empty (the creation failed) is removed."""
    new = not path.exists()
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        if new and os.fstat(fd).st_size == 0:
            path.unlink(missing_ok=True)
        os.close(fd)


def best_trials(study: Any, cfg: TuneConfig) -> list[Any]:
    done = [t for t in study.trials if t.state.name == "COMPLETE"]
    if cfg.objective == "pareto":
        return sorted(study.best_trials, key=lambda t: t.values[0])
    ok = [t for t in done if t.user_attrs["degraded_mass"] <= cfg.quality_budget]
    return sorted(ok, key=lambda t: t.values[0])[:1]


def owner() -> str:
    """This process as a trial's owner: host and pid."""
    return f"{socket.gethostname()}:{os.getpid()}"


def fail_orphans(study: Any) -> list[int]:
    """Mark FAIL the trials left RUNNING by a process of this host that is gone (a killed ``hobbit tune``), so that
    a resumed study neither counts nor waits on them; returns their numbers. A trial of a live process, or of
    another host, is left as it is."""
    from optuna.trial import TrialState

    host = socket.gethostname()
    failed = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        who, _, pid = str(t.user_attrs.get("owner", "")).rpartition(":")
        if who != host or not pid.isdigit() or pid_alive(int(pid)):
            continue
        study._storage.set_trial_state_values(t._trial_id, state=TrialState.FAIL)
        failed.append(t.number)
    return failed


def tune(trace: Trace | TraceFile, cfg: TuneConfig) -> dict[str, Any]:
    """Run (or continue) the study over ``trace`` (read whole, or a ``TraceFile`` each trial reads a window at a
    time); write trials.parquet, experiment/tuned.yaml, tune.json."""
    import optuna  # lazy: see open_study

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = Path(cfg.study) if cfg.study else out / "study.db"
    study = open_study(cfg, path)
    fail_orphans(study)
    finished = len([t for t in study.trials if t.state.name == "COMPLETE"])

    def objective(trial: Any):
        trial.set_user_attr("owner", owner())  # so that a later run can tell this trial's process is gone
        lat, q = evaluate(trace, cfg, suggest(trial, cfg.system))
        trial.set_user_attr("latency_ms", lat)
        trial.set_user_attr("degraded_mass", q)
        if cfg.objective == "budget" and hasattr(trial, "set_constraint"):  # optuna 5
            trial.set_constraint("quality", q - cfg.quality_budget)
        return lat if cfg.objective == "budget" else (lat, q)

    todo = max(cfg.trials - finished, 0)
    try:
        study.optimize(objective, n_trials=todo, show_progress_bar=todo > 0 and sys.stderr.isatty())
    except Exception as exc:  # the trials finished before stay in the study (each is committed as it ends)
        _raise_if_full(exc, path)
        raise
    rows = [{"trial": t.number, **t.params, **t.user_attrs} for t in study.trials if t.state.name == "COMPLETE"]
    atomic_write_parquet(pd.DataFrame(rows), out / "trials.parquet")
    best = best_trials(study, cfg)
    summary = {
        "study": str(path),
        "trials": len(rows),
        "resumed_from": finished,
        "objective": cfg.objective,
        "quality_budget": cfg.quality_budget,
        "best": [],
    }
    if not best:
        atomic_write_json(out / "tune.json", summary)
        return summary
    for t in best:
        s = suggest(optuna.trial.FixedTrial(t.params), cfg.system)
        summary["best"].append(
            {
                "trial": t.number,
                "latency_ms": t.user_attrs["latency_ms"],
                "degraded_mass": t.user_attrs["degraded_mass"],
                "system": dataclasses.asdict(s),
            }
        )
    top = summary["best"][0]
    note = (
        f"hobbit tune: trial {top['trial']} of {len(rows)}, {top['latency_ms']:.2f} ms/token, degraded gate mass "
        f"{top['degraded_mass']:.3f}; {cfg.model.name} on {cfg.hardware.name}"
    )
    system = suggest(optuna.trial.FixedTrial(best[0].params), cfg.system)
    summary["experiment"] = str(atomic_write_text(out / "experiment" / "tuned.yaml", experiment_yaml(system, note)))
    atomic_write_json(out / "tune.json", summary)
    return summary
