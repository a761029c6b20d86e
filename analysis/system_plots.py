"""The ``hobbit compare`` table and plot of simulated systems on one trace (rows of results.json summaries)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hobbit.analysis.plots import pyplot, save


def cpu_assisted(row: dict[str, Any]) -> bool:
    """Whether a system computes experts on the host CPU (the paper compares these apart from GPU-only ones)."""
    sc = row.get("system_config", {})
    return sc.get("cpu_misses", "never") != "never" or sc.get("placement") == "static"


def compare_table(rows: list[dict[str, Any]]) -> str:
    """The ``hobbit compare`` table: ranked rows (``rank``, ``gap_to_oracle`` and ``decode_tok_s`` set), one per
    system."""
    out = [
        (
            "| rank | system | decode ms/token | decode tok/s | p95 | prefill ms/request | hit rate | GB moved | degraded mass | "
            "bound ms/token | x own bound | x oracle |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        d, pre, b = r["decode_ms_per_token"], r["prefill_ms_per_request"], r["bound"]
        cpu = " (CPU)" if cpu_assisted(r) else ""
        out.append(
            f"| {r['rank']} | {r['system']}{cpu} | {d['mean']:.1f} | {r['decode_tok_s']:.2f} | {d['p95']:.1f} | "
            f"{'n/a' if pre['mean'] is None else format(pre['mean'], '.1f')} | "  # n/a: no prefill passes
            f"{r['hit_rate']:.3f} | {r['bytes_loaded'] / 1e9:.1f} | {r['quality_proxy']['degraded_mass']:.3f} | "
            f"{b['decode_ms_per_token']:.1f} | "
            f"{r['gap_to_bound']:.2f} | {r['gap_to_oracle']:.2f} |"
        )
    return "\n".join(out)


def plot_compare(rows: list[dict[str, Any]], out: Path, title: str) -> list[Path]:
    """``compare.png``/``.svg``: decode ms/token (stall apart) with each system's bound marked and the
    lowest bound of all as a line; prefill ms/request beside it."""
    plt = pyplot()
    names = [r["system"] + (" (CPU)" if cpu_assisted(r) else "") for r in rows]
    total = [r["decode_ms_per_token"]["mean"] for r in rows]
    stall = [min(r["stall_ms_per_token"], t) for r, t in zip(rows, total)]
    bound = [r["bound"]["decode_ms_per_token"] for r in rows]
    pre = [r["prefill_ms_per_request"]["mean"] or 0.0 for r in rows]  # 0: the trace has no prefill pass
    fig, (ax, ax2) = plt.subplots(
        1, 2, figsize=(11, 0.42 * len(rows) + 1.8), sharey=True, gridspec_kw={"width_ratios": [3, 2]}
    )
    y = list(range(len(rows)))
    ax.barh(y, [t - s for t, s in zip(total, stall)], color="C0", label="compute and other work")
    ax.barh(y, stall, left=[t - s for t, s in zip(total, stall)], color="C3", label="waiting for expert weights")
    ax.scatter(bound, y, marker="|", s=160, color="k", zorder=3, label="its bound (every expert in place)")
    ax.axvline(min(bound), color="k", lw=0.8, ls="--", label="oracle bound (lowest of all)")
    for i, t in enumerate(total):
        ax.text(t, i, f" {t:.1f}", va="center", fontsize=8)
    ax.set_yticks(y, names)
    ax.invert_yaxis()
    ax.set_xlabel("decode latency (ms / token)")
    ax.set_xlim(0, max(total) * 1.18)
    ax.legend(loc="upper right", fontsize=7)  # the fastest systems rank first: their bars are short
    ax2.set_xlabel("prefill latency (ms / request)")
    if max(pre) > 0:
        ax2.barh(y, pre, color="C2")
        ax2.set_xlim(0, max(pre) * 1.1)
    else:  # a decode-only trace (a converted decode log): say so where the bars would be
        ax2.text(0.5, 0.5, "n/a: the trace has\nno prefill passes", ha="center", va="center", transform=ax2.transAxes)
        ax2.set_xticks([])
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return save(fig, out, "compare")
