"""The only reader and writer of trace files (Parquet, zstd, schema v1).

Reads validate everything (``TraceError`` names file, row and field). Writes are
atomic and verified: rows go to a hidden temporary file next to the target, which is read
back and validated whole (rows and metadata) and only then renamed over the final name; a
failure, a crash or Ctrl-C leaves the final name as it was (absent, or the old file) and
no temporary file behind.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from hobbit.traces import validate
from hobbit.traces.arrays import TraceArrays, to_table
from hobbit.traces.schema import METADATA_KEY, SCHEMA_VERSION, TraceError, TraceMeta, arrow_schema
from hobbit.traces.validate import validate_table

COMPRESSION = "zstd"
# float leaves stored byte-stream-split: the weights then compress (about a third smaller); lossless
FLOAT_LEAVES = ["gate_weights.list.element", "pred_weights.list.element.list.element"]
INT_LEAVES = [
    "request_id",
    "phase",
    "step",
    "position",
    "layer",
    "expert_ids.list.element",
    "pred_ids.list.element.list.element",
]


@dataclass
class Trace:
    """A validated trace: metadata plus its columns as dense numpy arrays."""

    meta: TraceMeta
    arrays: TraceArrays
    path: str | None = None

    def __len__(self) -> int:
        return len(self.arrays)

    @property
    def num_tokens(self) -> int:
        return len(self.arrays) // len(self.meta.layers)


def parse_meta(raw: bytes | None, file: str) -> TraceMeta:
    """Schema metadata from its JSON bytes, checked field by field."""
    if raw is None:
        raise TraceError(
            file,
            "no 'hobbit.trace' schema metadata: not a hobbit trace",
            field="hobbit.trace",
            fix="convert it with `hobbit convert`",
        )
    try:
        d = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise TraceError(file, f"metadata is not JSON ({exc})", field="hobbit.trace") from exc
    version = d.get("schema_version") if isinstance(d, dict) else None
    if version != SCHEMA_VERSION:
        raise TraceError(
            file,
            f"schema_version {version!r} is not supported (this reader knows {SCHEMA_VERSION})",
            field="schema_version",
            fix="re-convert the trace with this version of hobbit",
        )
    try:
        meta = TraceMeta.from_json_dict(d)
    except (KeyError, TypeError, ValueError) as exc:
        raise TraceError(file, f"bad metadata: {exc}", field="hobbit.trace") from exc
    if meta.lookahead_depth < 0:
        raise TraceError(file, "must be >= 0", field="lookahead_depth")
    layers = meta.layers
    if list(layers) != sorted(set(layers)) or layers[0] < 0 or layers[-1] >= meta.model.num_layers:
        raise TraceError(
            file, f"{list(layers)} must be increasing layers in 0..{meta.model.num_layers - 1}", field="recorded_layers"
        )
    return meta


def read_meta(path: str | os.PathLike) -> TraceMeta:
    """Only the metadata (cheap: reads the footer)."""
    file = str(path)
    try:
        schema = pq.read_schema(file)
    except FileNotFoundError:
        raise TraceError(file, "no such file") from None
    except (pa.ArrowException, OSError) as exc:
        raise TraceError(file, f"not a readable Parquet file ({exc})") from exc
    return parse_meta((schema.metadata or {}).get(METADATA_KEY), file)


def read_trace(path: str | os.PathLike) -> Trace:
    """Read and validate a trace file."""
    meta, arrays = _read(path, keep=True)
    assert arrays is not None  # keep=True: every row is decoded
    return Trace(meta, arrays, str(path))


def check_trace(path: str | os.PathLike) -> TraceMeta:
    """Validate a trace file as ``read_trace`` does, keeping only its keys whole (15 bytes a row) and the rest a
    chunk at a time; its metadata."""
    return _read(path, keep=False)[0]


def _read(path: str | os.PathLike, keep: bool) -> tuple[TraceMeta, TraceArrays | None]:
    """The file's metadata and, with ``keep``, its rows (None without)."""
    file = str(path)
    meta = read_meta(file)
    try:
        arrays = _decode(file, meta, keep)
    except (pa.ArrowException, OSError) as exc:
        raise TraceError(file, f"corrupt Parquet data ({exc})") from exc
    finally:  # the reader is gone: its buffers and the decoded chunks, which pyarrow's pool would keep from the system
        pa.default_memory_pool().release_unused()
    return meta, arrays


