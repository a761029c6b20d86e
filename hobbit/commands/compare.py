"""``hobbit compare``: every system, and HOBBIT tuned for it, on your trace and machine, ranked
(``hobbit.studies.compare.compare``); prints the table and writes compare.md, compare.json and compare.png."""

from __future__ import annotations

import time
from pathlib import Path

from hobbit.api import trace_file, trace_of
from hobbit.plumbing.glue import CONF, hydra_command
from hobbit.plumbing.results_io import decode_text
from hobbit.studies.compare import CompareConfig, compare


@hydra_command(CONF, "compare", CompareConfig)
def compare_main(cfg: CompareConfig) -> None:
    """Every system, and HOBBIT tuned on held-apart requests, on one trace and machine, ranked."""
    t0 = time.perf_counter()
    trace = trace_of(trace_file(cfg.trace, cfg.model, cfg.seed), cfg.window_tokens)
    out = Path(cfg.out_dir)
    s = compare(trace, cfg, out)
    print(s["table"])
    best = s["systems"][0]
    print(f"\nfastest: {best['system']}, decode {decode_text(best['decode_ms_per_token']['mean'])}")
    print(f"{s['note']}; done in {time.perf_counter() - t0:.0f} s")
    for p in s["files"]:
        print(f"  {Path(p).resolve()}")
