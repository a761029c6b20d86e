"""``hobbit compare``: every system on the user's trace and machine, plus HOBBIT tuned for them, ranked.

The trace's first ``profile_share`` of requests are held apart: what systems learn offline (Fiddler's
popular experts, MoE-Infinity's activation matrices) and HOBBIT's tuning (``hobbit tune`` on them)
see only those; every system is timed on the same remaining requests. Each row gives decode and
prefill latency, hit rate, bytes moved, the system's own latency bound (``sim.bound``: every expert
already where its rules run it) and the gap to the lowest bound of all (the oracle bound: no system
on this machine and trace can be faster). Writes compare.json, compare.md, compare.png/.svg and each
system's results under systems/<name>/; the tuning study resumes where it stopped.

Every configuration it will run (each system, and the base the tuning varies) is checked first
(``hobbit.api.check``): bad input stops the command before the tuning or any simulation starts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from tqdm import tqdm

from hobbit.analysis.system_plots import compare_table, cpu_assisted, plot_compare
from hobbit.api import check
from hobbit.conf import CONF_DIR
from hobbit.plumbing.glue import compose, load_hardware
from hobbit.plumbing.phases import Phases, require
from hobbit.plumbing.results_io import tok_s, write_results
from hobbit.sim.checks import needs_weights
from hobbit.sim.config import ConfigError, HardwareConfig, ModelConfig, SimConfig, SystemConfig
from hobbit.sim.results import Results
from hobbit.sim.run import simulate
from hobbit.sim.tune import TuneConfig, best_trials, open_study, suggest, tune
from hobbit.sim.walk_copies import GENERAL
from hobbit.sim.windowed import simulate_file
from hobbit.sim.workload import split_requests
from hobbit.traces.interchange import weights_absent
from hobbit.traces.io import Trace, atomic_write_json, atomic_write_text
from hobbit.traces.window import TraceFile, held_apart

TUNED = "hobbit-tuned"


def all_systems() -> list[str]:
    """Every preset of conf/system, by name."""
    return sorted(p.stem for p in (CONF_DIR / "system").glob("*.yaml"))


@dataclass(frozen=True)
class CompareConfig:
    """Knobs of ``hobbit compare`` (conf/compare.yaml)."""

    LIMITS: ClassVar[dict[str, str]] = {
        "profile_share": "(0,1)",
        "tune_trials": ">=0",
        "quality_budget": "[0,1]",
        "window_tokens": ">=0",
    }

    # path knobs and their roles (hobbit/plumbing/guard.py)
    PATHS: ClassVar[dict[str, str]] = {"trace": "in", "profile": "in", "out_dir": "outdir"}

    trace: str | None = None
    """A schema-v1 routing trace (Parquet); null: the bundled model's trace (traces/tiny/trace.parquet); synthetic:
    routing drawn for the model's topology."""
    model: ModelConfig = field(default_factory=ModelConfig)
    """The model whose size the trace is replayed at (config group ``model=NAME``, conf/model/)."""
    hardware: HardwareConfig = field(default_factory=HardwareConfig)
    """The machine (config group ``hardware=NAME``, conf/hardware/); ``profile`` replaces it."""
    system: SystemConfig = field(default_factory=SystemConfig)
    """The base HOBBIT's tuning varies: T1, T2, the cache split and the cache weights (config group
    ``system=NAME``, conf/system/); the systems ranked are ``systems``."""
    profile: str | None = None
    """A calibrated hardware YAML (written by ``hobbit calibrate``) used instead of ``hardware``; null: ``hardware``."""
    systems: list[str] = field(default_factory=list)
    """The presets of conf/system ranked, e.g. [hobbit,on-demand,tec]; []: every preset."""
    profile_share: float = 0.25
    """This share of the trace's first requests is held apart: what systems learn offline comes from it and HOBBIT
    is tuned on it; every system is timed on the remaining requests."""
    tune_trials: int = 20
    """Optuna trials tuning HOBBIT on the requests held apart (``hobbit tune``'s search); 0: no tuned HOBBIT."""
    quality_budget: float = 0.25
    """The tuning's limit on the gate mass served in low precision or skipped (quality_proxy.degraded_mass)."""
    seed: int = 0
    """Seed of the fallback predictions when the trace has none, and of the tuning's sampler."""
    out_dir: str = "."
    """Where results go (the command's run directory)."""
    window_tokens: int = 0
    """0: the trace is read whole, once; N: every system's run (and each tuning trial) reads the trace file N tokens
    at a time (``sim.windowed``: the same results, the memory a window's, for traces longer than memory)."""


def _system(name: str) -> SystemConfig:
    return compose("sim", SimConfig, ["out_dir=.", f"system={name}"]).system


