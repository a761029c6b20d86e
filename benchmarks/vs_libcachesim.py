"""hobbit's whole run against libCacheSim's on the same expert-access stream, side by side in one run.

    python benchmarks/vs_libcachesim.py [--accesses 6400000] [--slots 64] [--repeats 3]

The stream: the bundled model's trace (real routing of the tiny Mixtral-shaped model), its requests repeated under
new ids until it holds --accesses expert accesses. An access is an (expert, layer) a forward pass uses, once per
pass, in the order the decision walk serves them (pass by pass, layer by layer, router order), as
``tests/test_libcachesim.py`` builds it.

- hobbit: ``hobbit.sim.run.simulate`` of that trace, system ``on-demand`` (one precision, a copy on every miss,
  nothing ahead) with an LRU cache of exactly --slots experts (``system.cache.high_bytes``), on h200-pcie5, the
  compiled core, streaming (``keep_decisions=False``, as ``hobbit sim`` runs): the decisions, the link's timing and
  the summary. The trace is in memory already; the time starts at ``simulate``.
- libCacheSim (github.com/1a1a11a/libCacheSim, its ``libcachesim`` bindings): ``LRU(slots).process_trace`` of the
  same stream written as its oracleGeneral binary trace (24 bytes a request), the reader included; writing the file
  is not timed.

Both must give the same hit ratio (checked). Each time is the median of --repeats runs after a warm-up. Ends with
``ratio_vs_libcachesim=<f>``: hobbit's seconds over libCacheSim's for the same accesses (1.0: as fast; hobbit also
times the link, which libCacheSim does not).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

ORACLE_GENERAL = np.dtype([("t", "<u4"), ("id", "<u8"), ("size", "<u4"), ("next", "<i8")])  # 24 bytes, packed


def repeated_trace(copies: int):
    """The bundled trace ``copies`` times over, each copy's requests under new ids."""
    from hobbit.traces.arrays import TraceArrays
    from hobbit.traces.io import Trace, read_trace
    from hobbit.traces.tiny import bundled_trace

    tr = read_trace(bundled_trace())
    a = tr.arrays
    n_req = int(a.request_id.max()) + 1
    rows = np.tile(np.arange(len(a)), copies)
    out = a.take(rows)
    out = TraceArrays(**{f: getattr(out, f) for f in TraceArrays.__dataclass_fields__})
    shift = np.repeat(np.arange(copies, dtype=np.int64) * n_req, len(a))
    out.request_id = (out.request_id + shift).astype(a.request_id.dtype)
    return Trace(tr.meta, out, f"bundled x {copies}")


def accesses(trace) -> np.ndarray:
    """The trace's expert accesses as object ids (layer x experts + expert + 1), in the walk's order."""
    from hobbit.sim.workload import build_workload

    wl = build_workload(trace)
    E, out = wl.num_experts, []
    for a, b in zip(wl.pass_start, wl.pass_end):
        for layer in range(wl.num_layers):
            out.extend(dict.fromkeys(layer * E + e + 1 for e in wl.ids[a:b, layer].ravel().tolist()))
    return np.asarray(out, np.uint64)


def median_seconds(run, repeats: int) -> float:
    run()  # warm-up: numba's compiled code loaded (or compiled), files cached
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--accesses", type=int, default=6_400_000)
    ap.add_argument("--slots", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)

    import libcachesim as lcs

    from hobbit.plumbing.glue import compose
    from hobbit.sim.config import SimConfig
    from hobbit.sim.run import simulate

    one = repeated_trace(1)
    per_copy = accesses(one)
    copies = max(-(-args.accesses // len(per_copy)), 1)
    trace = repeated_trace(copies)
    stream = np.tile(per_copy, copies)  # each copy's passes follow the last copy's: the same stream, repeated
    n = len(stream)

    base = compose("sim", SimConfig, ["out_dir=.", "system=on-demand", "hardware=h200-pcie5"])
    expert = base.model.expert_bytes("fp16")
    cfg = compose(
        "sim",
        SimConfig,
        [
            "out_dir=.",
            "system=on-demand",
            "hardware=h200-pcie5",
            "system.cache.policy=lru",
            f"system.cache.high_bytes={args.slots * expert}",
            "system.cache.low_bytes=0",
        ],
    )
    results = {}

    def ours() -> None:
        results["hobbit"] = simulate(
            trace, cfg.model, cfg.hardware, cfg.system, profile_share=0.0, keep_decisions=False
        )

    with tempfile.TemporaryDirectory(prefix="hobbit-lcs-") as tmp:
        path = Path(tmp) / "stream.oracleGeneral.bin"
        records = np.zeros(n, ORACLE_GENERAL)
        records["t"], records["id"], records["size"], records["next"] = np.arange(n) // 1000, stream, 1, -1
        records.tofile(path)

        def theirs() -> None:
            # libcachesim's stubs declare TraceReader abstract and omit TraceType; both exist at run time
            kind = lcs.TraceType.ORACLE_GENERAL_TRACE  # pyright: ignore[reportAttributeAccessIssue]
            reader = lcs.TraceReader(str(path), kind)  # pyright: ignore[reportAbstractUsage]
            results["libcachesim"] = lcs.LRU(args.slots).process_trace(reader)

        t_ours = median_seconds(ours, args.repeats)
        t_theirs = median_seconds(theirs, args.repeats)

    res = results["hobbit"]
    slots = res.summary["cache"]
    assert slots["high_slots"] == args.slots, slots
    mix = res.summary["served_mix"]
    hit_ours = mix["high_hit"] / (mix["high_hit"] + mix["high_load"])
    hit_theirs = 1.0 - results["libcachesim"][0]
    print(f"stream: {n:,} accesses ({copies} copies of the bundled trace), LRU of {args.slots} experts")
    print(f"hobbit      seconds={t_ours:.3f} maccesses_per_s={n / t_ours / 1e6:.2f} hit_ratio={hit_ours:.6f}")
    print(f"libcachesim seconds={t_theirs:.3f} maccesses_per_s={n / t_theirs / 1e6:.2f} hit_ratio={hit_theirs:.6f}")
    assert abs(hit_ours - hit_theirs) < 1e-9, "the two caches disagree on the same stream"
    print(f"ratio_vs_libcachesim={t_ours / t_theirs:.2f}")


if __name__ == "__main__":
    main()
