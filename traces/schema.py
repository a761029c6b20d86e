"""Trace schema version 1: columns, metadata and the error every reader raises.

One row per (request, token, MoE layer); see docs/design.md. The Arrow schema here is the
single definition; ``traces.io`` is the only module that reads or writes files.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import os
import sys
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa


def use_jemalloc_pool() -> None:
    """Make jemalloc pyarrow's default memory pool for this process, in place of its Linux default, mimalloc; a
    ``ARROW_DEFAULT_MEMORY_POOL`` set in the environment wins (nothing changes then), and off Linux nothing changes.

    Why: mimalloc madvises its 1 GiB arena for transparent huge pages (``MADV_HUGEPAGE``); where the kernel
    defragments on madvise (``/sys/kernel/mm/transparent_hugepage/defrag`` set to ``madvise``, a common default), a
    first touch of that arena can stall in the kernel, so reading a trace can take several times longer and its time
    varies widely; jemalloc's arenas do not ask for huge pages. docs/performance-log.md ("pyarrow's memory pool") has
    the numbers. A build of pyarrow without jemalloc falls back to the system allocator.

    The command line calls this at its entry point (``hobbit.cli.main``) and in every Hydra command's job (a sweep's
    workers, forked or started afresh), before any trace is read; a library user calls it (or
    ``hobbit.configure_runtime``) once, early. Importing the library changes nothing: the pool is process-wide."""
    if os.environ.get("ARROW_DEFAULT_MEMORY_POOL") or not sys.platform.startswith("linux"):
        return
    if pa.default_memory_pool().backend_name == "mimalloc":
        try:
            pa.set_memory_pool(pa.jemalloc_memory_pool())
        except NotImplementedError:  # a build without jemalloc
            pa.set_memory_pool(pa.system_memory_pool())


SCHEMA_VERSION = 1
METADATA_KEY = b"hobbit.trace"

PREFILL, DECODE = 0, 1
PHASE_NAMES = {PREFILL: "prefill", DECODE: "decode"}

# How the router turns logits into the weights it applies (the column gate_weights).
WEIGHT_RULES: dict[str, str] = {
    "softmax_renorm": "softmax over all experts, top-k, renormalised to sum 1 (Mixtral, Qwen3-MoE)",
    "softmax": "softmax over all experts, top-k mass kept as is (Qwen1.5/2-MoE, OLMoE)",
    "topk_softmax": "softmax over the top-k logits only (GPT-OSS, GraniteMoE)",
    "sparsemixer": "PhiMoE's sparsemixer: each choice weighted by its own masked softmax",
    "sigmoid_group": "biased sigmoid, group-limited choice, normalised, times routed_scaling_factor (DeepSeek-V3)",
    "unknown": "not recorded by the source",
}
INT32_MAX, INT16_MAX = 2**31 - 1, 2**15 - 1  # largest request_id / step / position, and layer or expert id

# what a token's top-k weights sum to under each rule, (low, high]; None: the number of experts chosen
WEIGHT_SUMS: dict[str, tuple[float, float | None]] = {
    "softmax_renorm": (1 - 1e-3, 1 + 1e-3),
    "topk_softmax": (1 - 1e-3, 1 + 1e-3),
    "softmax": (0.0, 1 + 1e-3),
    "sparsemixer": (0.0, None),
    "sigmoid_group": (0.0, float("inf")),
    "unknown": (0.0, float("inf")),
}

ARROW_COLUMNS: dict[str, pa.DataType] = {
    "request_id": pa.int32(),
    "phase": pa.int8(),
    "step": pa.int32(),
    "position": pa.int32(),
    "layer": pa.int16(),
    "expert_ids": pa.list_(pa.int16()),
    "gate_weights": pa.list_(pa.float32()),
    "pred_ids": pa.list_(pa.list_(pa.int16())),
    "pred_weights": pa.list_(pa.list_(pa.float32())),
}
REQUIRED_COLUMNS = ("request_id", "phase", "step", "position", "layer", "expert_ids", "gate_weights")
PRED_COLUMNS = ("pred_ids", "pred_weights")


class InputError(ValueError):
    """Bad user input (a file, a field, a knob): reported in one line, exit code 2."""


class TraceError(InputError):
    """A trace file that breaks schema v1: names the file, the first bad row and the field."""

    def __init__(
        self,
        file: object,
        message: str,
        *,
        row: int | None = None,
        field: str | None = None,
        fix: str | None = None,
        unit: str = "row",
    ) -> None:
        self.file, self.row, self.field, self.fix, self.message = str(file), row, field, fix, message
        self.unit = unit  # "row" of a table, "line" of a text file
        where = [self.file]
        if row is not None:
            where.append(f"{unit} {row}")
        if field is not None:
            where.append(f"field '{field}'")
        text = ": ".join(where) + f": {message}"
        if fix:
            text += f" (fix: {fix})"
        super().__init__(text)


@dataclass(frozen=True)
class ModelSpec:
    """Routing topology of the model a trace was recorded from."""

    name: str
    architecture: str
    num_layers: int  # MoE layers only
    num_experts: int
    top_k: int
    weight_rule: str = "unknown"
    hidden_size: int | None = None
    moe_intermediate_size: int | None = None
    shared_experts: int = 0

    def __post_init__(self) -> None:
        for name in ("num_layers", "num_experts", "top_k", "shared_experts"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int):
                raise ValueError(f"model.{name} must be a whole number, got {v!r}")
            if v < (0 if name == "shared_experts" else 1):
                raise ValueError(f"model.{name} must be >= {0 if name == 'shared_experts' else 1}, got {v}")
        if self.top_k > self.num_experts:
            raise ValueError(f"model.top_k ({self.top_k}) exceeds model.num_experts ({self.num_experts})")
        for name in ("num_layers", "num_experts"):  # a layer and an expert id are int16 columns
            if getattr(self, name) > INT16_MAX:
                raise ValueError(f"model.{name} must fit in int16 (at most {INT16_MAX}), got {getattr(self, name)}")
        if self.weight_rule not in WEIGHT_RULES:
            raise ValueError(f"model.weight_rule '{self.weight_rule}' is not one of {sorted(WEIGHT_RULES)}")


@dataclass(frozen=True)
class TraceMeta:
    """Schema metadata stored as JSON under ``hobbit.trace``.

    ``recorded_layers`` lists the MoE layers present when a source logged only some of
    them (None: all of ``0..num_layers-1``); every token then has exactly those layers.
    """

    model: ModelSpec
    lookahead_depth: int = 0
    source: dict[str, Any] = field(default_factory=dict)
    created: str = ""
    recorded_layers: tuple[int, ...] | None = None
    schema_version: int = SCHEMA_VERSION

    @property
    def layers(self) -> tuple[int, ...]:
        """MoE layer indices every token has, in order."""
        if self.recorded_layers is None:
            return tuple(range(self.model.num_layers))
        return tuple(self.recorded_layers)

    def to_json_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["recorded_layers"] = None if self.recorded_layers is None else list(self.recorded_layers)
        return d

    @staticmethod
    def from_json_dict(d: dict[str, Any]) -> TraceMeta:
        model = ModelSpec(**d["model"])
        rec = d.get("recorded_layers")
        return TraceMeta(
            model=model,
            lookahead_depth=int(d.get("lookahead_depth", 0)),
            source=dict(d.get("source", {})),
            created=str(d.get("created", "")),
            recorded_layers=None if rec is None else tuple(int(x) for x in rec),
            schema_version=int(d["schema_version"]),
        )


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def arrow_schema(meta: TraceMeta) -> pa.Schema:
    """The Arrow schema of a file holding ``meta`` (prediction columns only when D > 0)."""
    import json

    names = list(REQUIRED_COLUMNS) + (list(PRED_COLUMNS) if meta.lookahead_depth > 0 else [])
    schema = pa.schema([pa.field(n, ARROW_COLUMNS[n], nullable=False) for n in names])
    return schema.with_metadata({METADATA_KEY: json.dumps(meta.to_json_dict()).encode()})
