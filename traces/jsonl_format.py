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

import codecs
import difflib
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from hobbit.traces.arrays import TraceArrays, sort_by_weight
from hobbit.traces.interchange import WEIGHTS_ABSENT
from hobbit.traces.io import atomic_write
from hobbit.traces.schema import INT32_MAX, PHASE_NAMES, ModelSpec, TraceError, TraceMeta, now_iso
from hobbit.traces.validate import validate_source

_PHASES = {"prefill": 0, "decode": 1}
HEADER_KEYS = frozenset({"hobbit_trace_header", "model", "lookahead_depth", "recorded_layers", "gate_weights"})
MODEL_KEYS = frozenset(
    {"name", "num_layers", "num_experts", "top_k", "weight_rule", "architecture", "hidden_size",
     "moe_intermediate_size", "shared_experts"}
)  # fmt: skip
_INT_FIELDS = ("request_id", "step", "position", "layer")


def _header(path: Path, line: str, cfg: Any) -> TraceMeta:
    try:
        h = json.loads(line)
    except json.JSONDecodeError as exc:
        raise TraceError(path, f"the header is not JSON ({exc.msg})", row=1, unit="line") from None
    if not isinstance(h, dict) or h.get("hobbit_trace_header") != 1:
        raise TraceError(
            path,
            'must be the header {"hobbit_trace_header": 1, "model": {...}}',
            row=1,
            unit="line",
            field="hobbit_trace_header",
        )
    unknown = sorted(set(h) - HEADER_KEYS)
    if unknown:  # a misspelt key would silently drop what it meant (lookahed_depth: every row's predictions)
        near = difflib.get_close_matches(unknown[0], sorted(HEADER_KEYS), n=1, cutoff=0.6)
        raise TraceError(
            path,
            "the header has a key this format does not know" + (f" (did you mean {near[0]}?)" if near else ""),
            row=1,
            unit="line",
            field=unknown[0],
            fix=f"the header's keys are {', '.join(sorted(HEADER_KEYS))}",
        )
    m = h.get("model")
    if not isinstance(m, dict):
        raise TraceError(path, "header has no 'model' object", row=1, unit="line", field="model")
    unknown = sorted(set(m) - MODEL_KEYS)
    if unknown:
        raise TraceError(
            path,
            "the header's model has a key this format does not know",
            row=1,
            unit="line",
            field=f"model.{unknown[0]}",
            fix=f"the model's keys are {', '.join(sorted(MODEL_KEYS))}",
        )
    for key in ("name", "num_layers", "num_experts", "top_k"):
        if key not in m:
            raise TraceError(path, "header model lacks this key", row=1, unit="line", field=f"model.{key}")
    over = {k: getattr(cfg, k) for k in ("name", "num_layers", "num_experts", "weight_rule") if getattr(cfg, k, None)}
    fields = {"architecture": m.get("architecture", "unknown"), "weight_rule": m.get("weight_rule", "unknown")}
    extra = {k: m[k] for k in ("hidden_size", "moe_intermediate_size", "shared_experts") if k in m}
    try:
        spec = ModelSpec(
            name=str(m["name"]),
            num_layers=_whole(m["num_layers"]),
            num_experts=_whole(m["num_experts"]),
            top_k=_whole(m["top_k"]),
            **{**fields, **extra, **over},
        )
        rec = h.get("recorded_layers")
        depth = _whole(h.get("lookahead_depth", 0))
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 0:
            raise ValueError(f"lookahead_depth must be a whole number >= 0, got {depth!r}")
        layers = None
        if rec is not None:
            layers = tuple(_whole(x) for x in rec)
            if not all(isinstance(x, int) and 0 <= x < spec.num_layers for x in layers):
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
    return (
        isinstance(ids, list)
        and len(ids) == k
        and all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < e for i in ids)
    )


def _weights_ok(w: Any, k: int) -> bool:
    return (
        isinstance(w, list) and len(w) == k and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in w)
    )


