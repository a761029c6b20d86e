"""One compiled walk per eviction policy (``sim.fast.special``): the copies, and what a run compiles."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from hobbit.sim.fast import records, special, walk


def test_a_copy_defines_the_policys_functions_and_takes_the_rest_from_the_template():
    dep = special.dependent()
    assert {"walk", "_pre_admit", "_copy_in", "_serve_one", "_drop_stale", "_new_request"} <= set(dep)
    # what no policy changes lives beside the template (``steps``, ``state``, ``records``, ``borrow``): none depends
    assert set(dep) <= {n for n in vars(walk) if callable(getattr(walk, n))}
    assert not {"walk_state", "grow", "split_makespan", "admit", "enter", "note_use", "use", "needed"} & set(dep)
    for policy in ("lru", "belady", "lirs"):
        mod = special.core(policy)
        assert mod.POLICY == walk.OWN and mod.OWN_HIT and mod.PICKS_VICTIM
        assert mod.FUTURE == mod.OWN_RENEW == (policy == "belady")  # the walk moves next uses on for Belady alone
        assert mod.__name__ == f"hobbit.sim.fast.walk_{policy}_general"
        for name in dep:  # its own, compiled for it
            assert (
                getattr(mod, name) is not getattr(walk, name) and getattr(mod, name).py_func.__module__ == mod.__name__
            )
        for name in ("grow", "enter", "needed", "Staged", "Rows", "NEVER"):  # the template's, shared
            assert getattr(mod, name) is getattr(walk, name)
    # a copy's name carries a digest of every module the template takes code from
    names = special.template_text()
    for mod_name in ("walk", "steps", "records", "borrow", "order"):
        src = (Path(walk.__file__).parent / f"{mod_name}.py").read_text(encoding="utf-8")
        assert src in names, mod_name


def test_an_unknown_policy_is_named_with_those_there_are():
    with pytest.raises(ValueError, match=r"no eviction policy 'mru2': a registered .*Compiled"):
        special.text("mru2")


def test_a_plain_policy_runs_compiled_from_its_own_file():
    """MRU, the worked example, gives its victim compiled beside its class: its walk binds that function, and no
    line of the template names it."""
    from hobbit.sim.policies.compiled import Compiled
    from hobbit.sim.policies.eviction import mru

    part = mru.MRU.compiled
    assert isinstance(part, Compiled) and special.own_part("mru") == part
    mod = special.core("mru")
    assert mod.POLICY == walk.OWN and mod.PICKS_VICTIM and not (mod.OWN_HIT or mod.OWN_MISS or mod.OWN_INSERT)
    assert mod._p_evict.py_func is part.evict and walk._p_evict.py_func is not part.evict
    assert mod._p_hit is walk._p_hit  # none of its own: the template's, never called
    assert "mru" not in Path(walk.__file__).read_text().lower()


def test_every_policy_with_state_of_its_own_keeps_it_in_its_own_file():
    """The hooked policies and the listed ones: their hooks are functions of their own files (compiled in place),
    their state is built there, and the template names none of them, nor any prefetcher."""
    from hobbit.sim.policies.registry import EVICTION, PREFETCH, eviction_class

    text = Path(walk.__file__).read_text().lower()
    for policy in ("multidim", "lru", "lfu", "fifo", "sieve", "lfru", "s3fifo", "arc", "lirs", "belady"):
        part = special.own_part(policy)
        assert part is not None and part is eviction_class(policy).compiled and part.state, policy
        mod = special.core(policy)
        assert mod.POLICY == walk.OWN
        assert mod._p_evict.py_func.__module__ in {
            eviction_class(policy).__module__,
            "hobbit.sim.policies.eviction.lru",
        }
        assert mod.OWN_HIT == (part.hit is not None) and mod.OWN_MISS == (part.miss is not None)
        assert mod.OWN_INSERT == (part.insert is not None) and mod.OWN_RENEW == (part.renew is not None)
    names = (set(EVICTION) | set(PREFETCH) | {"s3-fifo", "moe-infinity"}) - {"hobbit", "none"}  # two plain words
    named = re.findall(r"\b(?:" + "|".join(sorted(map(re.escape, names), key=len, reverse=True)) + r")\b", text)
    assert named == [], named


def test_a_newly_registered_policy_takes_the_compiled_path():
    """A policy registered by one line (here, for this test: ``tests/plain_policy.py``) with its compiled victim: the
    compiled walk decides it (nothing is left to the reference), the same decisions and times as the reference walk,
    and its walk holds the policy's own function."""
    import dataclasses
    from unittest import mock

    import plain_policy

    from hobbit.sim import fast
    from hobbit.sim.policies import registry
    from hobbit.sim.run import simulate

    from sim_helpers import bundled, compose_sim

    cfg = compose_sim("system=hobbit-lru")
    with mock.patch.dict(registry.EVICTION, {"lru_scan": "plain_policy:LruScan"}):
        system = dataclasses.replace(cfg.system, cache=dataclasses.replace(cfg.system.cache, policy="lru_scan"))
        assert fast.unsupported(system) is None and special.compiled("lru_scan")
        tr = bundled(3)
        got = simulate(tr, cfg.model, cfg.hardware, system, engine="fast")
        ref = simulate(tr, cfg.model, cfg.hardware, system, engine="plain")
        assert special.core("lru_scan")._p_evict is plain_policy.oldest
        assert got.decisions.steps == ref.decisions.steps
        assert got.summary["decode_ms_per_token"] == pytest.approx(ref.summary["decode_ms_per_token"], rel=1e-9)
        assert got.summary["evictions"] == ref.summary["evictions"] > 0
        lru = simulate(tr, cfg.model, cfg.hardware, cfg.system, engine="fast")  # LRU by its list: the same victims
        assert lru.decisions.steps == got.decisions.steps


