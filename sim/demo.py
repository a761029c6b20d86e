"""``hobbit demo``: the main job on the bundled defaults, end to end.

Captures a routing trace from the bundled tiny MoE model on its held-out prompts, then
reports the trace's statistics as text, JSON and plots in the run directory.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from traces.cli import hydra_command


@dataclass(frozen=True)
class DemoConfig:
    """Knobs of ``hobbit demo`` (defaults keep it to a few minutes on two CPU cores)."""

    out_dir: str = "outputs/demo"
    max_prompts: int = 16
    max_new_tokens: int = 32
    lookahead: int = 3
    batch_size: int = 4


@hydra_command("pkg://conf", "demo", DemoConfig)
def demo_main(cfg: DemoConfig) -> None:
    """Capture on the bundled model, then trace statistics and plots."""
    from analysis.trace_plots import plot_trace_summary
    from traces.capture import CaptureConfig, capture
    from traces.io import atomic_write_text, read_trace
    from traces.stats import render, summarize

    out = Path(cfg.out_dir)
    t0 = time.perf_counter()
    print(f"[1/2] capture: bundled tiny MoE, {cfg.max_prompts} prompts x {cfg.max_new_tokens} new tokens")
    res = capture(CaptureConfig(out=str(out / "trace.parquet"), max_prompts=cfg.max_prompts,
                                max_new_tokens=cfg.max_new_tokens, lookahead=cfg.lookahead,
                                batch_size=cfg.batch_size))
    print("[2/2] trace statistics")
    summary = summarize(read_trace(res.path))
    text = render(summary)
    atomic_write_text(out / "trace_info.txt", text + "\n")
    atomic_write_text(out / "trace_info.json", json.dumps(summary, indent=1) + "\n")
    plots = plot_trace_summary(summary, out)
    print(text)
    print(f"\ndone in {time.perf_counter() - t0:.0f} s; results in {out.resolve()}:")
    for p in [res.path, out / "trace_info.txt", out / "trace_info.json", *plots]:
        print(f"  {Path(p).resolve()}")