def _row(obj: Any, path: Path, n: int, meta: TraceMeta) -> tuple:
    """One line's row, every field checked here so that errors name this file and line."""
    where = {"row": n, "unit": "line"}
    if not isinstance(obj, dict):
        raise TraceError(path, "row is not a JSON object", **where)
    for key in (*_INT_FIELDS, "phase", "expert_ids", "gate_weights"):
        if key not in obj:
            raise TraceError(path, "missing", field=key, **where)
    ph = obj["phase"]
    if isinstance(ph, bool) or not ((isinstance(ph, str) and ph in _PHASES) or ph in (0, 1)):
        raise TraceError(path, f"phase {ph!r} is not 'prefill' or 'decode'", field="phase", **where)
    ints = [_whole(obj[f]) for f in _INT_FIELDS]
    for f, v in zip(_INT_FIELDS, ints):
        top = meta.model.num_layers - 1 if f == "layer" else INT32_MAX
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= top:
            raise TraceError(path, f"{v!r} must be a whole number in 0..{top}", field=f, **where)
    k, e = meta.model.top_k, meta.model.num_experts
    ids, w = obj["expert_ids"], obj["gate_weights"]
    if not _ids_ok(ids, k, e):
        raise TraceError(
            path, f"{ids!r} must be a list of top_k={k} expert ids in 0..{e - 1}", field="expert_ids", **where
        )
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
                raise TraceError(
                    path,
                    f"pred_ids[{j}] / pred_weights[{j}] want top_k={k} ids in 0..{e - 1} and "
                    f"their weights, or [] and []",
                    field="pred_ids",
                    **where,
                )
        pred = (pi, pw)
    return (*ints, _PHASES[ph] if isinstance(ph, str) else ph, ids, [float(x) for x in w], pred)


class _Part(NamedTuple):
    """The rows of one piece of the file, in compact arrays, and the line each came from."""

    ints: np.ndarray  # [n, 4] request_id, step, position, layer
    phase: np.ndarray  # [n] 0 prefill, 1 decode
    ids: np.ndarray  # [n, K] as written (sorted by weight once all pieces are in)
    weights: np.ndarray  # [n, K]
    pred_ids: np.ndarray | None  # [n, D, K], -1 where a row gives []
    pred_weights: np.ndarray | None  # [n, D, K], NaN where a row gives []
    line: np.ndarray  # [n] the line each row is on


PIECE_BYTES = 1 << 24  # the file is read this much at a time, cut after a line's end (``_pieces``)
# what ``str.splitlines`` breaks a line at besides "\n" and "\r\n" (but a lone "\r"), in UTF-8: a piece holding one is
# read line by line, so that its lines are numbered as the whole file's ``splitlines`` numbers them
_OTHER_BREAKS = (b"\x0b", b"\x0c", b"\x1c", b"\x1d", b"\x1e", "\x85".encode(), "\u2028".encode(), "\u2029".encode())
_BREAK_BYTES = bytes({b[-1] for b in _OTHER_BREAKS} | {ord("\r")})


def _pieces(f: IO[bytes]) -> Iterator[tuple[int, bytes]]:
    """(byte offset, bytes) of ``f`` from where it stands, about ``PIECE_BYTES`` at a time, each ending after a
    "\\n" but the last."""
    offset, rest = f.tell(), b""
    while block := f.read(PIECE_BYTES):
        rest += block
        cut = rest.rfind(b"\n") + 1
        if cut:
            yield offset, rest[:cut]
            offset, rest = offset + cut, rest[cut:]
    if rest:
        yield offset, rest


def _count_lines(data: bytes) -> int:
    """The lines of ``data`` where "\n" alone breaks them (``_other_breaks`` found none)."""
    return data.count(b"\n") + bool(data and not data.endswith(b"\n"))


def _other_breaks(data: bytes) -> bool:
    """Whether ``str.splitlines`` would break ``data``'s text at more than its "\n"s."""
    if len(data.translate(None, _BREAK_BYTES)) == len(data):  # none of the bytes they are made of: one pass
        return False
    return any(b in data for b in _OTHER_BREAKS) or data.count(b"\r") != data.count(b"\r\n")


def _decode(path: Path, data: bytes, offset: int) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TraceError(path, f"not UTF-8 text ({exc.reason} at byte {offset + exc.start})") from None


def _schema(meta: TraceMeta) -> pa.Schema:
    ints = [pa.field(f, pa.int64()) for f in _INT_FIELDS]
    lists = [pa.field("expert_ids", pa.list_(pa.int64())), pa.field("gate_weights", pa.list_(pa.float64()))]
    preds = (
        [
            pa.field("pred_ids", pa.list_(pa.list_(pa.int64()))),
            pa.field("pred_weights", pa.list_(pa.list_(pa.float64()))),
        ]
        if meta.lookahead_depth > 0
        else []
    )
    return pa.schema([*ints, pa.field("phase", pa.string()), *lists, *preds])


def _lists(col: pa.ChunkedArray) -> tuple[np.ndarray, pa.Array] | None:
    """A list column's lengths and its values (None where a list or a value is null)."""
    a = col.combine_chunks()
    if a.null_count:
        return None
    values = a.flatten()
    if values.null_count:
        return None
    # pyarrow.compute makes its kernels' functions at import, where a checker cannot see them
    return pc.list_value_length(a).to_numpy(), values  # pyright: ignore[reportAttributeAccessIssue]  # made at import


