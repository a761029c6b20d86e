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
from typing import Any

import numpy as np
from hobbit.traces.arrays import TraceArrays, sort_by_weight
from hobbit.traces.schema import PHASE_NAMES, ModelSpec, TraceError, TraceMeta, now_iso

_PHASES = {"prefill": 0, "decode": 1}
_INT_FIELDS = ("request_id", "step", "position", "layer")


def _header(path: Path, line: str, cfg: Any) -> TraceMeta:
    try:
        h = json.loads(line)
    except json.JSONDecodeError as exc:
        raise TraceError(path, f"line 1: header is not JSON ({exc.msg})", row=1) from None
    if not isinstance(h, dict) or h.get("hobbit_trace_header") != 1:
        raise TraceError(path, "line 1 must be the header {\"hobbit_trace_header\": 1, \"model\": {...}}", row=1,
                         field="hobbit_trace_header")
    m = h.get("model")
    if not isinstance(m, dict):
        raise TraceError(path, "header has no 'model' object", row=1, field="model")
    for key in ("name", "num_layers", "num_experts", "top_k"):
        if key not in m:
            raise TraceError(path, "header model lacks this key", row=1, field=f"model.{key}")
    over = {k: getattr(cfg, k) for k in ("name", "num_layers", "num_experts", "weight_rule") if getattr(cfg, k, None)}
    fields = {"architecture": m.get("architecture", "unknown"), "weight_rule": m.get("weight_rule", "unknown")}
    extra = {k: m[k] for k in ("hidden_size", "moe_intermediate_size", "shared_experts") if k in m}
    try:
        spec = ModelSpec(name=str(m["name"]), num_layers=int(m["num_layers"]), num_experts=int(m["num_experts"]),
                         top_k=int(m["top_k"]), **{**fields, **extra, **over})
    except (TypeError, ValueError) as exc:
        raise TraceError(path, str(exc), row=1, field="model") from exc
    rec = h.get("recorded_layers")
    return TraceMeta(model=spec, lookahead_depth=int(h.get("lookahead_depth", 0)), created=now_iso(),
                     recorded_layers=None if rec is None else tuple(int(x) for x in rec),
                     source={"kind": "converter", "format": "jsonl", "input": str(path)})


def _row(obj: Any, path: Path, n: int, meta: TraceMeta) -> tuple:
    if not isinstance(obj, dict):
        raise TraceError(path, "row is not a JSON object", row=n)
    for key in (*_INT_FIELDS, "phase", "expert_ids", "gate_weights"):
        if key not in obj:
            raise TraceError(path, "missing", row=n, field=key)
    ph = obj["phase"]
    if ph not in _PHASES and ph not in (0, 1):
        raise TraceError(path, f"phase {ph!r} is not 'prefill' or 'decode'", row=n, field="phase")
    k, e = meta.model.top_k, meta.model.num_experts
    ids, w = obj["expert_ids"], obj["gate_weights"]
    for name, v in (("expert_ids", ids), ("gate_weights", w)):
        if not isinstance(v, list) or len(v) != k:
            raise TraceError(path, f"wants a list of top_k={k} values", row=n, field=name)
    if any((not isinstance(i, int)) or i < 0 or i >= e for i in ids):
        raise TraceError(path, f"ids {ids} must be integers in 0..{e - 1}", row=n, field="expert_ids")
    try:
        ints = [int(obj[f]) for f in _INT_FIELDS]
        wts = [float(x) for x in w]
    except (TypeError, ValueError) as exc:
        raise TraceError(path, f"not a number ({exc})", row=n) from None
    d = meta.lookahead_depth
    pred = None
    if d > 0:
        pi, pw = obj.get("pred_ids"), obj.get("pred_weights")
        if not isinstance(pi, list) or not isinstance(pw, list) or len(pi) != d or len(pw) != d:
            raise TraceError(path, f"wants {d} lists (lookahead_depth)", row=n, field="pred_ids")
        pred = (pi, pw)
    return (*ints, _PHASES.get(ph, ph), ids, wts, pred)


def read_generic_jsonl(path: Path, cfg: Any = None) -> tuple[TraceArrays, TraceMeta]:
    """Parse a generic JSONL file into dense arrays (not yet validated as a whole)."""

    lines = path.read_text(encoding="utf-8").splitlines()
    if not lines:
        raise TraceError(path, "file is empty")
    meta = _header(path, lines[0], cfg)
    rows = []
    for n, line in enumerate(lines[1:], 2):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TraceError(path, f"not JSON ({exc.msg})", row=n) from None
        rows.append(_row(obj, path, n, meta))
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
                    if len(ids_j) != k or len(w_j) != k:
                        raise TraceError(path, f"pred_ids[{j}] wants top_k={k} ids or []", row=i + 2, field="pred_ids")
                    s_ids, s_w = sort_by_weight(np.array([ids_j]), np.array([w_j], dtype=np.float32))
                    pid[i, j], pw[i, j] = s_ids[0], s_w[0]
        a.pred_ids, a.pred_weights = pid, pw
    return a.sorted(), meta


def write_generic_jsonl(arrays: TraceArrays, meta: TraceMeta, path: Path) -> None:
    """Export a trace in the generic format (what another tool would emit)."""
    m = meta.model
    header = {"hobbit_trace_header": 1, "lookahead_depth": meta.lookahead_depth,
              "model": {"name": m.name, "num_layers": m.num_layers, "num_experts": m.num_experts, "top_k": m.top_k,
                        "weight_rule": m.weight_rule, "architecture": m.architecture}}
    if meta.recorded_layers is not None:
        header["recorded_layers"] = list(meta.recorded_layers)
    with open(path, "w", encoding="utf-8") as f:
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