def test_a_newly_registered_prefetcher_takes_the_compiled_path():
    """A prefetcher registered by one line (here, for this test: ``tests/plain_prefetcher.py``) with its compiled
    ``propose``: the compiled walk decides it, general or specialised (nothing is left to the reference), with the
    reference walk's decisions and times, and each copy calls the prefetcher's own function."""
    import dataclasses
    from unittest import mock

    import plain_prefetcher

    from hobbit.sim import fast
    from hobbit.sim.policies import registry
    from hobbit.sim.run import simulate

    from sim_helpers import bundled, compose_sim

    cfg = compose_sim("system=hobbit-lru", "system.prefetch.max_depth=2")
    with mock.patch.dict(registry.PREFETCH, {"two_ahead": "plain_prefetcher:TwoAhead"}):
        system = dataclasses.replace(cfg.system, prefetch=dataclasses.replace(cfg.system.prefetch, kind="two_ahead"))
        assert fast.unsupported(system) is None and special.prefetchers()[-1] == "two_ahead"
        k = len(special.prefetchers()) - 1
        tr = bundled(3)
        ref = simulate(tr, cfg.model, cfg.hardware, system, engine="plain")
        for mode in ("general", "specialised"):
            got = simulate(tr, cfg.model, cfg.hardware, system, engine="fast", walks=mode)
            assert got.decisions.steps == ref.decisions.steps, mode
            assert got.summary["decode_ms_per_token"] == pytest.approx(ref.summary["decode_ms_per_token"], rel=1e-9)
            assert got.decisions.prefetch_issued == ref.decisions.prefetch_issued > 0
        variant = special.Variant("two_ahead", "never", False, False)
        for mod in (special.core("lru"), special.core("lru", variant)):
            assert getattr(mod, f"_pf{k}_propose") is plain_prefetcher.two_ahead  # compiled in place


def test_the_template_refuses_to_walk():
    assert walk.POLICY == -1 and not walk.PICKS_VICTIM and not (walk.OWN_HIT or walk.OWN_MISS or walk.OWN_INSERT)
    mod = special.core("lfu")
    assert mod.POLICY == walk.OWN and mod.OWN_HIT and mod.OWN_INSERT and not mod.OWN_MISS and mod.PICKS_VICTIM
    assert mod.__name__ == "hobbit.sim.fast.walk_lfu_general" and special.core("lfu") is mod


