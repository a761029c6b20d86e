"""``hobbit report dir=DIR``: aggregate a run or a multirun directory into DIR/report/."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from hobbit.analysis.report import build_report
from hobbit.plumbing.glue import TRACES_CONF, fail, hydra_command


@dataclass(frozen=True)
class ReportConfig:
    """Knobs of ``hobbit report``."""

    # path knobs and their roles (hobbit/plumbing/guard.py)
    PATHS: ClassVar[dict[str, str]] = {"dir": "in"}

    dir: str = ""
    """The run or multirun directory to aggregate (the report goes to DIR/report/)."""


@hydra_command(TRACES_CONF, "report", ReportConfig)
def report_main(cfg: ReportConfig) -> None:
    """Aggregate runs into runs.parquet, plots and report.md."""
    root = Path(cfg.dir)
    if not cfg.dir or not root.is_dir():
        fail(f"dir={cfg.dir!r} is not a directory (fix: hobbit report dir=PATH/TO/RUN/OR/MULTIRUN)")
    if not any(root.rglob("results.json")):
        fail(f"dir={root} holds no results.json: nothing to report (fix: the directory of a run or multirun)")
    path, agg = build_report(root)
    for p in agg.problems:
        print(f"left out: {p}")
    print(f"{len(agg.runs)} runs aggregated; report: {path.resolve()}")
