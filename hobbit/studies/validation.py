"""The executor's studies, as library code: ``calibrate_to`` (measure this machine, write a hardware profile) and
``validate_to`` (simulate and replay the same decisions, write the per-token error, its plot and report). This module
loads torch; only the executor's commands and the demo import it."""

from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path
from typing import Any

import pandas as pd

from hobbit.analysis.schedule_views import plot_gantt, write_timeline
from hobbit.analysis.validation_plots import plot_validation
from hobbit.executor.config import CalibrateConfig, ValidateConfig
from hobbit.executor.setup import pinned, prepare
from hobbit.executor.validate import Validation, full_profile, validate
from hobbit.executor.weights import first_layers, reduce_model
from hobbit.plumbing.glue import hydra_quote, load_hardware, load_tuned, searchpath, write_yaml
from hobbit.plumbing.phases import require
from hobbit.plumbing.results_io import decode_text, write_results
from hobbit.plumbing.schedule_files import GANTT_PASSES
from hobbit.sim.checks import check_profile, check_topology, check_weights
from hobbit.sim.config import ConfigError, HardwareConfig, ModelConfig
from hobbit.traces.io import atomic_write_json, atomic_write_parquet, atomic_write_text, read_trace
from hobbit.traces.tiny import bundled_trace


def write_profile(hw: HardwareConfig, model: ModelConfig, out: Path) -> tuple[Path, Path]:
    """hardware/<name>.yaml and model/<model>-div<scale>.yaml: a search path ``hobbit sim`` accepts."""
    model_file = model.name.replace("/", "-div")
    return (
        write_yaml(hw, out / "hardware" / f"{hw.name}.yaml"),
        write_yaml(dataclasses.replace(model, name=model_file), out / "model" / f"{model_file}.yaml"),
    )


def calibrate_to(cfg: CalibrateConfig, out: Path) -> tuple[HardwareConfig, Path, Path]:
    """Measure copies, expert and dense compute through the executor on the bundled trace; write the profile under
    ``out`` (``write_profile``). The profile, and its hardware and model files."""
    if cfg.name is not None and (
        not cfg.name or cfg.name != Path(cfg.name).name or cfg.name.startswith(".") or "\\" in cfg.name
    ):  # it names a file under the run's hardware/: a path would write elsewhere (name=../../x)
        raise ConfigError(
            f"name={cfg.name}: the profile's name is a file name, written as hardware/<name>.yaml in the run "
            f"directory (fix: a name without '/', '\\' or a leading '.', e.g. name=my-desk)"
        )
    device, model, pair, store = prepare(cfg)
    print(f"calibrating {model.name} on {device}")
    with pinned(cfg) as copy_cpu:
        hw = full_profile(
            store,
            device,
            pair,
            read_trace(bundled_trace()),
            copy_cpu=copy_cpu,
            statistic=cfg.statistic,
            rounds=cfg.rounds,
        )
    if cfg.name:
        hw = dataclasses.replace(hw, name=cfg.name)
    hw_file, model_file = write_profile(hw, model, out)
    return hw, hw_file, model_file


def calibrated_sim_command(root: Path, hardware: str, model: str) -> str:
    """The ``hobbit sim`` command line (for a POSIX shell) that simulates on the profile ``hobbit calibrate`` wrote
    under ``root``: its hardware/ and model/ groups on Hydra's search path, its hardware and (reduced) model chosen."""
    return shlex.join(
        ["hobbit", "sim", searchpath(root), f"hardware={hydra_quote(hardware)}", f"model={hydra_quote(model)}"]
    )


