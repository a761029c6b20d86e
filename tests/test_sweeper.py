"""``hobbit sim -m`` through the hobbit sweeper: chunks of configurations, one run directory per point."""

from __future__ import annotations

import dataclasses
import json

import pytest
import yaml

from hobbit.api import simulate_config
from hobbit.commands.sim import run_chunk
from hobbit.plumbing import glue
from hobbit.plumbing.glue import compose, set_values, with_overrides
from hobbit.plumbing.results_io import CACHED_MARK
from hobbit.plumbing.sweeper import claim, claims_dir
from hobbit.sim.config import SimConfig
from hobbit.traces.io import read_trace

from conftest import run_cli
from sim_helpers import write_first_requests


def _runs(root):
    return {int(p.parent.name): p.parent for p in root.glob("*/results.json")}


def test_points_run_in_chunks_and_write_their_own_run_directories(tmp_path):
    trace = write_first_requests(tmp_path, 2)
    root = tmp_path / "sweep"
    args = [
        "sim",
        "-m",
        f"trace={trace}",
        "system=hobbit,on-demand",
        "system.precision.t1=0.4,0.5,0.6",
        "use_cache=false",
        "hydra.sweeper.chunk_size=2",
        "hydra.launcher.n_jobs=1",
        f"hydra.sweep.dir={root}",
    ]
    assert run_cli(args) == 0
    runs = _runs(root)
    assert sorted(runs) == list(range(6))
    # one chunk per two points of one system: the group choice is composed per chunk, the values applied in the job
    chunks = [json.loads(p.read_text()) for p in sorted((root / ".chunks").glob("*.json"))]
    assert [len(c["points"]) for c in chunks] == [2, 1, 2, 1]
    seen = set()
    for run in runs.values():
        over = yaml.safe_load((run / ".hydra" / "overrides.yaml").read_text())
        knobs = dict(o.split("=", 1) for o in over)
        res = json.loads((run / "results.json").read_text())
        config = yaml.safe_load((run / ".hydra" / "config.yaml").read_text())
        assert res["system"] == knobs["system"] == config["system"]["name"]
        assert res["system_config"]["precision"]["t1"] == float(knobs["system.precision.t1"])
        assert config["out_dir"] == str(run)
        seen.add((knobs["system"], knobs["system.precision.t1"]))
    assert len(seen) == 6
    # a point's results are those of the same configuration run alone
    run = runs[4]
    over = [o for o in yaml.safe_load((run / ".hydra" / "overrides.yaml").read_text()) if not o.startswith("use_cache")]
    alone = simulate_config(read_trace(trace), compose("sim", SimConfig, ["out_dir=.", *over]))
    assert json.loads((run / "results.json").read_text())["decode_ms_per_token"] == alone.summary["decode_ms_per_token"]


def test_a_queue_of_points_is_drained_once_by_the_jobs_that_share_it(tmp_path):
    trace = write_first_requests(tmp_path, 1)
    root = tmp_path / "sweep"
    spec = root / ".chunks" / "0.json"
    spec.parent.mkdir(parents=True)
    spec.write_text(
        json.dumps(
            {
                "points": [
                    {"index": i, "values": [f"system.precision.t1={t}"], "overrides": [f"system.precision.t1={t}"]}
                    for i, t in enumerate((0.4, 0.5, 0.6))
                ]
            }
        )
    )
    assert claim(spec, 1) and not claim(spec, 1)  # one job took point 1: no other job may
    cfg = compose("sim", SimConfig, [f"trace={trace}", "use_cache=false", f"out_dir={tmp_path / 'job'}"])
    job = dataclasses.replace(cfg, sweep_chunk=str(spec))
    run_chunk(job)
    assert sorted(_runs(root)) == [0, 2]
    assert sorted(int(p.name) for p in claims_dir(spec).iterdir()) == [0, 1, 2]
    for run in _runs(root).values():
        (run / "results.json").unlink()
    run_chunk(job)  # a second job of the same queue finds every point taken
    assert _runs(root) == {}


def test_a_sweep_run_again_into_its_directory_claims_its_points_afresh(tmp_path):
    trace = write_first_requests(tmp_path, 1)
    root = tmp_path / "sweep"
    args = [
        "sim",
        "-m",
        f"trace={trace}",
        "system.precision.t1=0.4,0.6",
        "use_cache=false",
        "hydra.launcher.n_jobs=1",
        f"hydra.sweep.dir={root}",
    ]
    assert run_cli(args) == 0
    for run in _runs(root).values():
        (run / "results.json").unlink()
    assert run_cli(args) == 0
    assert sorted(_runs(root)) == [0, 1]


