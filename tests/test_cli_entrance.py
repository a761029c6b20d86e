"""The command line's entrance: overrides checked against each command's schema (a misspelt knob named with the
nearest one, exit 2), checks before work, printed commands that reproduce, tok/s beside ms/token, sweep lines that
name their overrides, reports of compare runs, the compiled core's announcement, and no process-wide setting made
by importing the library."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
from numba.core import event as numba_event

from hobbit.cli import COMMANDS
from hobbit.plumbing.glue import compose, hydra_quote, searchpath
from hobbit.plumbing.overrides import knob_tree, nearest_knob
from hobbit.sim.config import ConfigError, SimConfig

from conftest import run_cli
from sim_helpers import write_first_requests

ROOT = Path(__file__).parents[1]


@pytest.fixture(scope="module")
def small_trace(tmp_path_factory):
    return write_first_requests(tmp_path_factory.mktemp("t"), 2)


def _one_line_error(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err and "To append" not in err and "HYDRA_FULL_ERROR" not in err, err
    return lines[0]


# ---------------------------------------------------------------------------------------------- unknown knobs


def test_a_misspelt_knob_is_named_with_the_one_meant_and_exits_2(tmp_path, capfd):
    run = tmp_path / "run"
    assert run_cli(["sim", "system.precison.t1=0.5", f"hydra.run.dir={run}"]) == 2
    line = _one_line_error(capfd.readouterr().err)
    assert line.startswith("hobbit: error: ") and "system.precison.t1" in line
    assert "did you mean system.precision.t1?" in line
    assert not run.exists()  # refused before Hydra made the run directory


@pytest.mark.parametrize(
    "arg, needle",
    [
        ("+system.precison.t1=0.5", "did you mean system.precision.t1?"),  # what Hydra's own hint led to
        ("++system.precison.t1=0.5", "did you mean system.precision.t1?"),
        ("+system.precision.t1=0.5", "set it without '+' (system.precision.t1=0.5)"),
        ("precision.t1=0.5", "did you mean system.precision.t1?"),
        ("system.cache.multidim.wfld=0.3", "did you mean system.cache.multidim.w_fld?"),
        ("system=hobit", "did you mean system=hobbit?"),
    ],
)
def test_an_added_or_misplaced_knob_on_a_typed_config_exits_2_without_a_traceback(arg, needle, tmp_path, capfd):
    assert run_cli(["sim", arg, f"hydra.run.dir={tmp_path / 'run'}"]) == 2
    assert needle in _one_line_error(capfd.readouterr().err)
    assert not (tmp_path / "run").exists()


def test_a_sweep_over_a_misspelt_knob_exits_2_before_it_starts(tmp_path, capfd):
    sweep = tmp_path / "sweep"
    assert run_cli(["sim", "-m", "system.precison.t1=0.5,0.6", f"hydra.sweep.dir={sweep}"]) == 2
    assert "did you mean system.precision.t1?" in _one_line_error(capfd.readouterr().err)
    assert not sweep.exists()


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_names_a_knob_its_schema_lacks(command, tmp_path, capfd):
    assert run_cli([command, "no_such_knob.deeper=1", f"hydra.run.dir={tmp_path / 'run'}"]) == 2
    line = _one_line_error(capfd.readouterr().err)
    assert f"hobbit {command} has no knob no_such_knob.deeper" in line


def test_knobs_the_schema_has_and_a_search_paths_experiment_pass(small_trace, tmp_path, capfd):
    """Known knobs, a group's option, and ``+experiment=`` from an added search path are left to Hydra."""
    exp = tmp_path / "conf" / "experiment"
    exp.mkdir(parents=True)
    (exp / "mine.yaml").write_text("# @package _global_\nsystem:\n  precision:\n    t1: 0.45\n")
    args = ["sim", f"trace={small_trace}", "system=on-demand", "system.cache.high_fraction=0.5", "use_cache=false"]
    args += [f"hydra.searchpath=[file://{tmp_path / 'conf'}]", "+experiment=mine", f"hydra.run.dir={tmp_path / 'r'}"]
    assert run_cli(args) == 0, capfd.readouterr().err
    cfg = json.loads((tmp_path / "r" / "results.json").read_text())["system_config"]
    assert cfg["precision"]["t1"] == 0.45 and cfg["cache"]["high_fraction"] == 0.5


