"""One check sequence for a run (``sim.checks.check_run``): the Python API's check, the whole-trace run and the run
over a trace file read a window at a time refuse the same bad input with the same message, through that function."""

from __future__ import annotations

import dataclasses

import pytest

import hobbit.api
import hobbit.sim.run
import hobbit.sim.windowed
from hobbit.sim import checks
from hobbit.sim.checks import Described, check_run
from hobbit.sim.config import ConfigError, ProfileConfig
from hobbit.traces.io import read_meta

from sim_helpers import BUNDLED, bundled, compose_sim


def _bad_t1(cfg):
    p = dataclasses.replace(cfg.system.precision, t1=0.95, t2=0.9)
    return dataclasses.replace(cfg, system=dataclasses.replace(cfg.system, precision=p))


def _bad_engine(cfg):
    return dataclasses.replace(cfg, engine="warp")


def _bad_profile(cfg):
    prof = ProfileConfig(
        model="other", hidden_size=cfg.model.hidden_size + 1, expert_ffn=cfg.model.expert_ffn, link_gbps=10.0
    )
    return dataclasses.replace(cfg, hardware=dataclasses.replace(cfg.hardware, profile=prof))


BAD = {  # name: (the configuration made bad, what the message names)
    "knob": (lambda: _bad_t1(compose_sim()), "system.precision.t1=0.95"),
    "engine": (lambda: _bad_engine(compose_sim()), "engine=warp must be one of fast, plain, simpy"),
    "topology": (lambda: compose_sim("model=olmoe-1b-7b"), "does not fit model=olmoe-1b-7b"),
    "profile": (lambda: _bad_profile(compose_sim()), "calibrate again for this model"),
}


def _entry_points(trace):
    """Each entry point, as a function of a composed config that raises what it refuses."""
    return {
        "api.check": lambda cfg: hobbit.api.check(trace, cfg.model, cfg.hardware, cfg.system, engine=cfg.engine),
        "run.simulate": lambda cfg: hobbit.sim.run.simulate(
            trace, cfg.model, cfg.hardware, cfg.system, engine=cfg.engine
        ),
        "windowed.simulate_file": lambda cfg: hobbit.sim.windowed.simulate_file(
            BUNDLED, cfg.model, cfg.hardware, cfg.system, window_tokens=16, engine=cfg.engine
        ),
    }


@pytest.mark.parametrize("bad", sorted(BAD))
def test_every_entry_point_refuses_the_same_input_with_the_same_message_through_check_run(bad, monkeypatch):
    make, named = BAD[bad]
    cfg = make()
    with pytest.raises(ConfigError) as want:
        check_run(cfg.model, cfg.hardware, cfg.system, Described(read_meta(BUNDLED), str(BUNDLED)), engine=cfg.engine)
    assert named in str(want.value)
    calls = []

    def spy(*args, **kwargs):
        calls.append(args)
        return check_run(*args, **kwargs)

    for module in (hobbit.api, hobbit.sim.run, hobbit.sim.windowed):
        monkeypatch.setattr(module, "check_run", spy)
    for name, entry in _entry_points(bundled()).items():
        calls.clear()
        with pytest.raises(ConfigError) as got:
            entry(cfg)
        assert str(got.value) == str(want.value), name
        assert len(calls) == 1, name  # refused by the one check sequence, once


def test_a_windowed_run_refuses_a_window_under_one_token_and_an_engine_other_than_the_compiled_core():
    cfg = compose_sim("system=hobbit")
    with pytest.raises(ConfigError, match="must be >= 1 for a windowed run"):
        hobbit.sim.windowed.simulate_file(BUNDLED, cfg.model, cfg.hardware, cfg.system, window_tokens=0)
    with pytest.raises(ConfigError, match=r"runs the compiled core only \(fix: engine=fast\)"):
        hobbit.sim.windowed.simulate_file(BUNDLED, cfg.model, cfg.hardware, cfg.system, window_tokens=8, engine="plain")
    with pytest.raises(ConfigError, match=r"runs the compiled core only \(fix: engine=fast\)"):
        hobbit.api.simulate_file_config(BUNDLED, dataclasses.replace(cfg, window_tokens=8, engine="plain"))


def test_the_checks_run_in_one_order():
    """A configuration bad in two ways is refused for the first in ``check_run``'s order: the knobs before the
    engine, the engine before the topology."""
    trace = Described(read_meta(BUNDLED), str(BUNDLED))
    cfg = _bad_engine(_bad_t1(compose_sim("model=olmoe-1b-7b")))
    with pytest.raises(ConfigError, match="system.precision.t1"):
        check_run(cfg.model, cfg.hardware, cfg.system, trace, engine=cfg.engine)
    cfg = _bad_engine(compose_sim("model=olmoe-1b-7b"))
    with pytest.raises(ConfigError, match="engine=warp"):
        check_run(cfg.model, cfg.hardware, cfg.system, trace, engine=cfg.engine)
    assert checks.ENGINES == ("fast", "plain", "simpy")