def validate_to(cfg: ValidateConfig, out: Path) -> dict[str, Any]:
    """Validate, then write results.json, sim/, replay/, tokens.parquet, the plot and report.md."""
    hw = load_hardware(cfg.profile) if cfg.profile else None
    if cfg.tuned:
        cfg = dataclasses.replace(cfg, system=load_tuned(cfg.tuned, cfg.system))
    model = reduce_model(cfg.model, cfg.scale, cfg.layers)
    trace = read_trace(cfg.trace or bundled_trace())
    # before any work (the calibration takes a while): what the simulation would refuse after it
    require(
        trace,
        "validate",
        f"it replays {cfg.requests} request(s) after a warm-up one and times their decode tokens",
        decode=True,
        requests=cfg.requests + 1,
        fewer="requests=",
    )
    check_topology(first_layers(trace, model.num_layers), model)  # the layers it replays: the model's first
    check_weights(trace, cfg.system)
    if hw is not None:
        check_profile(model, hw)
    v = validate(cfg, trace, hw)
    write_profile(v.hardware, v.model, out)
    write_results(v.sim, out / "sim")
    write_results(v.replay, out / "replay")
    atomic_write_json(out / "results.json", v.summary)
    e = v.errors
    atomic_write_parquet(
        pd.DataFrame({"simulated_ms": e["sim_ms"], "measured_ms": e["measured_ms"]}), out / "tokens.parquet"
    )
    plots = plot_validation(e["sim_ms"], e["measured_ms"], v.summary["validation"], out)
    if v.schedules is not None:
        meta = {"model": v.summary["model"], "system": v.summary["system"], "hardware": v.summary["hardware"]}
        paths = [write_timeline(out / "timeline.json", v.schedules, align=True, meta=meta)]
        paths += plot_gantt(v.schedules, out, passes=GANTT_PASSES, align=True)
        for path in paths:
            print(f"timeline: {path.resolve()}")
        plots += paths[1:]
    atomic_write_text(out / "report.md", _report(v, plots))
    return v.summary["validation"]


def summary_line(v: dict[str, Any]) -> str:
    """One line of a validation's numbers, as ``hobbit validate`` and the demo print it."""
    pf = (
        ""
        if v.get("prefill_mape") is None
        else f"; prefill MAPE {100 * v['prefill_mape']:.1f} % over {v['prefills']} requests"
    )
    return (
        f"validation on {v['device']}: {v['tokens']} decode tokens, per-token MAPE {100 * v['mape']:.1f} %, bias "
        f"{100 * v['bias']:+.1f} % (replays' own spread {100 * v['noise_mape']:.1f} %), |error| P50 "
        f"{v['p50_abs_ms']:.2f} ms, P95 {v['p95_abs_ms']:.2f} ms (simulated {decode_text(v['mean_simulated_ms'], 1)} "
        f"vs measured {decode_text(v['mean_measured_ms'], 1)}){pf}"
    )


def _report(v: Validation, plots: list[Path]) -> str:
    s, e = v.summary, v.summary["validation"]
    p = s["profile"]
    return (
        f"# Validation: {s['system']} on {s['hardware']} ({e['device']}), {s['model']}\n\n"
        f"{summary_line(e)}.\n\nThe measured latency of a token is the {e['statistic']} of {e['replays']} replays of "
        f"the same decisions; noise_mape is their own spread (the per-token MAPE between two replays), the floor "
        f"under which the simulator's error cannot be told from the machine's.\n\n"
        f"Profile: link t0 {p['link_t0_s'] * 1e6:.1f} us, {p['link_gbps']:.2f} GB/s (copies during the replay: "
        f"{s['copies_measured_gbps']:.2f} GB/s), issuing a copy {p['copy_issue_s'] * 1e6:.1f} us; contention: the "
        f"link at {p['busy_link_gbps']:.2f} GB/s while computing, compute while copying: dense "
        f"x{p['busy_dense_factor']:.3f}, high expert x{p['busy_expert_high_factor']:.3f}, low expert "
        f"x{p['busy_expert_low_factor']:.3f}; in a decode step, per call, the dense part "
        f"+{p.get('step_dense_s', 0.0) * 1e6:.1f} us, a high expert +{p.get('step_expert_high_s', 0.0) * 1e6:.1f} us, "
        f"a low one +{p.get('step_expert_low_s', 0.0) * 1e6:.1f} us over their probes; replay loop "
        f"{p['layer_overhead_s'] * 1e6:.0f} us per layer.\n\n"
        f"![validation]({plots[0].name})\n"
        + "".join(f"\n![schedule]({p.name})\n" for p in plots if p.stem == "gantt" and p.suffix == ".png")
    )
