"""``reproduce.png``/``.svg``: HOBBIT's decode speed-ups, ours against the paper's, log-log."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hobbit.analysis.plots import pyplot, save

MARKERS = {"mixtral-8x7b": "o", "phi-3.5-moe": "s"}


def plot_reproduce(rows: list[dict[str, Any]], out: Path, tolerance: float) -> list[Path]:
    """One point per set-up x baseline x model: x the paper's speed-up, y ours; the diagonal and the
    band of ``tolerance`` around it. A row that carries ``other_reading`` (reproduce's other reading of
    ``serve_any_cached``) adds a hollow marker there, joined to its point."""
    plt = pyplot()
    from matplotlib.lines import Line2D  # after pyplot(), which picks the backend

    pts = [r for r in rows if r["decode_speedup"] and r["paper_decode_speedup"]]
    fig, ax = plt.subplots(figsize=(6.5, 5.5))
    other = {id(r): (r.get("other_reading") or {}).get("decode_speedup") for r in pts}
    ys = [r["decode_speedup"] for r in pts] + [y for y in other.values() if y]
    lo = min([0.5] + ys + [r["paper_decode_speedup"] for r in pts]) / 1.3
    hi = max([2.0] + ys + [r["paper_decode_speedup"] for r in pts]) * 1.3
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
        y2 = other[id(r)]
        if y2:
            x = r["paper_decode_speedup"]
            ax.plot([x, x], [r["decode_speedup"], y2], color=c, lw=0.8, alpha=0.6, zorder=2)
            marker = MARKERS.get(r["model"], "^")
            ax.scatter(x, y2, facecolors="none", edgecolors=c, marker=marker, s=40, zorder=3)
    handles, _ = ax.get_legend_handles_labels()
    for model, m in MARKERS.items():
        handles.append(Line2D([], [], color="0.4", marker=m, ls="", label=model))
    if any(other.values()):
        any_cached = next(r["other_reading"]["serve_any_cached"] for r in pts if other[id(r)])
        label = f"hollow: serve_any_cached={str(any_cached).lower()}"
        handles.append(Line2D([], [], color="0.4", marker="o", mfc="none", ls="", label=label))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("paper's decode speed-up of HOBBIT (Table 2)")
    ax.set_ylabel("simulated decode speed-up of HOBBIT")
    ax.set_title("HOBBIT over each baseline: simulated against the paper", fontsize=10)
    ax.legend(handles=handles, fontsize=7, loc="upper left")
    return save(fig, out, "reproduce")