def test_a_copy_is_written_once_and_an_older_templates_copy_goes(tmp_path, monkeypatch):
    monkeypatch.setattr(special, "home", lambda: tmp_path)
    stale = tmp_path / "walk_fifo_general_0123456789abcdef.py"
    before_variants = tmp_path / "walk_fifo_0123456789abcdef.py"  # a general copy as named before there were variants
    lookalike = tmp_path / "walk_fifo_x_0123456789abcdef.py"  # not a copy's name: stays
    variant = tmp_path / "walk_fifo_none_never_h0_b0_0123456789abcdef.py"  # another variant's copy stays
    for f in (stale, before_variants, lookalike, variant):
        f.write_text("POLICY = 2\n")
    (tmp_path / "__pycache__").mkdir()
    stale_cache = tmp_path / "__pycache__" / "walk_fifo_general_0123456789abcdef.walk-2140.py311.nbi"
    stale_cache.write_bytes(b"x")
    other = tmp_path / "walk_lru_general_0123456789abcdef.py"  # another policy's copy stays
    other.write_text("POLICY = 0\n")
    path = special.source("fifo")
    assert path.read_text(encoding="utf-8") == special.text("fifo")
    assert not stale.exists() and not stale_cache.exists() and not before_variants.exists()
    assert other.exists() and lookalike.exists() and variant.exists()
    assert oct(path.stat().st_mode & 0o777) == oct(0o666 & ~special._umask())
    os.utime(path, ns=(1, 1))  # numba keys its cache by the file's stamp: a second call must leave it as it is
    assert special.source("fifo") == path and path.stat().st_mtime_ns == 1
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".walk_")] == []  # no temporary file left


def test_a_run_compiles_its_own_policys_code_and_no_others(tmp_path):
    """From an empty numba cache, a run of an LRU system without prefetch compiles the LRU walk specialised for its
    settings and its list's helpers, and none of the other policies' code, nor the prefetchers', nor the CPU's
    (their branches are pruned before numba types them)."""
    code = textwrap.dedent(
        """
        from numba.core import event
        seen = set()
        class Seen(event.Listener):
            def on_start(self, e):
                f = e.data["dispatcher"].py_func
                seen.add(f.__module__.rpartition(".")[2] + "." + f.__name__)
            def on_end(self, e):
                pass
        event.register("numba:compile", Seen())
        from hobbit.sim.fast import decide, walk
        from hobbit.sim.workload import build_workload
        from sim_helpers import bundled, compose_sim
        cfg = compose_sim("system=moe-offloading")
        wl = build_workload(bundled(1))
        decide(wl, cfg.system, (6, 0), [[1, 1]] * wl.num_layers, walks="specialised")
        print(" ".join(sorted(seen)))
        """
    )
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=Path(__file__).resolve().parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=True,
    )
    seen = set(out.stdout.split())
    own = "walk_lru_none_never_h0_b0"
    # the policy's hooks, called from the walk (``_pre_admit`` and ``_copy_in``, inlined there)
    assert {f"{own}.walk", "lru.lru_evict", "lru.lru_insert"} <= seen
    assert {"lists.push", "lists.unlink"} <= seen, seen
    assert not {x for x in seen if x.startswith("walk_lru_general.")}
    others = {"compiled.wanted", "eam.best_match", "steps.split_cpu", "order.stable_order"}  # prefetch, EAM, the CPU
    others |= {
        "eam_priority.eam_priority_to_evict",
        "eam_release.eam_release_evict",
        "multidim.pruned_evict",
        "multidim.scan",
    }
    others |= {
        f"{own}._passed",
        "belady.belady_insert",
        "sieve.sieve_evict",
        "lfu.lfu_insert",
        "s3fifo.s3fifo_evict",
        "arc.evict_from",
    }
    others |= {"lirs._l_make_room", "lirs.lirs_evict", "lists.q_push"}
    assert not others & seen, others & seen


def test_where_the_template_cannot_be_written_copies_go_to_the_users_cache(tmp_path, monkeypatch):
    """A read-only install (the template's folder not writable): the copies go under ``$HOBBIT_CACHE``."""
    beside = Path(walk.__file__).parent / "__pycache__" / "walks"
    real = special._writable
    monkeypatch.setattr(special, "_writable", lambda d: d != beside and real(d))
    monkeypatch.setenv("HOBBIT_CACHE", str(tmp_path / "cache"))
    assert special.home() == tmp_path / "cache" / "walks"
    monkeypatch.setattr(special, "home", lambda: tmp_path / "cache" / "walks")
    assert special.source("sieve").parent == tmp_path / "cache" / "walks"


# one system per value of each setting a copy is specialised for (the prefetchers, cpu_misses, the history fallback,
# the bound's CPU split), each under a policy of its own
VARIANTS = [
    ("system=hobbit", "hobbit", "never", False, False),
    ("system=moe-infinity", "eam", "never", False, False),
    ("system=hobbit-oracle system.cpu_misses=split", "oracle", "split", False, True),
    ("system=hobbit-lru system.prefetch.kind=next_layer system.prefetch.fallback=history system.cpu_misses=faster",
     "next_layer", "faster", True, True),
    ("system=ktransformers", "none", "always", False, True),
]  # fmt: skip


