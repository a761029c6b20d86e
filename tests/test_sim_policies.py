"""Policies: the precision rule on worked examples, FLD ordering, LRU against a reference,
Belady below every policy, and contracts every registered policy must keep."""

from __future__ import annotations

import dataclasses
from collections import OrderedDict

import numpy as np
import pytest

from hobbit.sim.policies import EVICTION, PREFETCH, make_eviction, make_prefetcher
from hobbit.sim.policies.base import HIGH, LOW, SKIP, CacheView, PolicyInputs, PrefetchContext
from hobbit.sim.policies.cache import ExpertCache
from hobbit.sim.policies.eviction.belady import Belady
from hobbit.sim.policies.eviction.lru import LRU
from hobbit.sim.policies.eviction.multidim import MultiDim, MultiDimKnobs, fld
from hobbit.sim.policies.precision import hobbit_classes, rule_mix
from hobbit.sim.policies.prefetch.eam import EAMKnobs, EAMPrefetch


@pytest.mark.parametrize(
    "w2,expected",
    [
        (0.5, HIGH),
        (0.45, HIGH),
        (0.4, HIGH),  # w2 >= 0.4: s_1 = w1 <= 0.6
        (0.39, LOW),
        (0.25, LOW),
        (0.1, LOW),  # 0.1 <= w2 < 0.4
        (0.09, SKIP),
        (0.01, SKIP),
        (0.0, SKIP),  # w2 < 0.1
    ],
)
def test_mixtral_top2_rule(w2, expected):
    cls = hobbit_classes(np.array([[1 - w2, w2]], dtype=np.float32), 0.6, 0.9)
    assert cls[0, 0] == HIGH and cls[0, 1] == expected


def test_rule_normalises_and_ranks_by_mass_above():
    # raw softmax mass (Qwen-style, not summing to 1): normalised to (0.5, 0.3, 0.15, 0.05)
    w = np.array([[0.25, 0.15, 0.075, 0.025]])
    # s = (0, 0.5, 0.8, 0.95) -> high, high, low, skip
    assert hobbit_classes(w, 0.6, 0.9).tolist() == [[HIGH, HIGH, LOW, SKIP]]
    assert hobbit_classes(w, 0.0, 0.0).tolist() == [[HIGH, SKIP, SKIP, SKIP]]  # top-1 is always high
    assert hobbit_classes(w, 1.0, 1.0).tolist() == [[HIGH, HIGH, HIGH, HIGH]]
    assert rule_mix(hobbit_classes(w, 0.6, 0.9)) == {"high": 0.5, "low": 0.25, "skip": 0.25}


def test_fld_orders_layers_by_how_soon_they_run():
    L = 32
    # filling layer 10: layer 10 itself is most valuable, 11 next, ..., 9 (just passed) least
    order = sorted(range(L), key=lambda layer: -fld(layer, 10, L))
    assert order[:3] == [10, 11, 12] and order[-1] == 9
    assert fld(9, 10, L) == pytest.approx(1 / L)


def _cache(policy, high=3, low=0, layers=4):
    return ExpertCache(high, low, policy, layers)


def test_multidim_evicts_the_layer_just_passed_when_records_tie():
    c = _cache(MultiDim(MultiDimKnobs(0, 0, 0, 1)), high=3)
    for layer in (1, 2, 3):
        c.admit((layer, 0), HIGH, layer, transfer=layer)
    # filling layer 0 of the next token: layer 3 just ran, it is needed last
    _, victim = c.admit((0, 5), HIGH, 0, transfer=9)
    assert victim == (3, 0)


def test_multidim_keeps_recent_and_frequent_copies():
    c = _cache(MultiDim(MultiDimKnobs(1, 1, 1, 0)), high=2)
    c.tokens = 5
    c.admit((0, 1), HIGH, 0, transfer=0)
    c.admit((0, 2), HIGH, 0, transfer=1)
    for _ in range(3):
        c.use(HIGH, c.index[HIGH][(0, 1)], token=4)
    c.use(HIGH, c.index[HIGH][(0, 2)], token=2)
    _, victim = c.admit((0, 3), HIGH, 0, transfer=2)
    assert victim == (0, 2)


