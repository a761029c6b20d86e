"""``hobbit capture``, ``convert``, ``export`` and ``trace-info``: the trace commands."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import ClassVar

from hobbit.plumbing.glue import TRACES_CONF, fail, hydra_command
from hobbit.traces.capture import CaptureConfig, capture
from hobbit.traces.convert import ConvertConfig, convert
from hobbit.traces.export import ExportConfig, export
from hobbit.traces.io import json_safe, read_trace
from hobbit.traces.stats import render, summarize


@hydra_command(TRACES_CONF, "capture", CaptureConfig)
def capture_main(cfg: CaptureConfig) -> None:
    """Record routing traces from a Hugging Face MoE model (default: the bundled tiny model)."""
    res = capture(cfg)
    print(render(summarize(read_trace(res.path)), max_layer_rows=0))
    print(f"wrote {res.path}")


@hydra_command(TRACES_CONF, "convert", ConvertConfig)
def convert_main(cfg: ConvertConfig) -> None:
    """Convert published routing logs (flame | vllm | jsonl | llamacpp_csv | tec) into a schema-v1 trace."""
    path = convert(cfg)
    tr = read_trace(path)
    m = tr.meta.model
    for note in tr.meta.source.get("warnings", []):
        print(f"hobbit: warning: {note}", file=sys.stderr)
    print(
        f"wrote {path}: {m.name}, {tr.num_tokens} tokens x {len(tr.meta.layers)} layers, "
        f"{m.num_experts} experts, top-{m.top_k}"
    )


@hydra_command(TRACES_CONF, "export", ExportConfig)
def export_main(cfg: ExportConfig) -> None:
    """Write a schema-v1 trace in another tool's format (jsonl | llamacpp_csv | tec)."""
    path, dropped = export(cfg)
    for note in dropped:
        print(f"hobbit: warning: {note}", file=sys.stderr)
    print(f"wrote {path} (format={cfg.format})")


@dataclass(frozen=True)
class TraceInfoConfig:
    """Knobs of ``hobbit trace-info PATH [--json]``."""

    LIMITS: ClassVar[dict[str, str]] = {"max_layer_rows": ">=0"}

    # path knobs and their roles (hobbit/plumbing/guard.py)
    PATHS: ClassVar[dict[str, str]] = {"path": "in"}

    path: str = ""
    """The schema-v1 trace to describe (also given bare: ``hobbit trace-info PATH``)."""
    json: bool = False
    """Print the statistics as JSON instead of text (also ``--json``)."""
    max_layer_rows: int = 40
    """Rows of the text's per-layer table, a layer a row (the rest are counted; the JSON has all); 0: no table."""


@hydra_command(TRACES_CONF, "trace_info", TraceInfoConfig)
def trace_info_main(cfg: TraceInfoConfig) -> None:
    """Print a trace's model, requests, tokens, expert load, reuse and lookahead accuracy."""
    if not cfg.path:
        fail("trace-info needs a trace: hobbit trace-info PATH [--json]")
    s = summarize(read_trace(cfg.path))
    print(json.dumps(json_safe(s), indent=1, allow_nan=False) if cfg.json else render(s, cfg.max_layer_rows))  # strict
