"""Plots of a sweep (the table of ``analysis.aggregate``); each returns the files it wrote, or
nothing when the runs do not vary what it shows.

Columns used: ``decode_ms_per_token.mean``, ``system``, ``system_config.precision.t1/t2``,
``system_config.cache.multidim.w_*``, ``cache.high_bytes`` + ``cache.low_bytes``,
``quality_proxy.degraded_mass`` (or a measured ``quality.ppl_rel_change`` when present).
"""

from __future__ import annotations

from pathlib import Path
from typing import cast

import numpy as np
import pandas as pd

from hobbit.traces.io import file_writer, write_together

LAT = "decode_ms_per_token.mean"
T1, T2 = "system_config.precision.t1", "system_config.precision.t2"
WEIGHTS = [f"system_config.cache.multidim.w_{n}" for n in ("lru", "lfu", "lhu", "fld")]


def pyplot():
    """matplotlib's pyplot on the Agg backend (lazy: the backend is chosen before pyplot loads,
    and commands that draw nothing do not pay for matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.fonttype"] = "none"  # SVG text stays text: searchable, and checkable in tests
    import matplotlib.pyplot as plt

    return plt


def save(fig, out: Path, name: str) -> list[Path]:
    """``name``.png and ``name``.svg in ``out``; closes the figure."""
    fig.tight_layout()
    try:  # atomically, the two together: a full disk or Ctrl-C leaves no half-drawn image under either name
        return write_together([(out / f"{name}.{ext}", _drawn(fig, ext)) for ext in ("png", "svg")])
    finally:
        pyplot().close(fig)


def _drawn(fig, ext: str):
    return file_writer(lambda f: fig.savefig(f, format=ext, dpi=110), binary=True)


def _varies(df: pd.DataFrame, *cols: str) -> bool:
    return all(c in df and df[c].nunique() > 1 for c in cols)


FLAT = 1e-4  # a heatmap whose values span less than this share of their size is flat: float noise, not a trend


def t1_t2_heatmaps(df: pd.DataFrame, out: Path) -> list[Path]:
    """Decode ms/token over the T1 x T2 grid (runs with the T1/T2 rule; the best over any other
    knob swept), and the precision-rule mix over the same grid."""
    mode = "system_config.precision.mode"
    if mode in df:
        df = df.loc[df[mode] == "hobbit"]
    if not _varies(df, T1, T2):
        return []
    plt = pyplot()
    panels = [
        (LAT, "decode latency (ms / token)", "viridis_r"),
        ("precision_rule_mix.high", "share high", "Blues"),
        ("precision_rule_mix.low", "share low", "Oranges"),
        ("precision_rule_mix.skip", "share skipped", "Reds"),
    ]
    fig, axes = plt.subplots(1, 4, figsize=(17, 4))
    for ax, (col, label, cmap) in zip(axes, panels):
        grid = df.pivot_table(index=T2, columns=T1, values=col, aggfunc="min" if col == LAT else "mean")
        lo, hi = np.nanmin(grid.values), np.nanmax(grid.values)
        if hi - lo <= FLAT * max(abs(lo), abs(hi)):  # a flat grid (float noise apart): one light shade, dark text
            lo, hi = lo - 1.0, hi + 2.0
        im = ax.imshow(grid.values, origin="lower", cmap=cmap, aspect="auto", vmin=lo, vmax=hi)
        ax.set_xticks(range(len(grid.columns)), [f"{v:g}" for v in grid.columns])
        ax.set_yticks(range(len(grid.index)), [f"{v:g}" for v in grid.index])
        ax.set_xlabel("T1 (high up to this mass above)")
        ax.set_ylabel("T2 (skip beyond this mass above)")
        ax.set_title(label)
        for (i, j), v in np.ndenumerate(grid.values):
            if np.isfinite(v):
                dark = (v - lo) / (hi - lo + 1e-12) > 0.5  # every panel's map is darker for higher values
                ax.text(j, i, f"{v:.3g}", ha="center", va="center", fontsize=8, color="white" if dark else "black")
        fig.colorbar(im, ax=ax)
    fig.suptitle("HOBBIT's precision thresholds: latency (best over the other swept knobs) and the mix they give")
    return save(fig, out, "t1_t2")


def _column(df: pd.DataFrame, name: str) -> pd.Series:
    """``df[name]``, or zeros where the runs have no such column."""
    return df[name] if name in df else pd.Series(0, index=df.index)


def cache_size_lines(df: pd.DataFrame, out: Path) -> list[Path]:
    """Decode ms/token against cache size, one line per system."""
    size = (_column(df, "cache.high_bytes") + _column(df, "cache.low_bytes")) / 1e9
    if size.nunique() < 2:
        return []
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    d = df.assign(cache_gb=size)
    for system, g in d.groupby("system"):
        lat = cast(pd.Series, g.groupby("cache_gb")[LAT].mean()).sort_index()  # one column: a Series
        ax.plot(lat.index, lat.to_numpy(), "o-", label=system)
    ax.set_xlabel("expert cache (GB, both pools)")
    ax.set_ylabel("decode latency (ms / token)")
    ax.set_title("latency against cache size")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return save(fig, out, "cache_size")


def weight_sensitivity(df: pd.DataFrame, out: Path) -> list[Path]:
    """Decode ms/token against each of the four cache weights (normalised to sum 1)."""
    cols = [c for c in WEIGHTS if c in df]
    if len(cols) < 4 or not any(df[c].nunique() > 1 for c in cols):
        return []
    w = df[cols].to_numpy(dtype=float)
    w = w / np.clip(w.sum(axis=1, keepdims=True), 1e-12, None)
    plt = pyplot()
    fig, axes = plt.subplots(1, 4, figsize=(15, 3.6), sharey=True)
    for i, (ax, name) in enumerate(zip(axes, ["w_lru", "w_lfu", "w_lhu", "w_fld"])):
        ax.scatter(w[:, i], df[LAT], s=14, alpha=0.7)
        ax.set_xlabel(f"{name} (normalised)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("decode latency (ms / token)")
    fig.suptitle("sensitivity to the cache-policy weights")
    return save(fig, out, "weights")


def pareto_front(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Indices of the points no other point beats on both x and y (lower is better), by x."""
    order = np.lexsort((y, x))
    front, best = [], np.inf
    for i in order:
        if y[i] < best:
            front.append(i)
            best = y[i]
    return np.array(front, dtype=int)


