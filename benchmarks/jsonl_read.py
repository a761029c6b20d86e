"""Reading the generic JSONL format (``hobbit convert format=jsonl``): rows per second and memory, beside the
same file read a line at a time through the JSON module.

    python benchmarks/jsonl_read.py [--tokens 20000] [--repeats 3]

Writes the bundled trace's requests repeated until they hold --tokens tokens (``sim_speed.repeated_trace``:
32 layers, top-2, lookahead 3: 32 rows a token, each with its predicted experts) as generic JSONL
(``hobbit export``'s writer) to a temporary file, then parses it in fresh processes into the trace's arrays,
sorted and checked (``read_generic_jsonl``, what ``hobbit convert`` does before it writes), each timed from the
read's start to its end:

- ``arrow``: the converter as it runs: the file a piece at a time through Arrow's JSON reader, each piece's rows
  checked as whole arrays;
- ``lines``: every piece a line at a time through the JSON module, each row checked on its own (``arrow=False``;
  what the converter does where Arrow refuses a piece, so that an error names its line).

Memory is the process's peak resident set during the read over its resident set before it. Each figure is the
median of --repeats processes. Ends with one line ``jsonl_rows_per_s=<f> ratio_vs_lines=<f> peak_mib=<f>``: the
converter's rows per second, its speed over the line-by-line reading's, and its peak.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from trace_read import _status_kb, arguments, measure, read_line


def child(mode: str, path: str) -> None:
    """One read in this process; prints its seconds, memory and rows as JSON."""
    from hobbit.traces.jsonl_format import read_generic_jsonl

    before = _status_kb("VmRSS")
    t0 = time.perf_counter()
    a, _ = read_generic_jsonl(Path(path), arrow=mode == "arrow")
    seconds = time.perf_counter() - t0
    print(json.dumps({"seconds": seconds, "rows": len(a), "peak_kb": _status_kb("VmHWM") - before}))


def main() -> None:
    args = arguments(__doc__, 20_000, child)
    if args is None:
        return
    from sim_speed import repeated_trace

    from hobbit.traces.jsonl_format import write_generic_jsonl

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "trace.jsonl"
        tr = repeated_trace(args.tokens)
        write_generic_jsonl(tr.arrays, tr.meta, path)
        del tr
        print(f"{path.stat().st_size / 2**20:.0f} MiB file, {args.tokens:,} tokens")
        got = {mode: measure(mode, path, args.repeats, __file__) for mode in ("arrow", "lines")}
    for mode, g in got.items():
        print(read_line(mode, g))
    a = got["arrow"]
    print(
        f"jsonl_rows_per_s={a['rows'] / a['seconds']:.0f} ratio_vs_lines={got['lines']['seconds'] / a['seconds']:.2f} "
        f"peak_mib={a['peak_kb'] / 1024:.0f}"
    )


if __name__ == "__main__":
    main()
