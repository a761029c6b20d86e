"""Dense numpy <-> Arrow conversion of trace columns (no file I/O here).

Legend: N rows, K experts per row (top-k), D lookahead depth.
Missing predictions (layer l+d past the last recorded layer) are -1 ids / NaN weights
in the dense form and empty inner lists in Arrow.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from hobbit.traces.schema import ARROW_COLUMNS, TraceMeta, arrow_schema

ORDER_CHUNK = 1 << 20  # rows ``TraceArrays.is_sorted`` compares at a time


@dataclass
class TraceArrays:
    """Columns of a trace as numpy arrays, sorted by (request_id, step, position, layer)."""

    request_id: np.ndarray  # [N] int32
    phase: np.ndarray  # [N] int8
    step: np.ndarray  # [N] int32
    position: np.ndarray  # [N] int32
    layer: np.ndarray  # [N] int16
    expert_ids: np.ndarray  # [N, K] int16, highest weight first
    gate_weights: np.ndarray  # [N, K] float32
    pred_ids: np.ndarray | None = None  # [N, D, K] int16, -1 where missing
    pred_weights: np.ndarray | None = None  # [N, D, K] float32, NaN where missing

    def __len__(self) -> int:
        return int(self.layer.shape[0])

    def take(self, idx: np.ndarray | slice) -> TraceArrays:
        """The rows ``idx`` picks: a copy, or views of these arrays for a slice."""
        pick = lambda a: None if a is None else a[idx]
        return TraceArrays(
            self.request_id[idx],
            self.phase[idx],
            self.step[idx],
            self.position[idx],
            self.layer[idx],
            self.expert_ids[idx],
            self.gate_weights[idx],
            pick(self.pred_ids),
            pick(self.pred_weights),
        )

    def order(self) -> np.ndarray:
        """Row indices in (request_id, step, position, layer) order, the order traces are stored in."""
        return np.lexsort((self.layer, self.position, self.step, self.request_id))

    def is_sorted(self) -> bool:
        """Whether the rows are in (request_id, step, position, layer) order already (ties allowed), checked
        ``ORDER_CHUNK`` rows at a time without sorting."""
        keys = (self.request_id, self.step, self.position, self.layer)
        for lo in range(1, len(self), ORDER_CHUNK):
            hi = min(len(self), lo + ORDER_CHUNK)
            ok = np.zeros(hi - lo, dtype=bool)
            tied = np.ones(hi - lo, dtype=bool)
            for k in keys:
                now, before = k[lo:hi], k[lo - 1 : hi - 1]
                ok |= tied & (now > before)
                tied &= now == before
            if not (ok | tied).all():
                return False
        return True

    def sorted(self) -> TraceArrays:
        """These rows in (request_id, step, position, layer) order: ``self`` when they are already, else a copy sorted
        stably."""
        if self.is_sorted():
            return self
        return self.take(self.order())


def concat(parts: list[TraceArrays]) -> TraceArrays:
    fields = TraceArrays.__dataclass_fields__
    out = {}
    for f in fields:
        vals = [getattr(p, f) for p in parts]
        out[f] = None if any(v is None for v in vals) else np.concatenate(vals)
    return TraceArrays(**out)


def _offsets(lengths: np.ndarray | int, n: int) -> np.ndarray:
    """A list column's int32 offsets for its ``n`` lists' ``lengths`` (an int: every list that long)."""
    if isinstance(lengths, (int, np.integer)):
        return np.arange(n + 1, dtype=np.int32) * np.int32(lengths)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    return offsets


def _list_array(values: np.ndarray, lengths: np.ndarray | int, typ: pa.DataType, n: int) -> pa.ListArray:
    return pa.ListArray.from_arrays(pa.array(_offsets(lengths, n)), pa.array(values, type=typ))


def _row_items(a: np.ndarray) -> np.ndarray:
    """``a`` ([M, K], C-contiguous) as [M] items of K numbers each, a view: a masked gather or scatter then moves
    whole rows, one item each, not their K numbers one by one."""
    return a.view(np.dtype((np.void, a.shape[1] * a.itemsize)))[:, 0]


def _rows_where(a: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """The rows of ``a`` ([M, K]) where ``keep`` ([M] bool)."""
    return _row_items(np.ascontiguousarray(a))[keep].view(a.dtype).reshape(-1, a.shape[1])


def to_table(a: TraceArrays, meta: TraceMeta) -> pa.Table:
    """Arrow table with the exact schema v1 types and ``meta`` attached."""
    n, k = a.expert_ids.shape
    cols = {
        "request_id": pa.array(a.request_id.astype(np.int32)),
        "phase": pa.array(a.phase.astype(np.int8)),
        "step": pa.array(a.step.astype(np.int32)),
        "position": pa.array(a.position.astype(np.int32)),
        "layer": pa.array(a.layer.astype(np.int16)),
        "expert_ids": _list_array(a.expert_ids.astype(np.int16, copy=False).ravel(), k, pa.int16(), n),
        "gate_weights": _list_array(a.gate_weights.astype(np.float32, copy=False).ravel(), k, pa.float32(), n),
    }
    if meta.lookahead_depth > 0:
        if a.pred_ids is None or a.pred_weights is None:
            raise ValueError("lookahead_depth > 0 but no predictions were given")
        d = a.pred_ids.shape[1]
        present = (a.pred_ids[:, :, 0] >= 0).ravel()  # [N * D]
        inner_len = np.where(present, k, 0)
        ids = _rows_where(a.pred_ids.astype(np.int16, copy=False).reshape(n * d, k), present).ravel()
        wts = _rows_where(a.pred_weights.astype(np.float32, copy=False).reshape(n * d, k), present).ravel()
        inner_ids = _list_array(ids, inner_len, pa.int16(), n * d)
        inner_wts = _list_array(wts, inner_len, pa.float32(), n * d)
        cols["pred_ids"] = _list_array_nested(inner_ids, d, ARROW_COLUMNS["pred_ids"], n)
        cols["pred_weights"] = _list_array_nested(inner_wts, d, ARROW_COLUMNS["pred_weights"], n)
    return pa.Table.from_pydict(cols, schema=arrow_schema(meta))


def _list_array_nested(inner: pa.ListArray, lengths: np.ndarray | int, typ: pa.DataType, n: int) -> pa.ListArray:
    return pa.ListArray.from_arrays(pa.array(_offsets(lengths, n)), inner, type=typ)


NUMPY_OF = {
    pa.int8(): np.int8,
    pa.int16(): np.int16,
    pa.int32(): np.int32,
    pa.int64(): np.int64,
    pa.float32(): np.float32,
    pa.float64(): np.float64,
}


def to_numpy(col: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """A column's values as numpy, a view of its buffer where the type is fixed-width and nothing is null.
    ``pyarrow.Array.to_numpy`` imports pandas on first use (a slow import every command's start would pay); the
    trace's columns never need it. Anything else goes through it."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    dt = NUMPY_OF.get(arr.type)
    if dt is None or arr.null_count:
        return arr.to_numpy(zero_copy_only=False)
    dt = np.dtype(dt)
    buf = arr.buffers()[1]
    if buf is None:
        return np.zeros(0, dt)
    return np.frombuffer(buf, dt, count=len(arr), offset=arr.offset * dt.itemsize)


def list_lengths(col: pa.ChunkedArray | pa.Array) -> np.ndarray:
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    return np.diff(to_numpy(arr.offsets))


def list_values(arr: pa.Array) -> pa.Array:
    """``arr.flatten()`` (a list array's values, respecting slices: offsets may not start at 0). Without nulls, a
    slice of the values by the offsets: ``flatten`` imports ``pyarrow.compute``, an import every command's start would
    pay."""
    if arr.null_count:
        return arr.flatten()
    offsets = to_numpy(arr.offsets)
    lo = int(offsets[0]) if len(offsets) else 0
    return arr.values.slice(lo, int(offsets[-1]) - lo if len(offsets) else 0)


def flat_values(col: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Values of a list column, respecting slices (offsets may not start at 0)."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    return to_numpy(list_values(arr))


def nested_dense(
    col: pa.ChunkedArray | pa.Array, n: int, d: int, k: int, fill: float, dtype, out: np.ndarray | None = None
) -> np.ndarray:
    """[N, D, K] array from a list<list<...>> column whose inner lists are empty or K long (into ``out``, an
    [N, D, K] array of ``dtype``, when given)."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    inner = list_values(arr)  # N*D inner lists
    inner_len = list_lengths(inner)
    values = flat_values(inner)
    if out is None:
        out = np.empty((n, d, k), dtype=dtype)
    rows = out.view()
    rows.shape = (n * d, k)  # a view of ``out`` (numpy refuses where that would take a copy)
    rows.fill(fill)
    _row_items(rows)[inner_len == k] = _row_items(
        np.ascontiguousarray(values.astype(out.dtype, copy=False)).reshape(-1, k)
    )
    return out


def sort_by_weight(ids: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows reordered highest weight first (stable: source order on ties)."""
    order = np.argsort(-w, axis=1, kind="stable")
    return np.take_along_axis(ids, order, 1).astype(np.int16), np.take_along_axis(w, order, 1).astype(np.float32)
