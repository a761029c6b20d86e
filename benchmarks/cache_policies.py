"""Does HOBBIT's multi-dimensional cache beat the LRU family, and how far is each policy from the optimum?

    python benchmarks/cache_policies.py          # 2 jobs

Every eviction policy of the registry, as HOBBIT's cache (mixed precision, prefetch: the policy is the
only change) and as a plain cache (on-demand loading: one precision, no prefetch), on the bundled trace
(Mixtral-8x7B on an RTX 4090) and on the shared real traces, which no knob was tuned on, on devices too
small for their experts. Belady (MIN, the layer's experts kept resident) is the optimum of hits; its row
is the distance every other policy is from it. Prints the README's Markdown tables.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import cast

from joblib import Parallel, delayed
from real_traces import flame_and_qwen

from hobbit.api import configure, read_trace, simulate_config

POLICIES = ("multidim", "lru", "lfu", "fifo", "lfru", "arc", "s3fifo", "sieve", "lirs", "belady")


def _run(trace, model: str, system: str, policy: str, *over: str) -> tuple[float, float]:
    cfg = configure(model, "rtx4090-pcie4", system, engine="plain", overrides=[f"system.cache.policy={policy}", *over])
    s = simulate_config(trace, cfg).summary
    return s["decode_ms_per_token"]["mean"], s["hit_rate"]


def cases() -> list[tuple[str, object, str, list[str]]]:
    flame, qwen = flame_and_qwen(Path("/tmp/hobbit-cache-policies"))
    return [
        ("bundled, 4090", read_trace(), "mixtral-8x7b", []),
        ("FLAME-290M, 3 GB", flame, "flame-moe-290m", ["hardware.device_memory_bytes=3000000000"]),
        ("Qwen1.5-MoE, 12 GB", qwen, "qwen1.5-moe-a2.7b", [f"hardware.device_memory_bytes={12 * 2**30}"]),
    ]


def table(system: str, title: str, jobs: int) -> None:
    cs = cases()
    got = cast(  # joblib's default return_as="list"
        list[tuple[float, float]],
        Parallel(n_jobs=jobs)(
            delayed(_run)(tr, model, system, p, *extra) for p in POLICIES for _, tr, model, extra in cs
        ),
    )
    res = {(p, c[0]): got[i * len(cs) + j] for i, p in enumerate(POLICIES) for j, c in enumerate(cs)}
    print(f"\n{title}: decode ms/token (hit rate); x: over the best non-oracle policy of the column\n")
    print("| policy | " + " | ".join(c[0] for c in cs) + " |")
    print("|---|" + "---|" * len(cs))
    best = {c[0]: min(res[(p, c[0])][0] for p in POLICIES if p != "belady") for c in cs}
    for p in POLICIES:
        cells = []
        for c in cs:
            ms, hit = res[(p, c[0])]
            cells.append(f"{ms:.2f} ({hit:.3f}) x{ms / best[c[0]]:.2f}")
        print(f"| {p} | " + " | ".join(cells) + " |")


def main(jobs: int = 2) -> None:
    table("hobbit", "HOBBIT (mixed precision, prefetch) with each cache policy", jobs)
    table("on-demand", "A plain cache (on-demand loading, one precision, no prefetch) with each policy", jobs)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
