"""Simulation speed: token-layers per second of the whole run (decisions + timing + summary), trace loaded.

    python benchmarks/sim_speed.py [--tokens 10000] [--system hobbit] [--qwen-tokens 2000]
                                   [--scale 10000,100000,1000000] [--repeats 3] [--systems all]

1. Mixtral topology (32 layers, 8 experts, top-2): the bundled model's trace (real routing),
   its requests repeated under new ids until it holds --tokens tokens, model mixtral-8x7b on
   rtx4090-pcie4. ``simulate(engine="fast")`` (the compiled core) and ``engine="plain"`` (the
   Python reference walk and timing) run side by side on the same trace; both must give the
   same times.
2. Qwen3.5-397B topology (60 layers, 512 experts, top-10): a synthetic trace
   (``traces.synthetic``) on h200-pcie5; the reference runs on its first 160 tokens only
   (its Python walk is too slow for more), the compiled core on all --qwen-tokens. Under multidim, the compiled core
   again without the FLD term (``w_fld=0``): the layers' bounds then tie, and an eviction visits a third of
   the layers (most through the victim each layer keeps while it does not change).
3. Scale: the compiled core on 10^4, 10^5 and 10^6 tokens of the repeated Mixtral trace, each
   from a fresh trace object, streaming as ``hobbit sim`` and sweeps do (``keep_decisions=False``:
   a chunk of passes walked, timed and dropped at a time): seconds and token-layers/s, then in a
   second run (tracing slows allocation) the peak of memory allocated during it (tracemalloc,
   numpy's arrays included), next to the trace's own arrays; then the same peak for a run that
   keeps its decisions (``keep_decisions=True``, the Python API's default).

4. With ``--systems``: each named system's compiled-core rate on the traces of 1 and 2 (``all``: every
   preset of conf/system), the cost of a ``hobbit compare`` or ``hobbit reproduce`` run system by system.

Each rate is the median of --repeats runs after a warm-up (numba loads its compiled code
from its on-disk cache, or compiles it once), each laying its trace out afresh (the rate with
the layout already prepared, as a sweep's later points find it, is printed beside). Ends with one line
``token_layers_per_s=<f> ratio_vs_reference=<f>`` for part 1 (target: 1,000,000 on one
core), after one ``qwen_token_layers_per_s=<f>`` line (target 300,000).
"""

from __future__ import annotations

import argparse
import statistics
import time
import tracemalloc
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from hobbit.sim.results import Results


