"""Checks that a table obeys schema v1; raises ``TraceError`` at the first bad row.

Used by ``traces.io`` on every read and on every batch it writes. The columns arrive and are checked
``CHUNK_ROWS`` rows at a time (a file's are streamed from it) into arrays allocated once for the whole
trace, so a read holds the trace's arrays and O(chunk) more, never the decoded table whole beside them.
The checks run in the order the columns are read: the keys and routing lists, chunk by chunk; the rows'
order and each token's layers over the whole trace; then the predictions, chunk by chunk.
Legend: N rows, K top-k, D lookahead depth, L recorded layers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Literal, overload

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from hobbit.traces.arrays import TraceArrays, flat_values, list_lengths, list_values, nested_dense, to_numpy, to_table
from hobbit.traces.schema import ARROW_COLUMNS, PRED_COLUMNS, REQUIRED_COLUMNS, WEIGHT_SUMS, TraceError, TraceMeta

CHUNK_ROWS = 1 << 18  # rows checked at a time: each check's temporaries are a chunk's, not the trace's
KEY_COLUMNS = ("request_id", "phase", "step", "position", "layer")
KEY_DTYPES = {"request_id": np.int32, "phase": np.int8, "step": np.int32, "position": np.int32, "layer": np.int16}
Parts = Callable[[Sequence[str]], Iterable[pa.RecordBatch]]  # the named columns, a chunk of rows at a time, in order


def _first(mask: npt.ArrayLike) -> int:
    return int(np.flatnonzero(mask)[0])


def check_columns(schema: pa.Schema, meta: TraceMeta, file: str) -> None:
    """Every column schema v1 wants for ``meta`` is in ``schema``, with its type."""
    names = set(schema.names)
    wanted = list(REQUIRED_COLUMNS) + (list(PRED_COLUMNS) if meta.lookahead_depth > 0 else [])
    for name in wanted:
        if name not in names:
            fix = "record predictions or set lookahead_depth to 0" if name in PRED_COLUMNS else "re-export the trace"
            raise TraceError(file, "column is missing", field=name, fix=fix)
        typ = schema.field(name).type
        if typ != ARROW_COLUMNS[name]:
            raise TraceError(
                file,
                f"has type {typ}, schema v1 wants {ARROW_COLUMNS[name]}",
                field=name,
                fix="write the file through traces.io",
            )


def _check_nulls(part: pa.RecordBatch, names: Sequence[str], file: str, row0: int) -> None:
    for name in names:
        col = part.column(name)
        if col.null_count:
            raise TraceError(file, "null value", row=row0 + _first(np.asarray(col.is_null())), field=name)


def _check_lists(part: pa.RecordBatch, meta: TraceMeta, file: str, row0: int, ids: np.ndarray, wts: np.ndarray) -> None:
    """A chunk's routing lists (its first row is ``row0``) checked as they are copied into ``ids`` and ``wts``, the
    trace's [M, K] rows of them."""
    k, e = meta.model.top_k, meta.model.num_experts
    n = part.num_rows
    for name in ("expert_ids", "gate_weights"):
        lens = list_lengths(part.column(name))
        if np.any(lens != k):
            row = _first(lens != k)
            raise TraceError(
                file,
                f"has {lens[row]} entries, model.top_k is {k}",
                row=row0 + row,
                field=name,
                fix="every row lists exactly top_k experts",
            )
    ids[:] = flat_values(part.column("expert_ids")).reshape(n, k)
    wts[:] = flat_values(part.column("gate_weights")).reshape(n, k)
    bad = (ids < 0) | (ids >= e)
    if bad.any():
        row = _first(bad.any(axis=1))
        raise TraceError(
            file,
            f"expert id {ids[row][bad[row]][0]} out of range 0..{e - 1}",
            row=row0 + row,
            field="expert_ids",
            fix="check model.num_experts in the metadata",
        )
    if k > 1:
        dup = _duplicates(ids)
        if dup.any():
            raise TraceError(
                file, f"expert selected twice: {ids[_first(dup)].tolist()}", row=row0 + _first(dup), field="expert_ids"
            )
    if not np.isfinite(wts).all():
        raise TraceError(
            file, "non-finite weight", row=row0 + _first(~np.isfinite(wts).all(axis=1)), field="gate_weights"
        )
    if (wts < 0).any():
        row = _first((wts < 0).any(axis=1))
        raise TraceError(
            file,
            f"negative weight in {wts[row].tolist()}",
            row=row0 + row,
            field="gate_weights",
            fix="the weights the model applies, which are >= 0",
        )
    rule = meta.model.weight_rule
    low, high = WEIGHT_SUMS[rule]
    sums = wts.sum(axis=1, dtype=np.float64)
    bad = ~((sums > low) & (sums <= (k if high is None else high)))
    if bad.any():
        row = _first(bad)
        raise TraceError(
            file,
            f"weights {wts[row].tolist()} sum to {sums[row]:.6g}, which weight_rule={rule} does not give",
            row=row0 + row,
            field="gate_weights",
            fix="the weights as the model applies them, or the model's weight_rule",
        )
    if k > 1:
        unsorted = (wts[:, 1:] > wts[:, :-1] + 1e-6).any(axis=1)
        if unsorted.any():
            row = _first(unsorted)
            raise TraceError(
                file,
                f"weights {wts[row].tolist()} are not highest first",
                row=row0 + row,
                field="gate_weights",
                fix="sort each row by weight, descending",
            )


