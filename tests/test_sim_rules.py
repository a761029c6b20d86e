"""HOBBIT's rules as the paper states them (docs/design.md, Policies), on crafted cases:
skip only on a miss, request records that survive eviction, prefetched experts pinned in
their pool until their layer has run, and the staging-slot alternative."""

from __future__ import annotations

import dataclasses

import pytest

from hobbit.sim.config import PrefetchConfig, SystemConfig
from hobbit.sim.decide import Decider
from hobbit.sim.decisions import HIGH_HIT, LOW_HIT, SKIPPED
from hobbit.sim.policies import EVICTION, make_eviction
from hobbit.sim.policies.base import HIGH, LOW, CacheView, Hooked, PolicyInputs, Pool
from hobbit.sim.policies.cache import ExpertCache
from hobbit.sim.policies.eviction.multidim import MultiDim, MultiDimKnobs
from hobbit.sim.run import simulate
from hobbit.sim.workload import Workload

from sim_helpers import bundled, compose_sim, decode_workload


def _decide(wl: Workload, slots: tuple[int, int], system: SystemConfig):
    return Decider(wl, system, slots, (2, 1), keep_log=True).run()


NO_PREFETCH = SystemConfig(prefetch=PrefetchConfig(kind="none"))


def test_a_cached_expert_scored_above_t2_is_served_not_skipped():
    # token 0 loads experts 0 and 1 (equal weights: both high); token 1 scores expert 1 at 0.95 > T2:
    # it is cached, so it is served; token 2 scores expert 2 above T2 and it is not cached: skipped
    wl = decode_workload([[[0, 1]], [[0, 1]], [[0, 2]]], [[[0.5, 0.5]], [[0.95, 0.05]], [[0.95, 0.05]]])
    dec = _decide(wl, (4, 0), NO_PREFETCH)
    assert dec.log is not None
    acts = [(p, e, act) for p, _, e, act, _ in dec.log]
    assert (1, 1, "hit") in acts and (1, 1, "skip") not in acts
    assert (2, 2, "skip") in acts
    assert dec.served[SKIPPED] == 1 and dec.served[HIGH_HIT] == 3
    # the gate mass of the served selection counts as served, not skipped
    assert dec.mass[2] == pytest.approx(0.05)


def test_a_low_copy_serves_a_selection_that_would_be_skipped_even_without_serve_any_cached():
    wl = decode_workload([[[0, 1]], [[0, 1]]], [[[0.7, 0.3]], [[0.95, 0.05]]])  # expert 1: low, then above T2
    system = dataclasses.replace(
        NO_PREFETCH, precision=dataclasses.replace(NO_PREFETCH.precision, serve_any_cached=False)
    )
    dec = _decide(wl, (4, 4), system)
    assert dec.served[LOW_HIT] == 1 and dec.served[SKIPPED] == 0


def _cache(policy, high=2, low=1, layers=4):
    return ExpertCache(high, low, policy, layers)


def _use(c: ExpertCache, key, pool: int, token: int) -> None:
    c.use(pool, c.index[pool][key], token)


def test_records_survive_eviction_within_a_request_and_reset_per_request():
    c = _cache(MultiDim(MultiDimKnobs(0, 1, 0, 0)), high=2, low=1)
    a, b = (0, 1), (0, 2)
    c.admit(a, LOW, 0, transfer=0)
    _use(c, a, LOW, 1)
    _use(c, a, LOW, 2)
    c.admit(b, LOW, 0, transfer=1)  # the one low slot: a leaves
    assert a not in c.index[LOW] and c.record(a) == (2, 2, 0)
    slot, _ = c.admit(a, HIGH, 0, transfer=2)  # back at high precision: with its record
    pool = c.pools[HIGH]
    assert (pool.last_use[slot], pool.uses[slot], pool.high_uses[slot]) == (2, 2, 0)
    _use(c, a, HIGH, 3)
    assert c.record(a) == (3, 3, 1)
    c.new_request()
    assert c.record(a) == (0, 0, 0) and pool.uses[slot] == 0


@pytest.mark.parametrize("weights,victim", [((0, 1, 0, 0), (0, 3)), ((0, 0, 1, 0), (0, 1))])
def test_lhu_and_lfu_pick_different_victims(weights, victim):
    """a: 3 uses, 1 at high precision (2 were served by a low copy since evicted); c: 2 uses, both
    high. Frequency (w_lfu) evicts c; high-precision uses (w_lhu) evict a. With records per slot
    reset at insertion, H would equal F in the high pool and LHU would change nothing."""
    c = _cache(MultiDim(MultiDimKnobs(*weights)), high=2, low=1)
    a, b, cc = (0, 1), (0, 2), (0, 3)
    c.admit(a, LOW, 0, transfer=0)
    _use(c, a, LOW, 1)
    _use(c, a, LOW, 2)
    c.admit(b, LOW, 0, transfer=1)  # evicts a's low copy
    c.admit(a, HIGH, 0, transfer=2)
    _use(c, a, HIGH, 3)
    c.admit(cc, HIGH, 0, transfer=3)
    _use(c, cc, HIGH, 3)
    _use(c, cc, HIGH, 4)
    c.tokens = 4
    _, got = c.admit((0, 0), HIGH, 0, transfer=4)
    assert got == victim


