"""``DIR/report/``: runs.parquet, the plots, and report.md embedding them."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from hobbit.analysis import plots
from hobbit.analysis.aggregate import Aggregate, aggregate, knob_columns
from hobbit.traces.io import atomic_write_parquet, atomic_write_text
from hobbit.traces.schema import InputError


def _table(df: pd.DataFrame, cols: list[str], n: int = 10) -> str:
    cols = [c for c in cols if c in df]
    head = "| " + " | ".join(c.removeprefix("knob.") for c in cols) + " |"
    rows = [head, "|" + "---|" * len(cols)]
    for _, r in df[cols].head(n).iterrows():
        rows.append("| " + " | ".join(f"{v:.4g}" if isinstance(v, float) else str(v) for v in r) + " |")
    return "\n".join(rows)


KEY = ["system_config.precision.mode", "system_config.precision.t1", "system_config.precision.t2"]


def join_quality(df: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """Simulated runs, with the measured quality of the run that used the same rule joined on.

    Returns (the simulated runs, how many got a measured quality)."""
    sim = df.loc[df[plots.LAT].notna()] if plots.LAT in df else df.iloc[0:0]
    if "quality.ppl" not in df or not all(k in df for k in KEY):
        return sim, 0
    measured = df.loc[df["quality.ppl"].notna()]
    qcols = [str(c) for c in measured.columns if str(c).startswith("quality.")]
    q = measured.loc[:, KEY + qcols].drop_duplicates(subset=KEY)
    merged = sim.drop(columns=[c for c in qcols if c in sim]).merge(q, on=KEY, how="left")
    return merged, int(merged["quality.ppl"].notna().sum())


def build_report(root: str | Path) -> tuple[Path, Aggregate]:
    """Aggregate ``root`` and write ``root/report/``; returns the report.md path."""
    agg = aggregate(root)
    if agg.runs.empty and agg.problems:  # nothing readable: refused, no empty report written
        raise InputError(
            f"{Path(root)}: no run could be read ({'; '.join(agg.problems[:3])}) (fix: the directory of finished runs)"
        )
    out = Path(root) / "report"
    out.mkdir(parents=True, exist_ok=True)
    df = agg.runs
    lines = [
        f"# Sweep report: {Path(root).resolve().name}",
        "",
        f"{len(df)} runs aggregated from `{Path(root).resolve()}`; table: `runs.parquet`.",
    ]
    if agg.problems:
        lines += ["", "Runs left out:", *[f"- {p}" for p in agg.problems]]
    if df.empty:
        atomic_write_text(out / "report.md", "\n".join(lines) + "\n")
        return out / "report.md", agg
    atomic_write_parquet(df, out / "runs.parquet")
    df, joined = join_quality(df)
    if joined:
        lines += ["", f"Measured quality joined to {joined} simulated runs by precision mode, T1 and T2."]
    if df.empty:
        atomic_write_text(out / "report.md", "\n".join(lines) + "\n")
        return out / "report.md", agg
    df = df.sort_values(plots.LAT)
    knobs = [k for k in knob_columns(df) if k != "knob.system"]
    best = df.iloc[0]
    lines += [
        "",
        "## Fastest configurations",
        "",
        _table(
            df,
            ["run", "system", *knobs, plots.LAT, "decode_ms_per_token.p95", "hit_rate", "quality_proxy.degraded_mass"],
        ),
        "",
        f"Best: `{best['run']}` ({best['system']}) at {best[plots.LAT]:.2f} ms/token.",
    ]
    figures = [
        ("Latency against quality", plots.latency_quality(df, out)),
        ("Precision thresholds", plots.t1_t2_heatmaps(df, out)),
        ("Cache size", plots.cache_size_lines(df, out)),
        ("Cache-policy weights", plots.weight_sensitivity(df, out)),
    ]
    layers_file = Path(root) / best["run"] / "layers.parquet"
    run_name = layers_file.parent.resolve().name  # a report of one run calls it ".": its directory's name instead
    if layers_file.is_file():
        figures.append(
            (
                "Per-layer stall of the best configuration",
                plots.layer_stall(pd.read_parquet(layers_file), f"{run_name} ({best['system']})", out),
            )
        )
    for title, files in figures:
        if files:
            lines += ["", f"## {title}", "", f"![{title}]({files[0].name})"]
    atomic_write_text(out / "report.md", "\n".join(lines) + "\n")
    return out / "report.md", agg
