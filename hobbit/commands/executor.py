"""``hobbit quality``, ``calibrate`` and ``validate``: the executor's commands (the I/O edge).

This module loads torch; ``hobbit.cli`` imports a command's module only to run it, so the
simulator's commands never do.
"""

from __future__ import annotations

from pathlib import Path

from hobbit.executor.config import CalibrateConfig, QualityConfig, ValidateConfig
from hobbit.executor.quality import run_quality
from hobbit.plumbing.glue import CONF, hydra_command
from hobbit.studies.validation import calibrate_to, calibrated_sim_command, summary_line, validate_to
from hobbit.traces.io import atomic_write_json


@hydra_command(CONF, "quality", QualityConfig)
def quality_main(cfg: QualityConfig) -> None:
    """Perplexity, top-1 agreement and KL of the HOBBIT rule's mixed precision against full precision."""
    res = run_quality(cfg)
    out = Path(cfg.out_dir)
    atomic_write_json(out / "results.json", res)
    q, p = res["quality"], cfg.system.precision
    print(
        f"{cfg.system.name} (mode {p.mode}, T1 {p.t1}, T2 {p.t2}, {cfg.precision_pair}): perplexity "
        f"{q['ppl']:.4f} vs {q['ppl_reference']:.4f} ({100 * q['ppl_rel_change']:+.2f} %), top-1 agreement "
        f"{q['top1_agreement']:.4f}, KL {q['kl_mean']:.5f}, degraded gate mass {q['proxy']:.3f} over {q['tokens']} tokens"
    )
    print(f"results in {(out / 'results.json').resolve()}")


@hydra_command(CONF, "calibrate", CalibrateConfig)
def calibrate_main(cfg: CalibrateConfig) -> None:
    """Measure copies, expert and dense compute through the executor; write a hardware profile."""
    out = Path(cfg.out_dir)
    hw, hw_file, model_file = calibrate_to(cfg, out)
    print(f"profile: {hw_file.resolve()}\nmodel:   {model_file.resolve()}")
    print(f"use: {calibrated_sim_command(out, hw.name, model_file.stem)}")


@hydra_command(CONF, "validate", ValidateConfig)
def validate_main(cfg: ValidateConfig) -> None:
    """Simulate and replay the same trace and decisions; report the per-token error."""
    out = Path(cfg.out_dir)
    v = validate_to(cfg, out)
    print(summary_line(v))
    print(f"results in {out.resolve()}")
