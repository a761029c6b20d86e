"""`hobbit demo`: the main job runs end to end and says where everything went."""

from __future__ import annotations

import json

import pytest

from hobbit.traces.io import read_trace

from conftest import run_cli

pytestmark = pytest.mark.serial  # its validation step measures this machine's time: alone (make test)


def test_demo_writes_trace_stats_and_plots(tmp_path, capsys):
    run_dir = tmp_path / "demo"
    assert (
        run_cli(
            [
                "demo",
                "max_prompts=3",
                "max_new_tokens=4",
                "batch_size=3",
                "systems=[hobbit,on-demand,fiddler]",
                "sweep_t1=[0.5,0.7]",
                "sweep_t2=[0.9]",
                "sweep_high_gb=[8.0]",
                "validate_scale=32",
                "validate_requests=1",
                "validate_replays=2",
                "validate_rounds=6",
                f"hydra.run.dir={run_dir}",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    for name in [
        "trace.parquet",
        "trace_info.txt",
        "trace_info.json",
        "trace_summary.png",
        "trace_summary.svg",
        "compare/compare.md",
        "compare/compare.json",
        "compare/compare.png",
        "compare/compare.svg",
        "sweep/report/report.md",
        "sweep/report/runs.parquet",
        "validate/results.json",
        "validate/report.md",
        "plan/plan.md",
        "plan/plan.json",
        "plan/plan.png",
    ]:
        assert (run_dir / name).is_file(), name
        assert str((run_dir / name).resolve()) in out
    tr = read_trace(run_dir / "trace.parquet")
    s = json.loads((run_dir / "trace_info.json").read_text())
    assert s["requests"] == 3 == len(set(tr.arrays.request_id.tolist()))
    assert s["tokens"]["decode"] == 3 * 3  # 4 new tokens, the last never routed
    assert s["lookahead"] and s["model"]["name"] == "hobbit-tiny-mixtral"
    assert (run_dir / "trace_summary.png").stat().st_size > 20_000
    assert not list(run_dir.rglob(".*.tmp"))
    for system in ("hobbit", "on-demand"):
        r = json.loads((run_dir / "compare" / "systems" / system / "results.json").read_text())
        assert r["system"] == system and r["model"] == "mixtral-8x7b" and r["tokens"]["decode"] == 9
    table = (run_dir / "compare" / "compare.md").read_text()
    # ranked; a system that computes experts on the CPU is marked, as the paper compares those apart
    assert "| hobbit |" in table and "| on-demand |" in table and "| fiddler (CPU) |" in table
    ranked = json.loads((run_dir / "compare" / "compare.json").read_text())["systems"]
    assert [r["rank"] for r in ranked] == [1, 2, 3]
    # the last step plans the model on the machine from the captured routing, every runtime ranked or refused
    planned = json.loads((run_dir / "plan" / "plan.json").read_text())
    assert planned["trace"] == str(run_dir / "trace.parquet") and planned["model"] == "mixtral-8x7b"
    assert {r["runtime"] for r in planned["ranked"]} >= {"llama.cpp", "ktransformers", "hobbit"}
    assert planned["ranked"][0]["rank"] == 1 and "| 1 |" in out
