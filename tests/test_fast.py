"""The compiled core (``sim.fast``) against the reference walk and timing (``sim.decide``, ``sim.plain``).

Every registered system, every pairing of a registered cache policy with a registered
prefetcher, and Hypothesis-generated traces and knobs (topologies, prefill and decode,
tiny to huge caches, staging, per-layer pools, CPU placements, every cpu_misses mode,
cpu_insert, contention): the compiled core must make exactly the reference's decisions,
step by step and counter by counter, and time them within 1e-9 relative.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from hobbit.sim import fast
from hobbit.sim.config import ConfigError, ModelConfig, policy_knobs
from hobbit.sim.decisions import HIGH_LOAD, LOW_LOAD, DecisionTables, tables_from_steps
from hobbit.sim.policies.eviction import belady, eam_priority, multidim
from hobbit.sim.policies.registry import EVICTION, PREFETCH
from hobbit.sim.run import simulate
from hobbit.sim.system_checks import check_system
from hobbit.traces.io import Trace
from hobbit.traces.synthetic import SyntheticConfig, generate

from sim_helpers import bundled, compose_sim, without_predictions

SYSTEMS = sorted(p.stem for p in (Path(__file__).parents[1] / "conf" / "system").glob("*.yaml"))
COUNTERS = (
    "prefetch_issued",
    "prefetch_used",
    "copies_behind",
    "bytes_requested",
    "evictions",
    "slots",
    "staging",
    "prefetch_dropped",
)


def assert_same(got, ref, compiled: bool | None = None) -> None:
    """``got`` (engine=fast) made ``ref``'s (engine=plain) decisions and times; ``compiled``: whether the
    compiled walk (not the reference's, where it does not implement the system) must have decided."""
    a, b = got.decisions, ref.decisions
    if compiled is not None:
        assert (a.tables is not None) == compiled
    assert len(a.steps) == len(b.steps)
    for i, (x, y) in enumerate(zip(a.steps, b.steps)):
        assert x == y, f"step {i} differs:\n fast {x}\n ref  {y}"
    for name in COUNTERS:
        assert getattr(a, name) == getattr(b, name), name
    np.testing.assert_array_equal(a.served, b.served)
    np.testing.assert_array_equal(a.mass, b.mass)
    for name in ("pass_start", "pass_end", "step_stall", "step_end"):
        np.testing.assert_allclose(
            getattr(got.timeline, name), getattr(ref.timeline, name), rtol=1e-9, atol=1e-15, err_msg=name
        )
    ta, tb = got.timeline, ref.timeline
    assert (ta.bytes_moved, ta.cancelled, ta.late) == (tb.bytes_moved, tb.cancelled, tb.late)
    assert ta.link_busy_s == pytest.approx(tb.link_busy_s, rel=1e-9, abs=1e-15)
    assert ta.transfer_done.keys() == tb.transfer_done.keys()
    assert ta.transfer_start.keys() == tb.transfer_start.keys()
    for tid, t in tb.transfer_done.items():
        assert ta.transfer_done[tid] == pytest.approx(t, rel=1e-9, abs=1e-15)


def assert_streamed(got, whole) -> None:
    """``got`` (streamed: ``keep_decisions=False``) has the results of ``whole`` (the same run, its log kept), float
    for float: the summary, both tables and the decisions' counters; its decisions' records are not kept."""
    assert {k: v for k, v in got.summary.items() if k != "wall_s"} == {
        k: v for k, v in whole.summary.items() if k != "wall_s"
    }
    for mine, theirs in ((got.pass_columns, whole.pass_columns), (got.layer_columns, whole.layer_columns)):
        assert mine.keys() == theirs.keys()
        for name in theirs:
            np.testing.assert_array_equal(mine[name], theirs[name], err_msg=name)
            assert mine[name].dtype == theirs[name].dtype, name
    for name in COUNTERS:
        assert getattr(got.decisions, name) == getattr(whole.decisions, name), name
    np.testing.assert_array_equal(got.timeline.pass_end, whole.timeline.pass_end)
    assert got.decisions.tables is None and len(got.decisions.steps) == len(whole.decisions.steps)
    with pytest.raises(LookupError, match="keep_decisions=True"):
        got.decisions.steps[0]


def streamed(trace, model, hw, system, chunk_passes: int, **kw):
    """``simulate`` streaming, ``chunk_passes`` passes at a time."""
    with mock.patch.object(fast.streaming, "CHUNK_STEPS", chunk_passes * model.num_layers):
        return simulate(trace, model, hw, system, keep_decisions=False, **kw)


@pytest.fixture(scope="module")
def trace():
    """The bundled trace's first six requests (the golden test holds the whole trace to the simpy engine's numbers)."""
    return bundled(6)


@pytest.mark.parametrize("system", SYSTEMS)
def test_every_registered_system_decides_and_times_as_the_reference(trace, system):
    """Every system is decided by the compiled walk; multidim's twice: its pools (under ``multidim.PRUNE_MIN_SLOTS``
    here) scanned, and evicting layer by layer as large pools do."""
    cfg = compose_sim(f"system={system}")
    ref = simulate(trace, cfg.model, cfg.hardware, cfg.system, engine="plain")
    got = simulate(trace, cfg.model, cfg.hardware, cfg.system, engine="fast")
    assert_same(got, ref, compiled=True)
    assert got.summary["engine"] == "fast"
    assert_streamed(streamed(trace, cfg.model, cfg.hardware, cfg.system, 1), got)
    if cfg.system.cache.policy == "multidim":
        with mock.patch.object(multidim, "PRUNE_MIN_SLOTS", 0):
            assert_same(simulate(trace, cfg.model, cfg.hardware, cfg.system, engine="fast"), ref, compiled=True)


@pytest.mark.parametrize("w_fld", ["0.5", "0"])
def test_large_pools_evict_layer_by_layer_as_the_reference(w_fld):
    """A Qwen3.5-397B-topology trace (60 layers, 512 experts, top-10) on an H200: thousands of slots per pool.
    Without the FLD term (w_fld=0) the layers' bounds tie (every copy unused since its request began has record part
    0): an eviction visits many layers, most of them through the victim a layer keeps while it does not change."""
    from hobbit.traces.synthetic import SyntheticConfig, generate

    arrays, meta = generate(
        SyntheticConfig(
            name="synthetic-qwen3.5-397b",
            num_layers=60,
            num_experts=512,
            top_k=10,
            requests=2,
            prompt_tokens=8,
            decode_tokens=24,
            lookahead_depth=2,
            seed=3,
        )
    )
    tr = Trace(meta, arrays, "synthetic")
    cfg = compose_sim(
        "system=hobbit", "model=qwen3.5-397b-a17b", "hardware=h200-pcie5", f"system.cache.multidim.w_fld={w_fld}"
    )
    ref = simulate(tr, cfg.model, cfg.hardware, cfg.system, engine="plain", profile_share=0.0)
    got = simulate(tr, cfg.model, cfg.hardware, cfg.system, engine="fast", profile_share=0.0)
    assert min(got.decisions.slots) >= multidim.PRUNE_MIN_SLOTS and got.decisions.evictions > 1000
    assert_same(got, ref, compiled=True)


@pytest.mark.parametrize("policy", sorted(EVICTION))
def test_every_policy_with_every_prefetcher(trace, policy):
    """Each registered cache policy under each registered prefetcher, with staging slots for one in two; the first
    request profiles (MoE-Infinity's library), the second is timed."""
    small = Trace(trace.meta, trace.arrays.take(np.flatnonzero(trace.arrays.request_id < 2)), trace.path)
    for i, kind in enumerate(sorted(PREFETCH)):
        cfg = compose_sim(
            "system=hobbit",
            f"system.cache.policy={policy}",
            f"system.prefetch.kind={kind}",
            "system.cache.high_bytes=2000000000",
            "system.cache.low_bytes=700000000",
            f"system.prefetch.staging_slots={2 * (i % 2)}",
        )
        ref = simulate(small, cfg.model, cfg.hardware, cfg.system, engine="plain", profile_share=0.5)
        got = simulate(small, cfg.model, cfg.hardware, cfg.system, engine="fast", profile_share=0.5)
        assert_same(got, ref, compiled=fast.unsupported(cfg.system) is None)


def test_what_the_compiled_walk_leaves_to_the_reference():
    """Only a kept log: every registered cache policy and prefetcher, so every system, is decided compiled."""
    cfg = compose_sim("system=hobbit")
    left = {
        p
        for p in EVICTION
        if fast.unsupported(dataclasses.replace(cfg.system, cache=dataclasses.replace(cfg.system.cache, policy=p)))
    }
    assert left == {p for p in EVICTION if not fast.special.compiled(p)}
    own = {
        "multidim",
        "lru",
        "lfu",
        "fifo",
        "mru",
        "sieve",
        "lfru",
        "s3fifo",
        "arc",
        "lirs",
        "eam_release",
        "eam_priority",
        "belady",
    }
    assert {p for p in EVICTION if fast.special.own_part(p) is not None} == own  # compiled from their own files
    assert own == set(EVICTION) and not hasattr(fast.walk, "POLICIES")  # the walk holds none of its own
    assert left == set()
    kinds = {
        k
        for k in PREFETCH
        if fast.unsupported(dataclasses.replace(cfg.system, prefetch=dataclasses.replace(cfg.system.prefetch, kind=k)))
    }
    assert kinds == set(PREFETCH) - set(fast.special.prefetchers()) == set()
    assert fast.unsupported(cfg.system, keep_log=True)


def test_lirs_beyond_its_entries_is_decided_by_the_reference(trace):
    """LIRS's list of counted-out copies may hold a key more than once; past the entries the compiled walk keeps
    for it, the reference walk decides: the same decisions either way."""
    cfg = compose_sim(
        "system=hobbit",
        "system.cache.policy=lirs",
        "system.cache.per_layer=true",
        "system.cache.high_bytes=40000000000",
        "system.cache.low_bytes=6000000000",
        "hardware=h200-pcie5",  # pools larger than a 24 GB card holds
    )
    ref = simulate(trace, cfg.model, cfg.hardware, cfg.system, engine="plain")
    assert_same(simulate(trace, cfg.model, cfg.hardware, cfg.system, engine="fast"), ref, compiled=True)
    from hobbit.sim.policies.eviction import lirs

    with mock.patch.object(lirs, "VICTIMS_PER_KEY", 0):
        assert_same(simulate(trace, cfg.model, cfg.hardware, cfg.system, engine="fast"), ref, compiled=False)


def test_a_trace_without_predictions_falls_back_alike(trace):
    bare = without_predictions(
        Trace(trace.meta, trace.arrays.take(np.flatnonzero(trace.arrays.request_id < 4)), trace.path)
    )
    for fallback in ("oracle", "history", "none"):
        cfg = compose_sim(
            "system=hobbit",
            f"system.prefetch.fallback={fallback}",
            "system.cache.high_bytes=3000000000",
            "system.cache.low_bytes=1000000000",
        )
        assert_same(
            simulate(bare, cfg.model, cfg.hardware, cfg.system, engine="fast"),
            simulate(bare, cfg.model, cfg.hardware, cfg.system, engine="plain"),
            compiled=True,
        )


def test_the_tables_and_the_records_are_one_log(trace):
    """``DecisionTables`` laid out as ``LayerStep`` records and back are the same tables."""
    cfg = compose_sim("system=hobbit-cpu", "system.cache.high_bytes=3000000000")
    dec = simulate(trace, cfg.model, cfg.hardware, cfg.system, engine="fast").decisions
    assert dec.tables is not None
    back = tables_from_steps(list(dec.steps), dec.tables.num_layers)
    for name in DecisionTables.COLUMNS:
        np.testing.assert_array_equal(getattr(back, name), getattr(dec.tables, name), err_msg=name)
    seen = back.expert_bytes > 0  # the records name the bytes of the layers and precisions that copied
    assert seen.any() and np.array_equal(back.expert_bytes[seen], dec.tables.expert_bytes[seen])
    demand, ahead = dec.loads_per_step()
    assert demand.sum() == sum(1 for s in dec.steps for ld in s.loads if ld.demand)
    assert ahead.sum() == sum(1 for s in dec.steps for ld in s.loads if not ld.demand)


def test_a_run_lays_the_trace_out_in_its_own_memory():
    """Scale: the workload is views of the trace's arrays (no widened copy), the rule and the gate mass are
    computed as the walk reads them, and a whole run allocates less than half the trace's own bytes again,
    decision log and times included."""
    import tracemalloc

    from hobbit.sim import run

    tr = bundled()
    own = sum(v.nbytes for v in vars(tr.arrays).values() if isinstance(v, np.ndarray))
    cfg = compose_sim("system=hobbit")
    simulate(tr, cfg.model, cfg.hardware, cfg.system)  # compiled code loaded
    run._PREPARED.clear()
    tracemalloc.start()
    try:
        res = simulate(tr, cfg.model, cfg.hardware, cfg.system)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        run._PREPARED.clear()
    wl, a = res.workload, tr.arrays
    assert wl is not None and res.decisions.tables is not None
    for mine, theirs in (
        (wl.ids, a.expert_ids),
        (wl.weights, a.gate_weights),
        (wl.pred_ids, a.pred_ids),
        (wl.pred_weights, a.pred_weights),
    ):
        assert np.shares_memory(mine, theirs)
    assert not [k for k, v in wl.memo.items() if isinstance(v, np.ndarray) and v.nbytes > own / 50]
    assert res.decisions.tables.loads.dtype == np.int32
    assert peak < 1.5 * own, (peak, own)


def test_a_streamed_run_holds_the_trace_and_little_more():
    """Scale: streaming (``keep_decisions=False``), a run walks and times a chunk of passes at a time and drops each
    chunk's log; besides the trace it allocates its per-pass results, the cache's state and one chunk. Here (chunks
    of 32 passes) that is under a sixth of the trace's bytes, where a run keeping its log holds the log's tables
    (about 0.55x the trace) and more."""
    import tracemalloc

    from hobbit.sim import run

    tr = bundled()
    own = sum(v.nbytes for v in vars(tr.arrays).values() if isinstance(v, np.ndarray))
    cfg = compose_sim("system=hobbit")
    peaks = {}
    for keep in (True, False):
        with mock.patch.object(fast.streaming, "CHUNK_STEPS", 32 * cfg.model.num_layers):
            simulate(tr, cfg.model, cfg.hardware, cfg.system, keep_decisions=keep)  # compiled code loaded
            run._PREPARED.clear()
            tracemalloc.start()
            try:
                res = simulate(tr, cfg.model, cfg.hardware, cfg.system, keep_decisions=keep)
                peaks[keep] = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
                run._PREPARED.clear()
        if keep:
            log = sum(getattr(res.decisions.tables, n).nbytes for n in DecisionTables.COLUMNS)
    assert log > 0.5 * own, (log, own)
    assert peaks[False] < own / 6 and peaks[False] < peaks[True] - log, (peaks, own, log)


def test_a_run_reports_its_progress(trace):
    """``progress(passes timed, passes)``: after each chunk of a streamed run (what ``hobbit sim``'s bar shows),
    once at the end of a kept one."""
    cfg = compose_sim("system=hobbit")
    calls = []
    streamed(trace, cfg.model, cfg.hardware, cfg.system, 32, progress=lambda *a: calls.append(a))
    total = calls[-1][1]
    assert total > 64 and calls[-1] == (total, total)
    assert [c[0] for c in calls] == [min(32 * (i + 1), total) for i in range(-(-total // 32))]
    kept = []
    simulate(trace, cfg.model, cfg.hardware, cfg.system, progress=lambda *a: kept.append(a))
    assert kept == [(total, total)]


def test_a_streamed_run_carries_the_copies_still_running_into_its_next_chunk():
    """A copy started in one chunk can end in a later one, where a step waits for it, with the link shared by the
    compute (contention): the next chunk must know when it ends. Streamed one pass at a time, this run differs
    from the whole run if the copies carried over lose their times."""
    arrays, meta = generate(
        SyntheticConfig(
            num_layers=2,
            num_experts=16,
            top_k=6,
            requests=2,
            prompt_tokens=3,
            decode_tokens=8,
            lookahead_depth=2,
            seed=8330,
        )
    )
    tr = Trace(meta, arrays, "synthetic")
    model = ModelConfig(
        name="m",
        num_layers=2,
        num_experts=16,
        top_k=6,
        hidden_size=256,
        expert_ffn=512,
        dense_params_per_layer=10_000,
        other_params=10_000,
        kv_bytes_per_token=64,
    )
    cfg = compose_sim("system=hobbit")
    hw = dataclasses.replace(cfg.hardware, link_gbps=1e4, contention_compute=1.3, contention_link=1.7)
    s = cfg.system
    system = dataclasses.replace(
        s,
        cpu_misses="split",
        split_threshold=2.0,
        precision=dataclasses.replace(s.precision, t1=0.029574963966907064, t2=0.4896935204622582),
        prefetch=dataclasses.replace(s.prefetch, kind="eam"),
        cache=dataclasses.replace(s.cache, policy="lfru", high_bytes=13369344, low_bytes=208896),
    )
    whole = simulate(tr, model, hw, system)
    assert_streamed(streamed(tr, model, hw, system, 1), whole)


# the walk's own policy, and Belady, the one whose copies the walk renews as each key's next use moves on (``_passed``,
# ``_edge``): the others, compiled from their own files, have a test each below
POLICIES = ["multidim", "belady"]


@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(
    seed=st.integers(0, 10_000),
    layers=st.integers(1, 6),
    experts=st.integers(1, 24),
    k=st.integers(1, 6),
    prompt=st.integers(1, 9),
    decode=st.integers(0, 8),
    requests=st.integers(1, 3),
    policy=st.sampled_from(POLICIES),
    kind=st.sampled_from(fast.special.prefetchers()),
    mode=st.sampled_from(["hobbit", "high", "low"]),
    t=st.tuples(st.floats(0, 1), st.floats(0, 1)),
    high=st.sampled_from([0, 1, 2, 5, 17, 1000]),
    low=st.sampled_from([0, 1, 3, 9, 1000]),
    staging=st.sampled_from([0, 0, 1, 3]),
    per_layer=st.booleans(),
    cpu_misses=st.sampled_from(fast.records.CPU_MISSES),
    cpu_insert=st.sampled_from([0, 0, 1, 3]),
    any_cached=st.booleans(),
    multi=st.sampled_from(["max", "high"]),
    depth=st.integers(1, 4),
    fallback=st.sampled_from(["oracle", "history", "none"]),
    predictions=st.booleans(),
    pf_precision=st.sampled_from(["rule", "high", "low"]),
    weights=st.tuples(*[st.integers(0, 3)] * 4),
    gbps=st.sampled_from([0.5, 25.0, 1e4]),
    contention=st.sampled_from([(1.0, 1.0), (1.4, 1.0), (1.0, 2.0), (1.3, 1.7)]),
    demand_first=st.booleans(),
    split_max=st.sampled_from([-1, 0, 1]),
    split_threshold=st.sampled_from([0.0, 2.0, 1e9]),
    prune=st.sampled_from([0, multidim.PRUNE_MIN_SLOTS]),
    chunk=st.sampled_from([1, 2, 3, 1000]),
)
def test_random_traces_and_knobs(
    seed,
    layers,
    experts,
    k,
    prompt,
    decode,
    requests,
    policy,
    kind,
    mode,
    t,
    high,
    low,
    staging,
    per_layer,
    cpu_misses,
    cpu_insert,
    any_cached,
    multi,
    depth,
    fallback,
    predictions,
    pf_precision,
    weights,
    gbps,
    contention,
    demand_first,
    split_max,
    split_threshold,
    prune,
    chunk,
):
    """``prune`` 0: multidim evicts layer by layer in every pool (``multidim.PRUNE_MIN_SLOTS``), as large pools do.
    ``chunk``: the passes a streamed run walks and times at a time; it must give the whole run's results."""
    assume(sum(weights) > 0)
    k = min(k, experts)
    arrays, meta = generate(
        SyntheticConfig(
            num_layers=layers,
            num_experts=experts,
            top_k=k,
            requests=requests + 1,
            prompt_tokens=prompt,
            decode_tokens=decode,
            lookahead_depth=2,
            seed=seed,
        )
    )
    tr = Trace(meta, arrays, "synthetic")
    if not predictions:
        tr = without_predictions(tr)
    model = ModelConfig(
        name="m",
        num_layers=layers,
        num_experts=experts,
        top_k=k,
        hidden_size=256,
        expert_ffn=512,
        dense_params_per_layer=10_000,
        other_params=10_000,
        kv_bytes_per_token=64,
    )
    cfg = compose_sim("system=hobbit")
    hw = dataclasses.replace(
        cfg.hardware, link_gbps=gbps, contention_compute=contention[0], contention_link=contention[1]
    )
    s = cfg.system
    eb = (model.expert_bytes(s.weights), model.expert_bytes(s.precision.low))
    md = dataclasses.replace(
        policy_knobs(s.cache, "multidim"), w_lru=weights[0], w_lfu=weights[1], w_lhu=weights[2], w_fld=weights[3]
    )
    system = dataclasses.replace(
        s,
        demand_first=demand_first,
        cpu_misses=cpu_misses,
        cpu_insert=cpu_insert,
        split_max_fetch=split_max,
        split_threshold=split_threshold,
        precision=dataclasses.replace(
            s.precision, mode=mode, t1=min(t), t2=max(t), serve_any_cached=any_cached, multi_token=multi
        ),
        prefetch=dataclasses.replace(
            s.prefetch,
            kind=kind,
            max_depth=depth,
            fallback=fallback,
            staging_slots=staging,
            precision=pf_precision,
            clear_queue=seed % 3 == 0,  # MoE-Infinity's queue, cleared at every step, in a third of the examples
        ),
        cache=dataclasses.replace(
            s.cache, policy=policy, per_layer=per_layer, high_bytes=high * eb[0], low_bytes=low * eb[1], multidim=md
        ),
    )
    try:
        check_system(system)
    except ConfigError:
        assume(False)
    ref = simulate(tr, model, hw, system, engine="plain")
    with mock.patch.object(multidim, "PRUNE_MIN_SLOTS", prune):
        got = simulate(tr, model, hw, system, engine="fast")
        assert_same(got, ref, compiled=True)
        if got.decisions.tables is not None:  # a run the compiled walk decided (LIRS past its entries: the reference)
            assert_streamed(streamed(tr, model, hw, system, chunk), got)


@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(
    seed=st.integers(0, 10_000),
    layers=st.integers(2, 6),
    experts=st.integers(4, 24),
    k=st.integers(1, 4),
    prompt=st.integers(1, 6),
    decode=st.integers(2, 10),
    requests=st.integers(2, 5),
    high=st.integers(2, 40),
    low=st.sampled_from([0, 0, 3, 12]),
    staging=st.sampled_from([0, 0, 1, 3]),
    candidates=st.sampled_from([1, 2, 3, 32]),
    mode=st.sampled_from(["hobbit", "high"]),
    depth=st.integers(1, 3),
    cpu_misses=st.sampled_from(fast.records.CPU_MISSES),
    chunk=st.sampled_from([1, 3, 1000]),
)
def test_eam_priority_keeps_its_candidates_as_the_reference_scans(
    seed, layers, experts, k, prompt, decode, requests, high, low, staging, candidates, mode, depth, cpu_misses, chunk
):
    """MoE-Infinity's eviction under its own prefetcher (a match most of the time) in a shared pool that fills: the
    candidates one scan keeps (``walk._eam_evict``; as few as one, so that the bound and the copies that enter
    under it decide most evictions) give the reference's victims, whole and streamed."""
    k = min(k, experts)
    arrays, meta = generate(
        SyntheticConfig(
            num_layers=layers,
            num_experts=experts,
            top_k=k,
            requests=requests,
            prompt_tokens=prompt,
            decode_tokens=decode,
            lookahead_depth=2,
            seed=seed,
        )
    )
    tr = Trace(meta, arrays, "synthetic")
    model = ModelConfig(
        name="m",
        num_layers=layers,
        num_experts=experts,
        top_k=k,
        hidden_size=256,
        expert_ffn=512,
        dense_params_per_layer=10_000,
        other_params=10_000,
        kv_bytes_per_token=64,
    )
    cfg = compose_sim("system=moe-infinity")
    eb = (model.expert_bytes(cfg.system.weights), model.expert_bytes(cfg.system.precision.low))
    s = cfg.system
    system = dataclasses.replace(
        s,
        cpu_misses=cpu_misses,
        precision=dataclasses.replace(s.precision, mode=mode),
        prefetch=dataclasses.replace(s.prefetch, max_depth=depth, staging_slots=staging),
        cache=dataclasses.replace(s.cache, per_layer=False, high_bytes=high * eb[0], low_bytes=low * eb[1]),
    )
    try:
        check_system(system)
    except ConfigError:
        assume(False)
    ref = simulate(tr, model, cfg.hardware, system, engine="plain", profile_share=0.5)
    with mock.patch.object(eam_priority, "CANDIDATES", candidates):
        got = simulate(tr, model, cfg.hardware, system, engine="fast", profile_share=0.5)
        assert_same(got, ref, compiled=True)
        assert_streamed(streamed(tr, model, cfg.hardware, system, chunk, profile_share=0.5), got)


def test_eam_prioritys_candidates_do_not_outlive_their_request(monkeypatch):
    """A new request resets every copy's use count, so scores fall and the candidates a scan kept no longer bound the
    rest: the next eviction scans again (``Space.now``'s request count). Its kernels run as plain Python here: a pool
    of 12 copies, two candidates kept; then a new request, a copy in the last victim's slot, and the victim must be
    the copy the reference's scan picks, which was no candidate."""
    from hobbit.sim.policies.compiled import EXPERT, LAYER, N_FIELDS, NOW_REQUEST, NOW_STEP, TOUCHED, USES, Space

    monkeypatch.setattr(eam_priority, "CANDIDATES", 2)
    L, E, rows = 2, 8, 12
    lib = np.full((1, L, E), 0.5)
    lib[0, 1, 7] = 0.01  # the least likely expert: the lowest score once every use count is 0
    now, match = np.zeros(14, np.int64), np.zeros(1, np.int64)
    space = Space(L, E, rows, np.array([[rows], [0]]), None, False, now, match, lib)
    state = eam_priority.eam_priority_state(space)
    pool = np.zeros((2, rows, N_FIELDS), np.int64)
    pool[:, :, LAYER] = pool[:, :, EXPERT] = -1
    for s in range(rows):
        pool[0, s, LAYER], pool[0, s, EXPERT] = divmod(s + 4, E)
        pool[0, s, USES], pool[0, s, TOUCHED] = (50 if (s + 4) == 15 else s % 3), s + 1
        eam_priority.eam_priority_insert(state, pool, 0, 0, 0, rows, s)
    now[NOW_STEP] = 0  # layer 0 is the current one

    def scanned() -> int:  # the reference's victim: the lowest (score, touch) of every copy
        decays = [1.0 - ((x - 0) % L) / (L + 1) for x in range(L)]
        return min(
            range(rows),
            key=lambda s: (
                decays[pool[0, s, LAYER]]
                * (lib[0, pool[0, s, LAYER], pool[0, s, EXPERT]] + 1e-8)
                * (1 + pool[0, s, USES]),
                pool[0, s, TOUCHED],
            ),
        )

    first = scanned()
    assert eam_priority.eam_priority_evict(state, pool, 0, 0, 0, rows) == first and state.cand[eam_priority.VALID]
    assert pool[0, 11, USES] == 50 and 11 not in state.cand[eam_priority.SLOTS : eam_priority.SLOTS + 2]
    pool[0, first, EXPERT], pool[0, first, TOUCHED] = 0, 100  # a copy takes the victim's slot
    eam_priority.eam_priority_insert(state, pool, 0, 0, 0, rows, first)
    now[NOW_REQUEST] += 1
    pool[0, :, USES] = 0
    assert scanned() == 11
    assert eam_priority.eam_priority_evict(state, pool, 0, 0, 0, rows) == 11


def test_beladys_heaps_give_the_scans_victim_whatever_their_events():
    """Belady's compiled part, its kernels as plain Python, under random events on per-layer regions of different
    sizes (their heaps side by side in its arrays): copies enter (pinned or not), are used, pinned ones let go, keys'
    next uses move later (``Space.next_use``, each copy renewed), and each eviction's victim is the reference's scan:
    the unpinned copy of the region needed last, then touched first. The slot a victim frees is taken again at once
    (as the walk does), and the copy in it takes the victim's place in its heap, or leaves it, pinned."""
    from hobbit.sim.policies.compiled import EXPERT, LAYER, N_FIELDS, NEVER, PINNED, TOUCHED, Space

    rng = np.random.default_rng(7)
    L, E, cap = 2, 6, np.array([[3, 5], [0, 0]])
    rows = int(cap[0].sum())
    next_use = rng.integers(0, 40, L * E)
    space = Space(L, E, rows, cap, None, True, np.zeros(14, np.int64), np.zeros(1, np.int64), None, next_use)
    state = belady.belady_state(space)
    pool = np.zeros((2, rows, N_FIELDS), np.int64)
    pool[:, :, LAYER] = pool[:, :, EXPERT] = -1
    clock, evictions = 0, 0
    for _ in range(3000):
        g = int(rng.integers(L))
        r0, r1 = int(cap[0, :g].sum()), int(cap[0, : g + 1].sum())
        slots = range(r0, r1)
        held = [s for s in slots if pool[0, s, LAYER] >= 0]
        op = rng.integers(5)
        if op == 0:  # a copy enters: a free slot, else the policy's victim
            free = [s for s in slots if pool[0, s, LAYER] < 0]
            if free:
                slot = free[0]
            else:
                want = max(
                    (s for s in held if not pool[0, s, PINNED]),
                    key=lambda s: (next_use[g * E + pool[0, s, EXPERT]], -pool[0, s, TOUCHED]),
                    default=-1,
                )
                slot = belady.belady_evict(state, pool, 0, g, r0, r1)
                assert slot == want
                evictions += slot >= 0
                if slot < 0:
                    continue
            clock += 1
            pool[0, slot, LAYER], pool[0, slot, EXPERT] = g, rng.integers(E)
            pool[0, slot, TOUCHED], pool[0, slot, PINNED] = clock, rng.random() < 0.3
            belady.belady_insert(state, pool, 0, g, r0, r1, slot)
        elif op == 1 and held:  # a use
            slot = int(rng.choice(held))
            clock += 1
            pool[0, slot, TOUCHED] = clock
            belady.belady_hit(state, pool, 0, g, slot)
        elif op == 2 and held:  # a pin let go
            slot = int(rng.choice(held))
            if pool[0, slot, PINNED]:
                pool[0, slot, PINNED] = 0
                belady.belady_unpin(state, pool, 0, g, slot)
        elif op == 3:  # a key's next use moves on
            key = g * E + int(rng.integers(E))
            later = NEVER if rng.random() < 0.2 else next_use[key] + rng.integers(1, 30)
            next_use[key] = min(later, NEVER)  # later, or none: a next use never moves earlier
            for s in held:
                if g * E + pool[0, s, EXPERT] == key:
                    belady.belady_renew(state, pool, 0, g, s)
        in_heap = sorted(state.heap[0, r0 : r0 + state.n[0, g]])  # the region's unpinned copies, each once
        assert in_heap == [s for s in slots if pool[0, s, LAYER] >= 0 and not pool[0, s, PINNED]]
    assert evictions > 300


def test_a_uniform_precision_serves_prefill_at_its_precision_whatever_multi_token_says():
    """``precision.multi_token=high`` raises a prefill pass's experts to high precision under HOBBIT's rule only. With
    ``mode=low`` every copy is low: a prefill's low copy serves its hit, and nothing is loaded twice (asking a high
    copy for the hit would load a low one again: a second copy of a key in one pool, which its eviction cannot
    undo); both engines decide as with ``multi_token=max``."""
    runs = {}
    for multi in ("high", "max"):
        for policy in ("lru", "belady"):
            arrays, meta = generate(
                SyntheticConfig(
                    num_layers=1,
                    num_experts=3,
                    top_k=2,
                    requests=2,
                    prompt_tokens=2,
                    decode_tokens=3,
                    lookahead_depth=2,
                    seed=0,
                )
            )
            tr = without_predictions(Trace(meta, arrays, "synthetic"))
            model = ModelConfig(
                name="m",
                num_layers=1,
                num_experts=3,
                top_k=2,
                hidden_size=256,
                expert_ffn=512,
                dense_params_per_layer=10_000,
                other_params=10_000,
                kv_bytes_per_token=64,
            )
            cfg = compose_sim(
                "system=hobbit",
                "system.precision.mode=low",
                f"system.precision.multi_token={multi}",
                f"system.cache.policy={policy}",
                "system.prefetch.kind=none",
                "system.precision.serve_any_cached=false",
                "system.cpu_misses=never",
            )
            eb = model.expert_bytes(cfg.system.precision.low)
            system = dataclasses.replace(
                cfg.system, cache=dataclasses.replace(cfg.system.cache, high_bytes=0, low_bytes=3 * eb)
            )
            ref = simulate(tr, model, cfg.hardware, system, engine="plain")
            got = simulate(tr, model, cfg.hardware, system, engine="fast")
            assert_same(got, ref, compiled=True)
            runs[multi, policy] = ref
            assert ref.decisions.served[HIGH_LOAD] == 0 and ref.decisions.served[LOW_LOAD] > 0
    for policy in ("lru", "belady"):
        assert runs["high", policy].decisions.steps == runs["max", policy].decisions.steps


def test_the_compiled_bound_is_the_reference_bound(trace):
    from hobbit.sim.bound import pass_bounds

    for system in ("hobbit", "fiddler", "llama-cpp", "on-demand"):
        cfg = compose_sim(f"system={system}")
        res = simulate(trace, cfg.model, cfg.hardware, cfg.system, engine="fast")
        assert res.workload is not None
        np.testing.assert_allclose(
            fast.pass_bounds(res.workload, res.cost, cfg.system),
            pass_bounds(res.workload, res.cost, cfg.system),
            rtol=1e-12,
            atol=0,
        )


@pytest.mark.parametrize("system", ["hobbit", "on-demand"])
def test_a_streamed_walk_bounds_each_pass_and_counts_the_rule_as_it_reads_the_trace(trace, system):
    """A streamed run takes each pass's bound and, under HOBBIT's rule, the mix of its classes from the walk
    (``fast.Streamed``), not from passes of their own: the same floats as ``fast.pass_bounds`` and the same mix as
    the reference's rule. A fresh trace object, so that the run lays out (and counts) its own workload."""
    from hobbit.sim.policies.precision import hobbit_classes, rule_mix
    from hobbit.traces.io import Trace

    cfg = compose_sim(f"system={system}")
    fresh = Trace(trace.meta, trace.arrays, trace.path)
    with (
        mock.patch.object(fast, "pass_bounds") as bounds,
        mock.patch.object(fast.rule, "hobbit_counts", wraps=fast.rule.hobbit_counts) as counts,
    ):
        got = simulate(fresh, cfg.model, cfg.hardware, cfg.system, keep_decisions=False)
    assert not bounds.called  # the walk's bound, not a pass of its own
    assert counts.called == (cfg.system.precision.mode != "hobbit")  # the walk applied another rule: counted apart
    wl, p = got.workload, cfg.system.precision
    assert wl is not None
    np.testing.assert_array_equal(got.pass_columns["bound_ms"], fast.pass_bounds(wl, got.cost, cfg.system) * 1e3)
    assert got.summary["precision_rule_mix"] == rule_mix(hobbit_classes(wl.weights.reshape(-1, wl.top_k), p.t1, p.t2))


@settings(max_examples=40, deadline=None, derandomize=True, database=None)
@given(
    seed=st.integers(0, 10_000), k=st.integers(1, 20), t=st.tuples(st.floats(0, 1), st.floats(0, 1)), ties=st.booleans()
)
def test_the_compiled_rule_is_the_reference_rule(seed, k, t, ties):
    """HOBBIT's T1/T2 classes and the gate mass, compiled, are the reference's, boundaries included."""
    from hobbit.sim.fast import rule
    from hobbit.sim.policies.precision import EPS, classes_for, hobbit_classes

    rng = np.random.default_rng(seed)
    w = rng.dirichlet(np.ones(k), size=(50, 3)).astype(np.float32)
    if ties:  # weights whose mass above lands exactly on the thresholds
        w = np.round(w * 8) / 8
    w = -np.sort(-w, axis=-1)
    t1, t2 = min(t), max(t)
    cls, mass = rule.classes_and_mass(w, "hobbit", t1, t2)
    np.testing.assert_array_equal(cls, hobbit_classes(w, t1, t2))
    w64 = w.astype(np.float64)
    np.testing.assert_array_equal(mass, w64 / np.clip(w64.sum(axis=-1, keepdims=True), 1e-30, None))
    np.testing.assert_array_equal(
        rule.hobbit_counts(w.reshape(-1, k), t1 + EPS, t2 + EPS), np.bincount(cls.ravel(), minlength=3)
    )
    gaps = np.where(rng.random(w.shape) < 0.2, np.float32(np.nan), w)  # absent predictions count as 0
    np.testing.assert_array_equal(
        rule.classes_and_mass(gaps, "hobbit", t1, t2, nan_zero=True)[0],
        hobbit_classes(np.nan_to_num(gaps, nan=0.0), t1, t2),
    )
    for mode in ("high", "low"):
        np.testing.assert_array_equal(rule.classes_and_mass(w, mode, t1, t2)[0], classes_for(w, mode, t1, t2))


def test_the_compiled_pairwise_sum_is_numpys():
    """``policies.compiled.pairwise`` (the gate mass's and EAM's cosines' sums), compiled as the walk compiles it, adds
    as numpy's add.reduce adds: the same floats, through blocks of 128 and the halves numpy's recursion splits a
    longer run into."""
    from hobbit.sim.policies.compiled import pairwise as _pairwise

    assert hasattr(_pairwise, "py_func")  # compiled in place when the walk was imported (``fast``, above)

    rng = np.random.default_rng(7)
    for n in [*range(1, 300), 511, 512, 1000, 1024, 4099, 20_000]:
        a = rng.standard_normal(n + 3) * 10.0 ** rng.uniform(-6, 6, n + 3)  # magnitudes apart: rounding shows
        lo = int(rng.integers(0, 4))
        assert _pairwise(a, lo, n) == np.add.reduce(a[lo : lo + n]), n


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(seed=st.integers(0, 10_000), n=st.integers(0, 200), levels=st.integers(1, 6))
def test_the_core_orders_a_steps_experts_as_a_stable_sort(seed, n, levels):
    """The arrival order of a step's experts (``order.stable_order``: runs by insertion, merged above ``RUN``) is
    numpy's stable argsort, ties (the resident experts' -1.0, equal arrival times) kept in their logged order."""
    from hobbit.sim.fast.order import order_few, stable_order

    rng = np.random.default_rng(seed)
    v = np.concatenate([rng.integers(-1, levels, n) * 0.5, rng.random(3)])  # values beyond n are not sorted
    for sort in (stable_order, order_few):  # order_few: one or two in place, more by stable_order
        for m in (n, n % 3):  # n % 3: none, one or two
            order = np.full(len(v), -7, np.int64)
            sort(v, m, order, np.zeros(len(v), np.int64))
            np.testing.assert_array_equal(order[:m], np.argsort(v[:m], kind="stable"))
            assert (order[m:] == -7).all()


@pytest.mark.parametrize("policy", ["sieve", "lfru", "s3fifo", "arc", "lirs"])
def test_queue_policies_per_layer_as_the_reference(trace, policy):
    """The compiled SIEVE, LFRU, S3-FIFO, ARC and LIRS keep their queues and stacks per layer's part of a pool as
    the reference does."""
    cfg = compose_sim(
        "system=hobbit",
        f"system.cache.policy={policy}",
        "system.cache.per_layer=true",
        "system.cache.high_bytes=40000000000",
        "system.cache.low_bytes=6000000000",
        "hardware=h200-pcie5",  # pools larger than a 24 GB card holds
    )
    got = simulate(trace, cfg.model, cfg.hardware, cfg.system, engine="fast")
    assert got.decisions.evictions > 1000
    assert_same(got, simulate(trace, cfg.model, cfg.hardware, cfg.system, engine="plain"), compiled=True)


def test_one_compiled_walk_for_read_only_and_writable_traces():
    """joblib hands a worker a large array as a read-only memory map (``hobbit.sweep(..., n_jobs=2)``), a trace
    built in this process is writable; numba would compile the walk for each (minutes, in every worker): the
    compiled core gets the trace's arrays read-only either way."""
    tr = bundled(2)
    arrays, meta = tr.arrays, tr.meta
    frozen = dataclasses.replace(
        arrays, **{k: np.array(getattr(arrays, k)) for k in ("expert_ids", "gate_weights", "pred_ids", "pred_weights")}
    )
    for k in ("expert_ids", "gate_weights", "pred_ids", "pred_weights"):
        getattr(frozen, k).flags.writeable = False
    cfg = compose_sim("system=hobbit")
    for tr in (Trace(meta, arrays), Trace(meta, frozen)):
        simulate(tr, cfg.model, cfg.hardware, cfg.system)
    walk = fast.policy_walk(cfg.system.cache.policy)  # the general copy, which the suite runs (conftest)
    assert len(walk.signatures) == 1, walk.signatures
    assert arrays.gate_weights.flags.writeable  # the trace itself is left as it was


def test_a_compilation_is_announced_and_timed_a_cache_load_is_silent():
    import io

    from numba import njit
    from numba.core import event as numba_event

    @njit
    def helper(x):
        return x + 1

    out = io.StringIO()
    notice = fast.CompileNotice((fast.walk.walk, fast.timing.replay), out)
    with numba_event.install_listener("numba:compile", notice):
        helper(1)  # a compilation that is not the core's: silent
        assert out.getvalue() == ""
        for d in (fast.walk.walk, fast.timing.replay):  # numba fires numba:compile only on a cache miss
            notice.notify(numba_event.Event("numba:compile", numba_event.EventStatus.START, {"dispatcher": d}))
            notice.notify(numba_event.Event("numba:compile", numba_event.EventStatus.END, {"dispatcher": d}))
    lines = out.getvalue().splitlines()
    assert len(lines) == 3 and "compiling the simulator's core (walk first)" in lines[0]
    assert lines[1].startswith("hobbit: compiled walk in ") and lines[2].startswith("hobbit: compiled replay in ")
    assert fast.bound.pass_bounds in fast.ENTRY and fast.policy_walk("lru") in fast.NOTICE.entry


def test_per_pass_costs_are_the_costs_of_each_pass():
    from hobbit.sim.cost import CostModel
    from hobbit.sim.workload import build_workload

    cfg = compose_sim()
    wl = build_workload(bundled(6))
    cost = CostModel(cfg.model, cfg.hardware)
    sizes = np.asarray(wl.pass_end) - np.asarray(wl.pass_start)
    dense, other = fast.per_pass(cost, sizes, np.asarray(wl.pass_context))
    assert len(set(zip(sizes.tolist(), wl.pass_context))) < len(sizes)  # passes share (tokens, context) pairs
    assert dense[:, 0].tolist() == [cost.dense_s(int(n), int(c)) for n, c in zip(sizes, wl.pass_context)]
    assert dense[:, 1].tolist() == dense[:, 0].tolist()  # no layer runs whole on the CPU
    assert other.tolist() == [cost.other_s(int(n)) for n in sizes]
    kinds = fast.workload_kinds(wl)  # made once per workload, the same costs
    assert fast.workload_kinds(wl) is kinds
    again = fast.per_pass(cost, sizes, np.asarray(wl.pass_context), kinds)
    assert again[0].tolist() == dense.tolist() and again[1].tolist() == other.tolist()


@given(w=st.tuples(*[st.floats(0, 10, allow_nan=False)] * 4).filter(lambda w: sum(w) > 0), layers=st.integers(1, 128))
@settings(max_examples=60, deadline=None)
def test_the_fld_table_has_the_references_bits(w, layers):
    from hobbit.sim.policies.eviction.multidim import MultiDim, MultiDimKnobs

    pol = MultiDim(MultiDimKnobs(*w))
    want = np.array([pol._fld_weights(c, layers) for c in range(layers)], np.float64)
    got = multidim.fld_table(pol.w[3], layers)
    assert got.shape == want.shape and got.flags.writeable  # writable: numba compiles a read-only array apart
    assert (got.view(np.int64) == want.view(np.int64)).all()
    got[0, 0] = -1.0  # a copy: the next caller's table is untouched
    assert multidim.fld_table(pol.w[3], layers)[0, 0] == want[0, 0]


def test_cost_models_of_one_machine_share_their_answers():
    """A sweep's points each build a cost model; equal ones share one memo, and its answers are the uncached ones."""
    import hobbit.sim.cost as cost_mod
    from hobbit.sim.cost import CostModel

    cfg = compose_sim()
    a, b = CostModel(cfg.model, cfg.hardware), CostModel(cfg.model, cfg.hardware)
    other = CostModel(cfg.model, dataclasses.replace(cfg.hardware, link_gbps=cfg.hardware.link_gbps / 2))
    assert a._memo is b._memo and a._memo is not other._memo
    assert a.cached("expert_s", 1, 7) == b.expert_s(1, 7) and ("expert_s", 1, 7) in b._memo
    assert other.cached("transfer_s", 1 << 20) == other.transfer_s(1 << 20) != a.transfer_s(1 << 20)
    cost_mod._MEMOS.clear()  # a model that cannot be hashed (a measured profile holds lists) keeps its own memo
    hw = dataclasses.replace(cfg.hardware, name=["unhashable"])
    lone = CostModel(cfg.model, hw)
    assert lone._memo == {} and lone._memo is not CostModel(cfg.model, hw)._memo and not cost_mod._MEMOS
    for i in range(cost_mod.MEMOS_KEPT + 2):  # only the last few machines are remembered
        CostModel(cfg.model, cfg.hardware, layer_scale=2.0 + i)
    assert len(cost_mod._MEMOS) <= cost_mod.MEMOS_KEPT
