"""Sweep throughput through the user-facing command: configurations per minute with 1 and 2 workers.

    python benchmarks/sweep_scaling.py [--points 200] [--launcher joblib] [--tokens 20000]

Runs one ``hobbit sim -m`` sweep of the bundled trace, a T1 x T2 x cache split x cache weight grid
(5 x 4 x 2 x 5 = 200 points by default; result cache off), once with ``hydra.launcher.n_jobs=1``
and once with ``n_jobs=2``, each in a fresh process, timed from the command's start to its end
(imports, Hydra, the workers' start and every run directory written included). The ``hobbit``
sweeper (hobbit/plumbing/sweeper.py) launches chunks of configurations, each composed once. A 4-point sweep
per worker count measures the fixed part (the process, imports, Hydra, the workers' start, the
trace read); the rate beyond it is printed too. The sweep's launcher is ``hobbit sim``'s default (``hobbit``:
workers forked from the launching process, hobbit/plumbing/launcher.py) unless ``--launcher`` names another
(``joblib``: fresh worker processes through loky, which inherit nothing the launching process read). Ends with
``configs_per_min=<f> ratio_2_workers=<f>``: the one-worker rate and the two-worker rate over it, whole commands
(targets: 300 / min and 1.9x). The line before it gives what two workers could reach in this run if the
one-worker command's start (its 4-point sweep less those points) stayed as it is and the points took exactly half
the time. ``--tokens N`` sweeps the bundled trace's requests repeated to N tokens instead (written to a temporary
Parquet file): the same command's start before heavier points.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GRID = {
    "system.precision.t1": ["0.3", "0.4", "0.5", "0.6", "0.7"],
    "system.precision.t2": ["0.8", "0.85", "0.9", "0.95"],
    "system.cache.high_fraction": ["0.5", "0.75"],
    "system.cache.multidim.w_fld": ["0.1", "0.2", "0.3", "0.4", "0.5"],
}


def grid(points: int) -> list[str]:
    """The first axes of GRID whose product is ``points`` or more; the last axis cut to fit."""
    out, n = [], 1
    for key, values in GRID.items():
        take = values[: max(1, min(len(values), -(-points // n)))]
        out.append(f"{key}={','.join(take)}")
        n *= len(take)
        if n >= points:
            break
    return out


def sweep(
    points: int, jobs: int, out: Path, launcher: str | None = None, trace: Path | None = None
) -> tuple[float, int]:
    """(seconds the command took, run directories it wrote)."""
    cmd = [
        sys.executable,
        "-m",
        "hobbit",
        "sim",
        "-m",
        *grid(points),
        "use_cache=false",
        *([f"hydra/launcher={launcher}"] if launcher else []),
        *([f"trace={trace}"] if trace else []),
        f"hydra.launcher.n_jobs={jobs}",
        f"hydra.sweep.dir={out}",
    ]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - t0, len(list(out.glob("*/results.json")))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--points", type=int, default=200)
    ap.add_argument("--launcher", default=None, help="a hydra/launcher option (default: hobbit sim's, hobbit)")
    ap.add_argument(
        "--tokens",
        type=int,
        default=0,
        help="sweep the bundled trace's requests repeated to this many "
        "tokens (sim_speed.repeated_trace) instead of the bundled trace: heavier points, the same start",
    )
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        trace = None
        if args.tokens:
            from sim_speed import repeated_trace

            from hobbit.traces.io import write_trace

            tr = repeated_trace(args.tokens)
            trace = write_trace(Path(d) / "repeated.parquet", tr.arrays, tr.meta)
            print(f"trace: the bundled trace's requests repeated, {len(tr.arrays) // len(tr.meta.layers):,} tokens")
        sweep(4, 1, Path(d) / "warm", trace=trace)  # numba's on-disk cache filled, files in the page cache
        rate, beyond, smalls, walls = {}, {}, {}, {}
        for jobs in (1, 2):
            small, _ = sweep(4, jobs, Path(d) / f"small{jobs}", args.launcher, trace)  # the fixed part: start, ...
            wall, n = sweep(args.points, jobs, Path(d) / f"sweep{jobs}", args.launcher, trace)
            rate[jobs], beyond[jobs] = n / (wall / 60), (n - 4) / ((wall - small) / 60)
            smalls[jobs], walls[jobs] = small, wall
            print(
                f"n_jobs={jobs}: {n} configurations in {wall:.1f} s, {rate[jobs]:.1f} / minute; a 4-point sweep took "
                f"{small:.1f} s, the other {n - 4} points {rate[jobs] and beyond[jobs]:.1f} / minute"
            )
    print(f"beyond the fixed start: ratio_2_workers={beyond[2] / beyond[1]:.2f}")
    # what two workers could give, whole commands, if the start stayed as with one and every point took exactly half
    # the time: the start is the 4-point sweep less its points (at the one-worker rate beyond it); 1.9 needs that
    # start under about 1/18 of the points' time
    start = smalls[1] - 4 * 60 / beyond[1]
    print(
        f"with a perfect split beyond the start (about {start:.1f} s of {walls[1]:.1f} s with one worker): "
        f"ratio_2_workers about {walls[1] / (start + (walls[1] - start) / 2):.2f}"
    )
    print(f"configs_per_min={rate[1]:.1f} ratio_2_workers={rate[2] / rate[1]:.2f}")


if __name__ == "__main__":
    main()
