"""The generic JSONL routing format other tools can emit (documented in the README).

Line 1, the header::

    {"hobbit_trace_header": 1,
     "model": {"name": ..., "num_layers": ..., "num_experts": ..., "top_k": ..., "weight_rule": ...},
     "lookahead_depth": 0}                       # optional, default 0

then one object per (request, token, MoE layer)::

    {"request_id": 0, "phase": "prefill", "step": 0, "position": 3, "layer": 5,
     "expert_ids": [4, 1], "gate_weights": [0.7, 0.3],
     "pred_ids": [[4, 2], [0, 1]], "pred_weights": [[0.6, 0.4], [0.5, 0.5]]}   # optional

Rows may come in any order; experts are sorted highest weight first on conversion.
``pred_ids[d-1]`` is layer l+d's router applied to layer l's router input; use ``[]`` past
the last layer. Errors name the file, the line and the field.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO, Any

import numpy as np

from hobbit.traces.arrays import TraceArrays, sort_by_weight
from hobbit.traces.interchange import WEIGHTS_ABSENT
from hobbit.traces.io import atomic_write
from hobbit.traces.schema import INT32_MAX, PHASE_NAMES, ModelSpec, TraceError, TraceMeta, now_iso
from hobbit.traces.validate import validate_source

_PHASES = {"prefill": 0, "decode": 1}
_INT_FIELDS = ("request_id", "step", "position", "layer")


def _header(path: Path, line: str, cfg: Any) -> TraceMeta:
    try:
        h = json.loads(line)
    except json.JSONDecodeError as exc:
        raise TraceError(path, f"the header is not JSON ({exc.msg})", row=1, unit="line") from None
    if not isinstance(h, dict) or h.get("hobbit_trace_header") != 1:
        raise TraceError(path, "must be the header {\"hobbit_trace_header\": 1, \"model\": {...}}", row=1,
                         unit="line", field="hobbit_trace_header")
    m = h.get("model")
    if not isinstance(m, dict):
        raise TraceError(path, "header has no 'model' object", row=1, unit="line", field="model")
    for key in ("name", "num_layers", "num_experts", "top_k"):
        if key not in m:
            raise TraceError(path, "header model lacks this key", row=1, unit="line", field=f"model.{key}")
    over = {k: getattr(cfg, k) for k in ("name", "num_layers", "num_experts", "weight_rule") if getattr(cfg, k, None)}
    fields = {"architecture": m.get("architecture", "unknown"), "weight_rule": m.get("weight_rule", "unknown")}
    extra = {k: m[k] for k in ("hidden_size", "moe_intermediate_size", "shared_experts") if k in m}
    try:
        spec = ModelSpec(name=str(m["name"]), num_layers=_whole(m["num_layers"]), num_experts=_whole(m["num_experts"]),
                         top_k=_whole(m["top_k"]), **{**fields, **extra, **over})
        rec = h.get("recorded_layers")
        depth = _whole(h.get("lookahead_depth", 0))
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 0:
            raise ValueError(f"lookahead_depth must be a whole number >= 0, got {depth!r}")
        layers = None if rec is None else tuple(_whole(x) for x in rec)
        if layers is not None and not all(isinstance(x, int) and 0 <= x < spec.num_layers for x in layers):
            raise ValueError(f"recorded_layers must be layers in 0..{spec.num_layers - 1}, got {list(rec)}")
    except (TypeError, ValueError) as exc:
        raise TraceError(path, str(exc), row=1, unit="line", field="model") from exc
    source = {"kind": "converter", "format": "jsonl", "input": str(path)}
    if h.get("gate_weights") == WEIGHTS_ABSENT:  # placeholders: the T1/T2 rule must not read them
        source["weights"] = WEIGHTS_ABSENT
    return TraceMeta(model=spec, lookahead_depth=depth, created=now_iso(), recorded_layers=layers, source=source)


def _whole(v: Any) -> Any:
    """A JSON number that is a whole number as an int (2.0 -> 2); anything else as it is, for the check."""
    return int(v) if isinstance(v, float) and v.is_integer() else v


def _ids_ok(ids: Any, k: int, e: int) -> bool:
    return (isinstance(ids, list) and len(ids) == k
            and all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < e for i in ids))


def _weights_ok(w: Any, k: int) -> bool:
    return (isinstance(w, list) and len(w) == k
            and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in w))


def _row(obj: Any, path: Path, n: int, meta: TraceMeta) -> tuple:
    """One line's row, every field checked here so that errors name this file and line."""
    where = {"row": n, "unit": "line"}
    if not isinstance(obj, dict):
        raise TraceError(path, "row is not a JSON object", **where)
    for key in (*_INT_FIELDS, "phase", "expert_ids", "gate_weights"):
        if key not in obj:
            raise TraceError(path, "missing", field=key, **where)
    ph = obj["phase"]
    if isinstance(ph, bool) or (ph not in _PHASES and ph not in (0, 1)):
        raise TraceError(path, f"phase {ph!r} is not 'prefill' or 'decode'", field="phase", **where)
    ints = [_whole(obj[f]) for f in _INT_FIELDS]
    for f, v in zip(_INT_FIELDS, ints):
        top = meta.model.num_layers - 1 if f == "layer" else INT32_MAX
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= top:
            raise TraceError(path, f"{v!r} must be a whole number in 0..{top}", field=f, **where)
    k, e = meta.model.top_k, meta.model.num_experts
    ids, w = obj["expert_ids"], obj["gate_weights"]
    if not _ids_ok(ids, k, e):
        raise TraceError(path, f"{ids!r} must be a list of top_k={k} expert ids in 0..{e - 1}",
                         field="expert_ids", **where)
    if not _weights_ok(w, k):
        raise TraceError(path, f"{w!r} must be a list of top_k={k} numbers", field="gate_weights", **where)
    d = meta.lookahead_depth
    pred = None
    if d > 0:
        pi, pw = obj.get("pred_ids"), obj.get("pred_weights")
        if not isinstance(pi, list) or not isinstance(pw, list) or len(pi) != d or len(pw) != d:
            raise TraceError(path, f"wants {d} lists (lookahead_depth)", field="pred_ids", **where)
        for j, (ids_j, w_j) in enumerate(zip(pi, pw)):
            if ids_j == [] and w_j == []:
                continue
            if not _ids_ok(ids_j, k, e) or not _weights_ok(w_j, k):
                raise TraceError(path, f"pred_ids[{j}] / pred_weights[{j}] want top_k={k} ids in 0..{e - 1} and "
                                       f"their weights, or [] and []", field="pred_ids", **where)
        pred = (pi, pw)
    return (*ints, _PHASES.get(ph, ph), ids, [float(x) for x in w], pred)


