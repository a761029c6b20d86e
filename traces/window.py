"""A trace file read a window of whole passes at a time, for runs whose memory must not grow with the trace.

``scan`` reads the key columns once (a batch of rows at a time) and keeps what a run must know before it starts:
its tokens, requests and the sizes of its passes. ``windows`` then yields the rows a window at a time, each window
whole passes of about ``tokens`` tokens, validated as ``read_trace`` validates a whole trace (``validate``) and
checked against the window before it, so a run holds one window of the trace, never the trace.
Legend: N rows, L recorded layers, R requests.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from hobbit.traces import validate
from hobbit.traces.arrays import TraceArrays, to_numpy
from hobbit.traces.io import read_meta
from hobbit.traces.schema import DECODE, PRED_COLUMNS, REQUIRED_COLUMNS, TraceError, TraceMeta

BATCH_ROWS = 1 << 16  # rows decoded at a time: a window is assembled from these


@dataclass(frozen=True)
class Scan:
    """What a windowed run needs to know of a trace before its first window (``scan``)."""

    meta: TraceMeta
    tokens: int
    requests: np.ndarray  # [R] request ids, in the file's order (ascending)
    request_tokens: np.ndarray  # [R] tokens of each
    request_context: np.ndarray  # [R] each request's longest context: its largest position + 1
    pass_sizes: dict[tuple[int, int], int]  # (phase, tokens) -> passes of that phase and size
    request_decode: np.ndarray  # [R] decode tokens of each

    @property
    def passes(self) -> int:
        return sum(self.pass_sizes.values())


def _batches(f: pq.ParquetFile, columns: Sequence[str], rows: int = BATCH_ROWS) -> Iterator[pa.RecordBatch]:
    for group in range(f.num_row_groups):  # a reader each: one over the whole file keeps what it has read
        yield from f.iter_batches(batch_size=rows, row_groups=[group], columns=list(columns))


def _open(path: str) -> pq.ParquetFile:
    try:
        return pq.ParquetFile(path, page_checksum_verification=True)
    except FileNotFoundError:
        raise TraceError(path, "no such file") from None
    except (pa.ArrowException, OSError) as exc:
        raise TraceError(path, f"not a readable Parquet file ({exc})") from exc


def scan(path: str | os.PathLike, stop_tokens: int | None = None) -> Scan:
    """The tokens, requests and pass sizes of the trace at ``path`` (of its first ``stop_tokens`` tokens: a request's
    edge, as ``windows`` reads them), from its key columns read a batch at a time (the rows of its first recorded
    layer counted: one per token). The rows' order and values are checked as ``windows`` reads them; a file out of
    order gives a ``windows`` error, never a run on wrong counts."""
    file = str(path)
    meta = read_meta(file)
    first = meta.layers[0]
    stop = None if stop_tokens is None else int(stop_tokens) * len(meta.layers)
    cols = ["request_id", "step", "position", "phase", "layer"]
    reqs: list[np.ndarray] = []
    req_n: list[np.ndarray] = []
    req_ctx: list[np.ndarray] = []
    req_dec: list[np.ndarray] = []
    seen = 0  # the file's rows read
    sizes: dict[tuple[int, int], int] = {}
    cur: tuple[int, int, int, int] | None = None  # the open pass: (request, step, phase, tokens so far)
    tokens = 0
    with _open(file) as f:
        validate.check_columns(f.schema_arrow, meta, file)
        try:
            for batch in _batches(f, cols):
                if stop is not None and seen + batch.num_rows > stop:
                    if seen >= stop:
                        break
                    batch = batch.slice(0, stop - seen)
                seen += batch.num_rows
                r, s, pos, ph, layer = (to_numpy(batch.column(c)) for c in cols)
                keep = layer == first
                r, s, pos, ph = r[keep], s[keep], pos[keep], ph[keep]
                if not len(r):
                    continue
                tokens += len(r)
                # requests: the file is sorted by request, so each batch's are runs
                u, at, inv, n = np.unique(r, return_index=True, return_inverse=True, return_counts=True)
                ctx = np.maximum.reduceat(pos.astype(np.int64), np.sort(at)) + 1 if len(u) else np.zeros(0, np.int64)
                reqs.append(u.astype(np.int64))
                req_n.append(n.astype(np.int64))
                req_ctx.append(ctx)
                req_dec.append(np.bincount(inv.ravel(), weights=ph == DECODE, minlength=len(u)).astype(np.int64))
                # passes: runs of (request, step)
                new = np.ones(len(r), np.bool_)
                new[1:] = (r[1:] != r[:-1]) | (s[1:] != s[:-1])
                starts = np.flatnonzero(new)
                lens = np.diff(np.append(starts, len(r)))
                if cur is not None and cur[0] == r[0] and cur[1] == s[0]:
                    lens[0] += cur[3]
                elif cur is not None:
                    sizes[cur[2], cur[3]] = sizes.get((cur[2], cur[3]), 0) + 1
                for phase, n_tok in zip(ph[starts[:-1]].tolist(), lens[:-1].tolist()):
                    sizes[phase, n_tok] = sizes.get((phase, n_tok), 0) + 1
                cur = (int(r[starts[-1]]), int(s[starts[-1]]), int(ph[starts[-1]]), int(lens[-1]))
        except pa.ArrowException as exc:
            raise TraceError(file, f"corrupt Parquet data ({exc})") from exc
    if cur is not None:
        sizes[cur[2], cur[3]] = sizes.get((cur[2], cur[3]), 0) + 1
    if not tokens:
        raise TraceError(file, "trace has no rows")
    # a request cut by a batch boundary appears twice in a row: merged
    ids, n_tok, ctx, dec = (np.concatenate(x) for x in (reqs, req_n, req_ctx, req_dec))
    head = np.ones(len(ids), np.bool_)
    head[1:] = ids[1:] != ids[:-1]
    at = np.flatnonzero(head)
    return Scan(
        meta, tokens, ids[at], np.add.reduceat(n_tok, at), np.maximum.reduceat(ctx, at), sizes, np.add.reduceat(dec, at)
    )


def held_apart(requests: int, share: float) -> int:
    """How many of a trace's ``requests`` its first ``share`` holds apart for profiling (``workload.split_requests``):
    at least one request is always left to time."""
    return max(min(int(share * requests), requests - 1), 0)


@dataclass(frozen=True)
class TraceFile:
    """A trace file that a run reads a window of ``window_tokens`` tokens at a time, never whole: its path and its
    ``scan``; with ``stop_tokens``, its first tokens alone (a request's edge: the profiling requests a command holds
    apart, ``head``). Commands that run many simulations take it where they take a ``Trace`` read whole."""

    path: str
    window_tokens: int
    scan: Scan
    stop_tokens: int | None = None

    @classmethod
    def open(cls, path: str | os.PathLike, window_tokens: int, stop_tokens: int | None = None) -> TraceFile:
        return cls(str(path), int(window_tokens), scan(path, stop_tokens), stop_tokens)

    @property
    def meta(self) -> TraceMeta:
        return self.scan.meta

    def head(self, requests: int) -> TraceFile:
        """This trace's first ``requests`` requests (scanned again: their pass sizes)."""
        return TraceFile.open(self.path, self.window_tokens, int(self.scan.request_tokens[:requests].sum()))