@pytest.mark.parametrize("overrides,prefetcher,misses,history,bound_cpu", VARIANTS)
def test_a_copy_specialised_for_a_runs_settings_decides_as_the_general_copy(
    monkeypatch, overrides, prefetcher, misses, history, bound_cpu
):
    """``hobbit sim``'s default: a policy's walk specialised for the run's settings (``special.Variant``), which
    compiles none of the code other settings need; its results equal the general copy's, which the differential
    tests hold to the reference walk."""
    from hobbit.sim.run import simulate

    from sim_helpers import bundled, compose_sim

    cfg = compose_sim(*overrides.split())
    variant = special.Variant(prefetcher, misses, history, bound_cpu)
    tr = bundled(3)
    got = {}
    for mode in ("general", "specialised"):
        got[mode] = simulate(tr, cfg.model, cfg.hardware, cfg.system, keep_decisions=False, walks=mode)
    mod = special.core(cfg.system.cache.policy, variant)  # the copy the run took: compiled for its settings
    assert mod.walk.signatures and mod.PREFETCHER == special.prefetchers().index(prefetcher)
    assert (mod.MISSES, mod.HISTORY, mod.BOUND_CPU) == (records.CPU_MISSES.index(misses), int(history), int(bound_cpu))
    a, b = got["general"], got["specialised"]
    assert a.summary.keys() == b.summary.keys()
    same = [k for k in a.summary if k != "wall_s"]  # all but the run's own wall-clock time
    assert [a.summary[k] for k in same] == [b.summary[k] for k in same] and a.decode_ms_per_token
    assert a.pass_columns.keys() == b.pass_columns.keys()
    assert all(np.array_equal(a.pass_columns[k], b.pass_columns[k]) for k in a.pass_columns)
    assert all(np.array_equal(a.layer_columns[k], b.layer_columns[k]) for k in a.layer_columns)


def test_a_specialised_copy_refuses_another_runs_settings(monkeypatch):
    """A copy fixed for HOBBIT's prefetcher, given a run without prefetch, stops before it decides."""
    from hobbit.sim.run import simulate

    from sim_helpers import bundled, compose_sim

    hobbit = special.Variant("hobbit", "never", False, False)
    monkeypatch.setattr(special.Variant, "of", classmethod(lambda cls, inputs: hobbit))
    other = compose_sim("system=hobbit-no-prefetch")
    with pytest.raises(ValueError, match="specialised for other settings"):
        simulate(bundled(1), other.model, other.hardware, other.system, keep_decisions=False, walks="specialised")


def test_which_copy_a_run_uses(monkeypatch):
    """``auto`` takes the run's own copy, unless only the policy's general one is compiled; ``general`` and
    ``specialised`` take theirs; anything else is refused, naming the argument, or the variable a run reads it from."""
    from types import SimpleNamespace

    from hobbit.sim import fast
    from hobbit.sim.config import ConfigError
    from hobbit.sim.walk_copies import walk_copies

    v = special.Variant("none", "never", False, False)
    walks = {None: SimpleNamespace(name="general"), v: SimpleNamespace(name="own")}
    monkeypatch.setattr(fast.special, "core", lambda policy, variant=None: SimpleNamespace(walk=walks[variant]))
    monkeypatch.setattr(fast.NOTICE, "entry", fast.NOTICE.entry)
    compiled: set[str] = set()
    monkeypatch.setattr(fast.compiling, "_compiled", lambda d: d.name in compiled)
    pick = {}
    for mode in ("auto", "specialised", "general"):
        for have in ((), ("general",), ("own",), ("general", "own")):
            compiled = set(have)
            pick[mode, have] = fast.policy_walk("lru", v, mode).name
    assert pick["auto", ()] == pick["auto", ("own",)] == pick["auto", ("general", "own")] == "own"
    assert pick["auto", ("general",)] == "general"
    assert {pick["specialised", h] for h in ((), ("general",))} == {"own"}
    assert {pick["general", h] for h in ((), ("own",))} == {"general"}
    assert fast.policy_walk("lru").name == "general"  # no variant: the general copy
    with pytest.raises(ValueError, match="walks='fastest'"):
        fast.policy_walk("lru", v, "fastest")
    with pytest.raises(ConfigError, match="walks='fastest'"):  # a run's argument (``sim.run.simulate``'s walks)
        walk_copies("fastest")
    monkeypatch.setenv("HOBBIT_WALK", "specialised")  # a run given no choice: the environment's, where it is set
    assert walk_copies() == "specialised" and walk_copies("general") == "general"
    monkeypatch.setenv("HOBBIT_WALK", "fastest")
    with pytest.raises(ConfigError, match="HOBBIT_WALK='fastest'"):
        walk_copies()
    monkeypatch.delenv("HOBBIT_WALK")
    assert walk_copies() == "auto"