def _arrow_part(data: bytes, text: str, first: int, lines: int, meta: TraceMeta) -> _Part | None:
    """The rows of a piece read by Arrow's JSON reader, checked as ``_row`` checks each (vectorized); None where
    Arrow refuses the piece or any check fails: the piece is then read line by line (``_python_part``), which
    accepts what the JSON module and ``_row`` accept (``2.0`` for 2, a phase given as 0 or 1, a repeated key...) and
    names the first line that is wrong. ``lines``: the piece's (``_count_lines``), its first numbered ``first``."""
    if _other_breaks(data):
        return None
    try:
        t = pj.read_json(
            io.BytesIO(data),
            parse_options=pj.ParseOptions(explicit_schema=_schema(meta), unexpected_field_behavior="ignore"),
        )
    except (pa.ArrowException, ValueError, TypeError, OverflowError):
        return None
    n = t.num_rows
    if n == lines:
        line = first + np.arange(n)
    else:  # blank lines (Arrow skips them, as ``_python_part`` does)
        line = first + np.flatnonzero([bool(s.strip()) for s in text.split("\n")])
        if len(line) != n:
            return None
    L, E, k, d = meta.model.num_layers, meta.model.num_experts, meta.model.top_k, meta.lookahead_depth
    ints = np.empty((n, 4), np.int64)
    for j, f in enumerate(_INT_FIELDS):
        col = t.column(f)
        v = col.to_numpy()
        if col.null_count or n and not (v.min() >= 0 and v.max() <= (L - 1 if f == "layer" else INT32_MAX)):
            return None
        ints[:, j] = v
    ph = t.column("phase")
    equal = pc.equal  # pyright: ignore[reportAttributeAccessIssue]  # made at import (see _lists)
    prefill, decode = (equal(ph, name).to_numpy(zero_copy_only=False) for name in _PHASES)
    if ph.null_count or not (prefill | decode).all():
        return None
    ids, w = _lists(t.column("expert_ids")), _lists(t.column("gate_weights"))
    if ids is None or w is None or (ids[0] != k).any() or (w[0] != k).any():
        return None
    ids_v = ids[1].to_numpy()
    if n and not (ids_v.min() >= 0 and ids_v.max() < E):
        return None
    pid = pw = None
    if d > 0:
        outer_i, outer_w = _lists(t.column("pred_ids")), _lists(t.column("pred_weights"))
        if outer_i is None or outer_w is None or (outer_i[0] != d).any() or (outer_w[0] != d).any():
            return None
        inner_i, inner_w = _lists(pa.chunked_array([outer_i[1]])), _lists(pa.chunked_array([outer_w[1]]))
        if inner_i is None or inner_w is None:
            return None
        full = inner_i[0] == k
        if not ((full | (inner_i[0] == 0)).all() and (inner_w[0] == inner_i[0]).all()):
            return None
        p_ids = inner_i[1].to_numpy()
        if len(p_ids) and not (p_ids.min() >= 0 and p_ids.max() < E):
            return None
        pid = np.full((n * d, k), -1, np.int16)
        pw = np.full((n * d, k), np.nan, np.float32)
        pid[full], pw[full] = p_ids.reshape(-1, k), inner_w[1].to_numpy().reshape(-1, k)
        pid, pw = pid.reshape(n, d, k), pw.reshape(n, d, k)
    return _Part(
        ints,
        decode.astype(np.int8),
        ids_v.reshape(n, k).astype(np.int16),
        w[1].to_numpy().reshape(n, k).astype(np.float32),
        pid,
        pw,
        line,
    )


def _python_part(path: Path, lines: list[str], first: int, meta: TraceMeta) -> _Part:
    """The rows of a piece, a line at a time through the JSON module and ``_row``: every error names its line."""
    rows, line_of = [], []
    for n, line in enumerate(lines, first):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as exc:
            raise TraceError(path, f"not JSON ({getattr(exc, 'msg', exc)})", row=n, unit="line") from None
        rows.append(_row(obj, path, n, meta))
        line_of.append(n)
    k, d = meta.model.top_k, meta.lookahead_depth
    m = len(rows)
    pid = pw = None
    if d > 0:
        pid = np.full((m, d, k), -1, np.int16)
        pw = np.full((m, d, k), np.nan, np.float32)
        for i, r in enumerate(rows):
            for j in range(d):
                if r[7][0][j]:
                    pid[i, j], pw[i, j] = r[7][0][j], r[7][1][j]
    return _Part(
        np.array([r[:4] for r in rows], np.int64).reshape(m, 4),
        np.array([r[4] for r in rows], np.int8),
        np.array([r[5] for r in rows], np.int16).reshape(m, k),
        np.array([r[6] for r in rows], np.float32).reshape(m, k),
        pid,
        pw,
        np.array(line_of, np.int64),
    )


