"""Peak memory of a run over a long trace: read a window at a time (``window_tokens``, ``sim.windowed``) against read
whole, each in a child process of its own (its peak resident set, ``VmHWM``: Linux's ``ru_maxrss`` would carry the
writer's peak across the child's ``exec``), on a synthetic Mixtral-shaped trace.

The trace: requests of 512 prompt tokens (one prefill pass) and 512 decoded tokens, 32 MoE layers of 8 experts, top-2
drawn per layer from a Zipf popularity (exponent 0.8, each layer's own order) and softmaxed gate weights; no
predictions (a serving log's), so HOBBIT's prefetcher runs on the oracle fallback. Written a block of requests at a
time (``TraceWriter``), so the writer's memory is a block's.

    python benchmarks/long_trace.py --tokens 10000000 --whole-tokens 1000000

prints ``peak_mb_windowed=<f>`` for --tokens, and for --whole-tokens both ``peak_mb_whole=`` and the windowed run's
peak on that same trace (``ratio_whole_to_windowed=``), and each run's decode ms/token (the same within the
fallback's draws)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

L, E, K = 32, 8, 2
PROMPT, DECODE = 512, 512
BLOCK_REQUESTS = 16


def write_trace(path: Path, tokens: int, seed: int = 0) -> int:
    """A trace of about ``tokens`` tokens at ``path``; the tokens written."""
    from hobbit.traces.arrays import TraceArrays
    from hobbit.traces.io import TraceWriter
    from hobbit.traces.schema import ModelSpec, TraceMeta

    rng = np.random.default_rng(seed)
    meta = TraceMeta(
        model=ModelSpec(
            name="synthetic-mixtral",
            architecture="synthetic",
            num_layers=L,
            num_experts=E,
            top_k=K,
            weight_rule="softmax",
        ),
        lookahead_depth=0,
        source={"generator": "benchmarks/long_trace.py", "seed": seed},
    )
    logp = np.log(1.0 / np.arange(1, E + 1) ** 0.8)
    order = np.stack([rng.permutation(E) for _ in range(L)])  # each layer's popularity order
    logits = np.take_along_axis(np.broadcast_to(logp, (L, E)), np.argsort(order, axis=1), axis=1)  # [L, E]
    per = PROMPT + DECODE
    n_req = max(1, tokens // per)
    step = np.r_[np.zeros(PROMPT, np.int32), np.arange(1, DECODE + 1, dtype=np.int32)]
    phase = np.r_[np.zeros(PROMPT, np.int8), np.ones(DECODE, np.int8)]
    written = 0
    with TraceWriter(path, meta) as w:
        for r0 in range(0, n_req, BLOCK_REQUESTS):
            r = min(BLOCK_REQUESTS, n_req - r0)
            n = r * per
            g = logits[None] + rng.gumbel(size=(n, L, E))  # Gumbel-top-k: K draws without replacement
            top = np.argsort(-g, axis=2)[:, :, :K]
            lg = np.take_along_axis(g, top, axis=2)
            wts = np.exp(lg - lg.max(axis=2, keepdims=True))
            wts /= wts.sum(axis=2, keepdims=True)
            rows = n * L
            req = np.repeat(np.arange(r0, r0 + r, dtype=np.int32), per * L)
            w.write(
                TraceArrays(
                    request_id=req,
                    phase=np.tile(np.repeat(phase, L), r),
                    step=np.tile(np.repeat(step, L), r),
                    position=np.tile(np.repeat(np.arange(per, dtype=np.int32), L), r),
                    layer=np.tile(np.arange(L, dtype=np.int16), n),
                    expert_ids=top.reshape(rows, K).astype(np.int16),
                    gate_weights=wts.reshape(rows, K).astype(np.float32),
                )
            )
            written += n
    return written


CHILD = """
import json, sys, time
import numpy as np
from hobbit import api
path, window = sys.argv[1], int(sys.argv[2])
cfg = api.configure("mixtral-8x7b", "rtx4090-pcie4", "hobbit", window_tokens=window)
t = time.perf_counter()
if window:
    res = api.simulate_file_config(path, cfg)
else:
    res = api.simulate_config(api.read_trace(path), cfg, keep_decisions=False)
hwm = [int(x.split()[1]) for x in open("/proc/self/status") if x.startswith("VmHWM")]  # this process image's peak
print(json.dumps({"peak_mb": hwm[0] / 1024, "wall_s": time.perf_counter() - t,
                  "decode_ms": res.summary["decode_ms_per_token"]["mean"], "tokens": res.summary["tokens"]["total"]}))
"""


def run(path: Path, window: int) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), str(window)], capture_output=True, text=True, check=False
    )
    if out.returncode:
        raise SystemExit(f"child failed ({out.returncode}): {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=10_000_000, help="the long trace's tokens (windowed run only)")
    ap.add_argument("--whole-tokens", type=int, default=1_000_000, help="a trace run both ways (0: none)")
    ap.add_argument("--window", type=int, default=1 << 13, help="window_tokens of the windowed runs")
    ap.add_argument("--dir", default=None, help="where the traces are written (default: a temporary folder)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=a.dir) as d:
        warm = Path(d) / "warm.parquet"  # both ways once, so that no measured run's peak is the compiler's
        write_trace(warm, 4 * (PROMPT + DECODE))
        for w in (0, a.window):
            run(warm, w)
        if a.whole_tokens:
            p = Path(d) / "whole.parquet"
            t = time.perf_counter()
            n = write_trace(p, a.whole_tokens)
            print(f"wrote {n:,} tokens ({p.stat().st_size / 2**20:.0f} MiB) in {time.perf_counter() - t:.0f} s")
            whole, win = run(p, 0), run(p, a.window)
            print(f"whole    {n:,} tokens: {json.dumps(whole)}")
            print(f"windowed {n:,} tokens: {json.dumps(win)}")
            print(f"peak_mb_whole={whole['peak_mb']:.0f}")
            print(f"ratio_whole_to_windowed={whole['peak_mb'] / win['peak_mb']:.2f}")
            os.unlink(p)
        if a.tokens:
            p = Path(d) / "long.parquet"
            t = time.perf_counter()
            n = write_trace(p, a.tokens)
            print(f"wrote {n:,} tokens ({p.stat().st_size / 2**20:.0f} MiB) in {time.perf_counter() - t:.0f} s")
            win = run(p, a.window)
            print(f"windowed {n:,} tokens: {json.dumps(win)}")
            print(f"peak_mb_windowed={win['peak_mb']:.0f}")


if __name__ == "__main__":
    main()
