"""``hobbit compare``: every system on the user's trace and machine, plus HOBBIT tuned for them, ranked.

The trace's first ``profile_share`` of requests are held apart: what systems learn offline (Fiddler's
popular experts, MoE-Infinity's activation matrices) and HOBBIT's tuning (``hobbit tune`` on them)
see only those; every system is timed on the same remaining requests. Each row gives decode and
prefill latency, hit rate, bytes moved, the system's own latency bound (``sim.bound``: every expert
already where its rules run it) and the gap to the lowest bound of all (the oracle bound: no system
on this machine and trace can be faster). Writes compare.json, compare.md, compare.png/.svg and each
system's results under systems/<name>/; the tuning study resumes where it stopped.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from tqdm import tqdm

from hobbit.analysis.system_plots import compare_table, cpu_assisted, plot_compare
from hobbit.conf import CONF_DIR
from hobbit.glue import CONF, compose, hydra_command, load_hardware
from hobbit.results_io import write_results
from hobbit.sim.config import ConfigError, HardwareConfig, ModelConfig, SimConfig, SystemConfig
from hobbit.sim.run import needs_weights, simulate
from hobbit.sim.tune import TuneConfig, best_trials, open_study, suggest, tune
from hobbit.sim.workload import split_requests
from hobbit.traces.interchange import weights_absent
from hobbit.traces.io import Trace, atomic_write_json, atomic_write_text, read_trace
from hobbit.traces.tiny import bundled_trace

TUNED = "hobbit-tuned"


def all_systems() -> list[str]:
    """Every preset of conf/system, by name."""
    return sorted(p.stem for p in (CONF_DIR / "system").glob("*.yaml"))


@dataclass(frozen=True)
class CompareConfig:
    """Knobs of ``hobbit compare`` (conf/compare.yaml)."""

    LIMITS: ClassVar[dict[str, str]] = {"profile_share": "(0,1)", "tune_trials": ">=0", "quality_budget": "[0,1]"}

    # path knobs and their roles (hobbit/guard.py)
    PATHS: ClassVar[dict[str, str]] = {"trace": "in", "profile": "in", "out_dir": "outdir"}

    trace: str | None = None  # None: the bundled model's trace
    model: ModelConfig = field(default_factory=ModelConfig)
    hardware: HardwareConfig = field(default_factory=HardwareConfig)
    system: SystemConfig = field(default_factory=SystemConfig)  # the base HOBBIT's tuning varies
    profile: str | None = None  # a calibrated hardware YAML (hobbit calibrate) instead of hardware=
    systems: list[str] = field(default_factory=list)  # [] = every preset of conf/system
    profile_share: float = 0.25  # requests held apart for profiling and tuning
    tune_trials: int = 20  # 0: no tuned HOBBIT
    quality_budget: float = 0.25  # tuning: most gate mass served low or skipped
    seed: int = 0
    out_dir: str = "."


def _system(name: str) -> SystemConfig:
    return compose("sim", SimConfig, ["out_dir=.", f"system={name}"]).system


def _tuned(profile: Trace, cfg: CompareConfig, hw: HardwareConfig, out: Path) -> tuple[SystemConfig | None, str]:
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
    """Rows by decode latency, then prefill latency; each gains ``rank`` and ``gap_to_oracle``: its decode
    latency over the lowest bound of all rows."""
    oracle = min(r["bound"]["decode_ms_per_token"] for r in rows)
    out = sorted(rows, key=lambda r: (r["decode_ms_per_token"]["mean"], r["prefill_ms_per_request"]["mean"]))
    for i, r in enumerate(out, 1):
        r["rank"] = i
        r["gap_to_oracle"] = r["decode_ms_per_token"]["mean"] / oracle if oracle > 0 else float("nan")
    return out


def compare(trace: Trace, cfg: CompareConfig, out: Path) -> dict[str, Any]:
    """Run every system (and the tuned HOBBIT) on ``trace``; write the table, plot and JSON under ``out``."""
    hw = load_hardware(cfg.profile) if cfg.profile else cfg.hardware
    names = list(dict.fromkeys(cfg.systems)) or all_systems()
    unknown = sorted(set(names) - set(all_systems()))
    if unknown:
        raise ConfigError(f"systems={unknown} are not presets of conf/system (fix: some of {', '.join(all_systems())})")
    profile, timed = split_requests(trace, cfg.profile_share)
    systems = [_system(n) for n in names]
    notes = [
        f"{len(np.unique(profile.arrays.request_id))} requests held apart for profiling and tuning"
        if profile is not None
        else "no requests held apart (the trace has one request): nothing profiled"
    ]
    blind = weights_absent(trace.meta)
    if blind:  # run what can run: the T1/T2 rule needs the gate weights the trace's source lacked
        skipped = [s.name for s in systems if needs_weights(s)]
        systems = [s for s in systems if not needs_weights(s)]
        if not systems:
            raise ConfigError(
                f"trace {trace.path} has no gate weights and every system asked for needs them "
                f"(fix: systems= with uniform precision, e.g. [on-demand,freetoken,tec])"
            )
        if skipped:
            notes.append(f"the trace has no gate weights: {', '.join(skipped)} not run (the T1/T2 rule needs them)")
    if profile is None or blind or cfg.tune_trials == 0:
        notes.append("HOBBIT not tuned")
    else:
        print(f"tune HOBBIT on the profiling requests ({cfg.tune_trials} trials)")
        tuned, why = _tuned(profile, cfg, hw, out / "tune")
        notes.append(f"{TUNED}: {why}")
        if tuned is not None:
            systems.append(tuned)
    note = "; ".join(notes)
    rows = []
    for system in tqdm(systems, desc="compare", unit="system"):
        res = simulate(
            timed,
            cfg.model,
            hw,
            system,
            np.random.default_rng(cfg.seed),
            engine="fast",
            profile=profile,
            profile_share=0.0,
            keep_decisions=False,
        )
        write_results(res, out / "systems" / system.name)
        rows.append(res.summary)
    rows = rank(rows)
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
    keep = (
        "rank",
        "system",
        "decode_ms_per_token",
        "prefill_ms_per_request",
        "hit_rate",
        "bytes_loaded",
        "bound",
        "gap_to_bound",
        "gap_to_oracle",
        "stall_ms_per_token",
        "served_mix",
        "quality_proxy",
        "cpu_assisted",
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
        "systems": [{k: r[k] for k in keep if k in r} for r in rows],
    }
    atomic_write_json(out / "compare.json", summary)
    atomic_write_text(out / "compare.md", md)
    summary["files"] = [out / "compare.md", out / "compare.json", *plots]
    summary["table"] = table
    return summary


@hydra_command(CONF, "compare", CompareConfig)
def compare_main(cfg: CompareConfig) -> None:
    """Every system, and HOBBIT tuned on held-apart requests, on one trace and machine, ranked."""
    t0 = time.perf_counter()
    trace = read_trace(Path(cfg.trace) if cfg.trace else bundled_trace())
    out = Path(cfg.out_dir)
    s = compare(trace, cfg, out)
    print(s["table"])
    print(f"\n{s['note']}; done in {time.perf_counter() - t0:.0f} s")
    for p in s["files"]:
        print(f"  {Path(p).resolve()}")
