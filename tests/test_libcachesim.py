"""The cache policies against libCacheSim (github.com/1a1a11a/libCacheSim, the ``libcachesim`` bindings),
the library cache researchers use, on real routing.

A trace's expert accesses become a request stream: object (layer, expert), size 1, in the order
the decision walk serves them (pass by pass, layer by layer, a layer's experts in router order,
each once per pass). hobbit runs the same trace as a system with one precision, no prefetch and a
cache of ``slots`` experts; its hit ratio (hits / uses) must equal libCacheSim's exactly.

ARC, S3-FIFO and SIEVE keep their own order (``policies.base.Hooked``): the same stream gives the same
hit ratio. libCacheSim's S3-FIFO keeps nothing below 20 slots (its small queue refuses a copy that
would fill it); hobbit's does, so the sizes here are above that. LIRS follows libCacheSim's steps: on
its own the state machine gives libCacheSim's hits exactly, but libCacheSim's LIRS can hold a few more
objects than its size (a hit on Q's only copy evicts that copy and keeps it resident on S), which slots
cannot: as a cache policy it hits slightly less. libCacheSim has no LFRU: it is checked against a
transcription of the class the MoE expert-cache discussions use (tinyserve's ``LFRUPolicy``).

Belady: hobbit's is MIN with the experts of the token-layer being served kept resident (they are
computed in that layer: no real system can evict them mid-layer). libCacheSim's is MIN without
that constraint, so it may evict an expert the layer has just used and reach a higher, unreachable
hit ratio. The constraint is given to libCacheSim exactly by a refresh request per expert at the end
of its layer (the expert's next access is then within its own layer until the layer ends; refreshes
are not counted): MIN on that stream must give hobbit's ratio; where a layer has one expert
(a top-1 projection of the trace) the constraint is empty and plain MIN must give it too.
"""

from __future__ import annotations

import dataclasses

import pytest

from hobbit.sim.decide import Decider
from hobbit.sim.decisions import HIGH_HIT, HIGH_LOAD
from hobbit.sim.fast import decide_or_refer
from hobbit.sim.workload import Workload, build_workload

from sim_helpers import bundled, compose_sim, first_requests

lcs = pytest.importorskip("libcachesim")

NEVER = 2**62
SIZES = (64, 128)  # slots: a layer-loop of the bundled trace (32 layers x 2) is 64 experts


def layer_accesses(wl: Workload) -> list[list[int]]:
    """Per (pass, layer), the objects it uses in the decision walk's order (first use within the pass)."""
    E, out = wl.num_experts, []
    for a, b in zip(wl.pass_start, wl.pass_end):
        for layer in range(wl.num_layers):
            out.append(list(dict.fromkeys(layer * E + e for e in wl.ids[a:b, layer].ravel().tolist())))
    return out


def ours(wl: Workload, policy: str, slots: int) -> float:
    """hobbit's hit ratio as users get it: the compiled walk (``tests/test_fast.py`` holds it to the reference's
    decisions, policy by policy)."""
    system = compose_sim("system=on-demand", f"system.cache.policy={policy}").system
    served = decide_or_refer(wl, system, (slots, 0), (1, 1)).served
    return served[HIGH_HIT] / (served[HIGH_HIT] + served[HIGH_LOAD])


LIBCACHESIM = {"lru": "LRU", "fifo": "FIFO", "lfu": "LFU", "arc": "ARC", "s3fifo": "S3FIFO", "sieve": "Sieve"}
EXACT = tuple(LIBCACHESIM)  # LIRS: see the module's note
HOOKED = ("arc", "s3fifo", "sieve", "lirs", "lfru")


def lirs_alone(flat: list[int], slots: int) -> tuple[int, int]:
    """hobbit's LIRS state machine driven request by request, as libCacheSim drives its LIRS: (hits, the
    most objects it held beyond its size)."""
    from hobbit.sim.policies.eviction.lirs import LIRS

    pol = LIRS()
    st = pol.new_state(slots)
    st.is_pinned = lambda key: False
    hits = over = 0
    for o in flat:
        key = (o, 0)
        if pol._find(st, key):
            hits += 1
        else:
            pol._make_room(st, key)
            pol._insert(st, key)
        pol._limit_stack(st)
        held = sum(1 for f in st.s.values() if f[0] or f[1]) + sum(1 for k in st.q if k not in st.s)
        over = max(over, held - slots)
    return hits, over


def tinyserve_lfru(flat: list[int], slots: int) -> float:
    """e1n00r/tinyserve ``cache_policy.LFRUPolicy`` (197d368), transcribed: lookup, insert, select_evict."""
    data, clock, hits = {}, 0, 0
    for o in flat:
        if o in data:
            clock += 1
            data[o][1] += 1
            data[o][2] = clock
            hits += 1
            continue
        if len(data) >= slots:
            best, best_score = None, float("inf")
            for k, (_, freq, last) in data.items():
                score = freq / (clock - last + 1)
                if score < best_score:
                    best, best_score = k, score
            del data[best]
        clock += 1
        data[o] = [0, 1, clock]
    return hits / len(flat)


def theirs(steps: list[list[int]], policy: str, slots: int) -> float:
    cache = getattr(lcs, {**LIBCACHESIM, "lirs": "LIRS"}[policy])(slots)
    flat = [o for s in steps for o in s]
    return sum(cache.get(lcs.Request(obj_size=1, obj_id=o + 1)) for o in flat) / len(flat)