def test_the_nearest_knob_comes_from_the_schema():
    tree = knob_tree(SimConfig)
    assert nearest_knob(tree, "system.precison.t1") == "system.precision.t1"
    assert nearest_knob(tree, "precision.t2") == "system.precision.t2"
    assert nearest_knob(tree, "hardware.link_gpbs") == "hardware.link_gbps"
    assert nearest_knob(tree, "zzzzzz") is None
    assert "profile" in tree["hardware"]  # an optional node is walked too: its knobs are known


def test_compose_names_the_knob_meant():
    with pytest.raises(ConfigError, match=r"did you mean system\.precision\.t1\?"):
        compose("sim", SimConfig, ["out_dir=.", "system.precison.t1=0.5"])


# ---------------------------------------------------------------------------------------------- checks before work


@pytest.mark.parametrize("command", ["compare", "tune"])
def test_a_model_the_trace_does_not_fit_stops_the_command_before_any_trial(command, tmp_path, capfd):
    trials = "tune_trials=2" if command == "compare" else "trials=2"
    out = tmp_path / "out"
    assert run_cli([command, "model=olmoe-1b-7b", trials, f"hydra.run.dir={out}"]) == 2
    err = capfd.readouterr().err
    assert "does not fit model=olmoe-1b-7b" in err and "pick a model" in err
    assert "Traceback" not in err and "Trial" not in err, err
    assert not list(out.rglob("study.db"))  # no study was opened: the search never started


@pytest.mark.parametrize(
    "args",
    [
        ["validate", "model=olmoe-1b-7b"],  # before the calibration
        ["reproduce", f"trace={ROOT / 'traces' / 'tiny' / 'trace.parquet'}", "model=olmoe-1b-7b"],  # before the grid
    ],
)
def test_a_model_the_trace_does_not_fit_stops_validate_and_reproduce_before_any_work(args, tmp_path, capfd):
    assert run_cli([*args, f"hydra.run.dir={tmp_path / 'out'}"]) == 2
    cap = capfd.readouterr()
    assert "does not fit model=olmoe-1b-7b" in cap.err and "Traceback" not in cap.err
    assert "calibrating" not in cap.out and "simulate:" not in cap.err


# ---------------------------------------------------------------------------------------------- printed commands


def test_tunes_use_command_run_as_printed_reproduces_its_best_trial(small_trace, tmp_path, capsys):
    """The printed ``use:`` line, split as a shell splits it, simulates the tuned system on the same trace, model,
    hardware (a machine of a search path, as ``hobbit calibrate`` writes one, and a knob of it) and seed, with a base
    system's knob the experiment file does not set (and not one the search fixes): the best trial's latency comes
    back. The run directory's name holds a space, which the line quotes."""
    cal = tmp_path / "calibrated"
    (cal / "hardware").mkdir(parents=True)
    a100 = (ROOT / "conf" / "hardware" / "a100-pcie4.yaml").read_text()
    (cal / "hardware" / "my-gpu.yaml").write_text(re.sub(r"(?m)^name: .*$", "name: my-gpu", a100))
    run = tmp_path / "tune run"
    args = ["tune", f"trace={small_trace}", "trials=3", "quality_budget=1.0", "seed=2", "hardware=my-gpu"]
    args += ["hardware.link_gbps=20", "system.prefetch.max_depth=3", "system.precision.mode=high"]
    args += [f"hydra.searchpath=[file://{cal}]", f"hydra.run.dir={run}"]
    assert run_cli(args) == 0
    out = capsys.readouterr().out
    (line,) = [x for x in out.splitlines() if x.startswith("use: ")]
    argv = shlex.split(line.removeprefix("use: "))
    assert argv[:2] == ["hobbit", "sim"]
    sim_dir = tmp_path / "sim"
    assert run_cli([*argv[1:], "use_cache=false", f"hydra.run.dir={sim_dir}"]) == 0
    best = json.loads((run / "tune.json").read_text())["best"][0]
    r = json.loads((sim_dir / "results.json").read_text())
    cfg = (sim_dir / ".hydra" / "config.yaml").read_text()
    assert r["system"] == "hobbit-tuned" and r["hardware"] == "my-gpu" and r["model"] == "mixtral-8x7b"
    assert "link_gbps: 20.0" in cfg and "max_depth: 3" in cfg and "seed: 2" in cfg and "mode: hobbit" in cfg
    assert f"trace: {small_trace.resolve()}" in cfg
    assert r["decode_ms_per_token"]["mean"] == pytest.approx(best["latency_ms"], rel=1e-6)