def _decode(file: str, meta: TraceMeta, keep: bool) -> TraceArrays | None:
    """The file's rows checked (``validate.validate_parts``), streamed a chunk at a time: not ``read_table``, whose
    dataset layer imports pandas (a slow import every run's start would pay) and which decodes the whole table at
    once."""
    with pq.ParquetFile(file, page_checksum_verification=True) as f:

        def parts(columns: Sequence[str]) -> Iterator[pa.RecordBatch]:
            for group in range(f.num_row_groups):  # a reader each: one over the whole file keeps what it has read
                yield from f.iter_batches(batch_size=validate.CHUNK_ROWS, row_groups=[group], columns=list(columns))

        return validate.validate_parts(parts, f.metadata.num_rows, f.schema_arrow, meta, file, keep)


def write_trace(path: str | os.PathLike, arrays: TraceArrays, meta: TraceMeta) -> Path:
    """Sort, validate and atomically write a whole trace."""
    with TraceWriter(path, meta) as w:
        w.write(arrays)
    return Path(path)


class TraceWriter:
    """Writes a trace a row group at a time; the final name appears only on ``close``.

    Batches must arrive in (request_id, step, position, layer) order across calls;
    within a batch rows are sorted here. Each batch is validated before it is written.
    """

    def __init__(self, path: str | os.PathLike, meta: TraceMeta) -> None:
        self.path = Path(path)
        self.meta = meta
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = tmp_path(self.path)
        schema = arrow_schema(meta)
        split = [c for c in FLOAT_LEAVES if c.split(".")[0] in schema.names]
        try:  # page checksums let reads detect corruption
            self._writer = pq.ParquetWriter(
                self.tmp,
                schema,
                compression=COMPRESSION,
                write_page_checksum=True,
                # pyarrow takes a list of columns for both; its unannotated defaults (True, False) read as bool
                use_byte_stream_split=cast(Any, split),
                use_dictionary=cast(Any, INT_LEAVES),
            )
        except (OSError, pa.ArrowException) as exc:
            self.tmp.unlink(missing_ok=True)
            raise TraceError(self.path, f"cannot be written ({exc})", fix="a writable path for the trace") from exc
        self._last_key: tuple[int, int, int, int] | None = None
        self.rows = 0

    def write(self, arrays: TraceArrays) -> None:
        if len(arrays) == 0:
            return
        arrays = arrays.sorted()
        first = _key(arrays, 0)
        if self._last_key is not None and first <= self._last_key:
            raise TraceError(
                self.tmp,
                f"batch starts at {first}, not after the previous batch's {self._last_key}",
                row=self.rows,
                field="request_id",
            )
        for lo, hi in _token_slices(arrays, validate.CHUNK_ROWS):  # a row group each: the table of a slice at a time
            table = to_table(arrays.take(slice(lo, hi)), self.meta)
            try:
                validate_table(table, self.meta, str(self.path))
            except TraceError as exc:  # the row in the batch, not in the slice
                raise TraceError(
                    exc.file, exc.message, row=None if exc.row is None else lo + exc.row, field=exc.field, fix=exc.fix
                ) from None
            with naming(self.path):
                self._writer.write_table(table)
        self._last_key = _key(arrays, len(arrays) - 1)
        self.rows += len(arrays)

    def close(self) -> Path:
        """Finish the file, read it back and validate it whole, then (only then) rename it into place."""
        try:
            with naming(self.path):
                self._writer.close()
                with open(self.tmp, "rb") as f:
                    os.fsync(f.fileno())
            if self.rows == 0:
                raise TraceError(self.path, "nothing to write: the trace has no rows")
            try:
                check_trace(self.tmp)
            except TraceError as exc:  # name the file being written, not the temporary one
                raise TraceError(
                    self.path,
                    f"the written trace fails its check, nothing was replaced: {exc.message}",
                    row=exc.row,
                    field=exc.field,
                    fix=exc.fix,
                ) from exc
            with naming(self.path):
                os.replace(self.tmp, self.path)
        finally:
            self.tmp.unlink(missing_ok=True)
        return self.path

    def abort(self) -> None:
        try:  # the error that aborts (a full disk, a bad row) is the one to report, not the close's after it
            with contextlib.suppress(OSError, pa.ArrowException):
                self._writer.close()
        finally:
            with _stops_held():  # a second stop waits until the temporary file is gone
                self.tmp.unlink(missing_ok=True)

    def __enter__(self) -> TraceWriter:
        """As a context, ``kill`` (SIGTERM at its default action: a library user's script) unwinds the write as
        Ctrl-C does, through ``abort``, so that no temporary file is left (``write_together``'s rule)."""
        self._kill = _kill_unwinds()
        self._kill.__enter__()
        return self

    def __exit__(self, typ: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        try:
            if typ is None:
                self.close()
            else:
                self.abort()
        finally:
            self._kill.__exit__(None, None, None)


def _token_slices(a: TraceArrays, rows: int) -> Iterator[tuple[int, int]]:
    """Ranges [lo, hi) of ``a``'s rows (in order), about ``rows`` each, that cut no token (a token's rows share
    (request_id, step, position))."""
    n, lo = len(a), 0
    while lo < n:
        hi = min(n, lo + max(rows, 1))
        while hi < n:  # on to the next token's first row, a window at a time
            end = min(n, hi + 4096)
            new = (
                (a.request_id[hi:end] != a.request_id[hi - 1 : end - 1])
                | (a.step[hi:end] != a.step[hi - 1 : end - 1])
                | (a.position[hi:end] != a.position[hi - 1 : end - 1])
            )
            if new.any():
                hi += int(np.argmax(new))
                break
            hi = end
        yield lo, hi
        lo = hi


def _key(a: TraceArrays, i: int) -> tuple[int, int, int, int]:
    return (int(a.request_id[i]), int(a.step[i]), int(a.position[i]), int(a.layer[i]))


def empty_like_preds(n: int, d: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Dense prediction arrays with nothing predicted yet (-1 ids, NaN weights)."""
    return np.full((n, d, k), -1, np.int16), np.full((n, d, k), np.nan, np.float32)


NAME_MAX = 255  # bytes of one path component on Linux's and macOS's file systems


def _tmp_stem(name: str) -> str:
    """The hidden temporary file's stem for final name ``name``: ``.NAME``, or, where ``.NAME.<pid>.tmp`` would
    pass ``NAME_MAX``, its head and a hash of the whole (so that a name that fits is not refused for its temporary
    file's length)."""
    if len(f".{name}.{2**22}.tmp".encode()) <= NAME_MAX:
        return f".{name}"
    digest = hashlib.sha256(name.encode()).hexdigest()[:12]
    head = name.encode()[: NAME_MAX - 40].decode(errors="ignore")
    return f".{head}~{digest}"


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` of this host exists (another user's counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: alive
        return True
    return True


def tmp_path(path: Path) -> Path:
    """The hidden temporary file a write of ``path`` goes through, ``.NAME.<pid>.tmp`` beside it; those a killed
    process left for the same final name (their pid gone) are removed first."""
    stem = _tmp_stem(path.name)
    for old in path.parent.glob(f"{glob_escape(stem)}.*.tmp"):
        pid = old.name[len(stem) + 1 : -len(".tmp")]
        if pid.isdigit() and int(pid) != os.getpid() and not pid_alive(int(pid)):
            with contextlib.suppress(OSError):
                old.unlink()
    return path.with_name(f"{stem}.{os.getpid()}.tmp")


def glob_escape(text: str) -> str:
    """``text`` with glob's special characters escaped (``glob.escape`` for a name, not a path)."""
    return "".join(f"[{c}]" if c in "*?[" else c for c in text)


@contextlib.contextmanager
def naming(path: Path) -> Iterator[None]:
    """A context in which an OSError names ``path``, the file being written: a full disk fails a ``write()``, a
    flush or a close, which name no file; a copy names its source; the open of a temporary file names the hidden
    temporary."""
    try:
        yield
    except OSError as exc:
        if isinstance(exc, BrokenPipeError) or exc.filename == str(path):
            raise
        # pyarrow's carry the errno in their text too: "Error writing bytes to file. Detail: [errno 28] ..."
        found = re.search(r"\[errno (\d+)\]", str(exc))
        code = exc.errno if exc.errno is not None else int(found[1]) if found else None
        why = os.strerror(code) if code and (found or not exc.strerror) else exc.strerror or str(exc)
        raise OSError(code, why, str(path)) from exc


DISK_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}


def os_error_message(exc: OSError, knob: str | None) -> str:
    """One line for an OSError a write met (``naming`` has put the file it was writing in it): the file,
    the system's reason and, for a full disk or quota, the fix (``knob``: the knob that moves the output) and what
    was kept."""
    where = f"{exc.filename}: " if exc.filename else ""
    text = f"{where}{exc.strerror or exc}"
    if exc.errno in DISK_FULL:
        other = f", or {knob}= on another disk" if knob else ""
        text += f" (fix: free space there{other}; files already there were kept as they were)"
    return text


def write_together(files: Sequence[tuple[Path, Callable[[Path], object]]]) -> list[Path]:
    """Write each file through ``write(temporary path)`` to its hidden temporary file, and only when every one is
    written rename them into place, in order: a failure (a full disk, an error, Ctrl-C) leaves every final name as it
    was, complete or absent, and no temporary file. A set of files a reader takes together (a run's tables and its
    results.json) is then never a mix of two runs; the last one named is the one a reader looks for."""
    tmps: list[Path] = []
    with _kill_unwinds():
        try:
            for path, write in files:
                path.parent.mkdir(parents=True, exist_ok=True)
                tmps.append(tmp_path(path))
                with naming(path):
                    write(tmps[-1])
            for (path, _), tmp in zip(files, tmps, strict=True):
                with naming(path):
                    os.replace(tmp, path)
        finally:
            with _stops_held():  # a stop arriving now waits until every temporary file is gone
                for tmp in tmps:
                    tmp.unlink(missing_ok=True)
    return [path for path, _ in files]


STOPS = (signal.SIGINT, signal.SIGTERM)  # Ctrl-C and ``kill``


def raise_interrupt(signum: int, frame: Any) -> None:
    """A handler that makes a signal (``kill``'s SIGTERM) an interrupt, as Ctrl-C is: what is being written unwinds
    through its clean-up."""
    raise KeyboardInterrupt(f"signal {signum}")


@contextlib.contextmanager
def _kill_unwinds() -> Iterator[None]:
    """A context in which ``kill`` (SIGTERM) raises KeyboardInterrupt where the process had left it at its default
    action, which ends the process on the spot and would leave a temporary file behind (a sweep's worker between
    two jobs, a library user's script); a handler of the process's own is left as it is. Signal handlers belong to
    the main thread: in another, nothing changes."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        yield
        return
    signal.signal(signal.SIGTERM, raise_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


@contextlib.contextmanager
def _stops_held() -> Iterator[None]:
    """A context in which Ctrl-C and ``kill`` are held back (blocked), delivered as it ends: clean-up that a handler
    raising part way through would leave half done. Only the main thread receives Python's signals; elsewhere it
    holds nothing."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, STOPS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def file_writer(write: Callable[[IO], object], binary: bool = False) -> Callable[[Path], None]:
    """A ``write_together`` writer that calls ``write(file)`` on the opened temporary file and syncs it."""

    def run(tmp: Path) -> None:
        with open(tmp, "wb") if binary else open(tmp, "w", encoding="utf-8", newline="\n") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())

    return run


def text_writer(text: str) -> Callable[[Path], None]:
    return file_writer(lambda f: f.write(text))


def json_writer(obj: Any) -> Callable[[Path], None]:
    """Strict JSON (non-finite numbers become null)."""
    return text_writer(json.dumps(json_safe(obj), indent=1, allow_nan=False) + "\n")


def parquet_writer(df: Any) -> Callable[[Path], None]:
    """A pandas table, or columns (name -> 1-D array, written through pyarrow without pandas), as Parquet."""

    def run(tmp: Path) -> None:
        if isinstance(df, dict):
            pq.write_table(pa.Table.from_arrays([arrow_of(v) for v in df.values()], names=list(df)), tmp)
        else:
            df.to_parquet(tmp, index=False)

    return run


def atomic_write(path: str | os.PathLike, write: Callable[[IO], object], binary: bool = False) -> Path:
    """Call ``write(file)`` on a hidden temporary file next to ``path``, then rename it into place: the
    final name is complete or absent (or, if it existed, untouched), and no temporary file is left."""
    return write_together([(Path(path), file_writer(write, binary))])[0]


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write a small text file (JSON, Markdown) so that the final name is complete or absent."""
    return atomic_write(path, lambda f: f.write(text))


def json_safe(obj: Any) -> Any:
    """``obj`` with every non-finite float as None and numpy scalars as Python numbers: what strict
    JSON can hold (NaN and Infinity are not JSON)."""
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not np.isfinite(obj):
        return None
    return obj


def atomic_write_json(path: str | os.PathLike, obj: Any) -> Path:
    """Write ``obj`` as strict JSON (non-finite numbers become null), atomically."""
    return write_together([(Path(path), json_writer(obj))])[0]


def arrow_of(values: Any) -> pa.Array:
    """A 1-D numpy array as an Arrow array: numbers from their own buffer (``pyarrow.array`` on numpy imports
    pandas, a slow import at a command's start, for no use here); anything else through ``pyarrow.array``."""
    a = np.asarray(values)
    if a.ndim != 1 or a.dtype.kind not in "iuf":
        return pa.array(a)
    a = np.ascontiguousarray(a)
    return pa.Array.from_buffers(pa.from_numpy_dtype(a.dtype), len(a), [None, pa.py_buffer(a)])


def atomic_write_parquet(df: Any, path: str | os.PathLike) -> Path:
    """Write a pandas table, or columns (``parquet_writer``), as Parquet so that the final name is complete or
    absent."""
    return write_together([(Path(path), parquet_writer(df))])[0]
