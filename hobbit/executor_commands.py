"""``hobbit quality``, ``calibrate`` and ``validate``: the executor's commands (the I/O edge).

This module loads torch; ``hobbit.cli`` imports a command's module only to run it, so the
simulator's commands never do.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pandas as pd

from hobbit.analysis.validation_plots import plot_validation
from hobbit.executor.config import CalibrateConfig, QualityConfig, ValidateConfig
from hobbit.executor.quality import run_quality
from hobbit.executor.setup import prepare
from hobbit.executor.validate import Validation, full_profile, validate
from hobbit.executor.weights import reduce_model
from hobbit.glue import CONF, hydra_command, load_hardware, write_yaml
from hobbit.results_io import write_results
from hobbit.sim.config import HardwareConfig, ModelConfig
from hobbit.sim.run import check_profile
from hobbit.traces.io import atomic_write_json, atomic_write_parquet, atomic_write_text, read_trace
from hobbit.traces.tiny import bundled_trace


@hydra_command(CONF, "quality", QualityConfig)
def quality_main(cfg: QualityConfig) -> None:
    """Perplexity, top-1 agreement and KL of the HOBBIT rule's mixed precision against full precision."""
    res = run_quality(cfg)
    out = Path(cfg.out_dir)
    atomic_write_json(out / "results.json", res)
    q, p = res["quality"], cfg.system.precision
    print(f"{cfg.system.name} (mode {p.mode}, T1 {p.t1}, T2 {p.t2}, {cfg.precision_pair}): perplexity "
          f"{q['ppl']:.4f} vs {q['ppl_reference']:.4f} ({100 * q['ppl_rel_change']:+.2f} %), top-1 agreement "
          f"{q['top1_agreement']:.4f}, KL {q['kl_mean']:.5f}, degraded gate mass {q['proxy']:.3f} over {q['tokens']} tokens")
    print(f"results in {(out / 'results.json').resolve()}")


def write_profile(hw: HardwareConfig, model: ModelConfig, out: Path) -> tuple[Path, Path]:
    """hardware/<name>.yaml and model/<model>-div<scale>.yaml: a search path ``hobbit sim`` accepts."""
    model_file = model.name.replace("/", "-div")
    return (write_yaml(hw, out / "hardware" / f"{hw.name}.yaml"),
            write_yaml(dataclasses.replace(model, name=model_file), out / "model" / f"{model_file}.yaml"))


@hydra_command(CONF, "calibrate", CalibrateConfig)
def calibrate_main(cfg: CalibrateConfig) -> None:
    """Measure copies, expert and dense compute through the executor; write a hardware profile."""
    device, model, pair, store = prepare(cfg)
    print(f"calibrating {model.name} on {device}")
    hw = full_profile(store, device, pair, read_trace(bundled_trace()))
    if cfg.name:
        hw = dataclasses.replace(hw, name=cfg.name)
    hw_file, model_file = write_profile(hw, model, Path(cfg.out_dir))
    root = Path(cfg.out_dir).resolve()
    print(f"profile: {hw_file.resolve()}\nmodel:   {model_file.resolve()}")
    print(f"use: hobbit sim hydra.searchpath=[file://{root}] hardware={hw.name} model={model_file.stem}")


def validate_to(cfg: ValidateConfig, out: Path) -> dict[str, Any]:
    """Validate, then write results.json, sim/, replay/, tokens.parquet, the plot and report.md."""
    hw = load_hardware(cfg.profile) if cfg.profile else None
    if hw is not None:
        check_profile(reduce_model(cfg.model, cfg.scale, cfg.layers), hw)  # before any work
    v = validate(cfg, read_trace(cfg.trace or bundled_trace()), hw)
    write_profile(v.hardware, v.model, out)
    write_results(v.sim, out / "sim")
    write_results(v.replay, out / "replay")
    atomic_write_json(out / "results.json", v.summary)
    e = v.errors
    atomic_write_parquet(pd.DataFrame({"simulated_ms": e["sim_ms"], "measured_ms": e["measured_ms"]}),
                         out / "tokens.parquet")
    plots = plot_validation(e["sim_ms"], e["measured_ms"], v.summary["validation"], out)
    atomic_write_text(out / "report.md", _report(v, plots))
    return v.summary["validation"]


def _report(v: Validation, plots: list[Path]) -> str:
    s, e = v.summary, v.summary["validation"]
    p = s["profile"]
    return (f"# Validation: {s['system']} on {s['hardware']} ({e['device']}), {s['model']}\n\n"
            f"{e['tokens']} decode tokens: MAPE {100 * e['mape']:.1f} %, |error| P50 {e['p50_abs_ms']:.2f} ms, "
            f"P95 {e['p95_abs_ms']:.2f} ms; simulated {e['mean_simulated_ms']:.1f} ms/token, measured "
            f"{e['mean_measured_ms']:.1f}.\n\nProfile: link t0 {p['link_t0_s'] * 1e6:.1f} us, {p['link_gbps']:.2f} GB/s "
            f"(copies during the replay: {s['copies_measured_gbps']:.2f} GB/s); replay loop "
            f"{p['layer_overhead_s'] * 1e6:.0f} us per layer.\n\n![validation]({plots[0].name})\n")


@hydra_command(CONF, "validate", ValidateConfig)
def validate_main(cfg: ValidateConfig) -> None:
    """Simulate and replay the same trace and decisions; report the per-token error."""
    out = Path(cfg.out_dir)
    v = validate_to(cfg, out)
    print(f"validation on {v['device']}: {v['tokens']} decode tokens, MAPE {100 * v['mape']:.1f} %, "
          f"|error| P50 {v['p50_abs_ms']:.2f} ms, P95 {v['p95_abs_ms']:.2f} ms "
          f"(simulated {v['mean_simulated_ms']:.1f} vs measured {v['mean_measured_ms']:.1f} ms/token)")
    print(f"results in {out.resolve()}")