def _key(a: TraceArrays, i: int) -> tuple[int, int, int, int]:
    return (int(a.request_id[i]), int(a.step[i]), int(a.position[i]), int(a.layer[i]))


def windows(
    path: str | os.PathLike, meta: TraceMeta, tokens: int, skip_tokens: int = 0, stop_tokens: int | None = None
) -> Iterator[TraceArrays]:
    """The trace's rows after its first ``skip_tokens`` tokens (and before its first ``stop_tokens``: a request's
    edge, as ``skip_tokens``), a window of whole passes at a time: each window the
    passes that end within about ``tokens`` tokens of its start (one pass at least, never cut), validated as
    ``read_trace`` validates a whole trace and against the window before it (an error names the file's row)."""
    file = str(path)
    L = len(meta.layers)
    cols = list(REQUIRED_COLUMNS) + (list(PRED_COLUMNS) if meta.lookahead_depth > 0 else [])
    want = max(int(tokens), 1) * L
    skip = int(skip_tokens) * L
    stop = None if stop_tokens is None else int(stop_tokens) * L
    held: list[pa.RecordBatch] = []
    n_held = 0
    row0 = skip  # the file's row of the first held row
    last: tuple[int, int, int, int] | None = None  # the key of the previous window's last row
    last_phase = 0

    def emit(table: pa.Table) -> TraceArrays:
        nonlocal last, last_phase, row0
        try:
            a = validate.validate_table(table, meta, file)
        except TraceError as exc:
            where = None if exc.row is None else exc.row + row0
            raise TraceError(file, exc.message, row=where, field=exc.field, fix=exc.fix) from None
        first = _key(a, 0)
        if last is not None and (first <= last or (first[0] == last[0] and int(a.phase[0]) < last_phase)):
            raise TraceError(
                file,
                "rows are not strictly ordered by (request_id, step, position, layer), or a request has a prefill "
                "row after a decode row",
                row=row0,
                field="layer",
                fix="write through traces.io, which sorts rows",
            )
        last, last_phase = _key(a, len(a) - 1), int(a.phase[-1])
        row0 += len(a)
        return a

    with _open(file) as f:
        validate.check_columns(f.schema_arrow, meta, file)
        try:
            seen = 0  # the file's rows read
            for batch in _batches(f, cols):
                n = batch.num_rows
                if stop is not None and seen + n > stop:
                    batch, n = batch.slice(0, max(stop - seen, 0)), max(stop - seen, 0)
                    if not n:
                        break
                if seen + n <= skip:
                    seen += n
                    continue
                if seen < skip:
                    batch = batch.slice(skip - seen)
                seen += n
                held.append(batch)
                n_held += batch.num_rows
                while n_held >= want:
                    table = pa.Table.from_batches(held)
                    req, step = (to_numpy(table.column(c).combine_chunks()) for c in ("request_id", "step"))
                    # the window ends where the pass holding its ``want``-th row ends (a pass is never cut)
                    end = want - 1
                    same = (req[end:] == req[end]) & (step[end:] == step[end])
                    if same.all():
                        break  # that pass runs past the rows held: read on
                    cut = end + int(np.argmin(same))
                    yield emit(table.slice(0, cut))
                    rest = table.slice(cut)
                    held, n_held = rest.to_batches(), rest.num_rows
            if n_held:
                yield emit(pa.Table.from_batches(held))
        except pa.ArrowException as exc:
            raise TraceError(file, f"corrupt Parquet data ({exc})") from exc
        finally:
            pa.default_memory_pool().release_unused()