def test_an_interrupted_sweep_resumes_from_the_result_cache(tmp_path):
    trace = write_first_requests(tmp_path, 1)
    args = [
        "sim",
        "-m",
        f"trace={trace}",
        "system.precision.t1=0.4,0.6",
        f"cache_dir={tmp_path / 'cache'}",
        "hydra.launcher.n_jobs=1",
    ]
    assert run_cli([*args, f"hydra.sweep.dir={tmp_path / 'a'}"]) == 0
    assert run_cli([*args, f"hydra.sweep.dir={tmp_path / 'b'}"]) == 0
    again = _runs(tmp_path / "b")
    assert len(again) == 2 and all((r / CACHED_MARK).exists() for r in again.values())
    first = _runs(tmp_path / "a")
    for i in again:
        assert (
            json.loads((again[i] / "results.json").read_text())["hit_rate"]
            == json.loads((first[i] / "results.json").read_text())["hit_rate"]
        )


def test_a_bad_value_in_a_sweep_is_named(tmp_path, capsys):
    trace = write_first_requests(tmp_path, 1)
    code = run_cli(
        [
            "sim",
            "-m",
            f"trace={trace}",
            "system.prefetch.max_depth=2,deep",
            "use_cache=false",
            "hydra.launcher.n_jobs=1",
            f"hydra.sweep.dir={tmp_path / 's'}",
        ]
    )
    assert code == 2
    assert "system.prefetch.max_depth=deep" in capsys.readouterr().err


def test_values_are_set_with_their_types():
    cfg = compose("sim", SimConfig, ["out_dir=."])
    got = set_values(
        cfg, ["system.precision.t1=0.45", "system.prefetch.max_depth=3", "use_cache=false", "system.cache.policy=lru"]
    )
    assert (got.system.precision.t1, got.system.prefetch.max_depth, got.use_cache, got.system.cache.policy) == (
        0.45,
        3,
        False,
        "lru",
    )
    assert got.system.precision.t2 == cfg.system.precision.t2


PLAIN = [
    ["trace=/data/my run/trace.parquet", "cache_dir=/tmp/cache-1", "out_dir=runs/0"],
    ["profile_trace=profile.parquet", "system.cache.policy=lru", "seed=7"],
]
OMEGACONF = [
    ["trace=null"],
    ["cache_dir=~"],
    ["trace=1e3"],
    ["trace=true"],
    ["trace=a #b"],
    ["cache_dir=${oc.env:HOME}"],
    ["system.cache.policy=null"],
    ["trace=a: b"],
    ["seed=1.5"],
]


@pytest.mark.parametrize("overrides", PLAIN + OMEGACONF)
def test_values_set_without_omegaconf_are_what_omegaconf_sets(overrides, monkeypatch):
    """``set_values``' shortcut (plain values, paths on knobs that may be unset among them: a sweep of a user's
    trace) gives what ``with_overrides`` gives, and leaves to it every value its YAML reads otherwise."""
    cfg = compose("sim", SimConfig, ["out_dir=."])
    assert cfg.trace is None and cfg.cache_dir is None and cfg.profile_trace is None
    try:
        want = with_overrides(cfg, overrides)
    except Exception as exc:  # noqa: BLE001 - the shortcut must then fail the same way
        want = type(exc)
    called = []
    monkeypatch.setattr(glue, "with_overrides", lambda c, o: called.append(o) or with_overrides(c, o))
    try:
        got = set_values(cfg, overrides)
    except Exception as exc:  # noqa: BLE001
        got = type(exc)
    assert got == want
    assert bool(called) == (overrides in OMEGACONF)


def test_multirun_flag_between_overrides(tmp_path, capsys):
    """`-m` between two overrides: Hydra's parser would stop at it and print its usage text (20 lines, exit 2); the
    command line moves it first, as a user means it."""
    trace = write_first_requests(tmp_path, 1)
    root = tmp_path / "sweep"
    args = ["sim", f"trace={trace}", "system.precision.t1=0.4,0.6", "-m", "hydra.launcher.n_jobs=1"]
    assert run_cli([*args, f"hydra.sweep.dir={root}"]) == 0
    assert sorted(_runs(root)) == [0, 1]
    assert "unrecognized arguments" not in capsys.readouterr().err
