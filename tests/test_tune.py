"""`hobbit tune`: seeded, resumable, within the quality budget, and its experiment file reproduces its best."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from conftest import run_cli
from sim_helpers import write_first_requests


@pytest.fixture(scope="module")
def one_request(tmp_path_factory):
    return write_first_requests(tmp_path_factory.mktemp("t"), 1)


def test_tune_resumes_and_writes_a_ready_experiment(one_request, tmp_path, capsys):
    run = tmp_path / "tune"
    study = tmp_path / "study.db"
    args = ["tune", f"trace={one_request}", "quality_budget=0.3", f"study={study}", f"hydra.run.dir={run}"]
    assert run_cli([*args, "trials=5"]) == 0
    assert run_cli([*args, "trials=8"]) == 0
    out = capsys.readouterr().out
    assert "8 trials (5 from earlier runs)" in out
    s = json.loads((run / "tune.json").read_text())
    trials = pd.read_parquet(run / "trials.parquet")
    assert len(trials) == 8 and s["trials"] == 8
    best = s["best"][0]
    feasible = trials[trials.degraded_mass <= 0.3]
    assert best["latency_ms"] == pytest.approx(feasible.latency_ms.min())
    assert best["degraded_mass"] <= 0.3
    sysc = best["system"]
    assert 0 <= sysc["precision"]["t1"] <= sysc["precision"]["t2"] <= 1
    w = sysc["cache"]["multidim"]
    assert w["w_lru"] + w["w_lfu"] + w["w_lhu"] + w["w_fld"] == pytest.approx(1.0)
    # the experiment file reproduces the best trial through `hobbit sim`
    sim_dir = tmp_path / "sim"
    assert (
        run_cli(
            [
                "sim",
                f"trace={one_request}",
                f"hydra.searchpath=[file://{run}]",
                "+experiment=tuned",
                "engine=plain",
                "use_cache=false",
                f"hydra.run.dir={sim_dir}",
            ]
        )
        == 0
    )
    r = json.loads((sim_dir / "results.json").read_text())
    assert r["system"] == "hobbit-tuned"
    assert r["decode_ms_per_token"]["mean"] == pytest.approx(best["latency_ms"], rel=1e-6)


def test_same_seed_same_search(one_request, tmp_path):
    from hobbit.sim.tune import TuneConfig, tune
    from hobbit.traces.io import read_trace

    from sim_helpers import compose_sim

    base = compose_sim()
    tr = read_trace(one_request)
    runs = []
    for name in ("a", "b"):
        cfg = TuneConfig(
            model=base.model,
            hardware=base.hardware,
            system=base.system,
            trials=4,
            seed=3,
            study=str(tmp_path / f"{name}.db"),
            out_dir=str(tmp_path / name),
        )
        tune(tr, cfg)
        runs.append(pd.read_parquet(tmp_path / name / "trials.parquet"))
    pd.testing.assert_frame_equal(runs[0], runs[1])


def test_pareto_mode_returns_non_dominated_trials(one_request, tmp_path):
    from hobbit.sim.tune import TuneConfig, tune
    from hobbit.traces.io import read_trace

    from sim_helpers import compose_sim

    base = compose_sim()
    cfg = TuneConfig(
        model=base.model,
        hardware=base.hardware,
        system=base.system,
        trials=8,
        objective="pareto",
        study=str(tmp_path / "p.db"),
        out_dir=str(tmp_path),
    )
    s = tune(read_trace(one_request), cfg)
    front = [(b["latency_ms"], b["degraded_mass"]) for b in s["best"]]
    allt = pd.read_parquet(tmp_path / "trials.parquet")
    assert front
    for lat, q in front:
        dominated = ((allt.latency_ms < lat) & (allt.degraded_mass <= q)) | (
            (allt.latency_ms <= lat) & (allt.degraded_mass < q)
        )
        assert not dominated.any()


def test_bad_objective_exits_2(one_request, tmp_path):
    assert run_cli(["tune", f"trace={one_request}", "objective=fastest", f"hydra.run.dir={tmp_path}"]) == 2


@pytest.mark.serial  # a replay measured on this machine
def test_validate_replays_the_tuned_configuration(one_request, tmp_path, capsys):
    """`hobbit validate tuned=RUN` takes the system `hobbit tune` found (its run directory or the
    experiment file in it), and names a path that is neither."""
    run = tmp_path / "tune"
    assert run_cli(["tune", f"trace={one_request}", "trials=3", f"hydra.run.dir={run}"]) == 0
    best = json.loads((run / "tune.json").read_text())["best"][0]["system"]
    for tuned in (run, run / "experiment" / "tuned.yaml"):
        out = tmp_path / f"val-{tuned.name}"
        assert (
            run_cli(
                [
                    "validate",
                    f"tuned={tuned}",
                    "scale=32",
                    "layers=4",
                    "requests=1",
                    "replays=2",
                    "rounds=6",
                    f"hydra.run.dir={out}",
                ]
            )
            == 0
        )
        r = json.loads((out / "results.json").read_text())
        assert r["system"] == "hobbit-tuned" and r["validation"]["tokens"] > 0
        cfg = json.loads((out / "sim" / "results.json").read_text())["system_config"]
        assert cfg["precision"]["t1"] == pytest.approx(best["precision"]["t1"], abs=1e-6)
        assert cfg["cache"]["multidim"]["w_fld"] == pytest.approx(best["cache"]["multidim"]["w_fld"], abs=1e-6)
    capsys.readouterr()
    assert run_cli(["validate", f"tuned={one_request}", "scale=32", f"hydra.run.dir={tmp_path / 'bad'}"]) == 2
    assert "tuned=" in capsys.readouterr().err
