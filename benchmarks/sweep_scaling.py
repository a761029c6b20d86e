"""Sweep throughput with the joblib launcher: configurations per minute with 1 and 2 workers.

    python benchmarks/sweep_scaling.py [--configs 16] [--requests 6]

Runs the same ``hobbit sim -m`` sweep (the bundled trace's first --requests requests,
--configs configurations of T1 x cache size, result cache off) once with ``n_jobs=1`` and
once with ``n_jobs=2``, each in a fresh process, and ends with one line
``configs_per_min_1=<f> configs_per_min_2=<f> ratio=<f>``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def small_trace(path: Path, requests: int) -> Path:
    from hobbit.traces.io import Trace, read_trace, write_trace
    from hobbit.traces.tiny import bundled_trace

    tr = read_trace(bundled_trace())
    keep = np.flatnonzero(tr.arrays.request_id < requests)
    return write_trace(path, tr.arrays.take(keep), Trace(tr.meta, tr.arrays).meta)


def sweep(trace: Path, configs: int, jobs: int, out: Path) -> float:
    half = configs // 2
    t1 = ",".join(f"{0.3 + 0.6 * i / max(half - 1, 1):.3f}" for i in range(half))
    cmd = [sys.executable, "-m", "hobbit", "sim", "-m", f"trace={trace}", f"system.precision.t1={t1}",
           "system.cache.high_bytes=6000000000,12000000000", "system.cache.low_bytes=3000000000", "use_cache=false",
           f"hydra.launcher.n_jobs={jobs}", f"hydra.sweep.dir={out}"]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    n = len(list(out.glob("*/results.json")))
    assert n == 2 * half, n
    return n / ((time.perf_counter() - t0) / 60)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", type=int, default=16)
    ap.add_argument("--requests", type=int, default=6)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        trace = small_trace(Path(d) / "trace.parquet", args.requests)
        rate = {jobs: sweep(trace, args.configs, jobs, Path(d) / f"sweep{jobs}") for jobs in (1, 2)}
    for jobs, r in rate.items():
        print(f"n_jobs={jobs}: {r:.1f} configurations / minute")
    print(f"configs_per_min_1={rate[1]:.2f} configs_per_min_2={rate[2]:.2f} ratio={rate[2] / rate[1]:.3f}")


if __name__ == "__main__":
    main()