def theirs_min(steps: list[list[int]], slots: int, layer_resident: bool) -> float:
    """libCacheSim's Belady; ``layer_resident``: with a refresh request per object at the end of its layer."""
    seq = (
        [(o, True) for s in steps for o in s]
        if not layer_resident
        else [x for s in steps for x in [(o, True) for o in s] + [(o, False) for o in s]]
    )
    nxt, last = [NEVER] * len(seq), {}
    for i in range(len(seq) - 1, -1, -1):
        nxt[i] = last.get(seq[i][0], NEVER)
        last[seq[i][0]] = i
    if layer_resident:  # an access's next use is its refresh, at the end of its layer
        i = 0
        for s in steps:
            for j in range(len(s)):
                nxt[i + j] = i + len(s) + j
            i += 2 * len(s)
    cache, hits = lcs.Belady(slots), 0
    for (o, counted), n in zip(seq, nxt):
        hit = cache.get(lcs.Request(obj_size=1, obj_id=o + 1, next_access_vtime=n))
        assert counted or hit, "a refresh missed: the cache is smaller than one layer's experts"
        hits += counted and hit
    return hits / sum(len(s) for s in steps)


@pytest.fixture(scope="module")
def workloads(real_converted) -> dict[str, Workload]:
    """Decode routing: the bundled trace (its first 8 requests), FLAME-MoE-290M teacher-forced as
    decode, Qwen1.5-MoE's vLLM batches (prefill and decode passes)."""
    traces = {"bundled": first_requests(bundled(), 8), **real_converted}
    return {name: build_workload(tr, "none") for name, tr in traces.items()}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bundled", "flame", "qwen"])
def test_policies_give_libcachesims_hit_ratios(workloads, name):
    wl = workloads[name]
    steps = layer_accesses(wl)
    for slots in SIZES:
        ratios = {}
        for policy in EXACT:
            ratios[policy] = ours(wl, policy, slots)
            assert ratios[policy] == theirs(steps, policy, slots), (name, policy, slots)
        hits, over = lirs_alone([o for s in steps for o in s], slots)
        lcs_lirs = theirs(steps, "lirs", slots)
        assert hits / sum(map(len, steps)) == lcs_lirs, (name, slots)
        assert 0 <= lcs_lirs - ours(wl, "lirs", slots) < 0.01 + 0.01 * (over > 0), (name, slots, over)
        assert ours(wl, "lfru", slots) == tinyserve_lfru([o for s in steps for o in s], slots), (name, slots)
        best = ours(wl, "belady", slots)
        assert best == theirs_min(steps, slots, layer_resident=True), (name, slots)
        # MIN without the constraint reaches more: it evicts experts its layer is still computing
        assert best <= theirs_min(steps, slots, layer_resident=False) + 1e-12
        assert best > max(ratios.values()), (name, slots, best, ratios)


@pytest.mark.parametrize("policy", HOOKED)
@pytest.mark.parametrize("per_layer", [False, True])
def test_hooked_policies_track_the_cache_under_prefetch_and_per_layer_regions(workloads, policy, per_layer):
    """HOBBIT's own walk (two pools, prefetches pinned until their layer, a per-layer split) on the bundled
    trace: the policy's order holds exactly the copies each region holds, every use is served, and pins
    and regions leave its hit ratio in LRU's neighbourhood (not a broken order that never hits)."""
    wl = workloads["bundled"]
    system = compose_sim(
        "system=hobbit", f"system.cache.policy={policy}", f"system.cache.per_layer={str(per_layer).lower()}"
    ).system
    dec = Decider(wl, system, (96, 64), (3, 1))
    out = dec.run()
    assert out.evictions > 0 and out.prefetch_issued > 0
    cache = dec.cache
    assert cache.hooks is not None
    for pool in cache.pools:
        regions = {tuple(cache.region(pool, layer)) for layer in range(wl.num_layers)}
        for r in (range(t[0], t[-1] + 1) for t in regions):
            held = {s for s in r if pool.layer[s] >= 0}
            assert cache.hooks.slots(pool, r) == held, (pool.precision, r.start)
    hits = out.served[HIGH_HIT] + out.served[1]
    lru = decide_or_refer(
        wl, dataclasses.replace(system, cache=dataclasses.replace(system.cache, policy="lru")), (96, 64), (3, 1)
    ).served  # the compiled walk: only its hits are compared
    assert hits >= 0.5 * (lru[HIGH_HIT] + lru[1]), (hits, lru)


def test_belady_is_libcachesims_min_where_a_layer_uses_one_expert(workloads):
    wl = workloads["flame"]
    top1 = dataclasses.replace(wl, top_k=1, ids=wl.ids[:, :, :1].copy(), weights=wl.weights[:, :, :1].copy())
    steps = layer_accesses(top1)
    for slots in (8, 32):
        assert ours(top1, "belady", slots) == theirs_min(steps, slots, layer_resident=False), slots


def test_the_side_by_side_benchmark_agrees_with_libcachesim(capsys):
    """benchmarks/vs_libcachesim.py on a short stream: both caches' hit ratios equal (it asserts so), a ratio
    printed."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parents[1] / "benchmarks" / "vs_libcachesim.py"
    spec = importlib.util.spec_from_file_location("vs_libcachesim", path)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    bench.main(["--accesses", "150000", "--repeats", "1"])
    out = capsys.readouterr().out.strip().splitlines()
    ours, theirs = (float(line.rpartition("hit_ratio=")[2]) for line in out[1:3])
    assert ours == theirs and 0.0 < ours < 1.0
    assert float(out[-1].removeprefix("ratio_vs_libcachesim=")) > 0
