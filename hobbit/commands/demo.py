"""``hobbit demo``: the main job on the bundled defaults, end to end.

Captures a routing trace from the bundled tiny MoE model on its held-out prompts, reports
its statistics (text, JSON, plots), then simulates HOBBIT, its ablations and the systems
it is compared with, today's field and HOBBIT tuned on requests held apart, replaying that trace as
Mixtral-8x7B (same topology) on an RTX 4090 (``hobbit compare``: a ranked table and a plot); then
sweeps T1 x T2 x cache size on the bundled trace and builds the sweep report, validates the
simulator against a real replay, and plans the model on the machine from the captured routing (``hobbit plan``:
each runtime's best flags and predicted speed). Everything lands in the run directory.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from hobbit.analysis.report import build_report
from hobbit.analysis.trace_plots import plot_trace_summary
from hobbit.api import sweep
from hobbit.executor.config import ValidateConfig
from hobbit.planner.config import PlanConfig
from hobbit.planner.report import plan_table
from hobbit.planner.search import plan
from hobbit.plumbing.glue import CONF, compose, hydra_command
from hobbit.plumbing.results_io import decode_text
from hobbit.studies.compare import CompareConfig, compare
from hobbit.studies.validation import summary_line, validate_to
from hobbit.traces.capture import CaptureConfig, capture
from hobbit.traces.io import Trace, atomic_write_json, atomic_write_text, read_trace
from hobbit.traces.stats import render, summarize
from hobbit.traces.tiny import bundled_trace


@dataclass(frozen=True)
class DemoConfig:
    """Knobs of ``hobbit demo`` (defaults keep it to a few minutes on two CPU cores)."""

    LIMITS: ClassVar[dict[str, str]] = {
        "max_prompts": ">=1",
        "max_new_tokens": ">=1",
        "lookahead": ">=0",
        "batch_size": ">=1",
        "sweep_t1": "[0,1]",
        "sweep_t2": "[0,1]",
        "sweep_high_gb": ">=0",
        "sweep_jobs": ">=1",
        "validate_scale": ">=1",
        "validate_requests": ">=1",
        "validate_replays": ">=2",
        "validate_rounds": ">=1",
        "compare_trials": ">=0",
    }

    # path knobs and their roles (hobbit/plumbing/guard.py)
    PATHS: ClassVar[dict[str, str]] = {"out_dir": "outdir"}

    out_dir: str = "outputs/demo"
    """Where everything goes (the command's run directory)."""
    max_prompts: int = 16
    """Prompts captured from the bundled tiny model's held-out prompts."""
    max_new_tokens: int = 32
    """Tokens the capture generates per prompt."""
    lookahead: int = 3
    """D: the capture records layer l+d's router applied to layer l's router input, d = 1..D (the trace's
    predictions)."""
    batch_size: int = 4
    """Prompts per forward pass of the capture."""
    model: str = "mixtral-8x7b"
    """The preset of conf/model whose size the captured routing is replayed at (same topology), in the comparison,
    the sweep and the validation."""
    hardware: str = "rtx4090-pcie4"
    """The preset of conf/hardware the comparison and the sweep run on."""
    sweep_t1: list[float] = field(default_factory=lambda: [0.4, 0.6, 0.8])
    """The T1 values swept (system.precision.t1)."""
    sweep_t2: list[float] = field(default_factory=lambda: [0.9, 0.95])
    """The T2 values swept (system.precision.t2)."""
    sweep_high_gb: list[float] = field(default_factory=lambda: [8.0, 16.0])
    """The high-precision pool sizes swept, GB (1e9 bytes); the low pool is 4 GB."""
    sweep_jobs: int = 2
    """Simulations of the sweep run in parallel."""
    validate_scale: int = 16
    """The validation calibrates and runs the executor on ``model`` with its hidden and expert widths divided by N
    (hobbit validate scale=)."""
    validate_requests: int = 2
    """The validation replays the trace's first N requests, after one more as warm-up (hobbit validate requests=)."""
    validate_replays: int = 5
    """Replays of the validated decisions (hobbit validate replays=)."""
    validate_rounds: int = 15
    """Calibration rounds, at least 3 per replay (hobbit validate rounds=)."""
    systems: list[str] = field(default_factory=list)
    """The presets of conf/system compared (hobbit compare systems=); []: every preset."""
    compare_trials: int = 10
    """Optuna trials tuning HOBBIT on the requests held apart for the comparison (hobbit compare tune_trials=); 0:
    no tuned HOBBIT."""


@hydra_command(CONF, "demo", DemoConfig)
def demo_main(cfg: DemoConfig) -> None:
    """Capture on the bundled model, statistics, systems compared, a sweep, a validation and a plan."""
    out = Path(cfg.out_dir)
    t0 = time.perf_counter()
    print(f"[1/6] capture: bundled tiny MoE, {cfg.max_prompts} prompts x {cfg.max_new_tokens} new tokens")
    res = capture(
        CaptureConfig(
            out=str(out / "trace.parquet"),
            max_prompts=cfg.max_prompts,
            max_new_tokens=cfg.max_new_tokens,
            lookahead=cfg.lookahead,
            batch_size=cfg.batch_size,
        )
    )
    print("[2/6] trace statistics")
    trace = read_trace(res.path)
    summary = summarize(trace)
    text = render(summary, max_layer_rows=0)
    atomic_write_text(out / "trace_info.txt", render(summary) + "\n")
    atomic_write_json(out / "trace_info.json", summary)
    plots = plot_trace_summary(summary, out)
    print(text)
    which = f"{len(cfg.systems)} systems" if cfg.systems else "every system"
    print(f"[3/6] compare {which} and HOBBIT tuned for this trace: the trace as {cfg.model} on {cfg.hardware}")
    written = _compare(trace, cfg, out / "compare")
    n = len(cfg.sweep_t1) * len(cfg.sweep_t2) * len(cfg.sweep_high_gb)
    print(f"[4/6] sweep T1 x T2 x cache size ({n} configurations) on the bundled trace, and its report")
    written += _sweep(cfg, out / "sweep")
    print(
        f"[5/6] calibrate this machine and validate the simulator against a real replay ({cfg.model} at 1/"
        f"{cfg.validate_scale} width)"
    )
    written += _validate(cfg, out / "validate")
    print(f"[6/6] plan: each runtime's best flags and predicted tok/s for {cfg.model} on {cfg.hardware}, on this trace")
    written += _plan(res.path, cfg, out / "plan")
    print(f"\ndone in {time.perf_counter() - t0:.0f} s; results in {out.resolve()}:")
    for p in [res.path, out / "trace_info.txt", out / "trace_info.json", *plots, *written]:
        print(f"  {Path(p).resolve()}")


def _plan(trace: Path, cfg: DemoConfig, out: Path) -> list[Path]:
    pc = compose(
        "plan",
        PlanConfig,
        [
            f"model={cfg.model}",
            f"hardware={cfg.hardware}",
            f"trace={trace}",
            f"tune_trials={cfg.compare_trials}",
            f"out_dir={out}",
        ],
    )
    result = plan(pc, out)
    print(plan_table(result.rows))
    return result.files


def _compare(trace: Trace, cfg: DemoConfig, out: Path) -> list[Path]:
    systems = "[" + ",".join(cfg.systems) + "]"
    cc = compose(
        "compare",
        CompareConfig,
        [
            f"model={cfg.model}",
            f"hardware={cfg.hardware}",
            f"systems={systems}",
            f"tune_trials={cfg.compare_trials}",
            f"out_dir={out}",
        ],
    )
    s = compare(trace, cc, out)
    print(s["table"])
    print(s["note"])
    return s["files"]


def _sweep(cfg: DemoConfig, out: Path) -> list[Path]:
    grid = {
        "system.precision.t1": cfg.sweep_t1,
        "system.precision.t2": cfg.sweep_t2,
        "system.cache.high_bytes": [int(gb * 1e9) for gb in cfg.sweep_high_gb],
        "system.cache.low_bytes": [4_000_000_000],
    }
    sweep(
        bundled_trace(), grid, model=cfg.model, hardware=cfg.hardware, system="hobbit", n_jobs=cfg.sweep_jobs, out=out
    )
    report, agg = build_report(out)
    best = agg.runs.sort_values("decode_ms_per_token.mean").iloc[0]
    print(
        f"sweep: {len(agg.runs)} runs; fastest {decode_text(best['decode_ms_per_token.mean'], 1)} at T1="
        f"{best['system_config.precision.t1']}, T2={best['system_config.precision.t2']}, high pool "
        f"{best['cache.high_bytes'] / 1e9:.0f} GB"
    )
    return [report, report.parent / "runs.parquet", *sorted(report.parent.glob("*.png"))]


def _validate(cfg: DemoConfig, out: Path) -> list[Path]:
    vc = compose(
        "validate",
        ValidateConfig,
        [
            f"model={cfg.model}",
            f"scale={cfg.validate_scale}",
            f"requests={cfg.validate_requests}",
            f"replays={cfg.validate_replays}",
            f"rounds={cfg.validate_rounds}",
            "timeline=true",
            f"out_dir={out}",
        ],
    )
    v = validate_to(vc, out)
    print(summary_line(v))
    return [out / "results.json", out / "report.md", out / "validation.png", out / "timeline.json", out / "gantt.png"]