def repeated_trace(tokens: int):
    """The bundled trace's requests repeated under new ids (whole requests) until it holds ``tokens`` tokens."""
    from hobbit.traces.arrays import TraceArrays
    from hobbit.traces.io import Trace, read_trace
    from hobbit.traces.tiny import bundled_trace

    tr = read_trace(bundled_trace())
    a, L = tr.arrays, len(tr.meta.layers)
    req = a.request_id
    n_req = int(req.max()) + 1
    per_req = np.bincount(req, minlength=n_req) // L  # tokens of each request
    reps = -(-tokens // int(per_req.sum()))
    cum = np.cumsum(np.tile(per_req, reps))
    keep_reqs = int(np.searchsorted(cum, tokens)) + 1  # whole requests, at least ``tokens`` tokens
    full, part = divmod(keep_reqs, n_req)
    rows = np.concatenate(
        [np.arange(len(a))] * full + [np.flatnonzero(req < part)] if part else [np.arange(len(a))] * full
    )
    shift = np.repeat(
        np.arange(full + (1 if part else 0)) * n_req, [len(a)] * full + ([int((req < part).sum())] if part else [])
    )
    out = a.take(rows)
    out = TraceArrays(**{f: getattr(out, f) for f in TraceArrays.__dataclass_fields__})
    out.request_id = (out.request_id + shift).astype(a.request_id.dtype)
    return Trace(tr.meta, out, "bundled x repeated")


def qwen_trace(tokens: int):
    from hobbit.traces.io import Trace
    from hobbit.traces.synthetic import SyntheticConfig, generate

    requests = max(tokens // 160, 1)
    arrays, meta = generate(
        SyntheticConfig(
            name="synthetic-qwen3.5-397b",
            num_layers=60,
            num_experts=512,
            top_k=10,
            requests=requests,
            prompt_tokens=32,
            decode_tokens=128,
            lookahead_depth=2,
            seed=0,
        )
    )
    return Trace(meta, arrays, "synthetic qwen3.5-397b topology")


def first_tokens(trace, tokens: int):
    from hobbit.traces.io import Trace

    L = len(trace.meta.layers)
    return Trace(trace.meta, trace.arrays.take(np.arange(min(tokens * L, len(trace.arrays)))), trace.path)


def forget() -> None:
    """Drop the remembered layouts (``sim.run.prepare``): the next run lays its trace out again."""
    from hobbit.sim import run

    run._PREPARED.clear()


def rate(trace, cfg, engine: str, repeats: int) -> tuple[float, float, Results]:
    """Median token-layers/s of ``simulate`` after one warm-up run: (each run laying the trace out afresh, the
    layout already prepared, as a sweep's later points find it; the last run's results)."""
    from hobbit.sim.run import simulate

    n = len(trace.arrays)
    res = simulate(trace, cfg.model, cfg.hardware, cfg.system, engine=engine, profile_share=0.0, keep_decisions=False)
    fresh, prepared = [], []
    for _ in range(repeats):
        forget()
        for times in (fresh, prepared):
            t0 = time.perf_counter()
            res = simulate(
                trace, cfg.model, cfg.hardware, cfg.system, engine=engine, profile_share=0.0, keep_decisions=False
            )
            times.append(time.perf_counter() - t0)
    return n / statistics.median(fresh), n / statistics.median(prepared), res


def main() -> None:
    from hobbit.plumbing.glue import compose
    from hobbit.sim.config import SimConfig
    from hobbit.sim.run import simulate

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=10_000)
    ap.add_argument("--system", default="hobbit")
    ap.add_argument("--qwen-tokens", type=int, default=2000)
    ap.add_argument("--scale", default="10000,100000,1000000", help="token counts of the scale runs ('' for none)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--systems",
        default="",
        help="'all' (every conf/system preset) or a comma list: each one's "
        "compiled-core rate on both traces, a table before the last lines ('' for none)",
    )
    args = ap.parse_args()

    cfg = compose("sim", SimConfig, ["out_dir=.", f"system={args.system}"])
    trace = repeated_trace(args.tokens)
    n = len(trace.arrays)
    print(f"mixtral topology: {n // 32} tokens x 32 layers = {n} token-layers; system={args.system}")
    fast, fast_prep, a = rate(trace, cfg, "fast", args.repeats)
    ref, _, b = rate(trace, cfg, "plain", 1)
    assert np.allclose(a.timeline.pass_end, b.timeline.pass_end, rtol=1e-9, atol=0), "the engines disagree"
    print(
        f"  fast  {fast:12,.0f} token-layers/s ({fast_prep:,.0f} with the layout prepared, as in a sweep)\n"
        f"  plain {ref:12,.0f} token-layers/s (reference)"
    )

    qcfg = compose(
        "sim", SimConfig, ["out_dir=.", f"system={args.system}", "model=qwen3.5-397b-a17b", "hardware=h200-pcie5"]
    )
    q = qwen_trace(args.qwen_tokens)
    nq = len(q.arrays)
    q_fast, q_prep, _ = rate(q, qcfg, "fast", args.repeats)
    q_ref, _, _ = rate(first_tokens(q, 160), qcfg, "plain", 1)
    print(f"qwen3.5-397b topology: {nq // 60} tokens x 60 layers = {nq} token-layers")
    print(
        f"  fast  {q_fast:12,.0f} token-layers/s ({q_prep:,.0f} with the layout prepared)\n"
        f"  plain {q_ref:12,.0f} token-layers/s (reference, first 160 tokens)"
    )
    if qcfg.system.cache.policy == "multidim":
        ncfg = compose(
            "sim",
            SimConfig,
            [
                "out_dir=.",
                f"system={args.system}",
                "model=qwen3.5-397b-a17b",
                "hardware=h200-pcie5",
                "system.cache.multidim.w_fld=0",
            ],
        )
        q_nofld, _, _ = rate(q, ncfg, "fast", args.repeats)
        print(f"  fast, w_fld=0 {q_nofld:12,.0f} token-layers/s ({q_nofld / q_fast:.2f}x the default weights')")

    scale = [int(x) for x in args.scale.split(",") if x]
    if scale:
        print("scale (compiled core, whole run from a fresh trace object: layout included):")

    def peak(tr, keep: bool) -> float:
        """MiB allocated at the most during a run (tracing slows allocation: a run of its own)."""
        forget()
        tracemalloc.start()
        simulate(tr, cfg.model, cfg.hardware, cfg.system, profile_share=0.0, keep_decisions=keep)
        top = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        forget()
        return top / 2**20

    for tokens in scale:
        tr = repeated_trace(tokens)
        own = sum(v.nbytes for v in vars(tr.arrays).values() if isinstance(v, np.ndarray))
        simulate(first_tokens(tr, 100), cfg.model, cfg.hardware, cfg.system, profile_share=0.0)  # warm
        forget()
        t0 = time.perf_counter()
        simulate(tr, cfg.model, cfg.hardware, cfg.system, profile_share=0.0, keep_decisions=False)
        dt = time.perf_counter() - t0
        streamed, kept = peak(tr, False), peak(tr, True)
        print(
            f"  {tokens:>9,} tokens: {dt:8.2f} s  {len(tr.arrays) / dt:12,.0f} token-layers/s  "
            f"peak {streamed:8.0f} MiB allocated during the run, {kept:.0f} keeping its decisions "
            f"(the trace's arrays: {own / 2**20:.0f} MiB)"
        )
    if args.systems:
        from hobbit.studies.compare import all_systems

        names = all_systems() if args.systems == "all" else args.systems.split(",")
        print(f"every system, compiled core, token-layers/s (fresh layout, median of {args.repeats}):")
        print(f"  {'system':24s} {'mixtral topology':>18s} {'qwen topology':>16s}")
        for name in names:
            mcfg = compose("sim", SimConfig, ["out_dir=.", f"system={name}"])
            qc = compose(
                "sim", SimConfig, ["out_dir=.", f"system={name}", "model=qwen3.5-397b-a17b", "hardware=h200-pcie5"]
            )
            print(
                f"  {name:24s} {rate(trace, mcfg, 'fast', args.repeats)[0]:18,.0f} "
                f"{rate(q, qc, 'fast', args.repeats)[0]:16,.0f}",
                flush=True,
            )
    print(f"qwen_token_layers_per_s={q_fast:.0f} qwen_ratio_vs_reference={q_fast / q_ref:.1f}")
    print(f"token_layers_per_s={fast:.0f} ratio_vs_reference={fast / ref:.1f}")


if __name__ == "__main__":
    main()