def tuning_base(system: SystemConfig) -> SystemConfig:
    """What the tuning varies ``system`` into (``sim.tune.suggest``): HOBBIT's T1/T2 rule over the multidim cache."""
    return dataclasses.replace(
        system,
        precision=dataclasses.replace(system.precision, mode="hobbit"),
        cache=dataclasses.replace(system.cache, policy="multidim"),
    )


def _tuned(
    profile: Trace | TraceFile, cfg: CompareConfig, hw: HardwareConfig, out: Path
) -> tuple[SystemConfig | None, str]:
    """HOBBIT tuned on the profiling requests (the study resumes), or None with why."""
    tcfg = TuneConfig(
        model=cfg.model,
        hardware=hw,
        system=cfg.system,
        trials=cfg.tune_trials,
        seed=cfg.seed,
        objective="budget",
        quality_budget=cfg.quality_budget,
        study=str(out / "study.db"),
        out_dir=str(out),
    )
    summary = tune(profile, tcfg)
    best = best_trials(open_study(tcfg, out / "study.db"), tcfg)
    if not best:
        return None, f"no trial of {summary['trials']} met the quality budget {cfg.quality_budget}"
    import optuna

    system = suggest(optuna.trial.FixedTrial(best[0].params), cfg.system)
    return dataclasses.replace(system, name=TUNED), (
        f"trial {best[0].number} of {summary['trials']} on the profiling requests: {summary['experiment']}"
    )


