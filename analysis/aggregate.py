"""One run or a whole multirun directory -> one table, a row per run.

A run is a directory holding ``results.json``; its Hydra overrides (``.hydra/overrides.yaml``)
become columns (``system``, ``system.precision.t1`` ...) next to every results.json field,
flattened with dots (``decode_ms_per_token.mean``). A run whose results.json is missing or
unreadable is listed in ``problems`` by name; the rest is still aggregated.

The run directory of a command that writes its own product instead of results.json (``hobbit
compare``: compare.json, its systems' runs under systems/; ``hobbit tune``: tune.json) is no
run itself: the runs below it are aggregated and it is not called unfinished.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:  # pandas loads when a table is built: ``hobbit.api`` (flatten) is on every simulation's path
    import pandas as pd

KNOB_PREFIX = "knob."  # columns holding overridden knobs
# what a finished run of a command that writes no results.json of its own leaves in its run directory
PRODUCTS = ("compare.json", "tune.json", "reproduce.json")


@dataclass
class Aggregate:
    """Runs of a directory as a table, plus what could not be read."""

    root: Path
    runs: pd.DataFrame
    problems: list[str] = field(default_factory=list)


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        elif isinstance(v, (list, tuple)):
            out[key] = json.dumps(v)
        else:
            out[key] = v
    return out


def _overrides(run: Path) -> dict[str, Any]:
    f = run / ".hydra" / "overrides.yaml"
    if not f.is_file():
        return {}
    out: dict[str, Any] = {}
    for item in yaml.safe_load(f.read_text()) or []:
        key, _, value = str(item).lstrip("+~").partition("=")
        if key.startswith("hydra.") or key in ("trace", "out_dir"):
            continue
        try:
            out[KNOB_PREFIX + key] = yaml.safe_load(value)
        except yaml.YAMLError:
            out[KNOB_PREFIX + key] = value
    return out


def run_dirs(root: Path) -> list[Path]:
    """Directories under ``root`` (itself included) that are runs: they hold results.json or a .hydra dir. Not the
    report's, nor any under a hidden directory: a sweep's launched jobs (``.chunks/<n>-<j>``, each with Hydra's
    .hydra) write their points' runs beside them and are no runs themselves."""
    found = {p.parent for p in root.rglob("results.json")} | {p.parent for p in root.rglob(".hydra")}
    return sorted(
        d for d in found if not any(part == "report" or part.startswith(".") for part in d.relative_to(root).parts)
    )


def aggregate(root: str | Path) -> Aggregate:
    """Read every run under ``root``."""
    root = Path(root)
    rows, problems = [], []
    for run in run_dirs(root):
        f = run / "results.json"
        name = str(run.relative_to(root)) if run != root else "."
        if not f.is_file():
            if not any((run / p).is_file() for p in PRODUCTS):
                problems.append(f"{name}: no results.json (the run did not finish)")
            continue
        try:
            res = json.loads(f.read_text())
            if not isinstance(res, dict):
                raise ValueError("not a JSON object")
        except (json.JSONDecodeError, ValueError, UnicodeDecodeError) as exc:
            problems.append(f"{name}: results.json is unreadable ({exc})")
            continue
        rows.append({"run": name, **_overrides(run), **flatten(res)})
    import pandas as pd

    return Aggregate(root, pd.DataFrame(rows), problems)


def knob_columns(df: pd.DataFrame) -> list[str]:
    """Overridden knobs that take more than one value across the runs."""
    return [c for c in df.columns if c.startswith(KNOB_PREFIX) and df[c].astype(str).nunique() > 1]
