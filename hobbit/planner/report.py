"""A plan's table, plot and files: ``plan_table`` (markdown), ``plot_plan`` (plan.png/.svg), ``write_plan``
(plan.md, plan.json and the plot)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from hobbit.analysis.plots import pyplot, save
from hobbit.planner.config import Plan, PlanConfig
from hobbit.planner.settings import RUNTIMES
from hobbit.sim.config import HardwareConfig
from hobbit.sim.memory import GiB, gib
from hobbit.traces.io import atomic_write_json, atomic_write_text


def _rate(x: float, lo: float, hi: float) -> str:
    def f(v: float) -> str:
        return f"{v:,.0f}" if v >= 100 else f"{v:.1f}" if v >= 10 else f"{v:.2f}"

    if math.isclose(lo, hi, rel_tol=1e-3):
        return f(x)
    return f"{f(x)} ({f(lo)}-{f(hi)})"


def plan_table(rows: list[dict[str, Any]]) -> str:
    """The plan's ranked table (markdown)."""
    out = [
        "| rank | runtime | flags | GPU memory | host RAM | prefill tok/s | decode tok/s | bound by / why not |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if not r["fits"]:
            out.append(f"| - | {r['label']} | | | | | | {r['why']} |")
            continue
        ssd = f" (+{r['ssd_share']:.0%} of reads from SSD)" if r["ssd_share"] > 0.01 else ""
        host = gib(r["host_bytes"]) + ssd if r["host_bytes"] else "experts on the SSD" if ssd else "-"
        flags = r["shown"]
        out.append(
            f"| {r['rank']} | {r['label']} ({r['weights']}) | {flags} | {gib(r['gpu_bytes'])} of "
            f"{gib(r['gpu_capacity_bytes'])} | {host} | "
            f"{_rate(r['prefill_tok_s'], *r['prefill_range'])} | {_rate(r['decode_tok_s'], *r['decode_range'])} | "
            f"{r['why']} |"
        )
    return "\n".join(out)


def plot_plan(result: Plan, hw: HardwareConfig, out: Path) -> list[Path]:
    """plan.png/.svg: decode and prefill tok/s against the GPU memory each setting takes, one line per runtime, the
    chosen settings starred."""
    plt = pyplot()
    from matplotlib.ticker import LogFormatter  # here: matplotlib loads with the plot (``pyplot``)

    fig, axes = plt.subplots(1, 2, figsize=(13, 4.6))
    chosen = {(r["runtime"], r["flags"]) for r in result.rows if r["fits"]}
    for i, name in enumerate(dict.fromkeys(p.runtime for p in result.points)):
        mine = sorted((p for p in result.points if p.runtime == name and p.prediction), key=lambda p: p.gpu_bytes)
        if not mine:
            continue
        x = [p.gpu_bytes / GiB for p in mine]
        for ax, attr in zip(axes, ("decode", "prefill")):
            ax.plot(x, [getattr(p, attr) for p in mine], marker="o", ms=4, color=f"C{i}", label=RUNTIMES[name].label,
                    ls="-" if i % 2 == 0 else "--")  # fmt: skip  # dashed: a line that lies on another shows
            for p in mine:
                if (p.runtime, p.flags) in chosen:
                    ax.scatter([p.gpu_bytes / GiB], [getattr(p, attr)], marker="*", s=220, color=f"C{i}", zorder=4,
                               edgecolors="k")  # fmt: skip
    for ax, what in zip(axes, ("decode", "prefill")):
        ax.axvline(hw.device_memory_bytes / GiB, color="k", ls="--", lw=0.8, label="the GPU's memory")
        ax.set_xlabel("GPU memory the setting takes (GiB)")
        ax.set_ylabel(f"{what} tokens/s")
        ax.set_yscale("log")
        # rates as numbers (9, 30), not 9x10^0: the same ticks labelled as the log axis chooses them, plainly
        ax.yaxis.set_major_formatter(LogFormatter())
        ax.yaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False))
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))  # outside: lines run anywhere
    fig.suptitle(result.title + " (stars: each runtime's chosen setting)", fontsize=9)
    return save(fig, out, "plan")


def write_plan(result: Plan, cfg: PlanConfig, hw: HardwareConfig, out: Path) -> list[Path]:
    """plan.md, plan.json and the plot under ``out``."""
    plots = plot_plan(result, hw, out)
    best = next((r for r in result.rows if r["fits"]), None)
    head = (
        f"Run **{best['label']}**: `{best['flags'] or '(its defaults)'}`, about {best['decode_tok_s']:.1f} tokens/s "
        f"decoding and {best['prefill_tok_s']:,.0f} tokens/s on the prompt."
        if best
        else "No runtime can run this model on this machine."
    )
    md = (
        f"# {result.title}\n\n{head}\n\n{'; '.join(result.notes)}. Ranked by predicted decode speed; each runtime's "
        f"setting is the fastest of those that fit (figures in parentheses: the range over the plausible locality of "
        f"routing, hobbit/catalogue/data/routing.yaml's low and high presets).\n\n{plan_table(result.rows)}\n\n![plan](plan.png)\n"
    )
    points = [
        {
            "runtime": p.runtime,
            "value": p.value,
            "flags": p.flags,
            "gpu_bytes": p.gpu_bytes,
            "host_bytes": p.host_bytes,
            "ssd_share": p.ssd_share,
            "prefill_tok_s": p.prefill if p.prediction else None,
            "decode_tok_s": p.decode if p.prediction else None,
            "error": p.error,
        }
        for p in result.points
    ]
    doc = {
        "title": result.title,
        "model": result.model,
        "hardware": result.hardware,
        "context": cfg.context,
        "prompt": cfg.prompt,
        "gen": cfg.gen,
        "weights": cfg.weights,
        "trace": cfg.trace,
        "notes": result.notes,
        "ranked": result.rows,
        "points": points,
    }
    atomic_write_json(out / "plan.json", doc)
    atomic_write_text(out / "plan.md", md)
    return [out / "plan.md", out / "plan.json", *plots]