def test_lru_matches_a_reference_lru_on_a_seeded_stream():
    """libCacheSim's differential test: our cache with LRU against an OrderedDict LRU."""
    rng = np.random.default_rng(42)
    size = 7
    ours, ref = _cache(LRU(), high=size, layers=4), OrderedDict()
    for step in range(5000):
        key = (int(rng.integers(4)), int(rng.integers(6)))
        ref_hit = key in ref
        if ref_hit:
            ref.move_to_end(key)
        else:
            ref_victim = None
            if len(ref) >= size:
                ref_victim, _ = ref.popitem(last=False)
            ref[key] = True
        hit = ours.lookup(key, HIGH, True)
        assert (hit is not None) == ref_hit, step
        if hit is not None:
            ours.use(*hit, token=step + 1)
        else:
            slot, victim = ours.admit(key, HIGH, key[0], transfer=step)
            ours.use(HIGH, slot, token=step + 1)
            assert victim == ref_victim, step
        assert ours.keys(HIGH) == set(ref)


def _misses(policy, stream, size, uses=None):
    c = _cache(policy, high=size, layers=8)
    misses = 0
    for step, key in enumerate(stream):
        c.step = step
        hit = c.lookup(key, HIGH, True)
        if hit is None:
            misses += 1
            slot, _ = c.admit(key, HIGH, key[0], transfer=step)
            c.use(HIGH, slot, token=step + 1, hit=False)  # the use that loaded it, as the walk records it
        else:
            c.use(*hit, token=step + 1)
    return misses


@pytest.mark.parametrize("seed", range(5))
def test_belady_misses_no_more_than_any_policy(seed):
    rng = np.random.default_rng(seed)
    # a looping, skewed stream like a decode over 8 layers
    stream = [(layer, int(rng.choice(6, p=[0.4, 0.2, 0.15, 0.1, 0.1, 0.05]))) for _ in range(300) for layer in range(8)]
    uses: dict = {}
    for step, key in enumerate(stream):
        uses.setdefault(key, []).append(step)
    best = _misses(Belady(None, PolicyInputs(future_uses=uses)), stream, 10)
    for name in EVICTION:
        if name != "belady":
            pol = make_eviction(name, None, PolicyInputs(future_uses=uses))
            assert best <= _misses(pol, stream, 10), name


@pytest.mark.parametrize("name", sorted(EVICTION))
def test_every_eviction_policy_evicts_a_resident_copy(name):
    pol = make_eviction(name, None, PolicyInputs(future_uses={}))
    c = _cache(pol, high=6, layers=3)
    rng = np.random.default_rng(1)
    for step in range(200):
        key = (int(rng.integers(3)), int(rng.integers(5)))
        if c.lookup(key, HIGH, True) is None:
            before = c.keys(HIGH)
            slot, victim = c.admit(key, HIGH, key[0], transfer=step)
            assert slot >= 0 and (victim is None) == (len(before) < 6)
            assert victim is None or (victim in before and victim not in c.keys(HIGH))
        assert len(c) <= 6


def _frozen_dataclass(t: object) -> bool:
    params = getattr(t, "__dataclass_params__", None)  # what @dataclass records of its arguments
    return dataclasses.is_dataclass(t) and params is not None and params.frozen


@pytest.mark.parametrize("registry", [EVICTION, PREFETCH])
def test_every_registered_policy_declares_its_contract(registry):
    """Knobs (a frozen dataclass or None), known needs, and a name that is a config key."""
    from hobbit.sim.policies.base import NEEDS
    from hobbit.sim.policies.registry import _load
    from hobbit.traces.knobs import check_knobs

    for name, spec in registry.items():
        cls = _load(spec)
        assert cls.name == name and name.isidentifier(), spec
        assert cls.needs <= set(NEEDS), (name, cls.needs)
        assert cls.Knobs is None or _frozen_dataclass(cls.Knobs)
        if cls.Knobs is not None:
            check_knobs(cls.Knobs())  # the defaults are valid
            assert getattr(cls.Knobs(), "problems", list)() == [], name


def test_zero_slots_keep_nothing():
    c = _cache(LRU(), high=0, low=0)
    assert c.admit((0, 1), HIGH, 0, transfer=0) == (-1, None) and len(c) == 0