@pytest.mark.parametrize("name", sorted(EVICTION))
def test_no_policy_evicts_a_pinned_copy(name):
    future = {(0, e): [1000 - e] for e in range(4)}  # Belady would pick the farthest: expert 0
    policy = make_eviction(name, None, PolicyInputs(num_layers=4, future_uses=future))
    pool = Pool(4, HIGH)
    for s in range(4):
        pool.put(s, (0, s), clock=s + 1, transfer=s, pinned=s != 2)
        if isinstance(policy, Hooked):  # it keeps its own order: told of each copy, as the cache does
            policy.on_insert(pool, range(4), s)
        pool.last_use[s] = pool.uses[s] = pool.all_uses[s] = 10 - s  # slot 2 is no policy's first choice
    view = CacheView(layer=0, num_layers=4, tokens=20, clock=10, step=0)
    assert policy.to_evict(pool, view, range(4)) == 2
    pool.pinned[2] = 1
    assert policy.to_evict(pool, view, range(4)) == -1


def test_a_prefetched_expert_is_pinned_until_its_layer_has_run():
    # 3 layers, a pool of 2 high slots; token 0 at layer 0 prefetches layer 1's
    # predicted experts (1 and 2) into the pool, pinned: layer 0's own demand loads cannot take them
    ids = [[[0, 3], [1, 2], [0, 1]]]
    w = [[[0.5, 0.5]] * 3]
    pred = [[[[1, 2]], [[0, 1]], [[-1, -1]]]]
    wl = decode_workload(ids, w, pred=pred)
    system = SystemConfig(prefetch=PrefetchConfig(kind="hobbit", max_depth=1))
    dec = _decide(wl, (2, 0), system)
    assert dec.log is not None
    log = [(layer, e, act) for _, layer, e, act, _ in dec.log]
    # layer 0: expert 0 and 3 loaded (kept, then the prefetches for layer 1 evict them: FLD with
    # the target layer); layer 1 hits both prefetched copies; no pinned copy was evicted before
    assert (1, 1, "prefetch") in log and (1, 2, "prefetch") in log
    assert log.index((1, 1, "hit")) > log.index((1, 1, "prefetch"))
    assert (1, 1, "evict") not in log[: log.index((1, 1, "hit"))]
    assert dec.prefetch_issued == 4 and dec.prefetch_used == 4  # layer 1 prefetched layer 2's too


def test_a_demand_load_cannot_take_a_pinned_slot():
    # one high slot: layer 0's prefetch of layer 1's expert 1 takes it, pinned; at layer 1 expert 1 hits
    # and expert 2 (predicted wrong) is loaded, used once and not kept: the pinned copy stays
    wl = decode_workload([[[0, 3], [1, 2]]], [[[0.5, 0.5]] * 2], pred=[[[[1, -1]], [[-1, -1]]]])
    dec = _decide(wl, (1, 0), SystemConfig(prefetch=PrefetchConfig(kind="hobbit", max_depth=1)))
    layer1 = dec.steps[1]
    assert layer1.evicted == [] and (1, 2, HIGH) not in layer1.kept
    assert dec.prefetch_used == 1


def test_prefetches_beyond_the_pool_are_not_issued():
    # one high slot: the first predicted expert of layer 1 takes it pinned, the second finds no slot
    wl = decode_workload([[[0, 3], [1, 2]]], [[[0.5, 0.5]] * 2], pred=[[[[1, 2]], [[-1, -1]]]])
    dec = _decide(wl, (1, 0), SystemConfig(prefetch=PrefetchConfig(kind="hobbit", max_depth=1)))
    assert dec.prefetch_issued == 1 and dec.prefetch_dropped == 1


def test_staging_slots_are_a_knob_carved_from_the_high_pool():
    trace = bundled(2)
    base = compose_sim("system=hobbit", "engine=plain")
    pinned = simulate(trace, base.model, base.hardware, base.system)
    staged_sys = dataclasses.replace(base.system, prefetch=dataclasses.replace(base.system.prefetch, staging_slots=4))
    staged = simulate(trace, base.model, base.hardware, staged_sys)
    assert pinned.decisions.staging == 0 and staged.decisions.staging == 4
    assert staged.decisions.slots[HIGH] == pinned.decisions.slots[HIGH] - 4
    assert staged.decisions.slots[LOW] == pinned.decisions.slots[LOW]
    # never more prefetches waiting than staging slots: prefill's extra predictions are dropped
    assert staged.decisions.prefetch_dropped > 0
