"""Plots of a trace's statistics (the output of ``traces.stats.summarize``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from hobbit.analysis.plots import pyplot, save


def plot_trace_summary(s: dict[str, Any], out: Path) -> list[Path]:
    """Write ``trace_summary.png`` and ``.svg``: expert load, next-token reuse per layer, lookahead accuracy."""
    plt = pyplot()

    m = s["model"]
    counts = np.asarray(s["expert_load"]["counts"], dtype=float)
    share = counts / counts.sum(axis=1, keepdims=True).clip(min=1)
    layers = s["recorded_layers"]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2), gridspec_kw={"width_ratios": [1.3, 1, 1]})
    ax = axes[0]
    im = ax.imshow(share, aspect="auto", cmap="viridis", interpolation="nearest")
    ax.set_xlabel("expert id")
    ax.set_ylabel("MoE layer")
    ax.set_yticks(
        range(len(layers))[:: max(1, len(layers) // 8)], [str(x) for x in layers][:: max(1, len(layers) // 8)]
    )
    ax.set_title("expert load (share of the layer's selections)")
    fig.colorbar(im, ax=ax, label="share")
    ax = axes[1]
    reuse = s["next_token_reuse"]
    per = reuse.get("per_layer") or []
    if per:
        ax.plot(layers[: len(per)], per, "o-", ms=3, label="measured")
        ax.plot(
            layers[: len(per)],
            reuse["baseline_per_layer"],
            "--",
            color="C1",
            label="expected from the layer's load alone",
        )
    ax.axhline(m["top_k"] / m["num_experts"], color="grey", ls=":", label="uniform load (top_k / experts)")
    ax.set_ylim(0, 1)
    ax.set_xlabel("MoE layer")
    ax.set_ylabel("fraction of experts reused")
    ax.set_title("next-token expert reuse")
    ax.legend(loc="upper right", fontsize=8)
    ax = axes[2]
    la = s["lookahead"]
    if la:
        d = [r["d"] for r in la]
        ax.plot(d, [r["top1"] for r in la], "o-", label="top-1 hit")
        ax.plot(d, [r["recall"] for r in la], "s-", label="set recall")
        ax.plot(d, [r["baseline_top1"] for r in la], "--", color="grey", label="top-1 by chance given the load")
        ax.set_xticks(d)
        ax.legend(loc="center right", fontsize=8)
    else:
        ax.text(0.5, 0.5, "no lookahead predictions recorded", ha="center", va="center", transform=ax.transAxes)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("lookahead distance d (layers)")
    ax.set_ylabel("accuracy")
    ax.set_title("predicting layer l+d from layer l")
    fig.suptitle(f"{m['name']}: {s['tokens']['total']} tokens, {m['num_experts']} experts, top-{m['top_k']}")
    return save(fig, out, "trace_summary")
