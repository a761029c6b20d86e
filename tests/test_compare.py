"""``hobbit compare``: every system and a tuned HOBBIT on one trace and machine, ranked, none below the
oracle bound."""

from __future__ import annotations

import json

import pytest

from hobbit.plumbing.glue import compose
from hobbit.sim.config import ConfigError
from hobbit.studies.compare import TUNED, CompareConfig, all_systems, compare

from sim_helpers import bundled, first_requests


def _cfg(tmp_path, *over: str) -> CompareConfig:
    return compose("compare", CompareConfig, [f"out_dir={tmp_path}", *over])


@pytest.mark.slow
def test_compare_ranks_every_system_on_a_real_trace_above_the_oracle_bound(real_converted, tmp_path):
    """FLAME-MoE-290M's routing (its first 16 sequences) on a device holding ~23 % of its experts: every
    preset runs on the same timed requests, ranked by decode latency, and none is faster than its own bound
    or the lowest bound."""
    s = compare(
        first_requests(real_converted["flame"], 16),
        _cfg(tmp_path, "model=flame-moe-290m", "hardware.device_memory_bytes=3000000000", "tune_trials=2"),
        tmp_path,
    )
    data = json.loads((tmp_path / "compare.json").read_text())
    rows = data["systems"]
    assert {r["system"] for r in rows} - {TUNED} == set(all_systems())
    oracle = data["oracle_bound_ms_per_token"]
    assert oracle == min(r["bound"]["decode_ms_per_token"] for r in rows) > 0
    decode = [r["decode_ms_per_token"]["mean"] for r in rows]
    assert decode == sorted(decode) and [r["rank"] for r in rows] == list(range(1, len(rows) + 1))
    for r in rows:
        assert r["decode_ms_per_token"]["mean"] >= r["bound"]["decode_ms_per_token"] - 1e-9 >= oracle - 1e-9, r[
            "system"
        ]
        assert r["gap_to_oracle"] == pytest.approx(r["decode_ms_per_token"]["mean"] / oracle)
        assert (tmp_path / "systems" / r["system"] / "results.json").exists()
    # every system saw the same timed requests
    assert len({json.dumps(r["decode_ms_per_token"]) for r in rows}) > 1
    tokens = {
        json.loads((tmp_path / "systems" / r["system"] / "results.json").read_text())["tokens"]["decode"] for r in rows
    }
    assert len(tokens) == 1
    md = (tmp_path / "compare.md").read_text()
    assert "| 1 | " in md and "x oracle" in md and "requests held apart" in md
    assert (tmp_path / "compare.png").stat().st_size > 0 and s["files"]


def test_compare_tunes_hobbit_on_the_requests_held_apart(tmp_path):
    s = compare(
        bundled(8), _cfg(tmp_path, "systems=[hobbit,on-demand]", "tune_trials=4", "quality_budget=1.0"), tmp_path
    )
    rows = {r["system"]: r for r in json.loads((tmp_path / "compare.json").read_text())["systems"]}
    assert set(rows) == {"hobbit", "on-demand", TUNED}
    assert "held apart" in s["note"] and (tmp_path / "tune" / "study.db").exists()
    tuned = json.loads((tmp_path / "systems" / TUNED / "results.json").read_text())["system_config"]
    default = json.loads((tmp_path / "systems" / "hobbit" / "results.json").read_text())["system_config"]
    assert tuned["precision"] != default["precision"] and tuned["cache"]["policy"] == "multidim"


def test_compare_refuses_an_unknown_system(tmp_path):
    with pytest.raises(ConfigError, match="not presets of conf/system"):
        compare(bundled(4), _cfg(tmp_path, "systems=[hobbit,nope]", "tune_trials=0"), tmp_path)


def test_compare_from_the_command_line(tmp_path, capsys):
    from conftest import run_cli

    out = tmp_path / "cmp"
    assert run_cli(["compare", "systems=[hobbit,fiddler]", "tune_trials=0", f"out_dir={out}"]) == 0
    printed = capsys.readouterr().out
    assert "| 1 | " in printed and str((out / "compare.md").resolve()) in printed
    assert "| fiddler (CPU) |" in (out / "compare.md").read_text()
    assert run_cli(["compare", "systems=[hobbit,nope]", f"out_dir={tmp_path / 'bad'}"]) == 2
    assert "not presets of conf/system" in capsys.readouterr().err
    assert run_cli(["compare", f"profile={tmp_path / 'missing.yaml'}", f"out_dir={tmp_path / 'bad2'}"]) == 2
