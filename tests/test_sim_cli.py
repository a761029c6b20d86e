"""`hobbit sim`: results.json with the documented keys, tables, sweeps that never collide, exit codes."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from conftest import run_cli
from sim_helpers import write_first_requests

KEYS = {
    "tokens",
    "decode_ms_per_token",
    "prefill_ms_per_request",
    "precision_rule_mix",
    "served_mix",
    "hit_rate",
    "prefetch",
    "bytes_loaded",
    "link_busy_fraction",
    "stall_ms_per_token",
    "cache",
    "model",
    "hardware",
    "system",
}


@pytest.fixture(scope="module")
def small_trace(tmp_path_factory):
    return write_first_requests(tmp_path_factory.mktemp("t"), 2)


def test_sim_writes_results_and_tables(small_trace, tmp_path, capsys):
    out = tmp_path / "run"
    assert run_cli(["sim", f"trace={small_trace}", "system=hobbit", f"hydra.run.dir={out}"]) == 0
    s = json.loads((out / "results.json").read_text())
    assert KEYS <= set(s)
    assert set(s["decode_ms_per_token"]) == {"mean", "p50", "p95"}
    assert set(s["served_mix"]) == {"high_hit", "low_hit", "high_load", "low_load", "skipped", "cpu"}
    assert abs(sum(s["served_mix"].values()) - 1) < 1e-9
    assert set(s["precision_rule_mix"]) == {"high", "low", "skip"}
    assert set(s["prefetch"]) >= {"issued", "used", "accuracy"}
    passes = pd.read_parquet(out / "passes.parquet")
    layers = pd.read_parquet(out / "layers.parquet")
    assert len(passes) == s["requests"] + s["tokens"]["decode"]  # one prefill pass per request + one per decode token
    assert len(layers) == 32 and passes.latency_ms.gt(0).all()
    dec = passes[passes.phase == 1]
    assert dec.latency_ms.mean() == pytest.approx(s["decode_ms_per_token"]["mean"])
    assert "hobbit on rtx4090-pcie4" in capsys.readouterr().out
    assert (out / ".hydra" / "config.yaml").is_file()


def test_multirun_sweeps_on_two_workers_into_distinct_dirs(small_trace, tmp_path):
    sweep = tmp_path / "sweep"
    assert (
        run_cli(
            [
                "sim",
                "-m",
                f"trace={small_trace}",
                "system=hobbit,on-demand",
                "system.precision.t1=0.5,0.6",
                f"hydra.sweep.dir={sweep}",
                "hydra.launcher.n_jobs=2",
            ]
        )
        == 0
    )
    runs = sorted(p for p in sweep.iterdir() if p.is_dir() and (p / "results.json").exists())
    assert len(runs) == 4
    systems = sorted(json.loads((p / "results.json").read_text())["system"] for p in runs)
    assert systems == ["hobbit", "hobbit", "on-demand", "on-demand"]
    # each system's points are one queue, drained by one job per worker; each point claimed by one of them
    assert sorted(p.name for p in (sweep / ".chunks").iterdir() if p.is_dir()) == [
        "0-0",
        "0-1",
        "0.claims",
        "1-0",
        "1-1",
        "1.claims",
    ]
    assert sorted(p.name for p in (sweep / ".chunks" / "1.claims").iterdir()) == ["2", "3"]


def test_hydra_reads_the_mode_from_the_config_only_where_something_can_set_it(small_trace, tmp_path, monkeypatch):
    """Hydra composes the whole config once only to read ``hydra.mode``; ``glue._get_mode`` skips that where nothing
    can set it (conf/ never does), and leaves it to Hydra where an override or ``--config-dir`` could."""
    from pathlib import Path

    import yaml

    from hobbit.plumbing import glue

    for path in (Path(__file__).parents[1] / "conf").rglob("*.yaml"):
        doc = yaml.safe_load(path.read_text()) or {}
        assert "mode" not in (doc.get("hydra") or {}), path
    sweep = tmp_path / "sweep"  # the mode set by an override: Hydra's own reading, a sweep without -m
    assert (
        run_cli(
            [
                "sim",
                f"trace={small_trace}",
                "hydra.mode=MULTIRUN",
                "system.precision.t1=0.5,0.6",
                "use_cache=false",
                f"hydra.sweep.dir={sweep}",
            ]
        )
        == 0
    )
    assert len(list(sweep.glob("*/results.json"))) == 2
    asked = []
    monkeypatch.setattr(glue, "_HYDRA_GET_MODE", lambda self, name, overrides: asked.append(list(overrides)))
    assert run_cli(["sim", f"trace={small_trace}", "use_cache=false", f"hydra.run.dir={tmp_path / 'run'}"]) == 0
    assert (tmp_path / "run" / "results.json").is_file() and asked == []
    assert (
        run_cli(
            [
                "sim",
                "--config-dir",
                str(tmp_path),
                f"trace={small_trace}",
                "use_cache=false",
                f"hydra.run.dir={tmp_path / 'run2'}",
            ]
        )
        == 0
    )
    assert (tmp_path / "run2" / "results.json").is_file() and len(asked) == 1


def test_default_sweep_dirs_do_not_collide():
    """Second-resolution timestamps collide (docs/references.md): the dirs carry microseconds."""
    from pathlib import Path

    import yaml
    from hydra import compose, initialize_config_module

    import hobbit.commands.sim  # noqa: F401

    raw = yaml.safe_load((Path(__file__).parents[1] / "conf" / "sim.yaml").read_text())
    assert raw["hydra"]["sweep"]["dir"].endswith("%f}") and raw["hydra"]["run"]["dir"].endswith("%f}")
    with initialize_config_module(config_module="hobbit.conf", version_base="1.3"):
        cfg = compose("sim", return_hydra_config=True)
    assert cfg.hydra.launcher._target_.endswith("HobbitLauncher")


@pytest.mark.parametrize(
    "args,needle",
    [
        (["system.precision.t1=0.95"], "system.precision.t1=0.95"),
        (["system.cache.multidim.w_fld=-1"], "system.cache.multidim.w_fld=-1"),
        (["system.cache.policy=clairvoyant"], "system.cache.policy=clairvoyant"),
        (["system.cache.low_bytes=10"], "system.cache.low_bytes=10"),
        (["system=warp-drive"], "warp-drive"),
        (["model=olmoe-1b-7b"], "olmoe-1b-7b"),
    ],
)
def test_bad_input_exits_2_naming_it(small_trace, tmp_path, capsys, args, needle):
    assert run_cli(["sim", f"trace={small_trace}", *args, f"hydra.run.dir={tmp_path / 'r'}"]) == 2
    assert needle in capsys.readouterr().err
    assert not (tmp_path / "r" / "results.json").exists()


def test_a_run_neither_imports_pandas_nor_changes_its_tables(small_trace, tmp_path):
    """Reading a trace and writing a run's tables go through pyarrow's buffers: pandas (half a second of every
    command's start) is not imported, and the tables read back as what the run computed."""
    import subprocess
    import sys

    out = tmp_path / "run"
    code = (
        "import sys; from hobbit.cli import main\n"
        "try:\n"
        f"    main(['sim', 'trace={small_trace}', 'use_cache=false', 'hydra.run.dir={out}'])\n"
        "except SystemExit as e:\n"
        "    assert not e.code, e.code\n"
        "print('imported:', sorted(m for m in ('pandas', 'matplotlib', 'torch') if m in sys.modules))\n"
    )
    p = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "imported: []" in p.stdout
    from hobbit.api import read_trace, simulate_config
    from hobbit.plumbing.glue import compose
    from hobbit.sim.config import SimConfig

    res = simulate_config(read_trace(small_trace), compose("sim", SimConfig, [f"trace={small_trace}", "out_dir=."]))
    for name, cols in (("passes", res.pass_columns), ("layers", res.layer_columns)):
        got = pd.read_parquet(out / f"{name}.parquet")
        assert list(got.columns) == list(cols)
        for k, v in cols.items():
            assert got[k].dtype == v.dtype and np.array_equal(got[k].to_numpy(), v, equal_nan=True), (name, k)
