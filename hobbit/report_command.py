"""``hobbit report dir=DIR``: aggregate a run or a multirun directory into DIR/report/."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hobbit.analysis.report import build_report
from hobbit.glue import TRACES_CONF, fail, hydra_command


@dataclass(frozen=True)
class ReportConfig:
    """Knobs of ``hobbit report``."""

    dir: str = ""


@hydra_command(TRACES_CONF, "report", ReportConfig)
def report_main(cfg: ReportConfig) -> None:
    """Aggregate runs into runs.parquet, plots and report.md."""
    root = Path(cfg.dir)
    if not cfg.dir or not root.is_dir():
        fail(f"dir={cfg.dir!r} is not a directory (fix: hobbit report dir=PATH/TO/RUN/OR/MULTIRUN)")
    path, agg = build_report(root)
    for p in agg.problems:
        print(f"left out: {p}")
    print(f"{len(agg.runs)} runs aggregated; report: {path.resolve()}")
