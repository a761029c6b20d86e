"""``hobbit export``: a schema-v1 trace written in another tool's format.

``hobbit export trace=PATH format=jsonl|llamacpp_csv|tec out=PATH``. A format that cannot
carry part of the trace (gate weights, predicted experts, request boundaries) drops it with
a warning naming what is dropped; the export never fails for that. Every format is written
atomically (a temporary file next to ``out``, renamed into place when complete).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from hobbit.traces.arrays import TraceArrays
from hobbit.traces.io import read_trace
from hobbit.traces.jsonl_format import write_generic_jsonl
from hobbit.traces.llamacpp_csv import write_llamacpp_csv
from hobbit.traces.schema import TraceError, TraceMeta
from hobbit.traces.tec_format import write_tec


@dataclass(frozen=True)
class ExportConfig:
    """Knobs of ``hobbit export``: a schema-v1 trace written in another tool's format."""

    # path knobs and their roles (hobbit/plumbing/guard.py)
    PATHS: ClassVar[dict[str, str]] = {"trace": "in", "out": "out"}

    trace: str = ""
    """The schema-v1 trace to export."""
    format: str = "jsonl"
    """The format to write: jsonl | llamacpp_csv | tec (what it cannot carry is dropped with a warning)."""
    out: str = ""
    """The file to write (never the input)."""


def write_jsonl(arrays: TraceArrays, meta: TraceMeta, path: Path) -> list[str]:
    """The generic JSONL format (written atomically); returns what it dropped."""
    write_generic_jsonl(arrays, meta, path)
    return ["the trace's source metadata (provenance)"]


EXPORTERS: dict[str, Callable[[TraceArrays, TraceMeta, Path], list[str]]] = {
    "jsonl": write_jsonl,
    "llamacpp_csv": write_llamacpp_csv,
    "tec": write_tec,
}


def export(cfg: ExportConfig) -> tuple[Path, list[str]]:
    """Write ``cfg.trace`` as ``cfg.format`` to ``cfg.out``; returns the path and one warning per
    thing the format dropped."""
    if cfg.format not in EXPORTERS:
        raise TraceError(cfg.trace or "<trace>", f"format={cfg.format} is not one of {list(EXPORTERS)}", field="format")
    if not cfg.trace:
        raise TraceError("<trace>", "no trace to export (fix: trace=PATH)")
    if not cfg.out:
        raise TraceError(cfg.trace, "no output (fix: out=PATH)")
    tr = read_trace(cfg.trace)
    out = Path(cfg.out)
    dropped = EXPORTERS[cfg.format](tr.arrays, tr.meta, out)
    return out, [f"{out}: format={cfg.format} cannot carry {d}; dropped" for d in dropped]
