"""How steady is this machine? The floor under which a simulator's error cannot be told apart.

A single thread, pinned to one core, runs the same DRAM-bound work (one-token matmuls through
more expert-sized bf16 weights than a large LLC holds) over and over for ``--seconds``; each
sample's time is printed relative to the median. A shared VM whose speed moves between states
shows it here: ``hobbit validate``'s ``noise_mape`` has the same cause. Ends with
``machine_noise cv=<float> p90_over_p10=<float>``.

    python benchmarks/machine_noise.py [--seconds 60]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--mib", type=int, default=384, help="weights cycled through (MiB)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    g = torch.Generator().manual_seed(0)
    per = 3584 * 512 * 2  # one expert's gate/up at Mixtral / 8 in bf16
    ws = [torch.randn(3584, 512, generator=g).to(torch.bfloat16) for _ in range(max(1, args.mib * 2**20 // per))]
    x = torch.randn(1, 512, generator=g).to(torch.bfloat16)
    samples = []
    end = time.perf_counter() + args.seconds
    with torch.no_grad():
        while time.perf_counter() < end:
            t0 = time.perf_counter()
            for w in ws:
                _ = x @ w.t()
            samples.append(time.perf_counter() - t0)
    s = np.array(samples[1:] or samples)
    rel = s / np.median(s)
    print(f"{len(s)} samples of {1e3 * np.median(s):.1f} ms (median); each relative to the median:")
    print(" ".join(f"{r:.2f}" for r in rel))
    p10, p90 = np.percentile(s, [10, 90])
    print(f"machine_noise cv={s.std() / s.mean():.4f} p90_over_p10={p90 / p10:.4f}")


if __name__ == "__main__":
    main()