def _ctx(layer=0, num_layers=6, cached=(), preds=None, counts=None):
    preds = preds or {1: ([[1, 2]], [[HIGH, LOW]]), 2: ([[3, 4]], [[HIGH, SKIP]]), 3: ([[5, 0]], [[HIGH, HIGH]])}
    return PrefetchContext(
        layer=layer,
        num_layers=num_layers,
        predict=lambda d: preds.get(d, ([], [])),
        future=lambda d: preds.get(d, ([], [])),
        counts=counts if counts is not None else np.zeros((num_layers, 8), np.int64),
        is_cached=lambda lay, e: (lay, e) in cached,
        precision=HIGH,
    )


def test_hobbit_prefetch_goes_deeper_only_when_the_next_layer_is_cached():
    pf = make_prefetcher("hobbit", None, PolicyInputs(depth=2))
    got = pf.propose(_ctx())
    assert {(r.layer, r.expert, r.precision) for r in got} == {(1, 1, HIGH), (1, 2, LOW)}
    # layer 1 all cached -> layer 2; its predicted skip is not loaded
    got = pf.propose(_ctx(cached={(1, 1), (1, 2)}))
    assert {(r.layer, r.expert, r.precision) for r in got} == {(2, 3, HIGH)}
    # depth 2 reached: layers 1 and 2 cached, layer 3 is not looked at
    assert pf.propose(_ctx(cached={(1, 1), (1, 2), (2, 3)})) == []
    assert pf.propose(_ctx(layer=5)) == []  # nothing after the last layer


@pytest.mark.parametrize("name", sorted(PREFETCH))
def test_every_prefetcher_proposes_later_layers_only(name):
    pf = make_prefetcher(name, None, PolicyInputs(depth=3))
    counts = np.ones((6, 8), np.int64)
    for layer in range(6):
        for r in pf.propose(_ctx(layer=layer, counts=counts)):
            assert layer < r.layer < 6 and r.precision in (HIGH, LOW) and 0 <= r.expert < 8
    pf.end_request()
    for r in pf.propose(_ctx(layer=0, counts=counts)):
        assert 0 < r.layer <= 3


def test_eam_matches_the_most_similar_profiling_request():
    """MoE-Infinity: the library is the profiling requests' matrices, matched per layer over the layers
    not yet run; the best uncached experts of later layers by probability x layer decay are proposed;
    replayed requests never enter the library."""
    a = np.zeros((3, 4), np.int64)
    a[0, 0], a[1, 1], a[2, 2] = 5, 5, 5
    b = np.zeros((3, 4), np.int64)
    b[0, 3], b[1, 2], b[2, 1] = 5, 5, 5
    pf = make_prefetcher("eam", EAMKnobs(per_step=2), PolicyInputs(depth=1, profile=[a, b]))
    assert isinstance(pf, EAMPrefetch)
    cur = np.zeros((3, 4), np.int64)
    cur[1, 2], cur[2, 1] = 1, 1  # earlier tokens of this request routed like b
    got = pf.propose(_ctx(layer=0, num_layers=3, counts=cur))
    assert [(r.layer, r.expert) for r in got] == [(1, 2), (2, 1)]  # nearer layer first (decay)
    assert pf.match is not None and pf.match[1, 2] == 1.0 and pf.match[1, 1] == 0.0
    pf.end_request()
    assert pf.library is not None and len(pf.library) == 2  # nothing learnt from the replayed request
    assert make_prefetcher("eam", None, PolicyInputs(depth=1)).propose(_ctx(layer=0, counts=cur)) == []


def test_cache_view_is_frozen():
    v = CacheView(layer=0, num_layers=2, tokens=1, clock=0, step=0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        v.layer = 1  # pyright: ignore[reportAttributeAccessIssue]  # frozen: the assignment must fail


@pytest.mark.parametrize("mode,allowed", [("rule", {HIGH, LOW}), ("high", {HIGH}), ("low", {LOW})])
def test_prefetch_precision_follows_its_knob(mode, allowed):
    """system.prefetch.precision: the rule on the predicted weights (both classes occur), or one class."""
    from hobbit.sim.run import simulate

    from sim_helpers import bundled, compose_sim

    cfg = compose_sim("system=hobbit", f"system.prefetch.precision={mode}", "engine=plain")
    res = simulate(bundled(2), cfg.model, cfg.hardware, cfg.system, engine="plain", keep_log=True)
    assert res.decisions.log is not None
    got = {prec for (_, _, _, action, prec) in res.decisions.log if action == "prefetch"}
    assert got == allowed, (mode, got)
