"""Reading a trace file: rows per second and memory, beside pyarrow decoding the same file.

    python benchmarks/trace_read.py [--tokens 200000] [--repeats 3]

Writes the bundled trace's requests repeated until they hold --tokens tokens (``sim_speed.repeated_trace``:
32 layers, top-2, lookahead 3, 32 rows a token) to a temporary file, then reads it in fresh processes, each
timed from the read's start to its end:

- ``read_trace``: what every command does with a trace (``hobbit.traces.io.read_trace``): the file decoded a
  chunk of rows at a time, every row checked against schema v1 into the trace's dense arrays;
- ``decode``: pyarrow alone decoding the whole file into one table (``ParquetFile.read``), no checks, no arrays.

Memory is the process's peak resident set during the read over its resident set before it, next to the bytes
of the trace's arrays (what a run then holds). Each figure is the median of --repeats processes. Ends with one
line ``read_rows_per_s=<f> ratio_vs_decode=<f> peak_over_arrays=<f>``: the reader's rows per second, its time
over the decode's, and its peak over the arrays.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _status_kb(key: str) -> int:
    """A figure of /proc/self/status in KiB (VmRSS: resident now; VmHWM: the peak, this program's own: unlike
    ``ru_maxrss`` it does not count the launching process's memory, which a fork then exec carries into it)."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key + ":"))


def child(mode: str, path: str) -> None:
    """One read in this process; prints its seconds, memory and rows as JSON."""
    import numpy as np
    import pyarrow.parquet as pq

    from hobbit.traces.io import read_trace

    before = _status_kb("VmRSS")
    t0 = time.perf_counter()
    if mode == "decode":
        table = pq.ParquetFile(path).read()
        rows, held = table.num_rows, table.nbytes
    else:
        a = read_trace(path).arrays
        rows = len(a)
        held = sum(getattr(a, f).nbytes for f in a.__dataclass_fields__ if isinstance(getattr(a, f), np.ndarray))
    seconds = time.perf_counter() - t0
    peak = _status_kb("VmHWM")
    print(json.dumps({"seconds": seconds, "rows": rows, "held": held, "peak_kb": peak - before}))


def measure(mode: str, path: Path, repeats: int, script: str = __file__) -> dict[str, float]:
    """The median of each figure ``script --child mode path`` prints (its last line, JSON), over ``repeats``
    fresh processes."""
    runs = []
    for _ in range(repeats):
        out = subprocess.run(
            [sys.executable, script, "--child", mode, str(path)], check=True, capture_output=True, text=True
        ).stdout
        runs.append(json.loads(out.strip().splitlines()[-1]))
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def read_line(mode: str, g: dict[str, float]) -> str:
    """One mode's figures (``measure``'s): rows, seconds, rows per second, peak over the start."""
    return (
        f"  {mode:<7} {g['rows']:,.0f} rows in {g['seconds']:.2f} s ({g['rows'] / g['seconds']:,.0f} rows/s); "
        f"peak {g['peak_kb'] / 1024:,.0f} MiB over the start"
    )


def arguments(doc: str | None, tokens: int, child_of) -> argparse.Namespace | None:
    """A benchmark's arguments (--tokens, --repeats); None after running ``child_of(mode, path)`` when this
    process is one of its children (--child MODE PATH)."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=tokens)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--child", nargs=2, metavar=("MODE", "PATH"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child_of(*args.child)
        return None
    return args


def main() -> None:
    args = arguments(__doc__, 200_000, child)
    if args is None:
        return
    sys.path.insert(0, str(Path(__file__).parent))
    from sim_speed import repeated_trace

    from hobbit.traces.io import write_trace

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "trace.parquet"
        tr = repeated_trace(args.tokens)
        write_trace(path, tr.arrays, tr.meta)
        del tr
        print(f"{path.stat().st_size / 2**20:.0f} MiB file, {args.tokens:,} tokens")
        measure("read", path, 1)  # the file in the page cache, as a sweep's later reads find it
        got = {mode: measure(mode, path, args.repeats) for mode in ("decode", "read")}
    for mode, g in got.items():
        what = "the table" if mode == "decode" else "the arrays"
        print(f"{read_line(mode, g)}, {what} {g['held'] / 2**20:,.0f} MiB")
    r = got["read"]
    print(
        f"read_rows_per_s={r['rows'] / r['seconds']:.0f} ratio_vs_decode={r['seconds'] / got['decode']['seconds']:.2f} "
        f"peak_over_arrays={r['peak_kb'] * 1024 / r['held']:.2f}"
    )


if __name__ == "__main__":
    main()