def _duplicates(ids: np.ndarray) -> np.ndarray:
    """[M] whether a row of ``ids`` ([M, K]) names an expert twice: its K (K - 1) / 2 pairs compared for a small K
    (a sort along rows costs far more than a few comparisons), its entries sorted for a large one."""
    k = ids.shape[1]
    if k > 16:
        srt = np.sort(ids, axis=1)
        return (srt[:, 1:] == srt[:, :-1]).any(axis=1)
    dup = np.zeros(len(ids), dtype=bool)
    for i in range(k - 1):
        for j in range(i + 1, k):
            dup |= ids[:, i] == ids[:, j]
    return dup


def _check_keys(a: TraceArrays, meta: TraceMeta, file: str) -> None:
    """The keys' values, the rows' order (strictly increasing (request_id, step, position, layer)) and each token's
    layers (one row per recorded layer, in order), a chunk of rows, then of tokens, at a time."""
    layers = np.asarray(meta.layers, dtype=np.int64)
    n, L = len(a), len(layers)
    new_tok = np.empty(n, dtype=bool)  # whether a row starts a token: its (request_id, step, position) is new
    new_tok[:1] = True
    for lo in range(0, n, CHUNK_ROWS):
        hi = min(n, lo + CHUNK_ROWS)
        ph, st = a.phase[lo:hi], a.step[lo:hi]
        bad = (ph != 0) & (ph != 1)
        if bad.any():
            raise TraceError(file, "phase must be 0 (prefill) or 1 (decode)", row=lo + _first(bad), field="phase")
        bad = (ph == 1) & (st < 1)
        if bad.any():
            raise TraceError(
                file,
                "decode rows have step >= 1 (prefill chunks take steps from 0, decode steps follow them)",
                row=lo + _first(bad),
                field="step",
            )
        for name in ("request_id", "position"):
            col = getattr(a, name)[lo:hi]
            if np.any(col < 0):
                raise TraceError(file, "negative value", row=lo + _first(col < 0), field=name)
        s = max(lo - 1, 0)  # each row against the one before it, the chunk's first against the last chunk's last
        if hi - s < 2:
            continue
        dr, ds, dp, dl = (
            np.subtract(x[s + 1 : hi], x[s : hi - 1], dtype=np.int64)
            for x in (a.request_id, a.step, a.position, a.layer)
        )
        # lexicographic "strictly increasing": the first non-zero difference must be > 0
        ok = (dr > 0) | ((dr == 0) & ((ds > 0) | ((ds == 0) & ((dp > 0) | ((dp == 0) & (dl > 0))))))
        if not ok.all():
            raise TraceError(
                file,
                "rows are not strictly ordered by (request_id, step, position, layer)",
                row=s + 1 + _first(~ok),
                field="layer",
                fix="write through traces.io, which sorts rows",
            )
        # a request's prefill passes (its prompt's chunks) come before its decode passes, and a pass has one phase
        dph = np.subtract(a.phase[s + 1 : hi], a.phase[s : hi - 1], dtype=np.int64)
        bad = (dr == 0) & ((dph < 0) | ((ds == 0) & (dph != 0)))
        if bad.any():
            row = s + 1 + _first(bad)
            raise TraceError(
                file,
                f"request {a.request_id[row]} has a prefill row after a decode row, or a step with both phases",
                row=row,
                field="phase",
                fix="prefill chunks take steps 0..c-1 and decode steps come after them",
            )
        new_tok[s + 1 : hi] = (dr != 0) | (ds != 0) | (dp != 0)
    starts = np.flatnonzero(new_tok)
    del new_tok
    per = max(1, CHUNK_ROWS // L)
    for t0 in range(0, len(starts), per):
        t1 = min(len(starts), t0 + per)
        first = starts[t0:t1]
        sizes = np.diff(first, append=starts[t1] if t1 < len(starts) else n)
        # a token is wrong when it has other than L rows, or its rows are not the recorded layers in order
        wrong = (sizes != L) | (a.layer[np.minimum(first[:, None] + np.arange(L), n - 1)] != layers).any(axis=1)
        if wrong.any():
            tok = _first(wrong)
            row = int(first[tok])
            have = a.layer[row : row + int(sizes[tok])].tolist()
            missing = sorted(set(layers.tolist()) - set(have))
            what = f"missing layer(s) {missing}" if missing else f"layers {have}, expected {layers.tolist()}"
            raise TraceError(
                file,
                f"token (request {a.request_id[row]}, step {a.step[row]}, position {a.position[row]}) has {what}",
                row=row,
                field="layer",
                fix="every token needs one row per recorded MoE layer",
            )


def _check_preds(
    part: pa.RecordBatch, meta: TraceMeta, layer: np.ndarray, file: str, row0: int, ids: np.ndarray, wts: np.ndarray
) -> None:
    """A chunk's predictions (its first row is ``row0``, its rows' layers ``layer``) checked as they are laid out
    into ``ids`` and ``wts``, the trace's [M, D, K] rows of them."""
    n, k, d = part.num_rows, meta.model.top_k, meta.lookahead_depth
    present: np.ndarray | None = None  # [M, D] whether a prediction is given, from pred_ids' inner lists
    for name in PRED_COLUMNS:
        col = part.column(name)
        outer = list_lengths(col)
        if np.any(outer != d):
            row = _first(outer != d)
            raise TraceError(file, f"has {outer[row]} entries, lookahead_depth is {d}", row=row0 + row, field=name)
        inner = list_lengths(list_values(col)).reshape(n, d)
        if np.any((inner != 0) & (inner != k)):
            row = _first(((inner != 0) & (inner != k)).any(axis=1))
            raise TraceError(
                file, f"inner list lengths {inner[row].tolist()}, want 0 or top_k={k}", row=row0 + row, field=name
            )
        if name == "pred_ids":
            present = inner == k
    assert present is not None  # PRED_COLUMNS holds pred_ids
    pos = np.searchsorted(np.asarray(meta.layers), layer)  # [M] index of the row's layer
    reachable = pos[:, None] + np.arange(1, d + 1)[None, :] < len(meta.layers)  # [M, D]
    if np.any(reachable & ~present):
        row = _first((reachable & ~present).any(axis=1))
        raise TraceError(file, "prediction missing for a layer that exists", row=row0 + row, field="pred_ids")
    nested_dense(part.column("pred_ids"), n, d, k, -1, np.int16, out=ids)
    nested_dense(part.column("pred_weights"), n, d, k, np.nan, np.float32, out=wts)
    bad = ((ids >= meta.model.num_experts) | ((ids < 0) & present[:, :, None])).any(axis=(1, 2))
    if bad.any():
        raise TraceError(file, "predicted expert id out of range", row=row0 + _first(bad), field="pred_ids")


@overload
def validate_parts(
    parts: Parts, n: int, schema: pa.Schema, meta: TraceMeta, file: str, keep: Literal[True] = True
) -> TraceArrays: ...


@overload
def validate_parts(
    parts: Parts, n: int, schema: pa.Schema, meta: TraceMeta, file: str, keep: bool
) -> TraceArrays | None: ...


def validate_parts(
    parts: Parts, n: int, schema: pa.Schema, meta: TraceMeta, file: str, keep: bool = True
) -> TraceArrays | None:
    """Validate the ``n`` rows that ``parts`` yields (``schema``'s columns) against ``meta``; return them as dense
    arrays (``keep=False``: only check them, holding the keys whole and the rest a chunk at a time; None).
    ``parts(columns)`` yields the rows' named columns a chunk at a time, in order; it is called once for the keys and
    routing lists and, with predictions, once more for those."""
    check_columns(schema, meta, file)
    k, d = meta.model.top_k, meta.lookahead_depth
    whole = n if keep else 0
    a = TraceArrays(
        **{c: np.empty(n, KEY_DTYPES[c]) for c in KEY_COLUMNS},
        expert_ids=np.empty((whole, k), np.int16),
        gate_weights=np.empty((whole, k), np.float32),
    )
    for part, row0 in _chunks(parts, REQUIRED_COLUMNS, n, file):
        m = part.num_rows
        _check_lists(part, meta, file, row0, *_landing(a, ("expert_ids", "gate_weights"), row0, m, keep))
        for c in KEY_COLUMNS:
            getattr(a, c)[row0 : row0 + m] = to_numpy(part.column(c))
    if n == 0:
        raise TraceError(file, "trace has no rows")
    _check_keys(a, meta, file)
    if d > 0:
        a.pred_ids, a.pred_weights = np.empty((whole, d, k), np.int16), np.empty((whole, d, k), np.float32)
        for part, row0 in _chunks(parts, PRED_COLUMNS, n, file):
            m = part.num_rows
            _check_preds(
                part,
                meta,
                a.layer[row0 : row0 + m],
                file,
                row0,
                *_landing(a, ("pred_ids", "pred_weights"), row0, m, keep),
            )
    return a if keep else None


def _chunks(parts: Parts, columns: Sequence[str], n: int, file: str) -> Iterator[tuple[pa.RecordBatch, int]]:
    """The chunks ``parts`` yields of ``columns``, each checked for nulls, with its first row's number; ``n`` rows in
    all, or a ``TraceError``."""
    row0 = 0
    for part in parts(columns):
        if row0 + part.num_rows > n:
            raise TraceError(file, f"holds more rows than the {n} its footer counts", fix="re-export the trace")
        _check_nulls(part, columns, file, row0)
        yield part, row0
        row0 += part.num_rows
    if row0 != n:
        raise TraceError(file, f"holds {row0} rows, its footer counts {n}", fix="re-export the trace")


def _landing(a: TraceArrays, fields: Sequence[str], row0: int, m: int, keep: bool) -> list[np.ndarray]:
    """Where a chunk's ``m`` rows from ``row0`` land in ``fields`` of ``a``: those rows, or (``keep=False``) the first
    ``m`` rows of a buffer a chunk long, grown as needed."""
    out = []
    for f in fields:
        arr = getattr(a, f)
        if keep:
            out.append(arr[row0 : row0 + m])
            continue
        if len(arr) < m:
            arr = np.empty((m, *arr.shape[1:]), arr.dtype)
            setattr(a, f, arr)
        out.append(arr[:m])
    return out


def validate_source(
    a: TraceArrays, meta: TraceMeta, file: object, source: np.ndarray | None = None, unit: str = "row"
) -> TraceArrays:
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
    return validate_parts(
        lambda cols: table.select(list(cols)).to_batches(max_chunksize=CHUNK_ROWS),
        table.num_rows,
        table.schema,
        meta,
        file,
    )
