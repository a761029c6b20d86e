"""Timelines: ``timeline=true`` writes timeline.json (Chrome Trace Event format) and a Gantt plot."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd
import pytest

from conftest import run_cli
from sim_helpers import write_first_requests
from timeline_check import check_format, load, tokens


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    return write_first_requests(tmp_path_factory.mktemp("tl"), 3)


@pytest.mark.parametrize(
    "system,hardware",
    [
        ("hobbit", "rtx4090-pcie4"),
        ("hobbit-cpu", "rtx4090-pcie4"),  # the CPU track and the compute stream waiting for it
        ("hobbit", "jetson-agx-orin"),  # contention: copies and compute slow each other
    ],
)
def test_sim_timeline_is_trace_event_format_and_adds_up(trace, tmp_path, system, hardware):
    out = tmp_path / "run"
    assert (
        run_cli(
            [
                "sim",
                f"trace={trace}",
                f"system={system}",
                f"hardware={hardware}",
                "timeline=true",
                "timeline_tokens=:",
                f"hydra.run.dir={out}",
            ]
        )
        == 0
    )
    doc = load(out / "timeline.json")
    threads = check_format(doc)
    passes = pd.read_parquet(out / "passes.parquet")
    results = json.loads((out / "results.json").read_text())
    per_pass = tokens(threads, 1)
    assert len(per_pass) == len(passes)
    row: Any  # a row of passes.parquet, its columns as attributes
    for (tok, marks, work), row in zip(per_pass, passes.itertuples()):
        assert tok["dur"] / 1e3 == pytest.approx(row.latency_ms, rel=1e-9, abs=1e-6)
        assert tok["ts"] / 1e3 == pytest.approx(row.start_ms, rel=1e-9, abs=1e-6)
        # the compute stream's slices of one token add up to its latency: nothing is missing, nothing counted twice
        # (each slice rounded to the nanosecond)
        ns = 1e-6 * (len(work) + 1)
        assert sum(e["dur"] for e in work) / 1e3 == pytest.approx(row.latency_ms, rel=1e-9, abs=ns)
        assert sum(e["dur"] for e in marks) / 1e3 == pytest.approx(row.latency_ms, rel=1e-9, abs=ns)
        assert sum(e["dur"] for e in work if e["cat"] == "stall") / 1e3 == pytest.approx(row.stall_ms, abs=ns)
    copies = threads.get((1, 2), [])
    assert sum(e["args"]["bytes"] for e in copies) == results["bytes_loaded"]  # every copy that ran, once
    assert all(e["args"]["precision"] in ("high", "low") and isinstance(e["args"]["demand"], bool) for e in copies)
    counters = [e for e in doc["traceEvents"] if e["ph"] == "C"]
    c = results["cache"]
    assert counters and all(
        0 <= e["args"]["high"] <= c["high_slots"] and 0 <= e["args"]["low"] <= c["low_slots"] for e in counters
    )
    cpu = threads.get((1, 3), [])
    assert bool(cpu) == (results["served_mix"]["cpu"] > 0)
    for f in ("gantt.png", "gantt.svg"):
        assert (out / f).stat().st_size > 0


def test_timeline_window_and_bad_range(trace, tmp_path, capsys):
    out = tmp_path / "w"
    assert run_cli(["sim", f"trace={trace}", "timeline=true", "timeline_tokens=2:5", f"hydra.run.dir={out}"]) == 0
    doc = load(out / "timeline.json")
    toks = [e for e in doc["traceEvents"] if e.get("cat") == "token"]
    assert [e["args"]["pass"] for e in toks] == [2, 3, 4] and doc["otherData"]["passes"] == [2, 5]
    assert (
        run_cli(["sim", f"trace={trace}", "timeline=true", "timeline_tokens=5", f"hydra.run.dir={tmp_path / 'x'}"]) == 2
    )
    err = capsys.readouterr().err
    assert "timeline_tokens='5'" in err and "fix: A:B" in err
    assert not (tmp_path / "x" / "results.json").exists() or not (tmp_path / "x" / "timeline.json").exists()


def _whole_run_schedule(res, demand_first, window):
    """The schedule as built from re-timing every pass of the run (what ``simulated``, stopping early, must give)."""
    from hobbit.sim.events import build
    from hobbit.sim.plain import replay

    work: list = []
    tl = replay(res.workload, res.decisions, res.cost, demand_first, rec=work)
    copies = {t: (tl.transfer_start[t], d) for t, d in tl.transfer_done.items() if t in tl.transfer_start}
    return build(res.workload, res.decisions, tl, work, window, copies)


@pytest.mark.parametrize(
    "system,hardware",
    [
        ("hobbit", "rtx4090-pcie4"),
        ("hobbit-cpu", "rtx4090-pcie4"),
        ("hobbit", "jetson-agx-orin"),  # contention: a copy in flight ends at a time later compute shapes
    ],
)
def test_a_window_re_times_only_the_passes_it_needs_and_matches_the_whole_run(system, hardware, monkeypatch):
    """A timeline of a few passes re-times as many passes as its copies need, not the whole run, and its slices,
    copies and counters are exactly those of re-timing the whole run."""
    from hobbit.sim import events
    from hobbit.sim.decisions import Steps
    from hobbit.sim.events import parse_window, simulated
    from hobbit.sim.run import simulate

    from sim_helpers import bundled, compose_sim

    cfg = compose_sim(f"system={system}", f"hardware={hardware}")
    res = simulate(bundled(8), cfg.model, cfg.hardware, cfg.system)
    assert res.workload is not None
    n_pass = len(res.timeline.pass_start)
    assert n_pass > 100
    timed = []
    real_replay = events.replay
    monkeypatch.setattr(events, "replay", lambda *a, **k: timed.append(k["passes"]) or real_replay(*a, **k))
    for text in ("0:4", "30:33", "-3:", ":"):
        window = parse_window(text, n_pass)
        a, b = window
        timed.clear()
        got = simulated(res.workload, res.decisions, res.cost, cfg.system.demand_first, window)
        assert timed[-1] >= b
        if b < n_pass // 2:  # an early window: far fewer passes re-timed than the run has
            assert timed[-1] <= 4 * max(b, 8) < n_pass
        if text == "0:4":  # nor steps laid out as records (before the whole run's re-timing below lays out all)
            assert isinstance(res.decisions.steps, Steps)
            assert res.decisions.steps.laid_out() < len(res.decisions.steps) // 4
        want = _whole_run_schedule(res, cfg.system.demand_first, window)
        assert got.slices == want.slices and got.counters == want.counters and got.window == want.window
        assert {s.kind for s in got.slices} >= {"token", "layer", "expert", "copy"}
        np.testing.assert_array_equal(got.pass_end[a:b], want.pass_end[a:b])
        np.testing.assert_allclose(got.pass_end[a:b], res.timeline.pass_end[a:b], rtol=1e-9, atol=0)
