"""Traces with one phase or one request (issue 51, root cause 2): every command reports n/a for a phase the trace lacks
or refuses in one line naming the file and what is missing (exit 2), never a traceback; one place decides
(``hobbit.plumbing.phases``)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from hobbit.api import read_trace
from hobbit.plumbing.phases import Phases, require
from hobbit.sim.config import ConfigError
from hobbit.traces.io import write_trace
from hobbit.traces.schema import DECODE, PREFILL
from hobbit.traces.tiny import bundled_trace

from conftest import run_cli


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    """The bundled trace cut four ways: prefill only, decode only (as a converted decode log is), its first request
    alone, and its first token alone."""
    tr = read_trace(bundled_trace())
    a = tr.arrays
    root = tmp_path_factory.mktemp("phases")
    first = a.request_id == a.request_id[0]
    cuts = {
        "prefill_only": a.phase == PREFILL,
        "decode_only": a.phase == DECODE,
        "one_request": first,
        "one_token": first & (a.position == a.position[0]),
    }
    out = {}
    for name, mask in cuts.items():
        out[name] = root / f"{name}.parquet"
        write_trace(out[name], a.take(np.flatnonzero(mask)), tr.meta)
    return out


def _one_line_refusal(err: str, path, needle: str) -> None:
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("paths: ")]  # the guard's own note
    assert "Traceback" not in err
    assert len(lines) == 1 and lines[0].startswith("hobbit: error: ") and str(path) in lines[0], err
    assert needle in lines[0], lines[0]


def test_phases_are_counted_once_a_token(traces):
    full = Phases.of(read_trace(bundled_trace()))
    pre, dec = Phases.of(read_trace(traces["prefill_only"])), Phases.of(read_trace(traces["decode_only"]))
    assert (pre.decode_tokens, dec.prefill_tokens) == (0, 0)
    assert pre.prefill_tokens + dec.decode_tokens == full.prefill_tokens + full.decode_tokens
    assert Phases.of(read_trace(traces["one_token"])) == Phases(1, 0, 1)
    with pytest.raises(ConfigError, match=r"needs decode tokens .* 1 prefill and 0 decode tokens in 1 request"):
        require(read_trace(traces["one_token"]), "x", "y", decode=True)


@pytest.mark.parametrize("cut", ["prefill_only", "one_token"])
def test_sim_reports_the_prefill_of_a_trace_without_decode(cut, traces, tmp_path, capsys):
    out = tmp_path / "run"
    assert run_cli(["sim", f"trace={traces[cut]}", "use_cache=false", f"hydra.run.dir={out}"]) == 0
    printed = capsys.readouterr()
    assert "Traceback" not in printed.err
    assert "decode n/a (no decode passes), prefill " in printed.out
    s = json.loads((out / "results.json").read_text())
    assert s["decode_ms_per_token"]["mean"] is None and s["prefill_ms_per_request"]["mean"] > 0


def test_compare_ranks_a_decode_only_trace_with_prefill_na(traces, tmp_path, capsys):
    out = tmp_path / "cmp"
    args = ["compare", f"trace={traces['decode_only']}", "systems=[hobbit,fiddler]", "tune_trials=0"]
    assert run_cli([*args, f"hydra.run.dir={out}"]) == 0
    assert "Traceback" not in capsys.readouterr().err
    table = (out / "compare.md").read_text()
    rows = [ln for ln in table.splitlines() if ln.startswith(("| 1 ", "| 2 "))]
    assert len(rows) == 2 and all(" | n/a | " in r for r in rows)
    assert (out / "compare.png").stat().st_size > 0


@pytest.mark.parametrize(
    ("command", "cut", "extra", "needle"),
    [
        ("compare", "prefill_only", ["tune_trials=0"], "needs decode tokens"),
        ("tune", "prefill_only", ["trials=2"], "needs decode tokens (it minimises decode latency)"),
        ("validate", "one_request", ["requests=1", "scale=32"], "needs 2 requests"),
        ("validate", "prefill_only", ["requests=1", "scale=32"], "needs decode tokens"),
        ("plan", "one_token", ["model=mixtral-8x7b"], "needs decode tokens"),
    ],
)
def test_a_command_that_needs_a_phase_refuses_before_any_work(command, cut, extra, needle, traces, tmp_path, capsys):
    out = tmp_path / "run"
    assert run_cli([command, f"trace={traces[cut]}", *extra, f"hydra.run.dir={out}"]) == 2
    _one_line_refusal(capsys.readouterr().err, traces[cut], needle)
    written = [p for p in out.rglob("*") if p.is_file() and ".hydra" not in p.parts and p.suffix != ".log"]
    assert not written  # nothing but Hydra's record of the run and its log