def test_calibrates_use_command_quotes_what_the_shell_and_hydra_would_split():
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from hobbit.studies.validation import calibrated_sim_command

    d = Path("/tmp/my profiles/it's here")
    argv = shlex.split(calibrated_sim_command(d, "my-gpu", "mixtral-8x7b-div4"))
    assert argv[:2] == ["hobbit", "sim"] and argv[3:] == ["hardware=my-gpu", "model=mixtral-8x7b-div4"]
    (o,) = OverridesParser.create().parse_overrides([argv[2]])
    assert o.key_or_group == "hydra.searchpath" and o.value() == [f"file://{d}"]
    assert searchpath(Path("/plain/dir")) == "hydra.searchpath=[file:///plain/dir]"
    assert hydra_quote("plain-name_1.x") == "plain-name_1.x"


# ---------------------------------------------------------------------------------------------- tok/s


def _tok_s(text: str) -> list[tuple[float, float]]:
    return [(float(a), float(b)) for a, b in re.findall(r"([\d.]+) ms/token \(([\d.]+) tok/s\)", text)]


def test_sims_summary_shows_tok_s_beside_ms_per_token(small_trace, tmp_path, capsys):
    assert run_cli(["sim", f"trace={small_trace}", "use_cache=false", f"hydra.run.dir={tmp_path / 'r'}"]) == 0
    (pair,) = _tok_s(capsys.readouterr().out)
    mean = json.loads((tmp_path / "r" / "results.json").read_text())["decode_ms_per_token"]["mean"]
    assert pair[0] == pytest.approx(mean, abs=0.005) and pair[1] == pytest.approx(1000 / mean, rel=0.01)


def test_compares_table_has_a_tok_s_column(tmp_path, capsys):
    out = tmp_path / "cmp"
    assert run_cli(["compare", "systems=[hobbit,on-demand]", "tune_trials=0", f"hydra.run.dir={out}"]) == 0
    printed = capsys.readouterr().out
    header = next(x for x in printed.splitlines() if x.startswith("| rank"))
    cols = [c.strip() for c in header.strip("|").split("|")]
    assert cols[cols.index("decode ms/token") + 1] == "decode tok/s"
    data = json.loads((out / "compare.json").read_text())
    rows = [x for x in printed.splitlines() if re.match(r"\| \d+ \|", x)]
    for row, r in zip(rows, data["systems"]):
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert float(cells[cols.index("decode tok/s")]) == pytest.approx(1000 / r["decode_ms_per_token"]["mean"], 0.01)
        assert r["decode_tok_s"] == pytest.approx(1000 / r["decode_ms_per_token"]["mean"])
    assert "decode tok/s" in (out / "compare.md").read_text()
    assert _tok_s(printed)  # the fastest system's line


