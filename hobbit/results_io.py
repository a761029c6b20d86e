"""A run's files, and the result cache that lets an interrupted sweep resume.

``write_results``: results.json, passes.parquet (one row per forward pass) and
layers.parquet, each written atomically. The cache keeps finished runs by what determines
their results (the trace's bytes and every knob), so a rerun skips them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
from pathlib import Path

from hobbit.sim.config import SimConfig
from hobbit.sim.results import Results
from hobbit.traces.io import atomic_write_parquet, atomic_write_text

RESULT_FILES = ("results.json", "passes.parquet", "layers.parquet")
CACHED_MARK = ".cached"  # in a run dir whose results came from the result cache


def write_results(res: Results, out: Path) -> list[Path]:
    """results.json, passes.parquet, layers.parquet under ``out``; results.json is the last path."""
    paths = [atomic_write_parquet(res.passes, out / "passes.parquet"),
             atomic_write_parquet(res.layers, out / "layers.parquet")]
    paths.append(atomic_write_text(out / "results.json", json.dumps(res.summary, indent=1, default=float) + "\n"))
    return paths


def cache_root(cfg: SimConfig) -> Path:
    return Path(cfg.cache_dir or os.environ.get("HOBBIT_CACHE") or Path.home() / ".cache" / "hobbit") / "sim"


def config_key(cfg: SimConfig, trace_path: Path) -> str:
    """What determines a run's results: the trace's bytes and every knob of the run."""
    digest = hashlib.sha256(trace_path.read_bytes()).hexdigest()
    knobs = {k: v for k, v in dataclasses.asdict(cfg).items()
             if k not in ("trace", "out_dir", "cache_dir", "use_cache")}
    blob = json.dumps({"trace_sha256": digest, "knobs": knobs, "format": 1}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def from_cache(entry: Path, out: Path) -> bool:
    """Copy a finished run's files into ``out``; False when the cache has no complete entry."""
    if not all((entry / f).is_file() for f in RESULT_FILES):
        return False
    out.mkdir(parents=True, exist_ok=True)
    for f in RESULT_FILES:
        shutil.copyfile(entry / f, out / f)
    (out / CACHED_MARK).write_text(entry.name + "\n")
    return True


def to_cache(out: Path, entry: Path) -> None:
    """Keep a finished run's files under ``entry`` (atomically: a directory renamed into place)."""
    tmp = entry.with_name(f".{entry.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for f in RESULT_FILES:
        shutil.copyfile(out / f, tmp / f)
    try:
        os.replace(tmp, entry)  # atomic; a concurrent twin may have won, which is as good
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