def rank(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows by decode latency, then prefill latency; each gains ``rank``, ``gap_to_oracle`` (its decode latency over
    the lowest bound of all rows) and ``decode_tok_s``."""
    oracle = min(r["bound"]["decode_ms_per_token"] for r in rows)
    out = sorted(rows, key=lambda r: (r["decode_ms_per_token"]["mean"], r["prefill_ms_per_request"]["mean"] or 0.0))
    for i, r in enumerate(out, 1):
        r["rank"] = i
        r["gap_to_oracle"] = r["decode_ms_per_token"]["mean"] / oracle if oracle > 0 else float("nan")
        r["decode_tok_s"] = tok_s(r["decode_ms_per_token"]["mean"])
    return out


def check_all(
    trace: Trace | TraceFile,
    timed: Trace | None,
    profile: Trace | TraceFile | None,
    cfg: CompareConfig,
    hw: HardwareConfig,
    systems: list[SystemConfig],
) -> None:
    """Every configuration ``compare`` will run, checked before it runs any (``hobbit.api.check``): each system on
    the timed requests (``timed``; None: those of ``trace``, a ``TraceFile``, after its profiling requests), and the
    tuning's base on the profiling requests (when it tunes)."""
    for system in systems:
        if timed is None:
            check(trace, cfg.model, hw, system, profile_share=cfg.profile_share)
        else:
            check(timed, cfg.model, hw, system, profile=profile, profile_share=0.0)
    if profile is not None and cfg.tune_trials > 0 and not weights_absent(trace.meta):
        check(profile, cfg.model, hw, tuning_base(cfg.system))


def _runner(
    trace: Trace | TraceFile, cfg: CompareConfig, hw: HardwareConfig
) -> tuple[Callable[[SystemConfig], Results], Trace | TraceFile | None, Trace | None, int]:
    """How each system runs (the requests held apart for profiling, the rest timed), the profiling requests, the timed
    ones when read whole, and how many requests are held apart."""
    purpose = "it ranks systems by decode latency on the requests it times"
    if isinstance(trace, TraceFile):  # the profiling requests, and the timed ones' phases, from its scan
        tf, n_held = trace, held_apart(len(trace.scan.requests), cfg.profile_share)
        ph = Phases.of_requests(trace.scan, n_held, len(trace.scan.requests))
        require(trace, "compare", purpose, decode=True, phases=ph)

        def run_file(system: SystemConfig) -> Results:  # its run holds apart the same requests (``simulate_file``)
            rng = np.random.default_rng(cfg.seed)
            return simulate_file(
                tf.path, cfg.model, hw, system, rng, profile_share=cfg.profile_share,
                window_tokens=tf.window_tokens, scan=tf.scan, walks=GENERAL,
            )  # fmt: skip

        return run_file, trace.head(n_held) if n_held else None, None, n_held
    profile, timed = split_requests(trace, cfg.profile_share)
    n_held = 0 if profile is None else len(np.unique(profile.arrays.request_id))
    require(timed, "compare", purpose, decode=True)

    def run(system: SystemConfig) -> Results:
        rng = np.random.default_rng(cfg.seed)
        return simulate(
            timed, cfg.model, hw, system, rng, engine="fast", profile=profile, profile_share=0.0, keep_decisions=False,
            walks=GENERAL,  # many systems: each policy's general copy of the walk, compiled once
        )  # fmt: skip

    return run, profile, timed, n_held


def _runnable(trace: Trace | TraceFile, names: list[str], notes: list[str]) -> list[SystemConfig]:
    """The systems asked for that the trace can run: the T1/T2 rule needs the gate weights a trace's source may lack."""
    systems = [_system(n) for n in names]
    if not weights_absent(trace.meta):
        return systems
    skipped = [s.name for s in systems if needs_weights(s)]
    systems = [s for s in systems if not needs_weights(s)]
    if not systems:
        raise ConfigError(
            f"trace {trace.path} has no gate weights and every system asked for needs them "
            f"(fix: systems= with uniform precision, e.g. [on-demand,freetoken,tec])"
        )
    if skipped:
        notes.append(f"the trace has no gate weights: {', '.join(skipped)} not run (the T1/T2 rule needs them)")
    return systems


KEEP = (
    "rank", "system", "decode_ms_per_token", "decode_tok_s", "prefill_ms_per_request", "hit_rate", "bytes_loaded",
    "bound", "gap_to_bound", "gap_to_oracle", "stall_ms_per_token", "served_mix", "quality_proxy", "cpu_assisted",
)  # fmt: skip
"""What compare.json keeps of each system's results."""


def _write(rows: list[dict[str, Any]], trace: Trace | TraceFile, cfg: CompareConfig, hw: HardwareConfig,
           note: str, out: Path) -> dict[str, Any]:  # fmt: skip
    """compare.md, compare.json and the plot under ``out``; the summary, with the files and the table."""
    title = (
        f"{trace.meta.model.name} routing as {cfg.model.name} on {hw.name}: "
        f"{rows[0]['tokens']['decode']} decode tokens, {rows[0]['requests']} requests"
    )
    table = compare_table(rows)
    plots = plot_compare(rows, out, title)
    md = (
        f"# {title}\n\n{note}.\n\nRanked by decode latency. *degraded mass*: the gate mass served in low precision "
        f"or skipped (the quality proxy; the tuning keeps it within quality_budget={cfg.quality_budget}); *bound*: the "
        f"system's own rules with every expert already where they run it; *x oracle*: decode latency over the lowest "
        f"bound of all systems; (CPU): it also computes experts on the host CPU.\n\n"
        f"{table}\n\n![compare](compare.png)\n"
    )
    for r in rows:
        r["cpu_assisted"] = cpu_assisted(r)
    summary = {
        "title": title,
        "trace": str(trace.path),
        "model": cfg.model.name,
        "hardware": hw.name,
        "note": note,
        "oracle_bound_ms_per_token": min(r["bound"]["decode_ms_per_token"] for r in rows),
        "systems": [{k: r[k] for k in KEEP if k in r} for r in rows],
    }
    atomic_write_json(out / "compare.json", summary)
    atomic_write_text(out / "compare.md", md)
    summary["files"] = [out / "compare.md", out / "compare.json", *plots]
    summary["table"] = table
    return summary


def compare(trace: Trace | TraceFile, cfg: CompareConfig, out: Path) -> dict[str, Any]:
    """Run every system (and the tuned HOBBIT) on ``trace`` (read whole, or a ``TraceFile`` each run reads a window at
    a time); write the table, plot and JSON under ``out``."""
    hw = load_hardware(cfg.profile) if cfg.profile else cfg.hardware
    names = list(dict.fromkeys(cfg.systems)) or all_systems()
    unknown = sorted(set(names) - set(all_systems()))
    if unknown:
        raise ConfigError(f"systems={unknown} are not presets of conf/system (fix: some of {', '.join(all_systems())})")
    run, profile, timed, n_held = _runner(trace, cfg, hw)
    notes = [
        f"{n_held} requests held apart for profiling and tuning"
        if profile is not None
        else "no requests held apart (the trace has one request): nothing profiled"
    ]
    systems = _runnable(trace, names, notes)
    check_all(trace, timed, profile, cfg, hw, systems)
    if profile is None or weights_absent(trace.meta) or cfg.tune_trials == 0:
        notes.append("HOBBIT not tuned")
    else:
        print(f"tune HOBBIT on the profiling requests ({cfg.tune_trials} trials)")
        tuned, why = _tuned(profile, cfg, hw, out / "tune")
        notes.append(f"{TUNED}: {why}")
        if tuned is not None:
            systems.append(tuned)
    rows = []
    for system in tqdm(systems, desc="compare", unit="system", disable=None):
        res = run(system)
        write_results(res, out / "systems" / system.name)
        rows.append(res.summary)
    return _write(rank(rows), trace, cfg, hw, "; ".join(notes), out)