def test_validate_and_reproduce_show_tok_s():
    from hobbit.studies.reproduce import render
    from hobbit.studies.validation import summary_line

    v = {"device": "cpu", "tokens": 10, "mape": 0.1, "bias": 0.0, "noise_mape": 0.01, "p50_abs_ms": 1.0}
    v |= {"p95_abs_ms": 2.0, "mean_simulated_ms": 40.0, "mean_measured_ms": 50.0}
    assert _tok_s(summary_line(v)) == [(40.0, 25.0), (50.0, 20.0)]
    row = {"setup": "4090", "hobbit": "hobbit", "baseline": "on-demand", "model": "m", "gpu_only": True}
    row |= {"decode_speedup": 2.0, "paper_decode_speedup": 2.0, "off": 0.0, "within_tolerance": True}
    row |= {"sign_right": True, "prefill_reduction": None, "paper_prefill_reduction": None}
    row["workloads"] = [{"hobbit_ms_per_token": 40.0, "baseline_ms_per_token": 80.0}]
    table = {"rows": [row], "ablation": [], "precision_mix": [], "tolerance": 0.25, "workloads": [], "averaging": ""}
    assert _tok_s(render(table)) == [(40.0, 25.0), (80.0, 12.5)]


# ---------------------------------------------------------------------------------------------- sweeps


def test_a_sweep_points_line_names_its_overrides(small_trace, tmp_path, capfd):
    sweep = tmp_path / "sweep"
    args = ["sim", "-m", f"trace={small_trace}", "system=hobbit", "system.cache.high_fraction=0.5,0.6"]
    args += ["use_cache=false", "hydra.launcher.n_jobs=2", f"hydra.sweep.dir={sweep}"]
    assert run_cli(args) == 0
    out = capfd.readouterr().out
    for i, f in enumerate(("0.5", "0.6")):
        (line,) = [x for x in out.splitlines() if x.startswith(f"[{i + 1}/2] system.cache.high_fraction={f}: ")]
        mean = json.loads((sweep / str(i) / "results.json").read_text())["decode_ms_per_token"]["mean"]
        (pair,) = _tok_s(line)
        assert pair[0] == pytest.approx(mean, abs=0.005)


# ---------------------------------------------------------------------------------------------- hobbit report


def test_report_of_a_finished_compare_run_aggregates_its_systems(tmp_path, capsys):
    out = tmp_path / "cmp"
    assert run_cli(["compare", "systems=[hobbit,on-demand]", "tune_trials=0", f"hydra.run.dir={out}"]) == 0
    capsys.readouterr()
    assert run_cli(["report", f"dir={out}"]) == 0
    printed = capsys.readouterr().out
    assert "2 runs aggregated" in printed and "did not finish" not in printed and "left out" not in printed
    (out / "stopped" / ".hydra").mkdir(parents=True)  # a run that did stop is still named
    assert run_cli(["report", f"dir={out}"]) == 0
    assert "left out: stopped: no results.json (the run did not finish)" in capsys.readouterr().out


# ---------------------------------------------------------------------------------------------- the compiled core


class _Dispatcher:
    """What ``CompileNotice`` reads of a numba dispatcher: its function, its compiled versions (none)."""

    def __init__(self, name: str, module: str) -> None:
        self.py_func = SimpleNamespace(__name__=name, __module__=module)
        self.overloads: dict = {}

    def __call__(self, *args: object) -> object:  # a dispatcher is the function it compiles; this one never runs
        raise NotImplementedError


def _dispatcher(name: str, module: str = "hobbit.sim.fast.walk") -> _Dispatcher:
    return _Dispatcher(name, module)


def _event(d, start: bool) -> numba_event.Event:
    status = numba_event.EventStatus.START if start else numba_event.EventStatus.END
    return numba_event.Event("numba:compile", status, {"dispatcher": d})