def read_generic_jsonl(path: Path, cfg: Any = None, arrow: bool = True) -> tuple[TraceArrays, TraceMeta]:
    """Parse a generic JSONL file into dense arrays, sorted and validated as a whole; every error
    names this file and the line it comes from.

    The file is read a piece (``PIECE_BYTES``) at a time, each piece by Arrow's JSON reader (``_arrow_part``), or,
    where that refuses it or finds a row wrong, a line at a time (``_python_part``, which names the line; ``arrow=
    False``: every piece so): memory holds the rows as compact arrays, not as Python objects."""
    path = Path(path)
    parts: list[_Part] = []
    meta = None
    first = 1
    with open(path, "rb") as f:
        for offset, data in _pieces(f):
            if offset == 0 and data.startswith(codecs.BOM_UTF8):  # a file saved by a Windows editor: its BOM is no row
                data = data[len(codecs.BOM_UTF8) :]
            text = _decode(path, data, offset)
            if meta is None:
                lines = text.splitlines()
                if not lines:
                    break
                meta = _header(path, lines[0], cfg)
                head = text.find("\n") + 1 or len(text)  # the same "\n" as in ``data``: bytes up to it
                if text[:head].splitlines() != lines[:1]:  # the header's line ends otherwise: the piece line by line
                    parts.append(_python_part(path, lines[1:], 2, meta))
                    first = len(lines) + 1
                    continue
                text, data, first = text[head:], data[data.find(b"\n") + 1 or len(data) :], 2
            n_lines = _count_lines(data)
            part = _arrow_part(data, text, first, n_lines, meta) if arrow and data else None
            if part is None:
                split = text.splitlines()
                part, n_lines = _python_part(path, split, first, meta), len(split)
            parts.append(part)
            first += n_lines
    if meta is None:
        raise TraceError(path, "file is empty")
    if not sum(len(p.line) for p in parts):
        raise TraceError(path, "header but no rows")

    def cat(field: str) -> np.ndarray:
        return np.concatenate([getattr(p, field) for p in parts])

    ints = cat("ints")
    ids, w = sort_by_weight(cat("ids"), cat("weights"))
    a = TraceArrays(
        request_id=ints[:, 0].astype(np.int32),
        step=ints[:, 1].astype(np.int32),
        position=ints[:, 2].astype(np.int32),
        layer=ints[:, 3].astype(np.int16),
        phase=cat("phase"),
        expert_ids=ids,
        gate_weights=w,
    )
    if meta.lookahead_depth > 0:
        pid, pw = cat("pred_ids"), cat("pred_weights")
        for j in range(meta.lookahead_depth):
            given = pid[:, j, 0] >= 0
            pid[given, j], pw[given, j] = sort_by_weight(pid[given, j], pw[given, j])
        a.pred_ids, a.pred_weights = pid, pw
    return validate_source(a, meta, path, cat("line"), unit="line"), meta


def write_generic_jsonl(arrays: TraceArrays, meta: TraceMeta, path: Path) -> None:
    """Export a trace in the generic format (what another tool would emit), atomically. A trace whose
    source had no gate weights says so in the header (``"gate_weights": "absent"``), and reads back so."""
    m = meta.model
    header = {
        "hobbit_trace_header": 1,
        "lookahead_depth": meta.lookahead_depth,
        "model": {
            "name": m.name,
            "num_layers": m.num_layers,
            "num_experts": m.num_experts,
            "top_k": m.top_k,
            "weight_rule": m.weight_rule,
            "architecture": m.architecture,
        },
    }
    if meta.recorded_layers is not None:
        header["recorded_layers"] = list(meta.recorded_layers)
    if meta.source.get("weights") == WEIGHTS_ABSENT:
        header["gate_weights"] = WEIGHTS_ABSENT

    def write(f: IO) -> None:
        f.write(json.dumps(header) + "\n")
        for i in range(len(arrays)):
            row = {
                "request_id": int(arrays.request_id[i]),
                "phase": PHASE_NAMES[int(arrays.phase[i])],
                "step": int(arrays.step[i]),
                "position": int(arrays.position[i]),
                "layer": int(arrays.layer[i]),
                "expert_ids": arrays.expert_ids[i].tolist(),
                "gate_weights": arrays.gate_weights[i].tolist(),
            }
            if meta.lookahead_depth > 0:
                pid, pw = arrays.pred_ids, arrays.pred_weights
                assert pid is not None and pw is not None  # a trace with a lookahead depth has both columns
                row["pred_ids"] = [[int(x) for x in p] if p[0] >= 0 else [] for p in pid[i]]
                row["pred_weights"] = [p.tolist() if pid[i][j][0] >= 0 else [] for j, p in enumerate(pw[i])]
            f.write(json.dumps(row) + "\n")

    atomic_write(path, write)
