"""A run's files, and the result cache that lets an interrupted sweep resume.

``write_results``: results.json, passes.parquet (one row per forward pass) and
layers.parquet, each written atomically. The cache keeps finished runs by what determines
their results (the trace's bytes and every knob), so a rerun skips them; each entry carries
its files' checksums, and one that does not match them is never used.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from hobbit.sim.config import SimConfig
from hobbit.traces.io import json_writer, parquet_writer, text_writer, write_together

if TYPE_CHECKING:  # the tables are written from their columns through pyarrow, not from DataFrames
    from hobbit.sim.results import Results

RESULT_FILES = ("passes.parquet", "layers.parquet", "results.json")  # results.json, what readers look for, last
# results.json's layout and the meaning of its keys: a cache entry written under another is simulated again
RESULTS_FORMAT = 2
CACHED_MARK = ".cached"  # in a run dir whose results came from the result cache
MANIFEST = "sha256.json"  # in a cache entry: its files' SHA-256 and the key it holds the results of


def tok_s(ms_per_token: float | None) -> float:
    """Decode throughput, tokens per second, of a decode latency in ms per token (one token per decode pass); NaN
    where the trace had no decode pass (None)."""
    if ms_per_token is None:
        return float("nan")
    return 1000.0 / ms_per_token if ms_per_token > 0 else float("inf")


def tok_s_text(ms_per_token: float | None) -> str:
    """The throughput of a decode latency as the commands print it: ``24.3``; below 10 tok/s with a second decimal."""
    if ms_per_token is None:
        return "n/a"
    t = tok_s(ms_per_token)
    return f"{t:.{2 if t < 10 else 1}f}"


def decode_text(ms_per_token: float | None, digits: int = 2) -> str:
    """``41.20 ms/token (24.3 tok/s)``: a decode latency beside the throughput it means, as every command prints
    them; ``n/a (no decode passes)`` for a trace without decode (``hobbit.plumbing.phases``)."""
    if ms_per_token is None:
        return "n/a (no decode passes)"
    return f"{ms_per_token:.{digits}f} ms/token ({tok_s_text(ms_per_token)} tok/s)"


def write_results(res: Results, out: Path) -> list[Path]:
    """results.json, passes.parquet, layers.parquet under ``out``, renamed into place together once all three are
    written (``write_together``: a full disk leaves a run's earlier files as they were, never a mix of two runs);
    results.json, what readers look for, is the last path."""
    paths = write_together(
        [
            (out / "passes.parquet", parquet_writer(res.pass_columns)),
            (out / "layers.parquet", parquet_writer(res.layer_columns)),
            (out / "results.json", json_writer(res.summary)),
        ]
    )
    (out / CACHED_MARK).unlink(missing_ok=True)  # these results were simulated, not copied
    return paths


def cache_root(cfg: SimConfig) -> Path | None:
    """The result cache's directory, or None (with a warning) when it cannot be written: the run
    then goes on without a cache."""
    env = os.environ.get("HOBBIT_CACHE")
    given, knob = (cfg.cache_dir, "cache_dir=") if cfg.cache_dir else (env, "HOBBIT_CACHE=") if env else (None, "")
    root = (Path(given).expanduser() if given else Path.home() / ".cache" / "hobbit") / "sim"  # '~/x' is home's x
    try:
        root.mkdir(parents=True, exist_ok=True)
        if os.access(root, os.W_OK | os.X_OK):
            return root
    except OSError:
        pass
    fix = f"{knob or 'cache_dir='}A/WRITABLE/DIR" + (
        f", or unset HOBBIT_CACHE for {Path.home() / '.cache/hobbit'}" if knob == "HOBBIT_CACHE=" else ""
    )
    warnings.warn(f"result cache {root} is not writable: running without it (fix: {fix})", stacklevel=2)
    return None


def config_blob(cfg: SimConfig, trace_path: Path) -> str:
    """What determines a run's results, as JSON: the trace's bytes (their SHA-256) and every knob of the run."""
    digest = _sha256(trace_path)
    knobs = {
        k: v
        for k, v in dataclasses.asdict(cfg).items()
        if k not in ("trace", "out_dir", "cache_dir", "use_cache", "timeline", "timeline_tokens", "sweep_chunk")
    }
    return json.dumps({"trace_sha256": digest, "knobs": knobs, "format": RESULTS_FORMAT}, sort_keys=True, default=str)


def key_of(blob: str) -> str:
    """A cache entry's name: the first 32 hex digits of its blob's SHA-256."""
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def _sha256(path: Path) -> str:
    st = path.stat()
    key = (str(path.resolve()), st.st_mtime_ns, st.st_size)
    if key not in _DIGESTS:  # a sweep asks for its trace's digest once per point
        _DIGESTS[key] = _file_sha256(path)
    return _DIGESTS[key]


_DIGESTS: dict[tuple, str] = {}


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _verified(entry: Path, blob: str | None) -> bool:
    """Whether a cache entry is whole and holds the results it is named for: its manifest lists every result file
    with the checksum it has, and the blob it was written for, which hashes to the entry's name and is the blob
    asked for (``blob``; None: any that hashes to the name). An entry copied or renamed under another key fails."""
    try:
        manifest = json.loads((entry / MANIFEST).read_text())
        files, held = manifest["files"], manifest["blob"]
        whole = all(files.get(f) == _sha256(entry / f) for f in RESULT_FILES)
        return whole and key_of(held) == entry.name and (blob is None or held == blob)
    except (OSError, ValueError, AttributeError, KeyError, TypeError):
        return False


def from_cache(entry: Path, out: Path, blob: str | None = None) -> bool:
    """Copy a finished run's files into ``out`` if the cache holds it whole, for ``blob`` (``config_blob``); a
    corrupt, partial or misplaced entry (one whose files belong to another key) is dropped with a warning (the run is
    simulated again and cached anew), never copied."""
    if not entry.exists():
        return False
    if not _verified(entry, blob):
        warnings.warn(
            f"result cache entry {entry} is corrupt, partial or holds another run's results: ignored, simulating again",
            stacklevel=2,
        )
        shutil.rmtree(entry, ignore_errors=True)
        return False
    copies = [(out / f, lambda tmp, f=f: shutil.copyfile(entry / f, tmp)) for f in RESULT_FILES]
    # the mark before results.json: a reader that finds results.json finds the rest
    write_together([*copies[:-1], (out / CACHED_MARK, text_writer(entry.name + "\n")), copies[-1]])
    return True


def to_cache(out: Path, entry: Path, blob: str) -> None:
    """Keep a finished run's files under ``entry`` with their checksums and the ``blob`` they are the results of
    (atomically: a directory renamed into place). A cache that cannot be written is skipped with a warning; the run's
    own files stand."""
    tmp = entry.with_name(f".{entry.name}.{os.getpid()}.tmp")
    try:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        for f in RESULT_FILES:
            shutil.copyfile(out / f, tmp / f)
        manifest = {"files": {f: _sha256(tmp / f) for f in RESULT_FILES}, "blob": blob}
        (tmp / MANIFEST).write_text(json.dumps(manifest) + "\n")
        shutil.rmtree(entry, ignore_errors=True)  # a corrupt entry dropped earlier, or a twin's
        os.replace(tmp, entry)
    except OSError as exc:
        warnings.warn(f"result cache {entry.parent}: could not keep this run ({exc.strerror or exc})", stacklevel=2)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
