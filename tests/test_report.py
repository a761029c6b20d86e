"""Sweeps and reports: a multirun aggregated into a table and plots, resume, broken runs named."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from conftest import run_cli
from sim_helpers import bundled

SWEEP = [
    "system=hobbit,on-demand",
    "system.precision.t1=0.4,0.6",
    "system.precision.t2=0.8,0.95",
    "system.cache.high_bytes=4000000000,12000000000",
    "system.cache.low_bytes=4000000000",
    "system.cache.multidim.w_fld=0.3,0.7",
    "engine=plain",
    "hydra.launcher.n_jobs=2",
]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    from hobbit.traces.io import write_trace

    d = tmp_path_factory.mktemp("sweep")
    tr = bundled(1)
    trace = write_trace(d / "one.parquet", tr.arrays, tr.meta)
    root = d / "multirun"
    assert run_cli(["sim", "-m", f"trace={trace}", *SWEEP, f"hydra.sweep.dir={root}"]) == 0
    return trace, root


def _results(root):
    return {p.parent.name: json.loads(p.read_text()) for p in root.glob("*/results.json")}


def test_multirun_aggregates_into_a_table_and_every_plot(sweep, capsys):
    _, root = sweep
    results = _results(root)
    assert len(results) == 32
    assert run_cli(["report", f"dir={root}"]) == 0
    out = capsys.readouterr().out
    assert "32 runs aggregated" in out and "left out" not in out  # the sweep's jobs (.chunks/*) are no runs
    rep = root / "report"
    runs = pd.read_parquet(rep / "runs.parquet")
    assert len(runs) == 32
    for _, row in runs.iterrows():
        r = results[row["run"]]
        assert row["decode_ms_per_token.mean"] == pytest.approx(r["decode_ms_per_token"]["mean"])
        assert row["quality_proxy.degraded_mass"] == pytest.approx(r["quality_proxy"]["degraded_mass"])
        assert row["knob.system"] == r["system"]
        assert row["system_config.precision.t1"] == r["system_config"]["precision"]["t1"]
    for name in ("t1_t2", "cache_size", "weights", "latency_quality", "layer_stall"):
        for ext in ("png", "svg"):
            assert (rep / f"{name}.{ext}").stat().st_size > 5000, name
    md = (rep / "report.md").read_text()
    for name in ("t1_t2", "cache_size", "weights", "latency_quality", "layer_stall"):
        assert f"({name}.png)" in md
    # the plots hold the runs' values: the fastest hobbit latency labels its T1 x T2 cell
    hob = runs[runs.system == "hobbit"]
    best_cell = hob.groupby(["system_config.precision.t1", "system_config.precision.t2"])[
        "decode_ms_per_token.mean"
    ].min()
    svg = (rep / "t1_t2.svg").read_text()
    for v in best_cell:
        assert f"{v:.3g}" in svg
    best = runs.sort_values("decode_ms_per_token.mean").iloc[0]
    assert f"Best: `{best['run']}`" in md
    assert re.search(r"layer_stall", md)


def test_rerunning_a_sweep_skips_finished_runs(sweep, tmp_path, capsys):
    trace, root = sweep
    again = tmp_path / "again"
    capsys.readouterr()
    assert run_cli(["sim", "-m", f"trace={trace}", *SWEEP, f"hydra.sweep.dir={again}"]) == 0
    assert "32 runs finished, 32 skipped as already simulated" in capsys.readouterr().out
    first, second = _results(root), _results(again)
    assert {k: v["decode_ms_per_token"] for k, v in first.items()} == {
        k: v["decode_ms_per_token"] for k, v in second.items()
    }


def test_broken_runs_are_named_and_the_rest_aggregated(sweep, tmp_path, capsys):
    import shutil

    _, root = sweep
    copy = tmp_path / "copy"
    shutil.copytree(root, copy, ignore=shutil.ignore_patterns("report"))
    (copy / "3" / "results.json").write_text("{ not json")
    (copy / "5" / "results.json").unlink()
    assert run_cli(["report", f"dir={copy}"]) == 0
    out = capsys.readouterr().out
    assert "3: results.json is unreadable" in out and "5: no results.json" in out
    assert len(pd.read_parquet(copy / "report" / "runs.parquet")) == 30
    md = (copy / "report" / "report.md").read_text()
    assert "- 3: results.json is unreadable" in md and "- 5: no results.json" in md


def test_report_of_a_single_run_and_of_nothing(tmp_path, capsys, sweep):
    _, root = sweep
    assert run_cli(["report", f"dir={root / '0'}"]) == 0
    assert "1 runs aggregated" in capsys.readouterr().out
    assert run_cli(["report", f"dir={tmp_path / 'nope'}"]) == 2


def test_a_flat_heatmap_panel_is_one_colour_while_a_varying_one_is_not(tmp_path):
    """A T1 x T2 panel whose values differ only by float noise (the share high of top-2 routing, 0.5 at every T1)
    is drawn in one shade, not stretched into full contrast; a panel that varies keeps its contrast."""
    import base64
    import io

    import matplotlib.image as mpimg

    from hobbit.analysis.plots import LAT, T1, T2, t1_t2_heatmaps

    rows = [
        {
            T1: t1,
            T2: t2,
            LAT: 300 + 10 * t1 + 20 * t2,
            "precision_rule_mix.high": 0.5 + 4e-6 * t1,
            "precision_rule_mix.low": 0.4,
            "precision_rule_mix.skip": 0.1 * t2,
        }
        for t1 in (0.3, 0.5)
        for t2 in (0.8, 0.9)
    ]
    t1_t2_heatmaps(pd.DataFrame(rows), tmp_path)
    images = re.findall(r'xlink:href="data:image/png;base64,([^"]+)"', (tmp_path / "t1_t2.svg").read_text())
    assert len(images) >= 4  # the four panels, then their colour bars
    panels = [mpimg.imread(io.BytesIO(base64.b64decode(b)), format="png") for b in images[:4]]
    shades = [len({tuple(px) for px in p.reshape(-1, p.shape[-1]).round(3).tolist()}) for p in panels]
    assert shades[1] == 1 and shades[2] == 1  # share high (noise) and share low (constant): one shade each
    assert shades[0] > 1 and shades[3] > 1  # latency and share skipped vary
