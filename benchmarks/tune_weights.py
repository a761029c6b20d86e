"""Tune HOBBIT's four cache weights on a calibration trace, then check them out of sample.

    python benchmarks/tune_weights.py                # grid step 0.25 on the simplex, 2 jobs

The paper tunes the weights of Eq. 3 on a calibration set and does not publish them (§3.4).
Here the calibration set is the bundled model's trace (Mixtral-8x7B on an RTX 4090); every
point of the simplex grid (w_lru + w_lfu + w_lhu + w_fld = 1, step 0.25) is simulated on it,
and the best, equal weights, each term alone and HOBBIT with an LRU cache are then run on the
shared real traces, which the tuning never saw, on devices too small for their experts. Prints
Markdown tables (the README's) and where the best point sits.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

from joblib import Parallel, delayed
from real_traces import flame_and_qwen

from hobbit.api import configure, read_trace, simulate_config

STEP = 4  # quarters


def _ms(trace, model: str, hardware: str, *over: str, system: str = "hobbit") -> float:
    cfg = configure(model, hardware, system, engine="plain", overrides=list(over))
    return simulate_config(trace, cfg).summary["decode_ms_per_token"]["mean"]


def _weights(w: tuple[float, ...]) -> list[str]:
    return [f"system.cache.multidim.w_{n}={x}" for n, x in zip(("lru", "lfu", "lhu", "fld"), w)]


def grid() -> list[tuple[float, ...]]:
    pts = [
        tuple(c / STEP for c in combo) for combo in itertools.product(range(STEP + 1), repeat=4) if sum(combo) == STEP
    ]
    return sorted(pts)


def main(jobs: int = 2) -> None:
    bundled = read_trace()
    pts = grid()
    ms = Parallel(n_jobs=jobs)(delayed(_ms)(bundled, "mixtral-8x7b", "rtx4090-pcie4", *_weights(w)) for w in pts)
    ranked = sorted(zip(ms, pts))
    best = ranked[0][1]
    print(
        f"calibration (bundled trace, mixtral-8x7b on rtx4090-pcie4, {len(pts)} points): best w_lru, w_lfu, "
        f"w_lhu, w_fld = {best}: {ranked[0][0]:.1f} ms/token; worst {ranked[-1][0]:.1f}"
    )
    for m, w in ranked[:5]:
        print(f"  {w}: {m:.1f}")
    flame, qwen = flame_and_qwen(Path("/tmp/hobbit-tune-weights"))
    cases = [
        ("bundled, 4090", bundled, "mixtral-8x7b", []),
        ("FLAME-290M, 3 GB", flame, "flame-moe-290m", ["hardware.device_memory_bytes=3000000000"]),
        ("Qwen1.5-MoE, 12 GB", qwen, "qwen1.5-moe-a2.7b", [f"hardware.device_memory_bytes={12 * 2**30}"]),
    ]
    variants = [
        ("tuned " + str(best), _weights(best), "hobbit"),
        ("equal", _weights((0.25,) * 4), "hobbit"),
        ("FLD only", _weights((0, 0, 0, 1)), "hobbit"),
        ("LRU term only", _weights((1, 0, 0, 0)), "hobbit"),
        ("LFU term only", _weights((0, 1, 0, 0)), "hobbit"),
        ("LHU term only", _weights((0, 0, 1, 0)), "hobbit"),
        ("hobbit-lru", [], "hobbit-lru"),
    ]
    print("\n| weights (w_lru, w_lfu, w_lhu, w_fld) | " + " | ".join(c[0] for c in cases) + " |")
    print("|---|" + "---|" * len(cases))
    for name, over, system in variants:
        row = Parallel(n_jobs=jobs)(
            delayed(_ms)(tr, model, "rtx4090-pcie4", *extra, *over, system=system) for _, tr, model, extra in cases
        )
        print(f"| {name} | " + " | ".join(f"{x:.2f}" for x in row) + " |")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
