"""The `hobbit` console script: help, dispatch, exit codes, config composition."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hobbit.cli import COMMANDS, rewrite

from conftest import run_cli

ROOT = Path(__file__).parents[1]


def test_help_lists_every_command(capsys):
    assert run_cli(["--help"]) == 0
    out = capsys.readouterr().out
    for name in COMMANDS:
        assert name in out


def test_unknown_command_and_no_command_exit_2(capsys):
    assert run_cli(["frobnicate"]) == 2
    assert "unknown command 'frobnicate'" in capsys.readouterr().err
    assert run_cli([]) == 2


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_each_command_has_help(command, capsys):
    assert run_cli([command, "--help"]) == 0
    out = capsys.readouterr().out
    assert f"hobbit {command}" in out and "Usage" in out


def test_rewrite_sugar():
    assert rewrite("trace-info", ["a.parquet", "--json"]) == ["path=a.parquet", "json=true"]
    assert rewrite("convert", ["in=x.jsonl", "out=y"]) == ["input=x.jsonl", "out=y"]
    assert rewrite("capture", ["model=/my models/m's"]) == ["model='/my models/m\\'s'"]
    assert rewrite("capture", ["lookahead=3"]) == ["lookahead=3"]
    # a word a Hydra flag takes is the flag's, not a trace's path
    assert rewrite("trace-info", ["--cfg", "job"]) == ["--cfg", "job"]
    assert rewrite("trace-info", ["a.parquet", "--cfg", "job"]) == ["path=a.parquet", "--cfg", "job"]
    assert rewrite("trace-info", ["--info", "a.parquet"]) == ["--info", "path=a.parquet"]


def test_trace_info_prints_its_config_with_cfg_job(capsys):
    """``hobbit trace-info --cfg job`` prints the command's config (it took ``job`` as the trace's path and ended in
    Hydra's usage text, twice)."""
    assert run_cli(["trace-info", "--cfg", "job"]) == 0
    out = capsys.readouterr().out
    assert "path: ''" in out and "max_layer_rows: 40" in out


def test_unknown_knob_exits_2(capsys):
    assert run_cli(["capture", "no_such_knob=1"]) == 2
    assert "no_such_knob" in capsys.readouterr().err