def read_generic_jsonl(path: Path, cfg: Any = None) -> tuple[TraceArrays, TraceMeta]:
    """Parse a generic JSONL file into dense arrays, sorted and validated as a whole; every error
    names this file and the line it comes from."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise TraceError(path, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if not lines:
        raise TraceError(path, "file is empty")
    meta = _header(path, lines[0], cfg)
    rows, line_of = [], []
    for n, line in enumerate(lines[1:], 2):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as exc:
            raise TraceError(path, f"not JSON ({getattr(exc, 'msg', exc)})", row=n, unit="line") from None
        rows.append(_row(obj, path, n, meta))
        line_of.append(n)
    if not rows:
        raise TraceError(path, "header but no rows")
    k, d = meta.model.top_k, meta.lookahead_depth
    col = lambda i, dt: np.array([r[i] for r in rows], dtype=dt)  # noqa: E731
    ids, w = sort_by_weight(np.array([r[5] for r in rows]), np.array([r[6] for r in rows], dtype=np.float32))
    a = TraceArrays(request_id=col(0, np.int32), step=col(1, np.int32), position=col(2, np.int32),
                    layer=col(3, np.int16), phase=col(4, np.int8), expert_ids=ids, gate_weights=w)
    if d > 0:
        pid = np.full((len(rows), d, k), -1, np.int16)
        pw = np.full((len(rows), d, k), np.nan, np.float32)
        for i, r in enumerate(rows):
            for j in range(d):
                ids_j, w_j = r[7][0][j], r[7][1][j]
                if ids_j:
                    s_ids, s_w = sort_by_weight(np.array([ids_j]), np.array([w_j], dtype=np.float32))
                    pid[i, j], pw[i, j] = s_ids[0], s_w[0]
        a.pred_ids, a.pred_weights = pid, pw
    return validate_source(a, meta, path, np.asarray(line_of), unit="line"), meta


def write_generic_jsonl(arrays: TraceArrays, meta: TraceMeta, path: Path) -> None:
    """Export a trace in the generic format (what another tool would emit), atomically. A trace whose
    source had no gate weights says so in the header (``"gate_weights": "absent"``), and reads back so."""
    m = meta.model
    header = {"hobbit_trace_header": 1, "lookahead_depth": meta.lookahead_depth,
              "model": {"name": m.name, "num_layers": m.num_layers, "num_experts": m.num_experts, "top_k": m.top_k,
                        "weight_rule": m.weight_rule, "architecture": m.architecture}}
    if meta.recorded_layers is not None:
        header["recorded_layers"] = list(meta.recorded_layers)
    if meta.source.get("weights") == WEIGHTS_ABSENT:
        header["gate_weights"] = WEIGHTS_ABSENT

    def write(f: IO) -> None:
        f.write(json.dumps(header) + "\n")
        for i in range(len(arrays)):
            row = {"request_id": int(arrays.request_id[i]), "phase": PHASE_NAMES[int(arrays.phase[i])],
                   "step": int(arrays.step[i]), "position": int(arrays.position[i]), "layer": int(arrays.layer[i]),
                   "expert_ids": arrays.expert_ids[i].tolist(), "gate_weights": arrays.gate_weights[i].tolist()}
            if meta.lookahead_depth > 0:
                row["pred_ids"] = [[int(x) for x in p] if p[0] >= 0 else [] for p in arrays.pred_ids[i]]
                row["pred_weights"] = [p.tolist() if arrays.pred_ids[i][j][0] >= 0 else []
                                       for j, p in enumerate(arrays.pred_weights[i])]
            f.write(json.dumps(row) + "\n")

    atomic_write(path, write)