def test_the_cores_compilation_announces_an_estimate_and_shows_its_progress():
    import io

    from hobbit.sim.fast import CompileNotice, compile_estimate

    walk, replay, bounds = _dispatcher("walk"), _dispatcher("replay"), _dispatcher("pass_bounds")
    now = [100.0]
    out = io.StringIO()
    notice = CompileNotice((walk, replay, bounds), out, tick=None, clock=lambda: now[0])
    notice.notify(_event(walk, True))
    now[0] += 30
    notice.notify(_event(_dispatcher("_l_make_room"), True))  # a helper of the walk, compiled on the way
    notice.notify(_event(_dispatcher("impl", "numba.cpython.listobj"), True))  # numba's own: not named
    notice.progress()
    now[0] += 50
    notice.notify(_event(walk, False))
    notice.notify(_event(replay, True))
    now[0] += 3
    notice.notify(_event(replay, False))
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("hobbit: compiling the simulator's core (walk first): up to 3 functions, ")
    assert "about 24-53 s" in lines[0] and "numba's cache" in lines[0]
    assert lines[1] == "hobbit: compiling walk (1 of 3): 30 s so far; now on _l_make_room"
    assert lines[2] == "hobbit: compiled walk in 80 s (1 of 3)"
    assert lines[3] == "hobbit: compiled replay in 3 s (2 of 3)"
    assert compile_estimate(["replay", "pass_bounds"]) == "about 4-8 s"


def test_the_progress_lines_come_from_a_thread_that_ends_with_the_compilation():
    import io
    import time

    from hobbit.sim.fast import CompileNotice

    walk = _dispatcher("walk")
    out = io.StringIO()
    notice = CompileNotice((walk,), out, tick=0.01)
    notice.notify(_event(walk, True))
    for _ in range(1000):  # until the thread has written a line (it writes one each tick)
        if "so far" in out.getvalue():
            break
        time.sleep(0.01)
    notice.notify(_event(walk, False))
    assert "hobbit: compiling walk (1 of 1): " in out.getvalue()
    assert not [t for t in threading.enumerate() if t.name == "hobbit-compile"]  # a launcher may fork now


# ---------------------------------------------------------------------------------------------- no import-time effects


def _python(code: str, **env: str) -> list[str]:
    environ = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"} | env
    r = subprocess.run([sys.executable, "-c", code], env=environ, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout.split()


STATE = (
    "import pyarrow as pa; from hydra._internal.hydra import Hydra; from hobbit.plumbing import glue; "
    "print(pa.default_memory_pool().backend_name, Hydra.get_mode is glue._get_mode)"
)


def test_importing_the_library_sets_nothing_process_wide():
    """pyarrow's default memory pool and Hydra's class are as they were after importing the library, a trace read."""
    (plain,) = _python("import pyarrow as pa; print(pa.default_memory_pool().backend_name)")
    imported = _python(
        "import hobbit, hobbit.traces, hobbit.api, hobbit.sim, hobbit.sim.run, hobbit.plumbing.glue; "
        "hobbit.api.read_trace(); " + STATE
    )
    assert imported == [plain, "False"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the pool is chosen on Linux only")
def test_the_command_lines_entry_sets_the_pool_and_hydras_shortcut():
    cli = "from hobbit.cli import main\ntry:\n    main(['trace-info', 'traces/tiny/trace.parquet'])\nexcept SystemExit:\n    pass\n"
    pool, patched = _python(cli + STATE)[-2:]
    assert pool in ("jemalloc", "system") and patched == "True"  # system: a pyarrow built without jemalloc
    assert _python(cli + STATE, ARROW_DEFAULT_MEMORY_POOL="mimalloc")[-2:] == ["mimalloc", "True"]  # the user's
    api = "import hobbit; hobbit.configure_runtime(); " + STATE
    assert _python(api) == [pool, "True"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the pool is chosen on Linux only")
def test_a_command_run_without_the_entry_point_sets_the_pool_too():
    """A launcher's worker started afresh (joblib, Ray) runs the command's job, not ``hobbit.cli.main``."""
    code = (
        "import sys; sys.argv = ['hobbit-trace-info', 'path=traces/tiny/trace.parquet']\n"
        "from hobbit.commands.trace import trace_info_main\n"
        "try:\n    trace_info_main()\nexcept SystemExit:\n    pass\n" + STATE
    )
    assert _python(code)[-2] in ("jemalloc", "system")