def test_console_script_runs(tmp_path, synthetic_small):
    """The installed entry point, in a fresh process, on a path with a space."""
    from hobbit.traces.io import write_trace

    arrays, meta = synthetic_small
    p = write_trace(tmp_path / "a dir" / "t.parquet", arrays, meta)
    exe = Path(sys.executable).with_name("hobbit")
    r = subprocess.run([str(exe), "trace-info", str(p)], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "synthetic-mixtral" in r.stdout and "lookahead  d=1" in r.stdout
    assert sorted(x.name for x in tmp_path.iterdir()) == ["a dir"]  # trace-info writes nothing
    r = subprocess.run(
        [str(exe), "trace-info", str(tmp_path / "missing.parquet")], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 2 and "missing.parquet does not exist" in r.stderr


def _dependencies_only(tmp_path: Path) -> Path:
    """A folder of links to this environment's installed distributions, hobbit's own (its editable install and
    import hook) left out: another environment sees the dependencies through it, and not the source tree."""
    import sysconfig

    site = Path(sysconfig.get_paths()["purelib"])
    deps = tmp_path / "deps"
    deps.mkdir()
    for p in site.iterdir():
        if p.name.startswith(("__editable__", "hobbit")) or p.suffix == ".pth" or p.name == "__pycache__":
            continue
        (deps / p.name).symlink_to(p)
    return deps


@pytest.mark.slow
def test_wheel_from_a_clean_copy_simulates_in_an_environment_of_its_own(tmp_path):
    """Built from a copy of the tree (links kept, as a clone has them) and installed with its dependencies into a
    new environment that holds no editable install and has no source tree on its path, the wheel adds ``hobbit``
    (and its dist-info) and nothing else; ``hobbit --help`` and ``hobbit sim`` on the bundled trace (the compiled
    core included) run there, away from the repository."""
    src = tmp_path / "src"  # a copy: building leaves build/ behind, and a stale one could leak into the wheel
    skip = shutil.ignore_patterns(
        ".git",
        ".venv",
        "build",
        "outputs",
        "multirun",
        "*.egg-info",
        "__pycache__",
        ".hypothesis",
        ".pytest_cache",
        "demo-out",
        "site",
        ".whl",
    )
    shutil.copytree(ROOT, src, ignore=skip, symlinks=True)
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path / "dist"),
            str(src),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    (whl,) = (tmp_path / "dist").glob("hobbit-*.whl")
    env = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True, timeout=300)
    py = env / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    (site / "dependencies.pth").write_text(f"{_dependencies_only(tmp_path)}\n")
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    # with its dependencies: pip resolves the wheel's requirements against what the new environment sees
    r = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(py), "install", "--no-index", "-q", str(whl)],
        env=clean,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    top = {p.name for p in site.iterdir()} - {"dependencies.pth"}
    assert top == {"hobbit", f"{whl.name.split('-')[0]}-{whl.name.split('-')[1]}.dist-info"}, top
    for must in [
        "conf/__init__.py",
        "conf/demo.yaml",
        "conf/system/hobbit.yaml",
        "conf/traces/capture.yaml",
        "traces/tiny/model.safetensors",
        "traces/tiny/config.json",
        "traces/tiny/tokenizer.json",
        "traces/tiny/prompts.jsonl",
        "traces/tiny/trace.parquet",
        "sim/policies/eviction/mru.py",
        "sim/fast/__init__.py",
        "sim/fast/walk.py",
        "sim/fast/special.py",
        "cli.py",
        "__main__.py",
        "catalogue/data/parts.yaml",
        "catalogue/data/routing.yaml",
        "catalogue/data/cpus.yaml",
        "catalogue/data/hf-configs/SOURCES.md",
        "catalogue/data/hf-configs/deepseek-r1.json",
        "sim/fast/records.py",
        "sim/fast/steps.py",
        "planner/search.py",
        "commands/plan.py",
        "plumbing/glue.py",
        "studies/compare.py",
    ]:
        assert (site / "hobbit" / must).is_file() and not (site / "hobbit" / must).is_symlink(), must
    code = "import sys, hobbit, hobbit.sim.run as r, hobbit.sim.fast as f; print(r.__file__, f.__file__, sys.path)"
    r = subprocess.run([str(py), "-c", code], cwd=tmp_path, env=clean, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    run_file, fast_file, path = r.stdout.split(" ", 2)
    assert run_file.startswith(str(site)) and fast_file.startswith(str(site)), r.stdout
    assert str(ROOT) not in path and "__editable__" not in path, path
    exe = env / "bin" / "hobbit"
    r = subprocess.run([str(exe), "--help"], cwd=tmp_path, env=clean, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "usage: hobbit <command>" in r.stdout, r.stderr[-2000:]
    r = subprocess.run(
        [str(exe), "sim", f"hydra.run.dir={tmp_path / 'run'}"],
        cwd=tmp_path,
        env=clean,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    res = json.loads((tmp_path / "run" / "results.json").read_text())
    assert res["engine"] == "fast" and res["tokens"]["decode"] > 1000 and res["decode_ms_per_token"]["mean"] > 0, res


def test_a_command_exits_without_the_interpreters_final_collections():
    """``quick_exit``: the garbage collector's objects are frozen at exit, after the handlers registered before it
    (which run last, and still see a normal exit), and only once however often it is asked."""
    code = (
        "import atexit, gc; "
        "atexit.register(lambda: print('at exit frozen:', gc.get_freeze_count() > 0)); "
        "from hobbit.plumbing.glue import quick_exit; quick_exit(); quick_exit(); "
        "print('running frozen:', gc.get_freeze_count() > 0)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert r.stdout.split("\n")[:2] == ["running frozen: False", "at exit frozen: True"]


@pytest.mark.parametrize("args", [["sim", "--help"], ["trace-info", str(ROOT / "traces" / "tiny" / "trace.parquet")]])
def test_a_reader_that_goes_away_ends_the_command_quietly(args, tmp_path):
    """``hobbit ... | head``: the pipe closes before the command writes; no traceback, SIGPIPE's exit code."""
    exe = Path(sys.executable).with_name("hobbit")
    p = subprocess.Popen([str(exe), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    assert p.stdout is not None and p.stderr is not None
    p.stdout.close()  # the reader is gone before the first write
    err = p.stderr.read()
    assert p.wait(timeout=300) == 141, err
    assert "Traceback" not in err and "Broken pipe" not in err
