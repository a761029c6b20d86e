"""``hobbit demo``: the main job on the bundled defaults, end to end.

Captures a routing trace from the bundled tiny MoE model on its held-out prompts, reports
its statistics (text, JSON, plots), then simulates HOBBIT, its ablations and the systems
it is compared with replaying that trace as Mixtral-8x7B (same topology) on an RTX 4090,
with a table and a plot; everything lands in the run directory.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
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
    model: str = "mixtral-8x7b"  # the trace's routing replayed at this model's size
    hardware: str = "rtx4090-pcie4"
    systems: list[str] = field(default_factory=lambda: ["hobbit", "hobbit-no-mixed", "hobbit-no-prefetch", "hobbit-lru", "moe-offloading",
                                "moe-infinity", "on-demand", "fiddler", "llama-cpp", "oracle"])


@hydra_command("pkg://conf", "demo", DemoConfig)
def demo_main(cfg: DemoConfig) -> None:
    """Capture on the bundled model, then trace statistics and plots."""
    from analysis.trace_plots import plot_trace_summary
    from traces.capture import CaptureConfig, capture
    from traces.io import atomic_write_text, read_trace
    from traces.stats import render, summarize

    out = Path(cfg.out_dir)
    t0 = time.perf_counter()
    print(f"[1/3] capture: bundled tiny MoE, {cfg.max_prompts} prompts x {cfg.max_new_tokens} new tokens")
    res = capture(CaptureConfig(out=str(out / "trace.parquet"), max_prompts=cfg.max_prompts,
                                max_new_tokens=cfg.max_new_tokens, lookahead=cfg.lookahead,
                                batch_size=cfg.batch_size))
    print("[2/3] trace statistics")
    trace = read_trace(res.path)
    summary = summarize(trace)
    text = render(summary, max_layer_rows=0)
    atomic_write_text(out / "trace_info.txt", render(summary) + "\n")
    atomic_write_text(out / "trace_info.json", json.dumps(summary, indent=1) + "\n")
    plots = plot_trace_summary(summary, out)
    print(text)
    print(f"[3/3] simulate {len(cfg.systems)} systems: the trace as {cfg.model} on {cfg.hardware}")
    written = _simulate_systems(trace, cfg, out / "sim")
    print(f"\ndone in {time.perf_counter() - t0:.0f} s; results in {out.resolve()}:")
    for p in [res.path, out / "trace_info.txt", out / "trace_info.json", *plots, *written]:
        print(f"  {Path(p).resolve()}")


def _simulate_systems(trace, cfg: DemoConfig, out: Path) -> list[Path]:
    from tqdm import tqdm

    from analysis.system_plots import plot_systems, systems_table
    from sim.commands import compose_sim, write_results
    from sim.run import simulate
    from traces.io import atomic_write_text

    rows = []
    for system in tqdm(cfg.systems, desc="simulate", unit="system"):
        sc = compose_sim([f"system={system}", f"model={cfg.model}", f"hardware={cfg.hardware}", f"out_dir={out / system}"])
        res = simulate(trace, sc.model, sc.hardware, sc.system)
        write_results(res, out / system)
        rows.append(res.summary)
    table = systems_table(rows)
    print(table)
    title = f"{trace.meta.model.name} routing as {cfg.model} on {cfg.hardware}: {rows[0]['tokens']['decode']} decode tokens"
    md = atomic_write_text(out / "systems.md", f"# {title}\n\n{table}\n\n![systems](systems.png)\n")
    return [md, *plot_systems(rows, out, title)]