def latency_quality(df: pd.DataFrame, out: Path) -> list[Path]:
    """Latency against quality loss, the Pareto front marked; measured quality when present."""
    qcol, qlabel = "quality_proxy.degraded_mass", "gate mass served low or skipped (proxy)"
    if "quality.ppl_rel_change" in df and df["quality.ppl_rel_change"].notna().any():
        qcol, qlabel = "quality.ppl_rel_change", "perplexity change (measured)"
    if qcol not in df or len(df) < 2:
        return []
    d = df.dropna(subset=[qcol, LAT])
    x, y = d[qcol].to_numpy(float), d[LAT].to_numpy(float)
    front = pareto_front(x, y)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.4))
    for system, g in d.groupby("system"):
        ax.scatter(g[qcol], g[LAT], s=18, alpha=0.7, label=system)
    ax.plot(x[front], y[front], "k-", lw=1.2, label="Pareto front")
    ax.scatter(x[front], y[front], s=40, facecolors="none", edgecolors="k")
    ax.set_xlabel(qlabel)
    ax.set_ylabel("decode latency (ms / token)")
    ax.set_title("latency against quality loss")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return save(fig, out, "latency_quality")


def layer_stall(layers: pd.DataFrame, label: str, out: Path) -> list[Path]:
    """Per-layer decode stall of one run (the best)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 3.6))
    ax.bar(layers["layer"], layers["decode_stall_ms_per_token"], color="C3")
    ax.set_xlabel("MoE layer")
    ax.set_ylabel("stall (ms / decode token)")
    ax.set_title(f"where the best configuration waits for weights: {label}", fontsize=10)
    return save(fig, out, "layer_stall")
