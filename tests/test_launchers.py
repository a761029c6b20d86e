"""Distributed sweeps: the same multirun through Hydra's Ray launcher, on a local Ray on loopback."""

from __future__ import annotations

import json

import pytest

from conftest import run_cli
from sim_helpers import bundled

pytest.importorskip("hydra_plugins.hydra_ray_launcher", reason="the ray extra is not installed (pip install .[ray])")

pytestmark = pytest.mark.serial  # a local Ray takes the machine's cores: alone (make test)


def test_sweep_through_the_ray_launcher(tmp_path):
    from hobbit.traces.io import write_trace

    tr = bundled(1)
    trace = write_trace(tmp_path / "one.parquet", tr.arrays, tr.meta)
    sweep = tmp_path / "ray"
    args = [
        "sim",
        "-m",
        "hydra/launcher=ray",
        "+hydra.launcher.ray.init.num_cpus=2",
        "+hydra.launcher.ray.init.include_dashboard=false",
        "+hydra.launcher.ray.init._node_ip_address=127.0.0.1",
        f"trace={trace}",
        "system=hobbit,on-demand",
        "system.precision.t1=0.5,0.6",
        "engine=plain",
        "use_cache=false",
        f"hydra.sweep.dir={sweep}",
    ]
    try:
        assert run_cli(args) == 0
    finally:
        import ray

        ray.shutdown()
    results = [json.loads(p.read_text()) for p in sorted(sweep.glob("*/results.json"))]
    assert len(results) == 4
    assert sorted(r["system"] for r in results) == ["hobbit", "hobbit", "on-demand", "on-demand"]
    assert {r["system_config"]["precision"]["t1"] for r in results} == {0.5, 0.6}