def test_a_sweep_runs_general_copies(monkeypatch):
    """A sweep's points (several systems, or one system's knobs) run each policy's general copy, compiled once for
    all of them; a sweep of one point keeps the default."""
    from hobbit import api

    seen = []
    monkeypatch.delenv("HOBBIT_WALK", raising=False)
    monkeypatch.setattr(api, "_points", lambda tr, chunk, walks: seen.append(walks) or [{}] * len(chunk))
    api.sweep(None, {"system": ["hobbit", "on-demand"]}, progress=False)
    api.sweep(None, {"system.precision.t1": [0.5, 0.6]}, progress=False)
    assert set(seen) == {"general"} and "HOBBIT_WALK" not in os.environ
    seen.clear()
    api.sweep(None, {"system.precision.t1": [0.5]}, progress=False)
    assert seen == [None]


def test_no_code_sets_the_walk_copies_variable():
    """Which copy of a walk runs is an argument (``walks=``) that the commands running many simulations pass
    (``general``); no library code or command sets ``$HOBBIT_WALK`` (process-global state), and only
    ``sim.walk_copies`` reads it, as the default of a run given no choice."""
    root = Path(__file__).resolve().parents[1]
    readers = []
    for pkg in ("sim", "traces", "executor", "analysis", "hobbit"):
        for f in (root / pkg).rglob("*.py"):
            if f.is_symlink() or "__pycache__" in f.parts:
                continue
            text = f.read_text(encoding="utf-8")
            if "HOBBIT_WALK" in text or "WALK_ENV" in text:
                readers.append(f.relative_to(root).as_posix())
            assert not re.search(r"environ\[[^]]*WALK", text), f  # never set
            assert "putenv" not in text or "WALK" not in text, f
    assert readers == ["sim/walk_copies.py"], readers


def test_the_many_run_commands_pass_general_copies(monkeypatch, tmp_path):
    """``hobbit plan`` (and compare, reproduce, tune: the same argument at their calls) runs each policy's general
    copy of the walk, passed down as an argument; a multirun's jobs likewise (``commands.sim.job_walks``)."""
    from hobbit.commands import sim as sim_command
    from hobbit.planner import predict

    seen: list[str | None] = []
    real = predict.simulate_config

    def spy(trace, cfg, **kw):
        seen.append(kw.get("walks"))
        return real(trace, cfg, **kw)

    monkeypatch.setattr(predict, "simulate_config", spy)
    from hobbit.planner.search import plan_for

    plan_for("mixtral-8x7b", "rtx4090-pcie4", runtimes=["llama.cpp"], points=2)
    assert seen and set(seen) == {"general"}
    assert sim_command.job_walks() is None  # outside a multirun: the run's own choice


def test_compiled_hooks_are_named_after_their_policy_and_hook():
    """One naming scheme for the compiled parts, as libCacheSim's ``LRU_find`` / ``LRU_insert`` / ``LRU_evict``:
    each hook is ``<policy>_<hook>`` (FIFO's are LRU's list, whose hit it does not take)."""
    from hobbit.sim.policies.registry import EVICTION, PREFETCH

    for policy in EVICTION:
        part = special.own_part(policy)
        assert part is not None
        for field in (*special.PARTS, "state"):
            fn = getattr(part, field, None)
            if fn is None:
                continue
            name = getattr(fn, "py_func", fn).__name__
            assert name.endswith(f"_{field}") and name.removesuffix(f"_{field}") in EVICTION, (policy, field, name)
            assert name.startswith(policy) or policy == "fifo", (policy, name)
    for prefetcher in special.prefetchers():
        part = special.prefetch_part(prefetcher)
        assert part is not None
        for field in ("propose", "begin", "state"):
            fn = getattr(part, field, None)
            if fn is not None:
                assert getattr(fn, "py_func", fn).__name__ == f"{prefetcher}_{field}" and prefetcher in PREFETCH
