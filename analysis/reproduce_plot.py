"""``reproduce.png``/``.svg``: HOBBIT's decode speed-ups, ours against the paper's, log-log."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hobbit.analysis.plots import pyplot, save

MARKERS = {"mixtral-8x7b": "o", "phi-3.5-moe": "s"}


def plot_reproduce(rows: list[dict[str, Any]], out: Path, tolerance: float) -> list[Path]:
    """One point per set-up x baseline x model: x the paper's speed-up, y ours; the diagonal and the
    band of ``tolerance`` around it."""
    plt = pyplot()
    from matplotlib.lines import Line2D  # after pyplot(), which picks the backend

    pts = [r for r in rows if r["decode_speedup"] and r["paper_decode_speedup"]]
    fig, ax = plt.subplots(figsize=(6.5, 5.5))
    lo = min([0.5] + [min(r["decode_speedup"], r["paper_decode_speedup"]) for r in pts]) / 1.3
    hi = max([2.0] + [max(r["decode_speedup"], r["paper_decode_speedup"]) for r in pts]) * 1.3
    ax.plot([lo, hi], [lo, hi], color="0.3", lw=1, label="ours = paper")
    ax.fill_between(
        [lo, hi],
        [lo * (1 - tolerance), hi * (1 - tolerance)],
        [lo * (1 + tolerance), hi * (1 + tolerance)],
        color="0.85",
        label=f"within {100 * tolerance:.0f} %",
    )
    ax.axhline(1.0, color="C3", lw=0.8, ls=":")
    ax.axvline(1.0, color="C3", lw=0.8, ls=":")
    colors: dict[str, str] = {}
    for r in pts:
        key = f"{r['setup']} vs {r['baseline']}"
        first = key not in colors
        c = colors.setdefault(key, f"C{len(colors)}")
        ax.scatter(
            r["paper_decode_speedup"],
            r["decode_speedup"],
            color=c,
            marker=MARKERS.get(r["model"], "^"),
            s=40,
            zorder=3,
            label=key if first else None,
        )
    handles, _ = ax.get_legend_handles_labels()
    for model, m in MARKERS.items():
        handles.append(Line2D([], [], color="0.4", marker=m, ls="", label=model))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("paper's decode speed-up of HOBBIT (Table 2)")
    ax.set_ylabel("simulated decode speed-up of HOBBIT")
    ax.set_title("HOBBIT over each baseline: simulated against the paper", fontsize=10)
    ax.legend(handles=handles, fontsize=7, loc="upper left")
    return save(fig, out, "reproduce")
