"""Checks that a table obeys schema v1; raises ``TraceError`` at the first bad row.

Used by ``traces.io`` on every read and on every batch it writes.
Legend: N rows, K top-k, D lookahead depth, L recorded layers.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from hobbit.traces.arrays import TraceArrays, flat_values, list_lengths, list_values, nested_dense, to_numpy, to_table
from hobbit.traces.schema import ARROW_COLUMNS, PRED_COLUMNS, REQUIRED_COLUMNS, WEIGHT_SUMS, TraceError, TraceMeta


def _first(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def check_columns(table: pa.Table, meta: TraceMeta, file: str) -> None:
    names = set(table.column_names)
    wanted = list(REQUIRED_COLUMNS) + (list(PRED_COLUMNS) if meta.lookahead_depth > 0 else [])
    for name in wanted:
        if name not in names:
            fix = "record predictions or set lookahead_depth to 0" if name in PRED_COLUMNS else "re-export the trace"
            raise TraceError(file, "column is missing", field=name, fix=fix)
        typ = table.schema.field(name).type
        if typ != ARROW_COLUMNS[name]:
            raise TraceError(file, f"has type {typ}, schema v1 wants {ARROW_COLUMNS[name]}", field=name,
                             fix="write the file through traces.io")
        if table.column(name).null_count:
            row = _first(np.asarray(table.column(name).is_null()))
            raise TraceError(file, "null value", row=row, field=name)


def _check_lists(table: pa.Table, meta: TraceMeta, file: str) -> tuple[np.ndarray, np.ndarray]:
    k, e = meta.model.top_k, meta.model.num_experts
    n = table.num_rows
    for name in ("expert_ids", "gate_weights"):
        lens = list_lengths(table.column(name))
        if np.any(lens != k):
            row = _first(lens != k)
            raise TraceError(file, f"has {lens[row]} entries, model.top_k is {k}", row=row, field=name,
                             fix="every row lists exactly top_k experts")
    ids = flat_values(table.column("expert_ids")).reshape(n, k).astype(np.int16)
    wts = flat_values(table.column("gate_weights")).reshape(n, k).astype(np.float32)
    bad = (ids < 0) | (ids >= e)
    if bad.any():
        row = _first(bad.any(axis=1))
        raise TraceError(file, f"expert id {ids[row][bad[row]][0]} out of range 0..{e - 1}", row=row,
                         field="expert_ids", fix="check model.num_experts in the metadata")
    if k > 1:
        srt = np.sort(ids, axis=1)
        dup = (srt[:, 1:] == srt[:, :-1]).any(axis=1)
        if dup.any():
            raise TraceError(file, f"expert selected twice: {ids[_first(dup)].tolist()}", row=_first(dup),
                             field="expert_ids")
    if not np.isfinite(wts).all():
        raise TraceError(file, "non-finite weight", row=_first(~np.isfinite(wts).all(axis=1)), field="gate_weights")
    if (wts < 0).any():
        raise TraceError(file, f"negative weight in {wts[_first((wts < 0).any(axis=1))].tolist()}",
                         row=_first((wts < 0).any(axis=1)), field="gate_weights",
                         fix="the weights the model applies, which are >= 0")
    rule = meta.model.weight_rule
    low, high = WEIGHT_SUMS[rule]
    sums = wts.sum(axis=1, dtype=np.float64)
    bad = ~((sums > low) & (sums <= (k if high is None else high)))
    if bad.any():
        row = _first(bad)
        raise TraceError(file, f"weights {wts[row].tolist()} sum to {sums[row]:.6g}, which weight_rule={rule} "
                               f"does not give", row=row, field="gate_weights",
                         fix="the weights as the model applies them, or the model's weight_rule")
    if k > 1:
        unsorted = (wts[:, 1:] > wts[:, :-1] + 1e-6).any(axis=1)
        if unsorted.any():
            raise TraceError(file, f"weights {wts[_first(unsorted)].tolist()} are not highest first",
                             row=_first(unsorted), field="gate_weights", fix="sort each row by weight, descending")
    return ids, wts


def _check_keys(a: TraceArrays, meta: TraceMeta, file: str) -> None:
    layers = np.asarray(meta.layers, dtype=np.int64)
    if np.any(~np.isin(a.phase, (0, 1))):
        raise TraceError(file, "phase must be 0 (prefill) or 1 (decode)", row=_first(~np.isin(a.phase, (0, 1))),
                         field="phase")
    bad = ((a.phase == 0) & (a.step != 0)) | ((a.phase == 1) & (a.step < 1))
    if bad.any():
        raise TraceError(file, "prefill rows have step 0 and decode rows step >= 1", row=_first(bad), field="step")
    for name in ("request_id", "position"):
        col = getattr(a, name)
        if np.any(col < 0):
            raise TraceError(file, "negative value", row=_first(col < 0), field=name)
    n = len(a)
    key = np.stack([a.request_id, a.step, a.position, a.layer], axis=1).astype(np.int64)
    if n > 1:
        diff = key[1:] - key[:-1]
        # lexicographic "strictly increasing": the first non-zero difference must be > 0
        nz = diff != 0
        first_nz = np.where(nz.any(axis=1), nz.argmax(axis=1), 0)
        sign = diff[np.arange(n - 1), first_nz]
        if np.any(sign <= 0):
            row = _first(sign <= 0) + 1
            raise TraceError(file, "rows are not strictly ordered by (request_id, step, position, layer)",
                             row=row, field="layer", fix="write through traces.io, which sorts rows")
    new_tok = np.ones(n, dtype=bool)
    if n > 1:
        new_tok[1:] = (key[1:, :3] != key[:-1, :3]).any(axis=1)
    starts = np.flatnonzero(new_tok)
    sizes = np.diff(np.append(starts, n))
    idx_in_tok = np.arange(n) - np.repeat(starts, sizes)
    expected = np.where(idx_in_tok < len(layers), layers[np.minimum(idx_in_tok, len(layers) - 1)], -1)
    wrong = (a.layer != expected) | np.repeat(sizes != len(layers), sizes)
    if wrong.any():
        row = _first(wrong)
        tok = int(np.searchsorted(starts, row, side="right") - 1)
        have = a.layer[starts[tok]: starts[tok] + sizes[tok]].tolist()
        missing = sorted(set(layers.tolist()) - set(have))
        what = f"missing layer(s) {missing}" if missing else f"layers {have}, expected {layers.tolist()}"
        raise TraceError(file, f"token (request {a.request_id[row]}, step {a.step[row]}, position "
                               f"{a.position[row]}) has {what}", row=int(starts[tok]), field="layer",
                         fix="every token needs one row per recorded MoE layer")


def _check_preds(table: pa.Table, meta: TraceMeta, a: TraceArrays, file: str) -> None:
    n, k, d = len(a), meta.model.top_k, meta.lookahead_depth
    for name in PRED_COLUMNS:
        outer = list_lengths(table.column(name))
        if np.any(outer != d):
            row = _first(outer != d)
            raise TraceError(file, f"has {outer[row]} entries, lookahead_depth is {d}", row=row, field=name)
        inner = list_lengths(list_values(table.column(name).combine_chunks())).reshape(n, d)
        if np.any((inner != 0) & (inner != k)):
            row = _first(((inner != 0) & (inner != k)).any(axis=1))
            raise TraceError(file, f"inner list lengths {inner[row].tolist()}, want 0 or top_k={k}", row=row,
                             field=name)
        if name == "pred_ids":
            present = inner == k
    pos = np.searchsorted(np.asarray(meta.layers), a.layer)  # [N] index of the row's layer
    reachable = pos[:, None] + np.arange(1, d + 1)[None, :] < len(meta.layers)  # [N, D]
    if np.any(reachable & ~present):
        row = _first((reachable & ~present).any(axis=1))
        raise TraceError(file, "prediction missing for a layer that exists", row=row, field="pred_ids")
    ids = nested_dense(table.column("pred_ids"), n, d, k, -1, np.int16)
    wts = nested_dense(table.column("pred_weights"), n, d, k, np.nan, np.float32)
    if np.any((ids >= meta.model.num_experts) | ((ids < 0) & present[:, :, None])):
        row = _first(((ids >= meta.model.num_experts) | ((ids < 0) & present[:, :, None])).any(axis=(1, 2)))
        raise TraceError(file, "predicted expert id out of range", row=row, field="pred_ids")
    a.pred_ids, a.pred_weights = ids, wts


def validate_source(a: TraceArrays, meta: TraceMeta, file: object, source: np.ndarray | None = None,
                    unit: str = "row") -> TraceArrays:
    """Sort a converter's rows and validate them whole; an error names the input ``file`` and the
    ``unit`` (row, line) the bad row came from (``source[i]``: where row ``i`` of ``a`` came from,
    default its index), never the trace being written nor a row of the sorted table."""
    order = a.order()
    a = a.take(order)
    try:
        return validate_table(to_table(a, meta), meta, str(file))
    except TraceError as exc:
        where = None if exc.row is None else int(order[exc.row] if source is None else source[order[exc.row]])
        raise TraceError(file, exc.message, row=where, unit=unit, field=exc.field, fix=exc.fix) from None


def validate_table(table: pa.Table, meta: TraceMeta, file: str) -> TraceArrays:
    """Validate ``table`` against ``meta``; return its columns as dense arrays."""
    check_columns(table, meta, file)
    ids, wts = _check_lists(table, meta, file)
    col = lambda name, dt: to_numpy(table.column(name)).astype(dt)  # noqa: E731
    a = TraceArrays(col("request_id", np.int32), col("phase", np.int8), col("step", np.int32),
                    col("position", np.int32), col("layer", np.int16), ids, wts)
    if table.num_rows == 0:
        raise TraceError(file, "trace has no rows")
    _check_keys(a, meta, file)
    if meta.lookahead_depth > 0:
        _check_preds(table, meta, a, file)
    return a
