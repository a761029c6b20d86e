"""Bad input ends in one line and exit 2, never a traceback, and never costs a user a file.

Each class of failure has one mechanism (README, "What is refused, what is guaranteed"): the
path guard every command passes (``hobbit/plumbing/guard.py``), verified trace writes
(``traces/io.py``), numbers checked where configs are typed (``traces/knobs.py``), the
self-checking result cache (``hobbit/plumbing/results_io.py``), converter errors that name the input.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shutil
from collections.abc import Sequence
from pathlib import Path

import pytest

from hobbit.traces.io import read_trace, write_trace
from hobbit.traces.schema import TraceError

from conftest import run_cli
from sim_helpers import bundled, write_first_requests

HEADER = {
    "hobbit_trace_header": 1,
    "model": {"name": "x", "num_layers": 1, "num_experts": 4, "top_k": 2, "weight_rule": "softmax_renorm"},
}
ROW = {
    "request_id": 0,
    "phase": "prefill",
    "step": 0,
    "position": 0,
    "layer": 0,
    "expert_ids": [1, 2],
    "gate_weights": [0.6, 0.4],
}


@pytest.fixture(scope="module")
def small_trace(tmp_path_factory) -> Path:
    return write_first_requests(tmp_path_factory.mktemp("t"), 1)


def _jsonl(path: Path, header: dict = HEADER, rows: list[dict] | None = None) -> Path:
    path.write_text("\n".join(json.dumps(r) for r in [header, *(rows or [ROW])]) + "\n")
    return path


def refused(capsys, args: list[str], needle: str, keep: Sequence[Path] = ()) -> str:
    """Run ``hobbit ARGS``: exit 2, one error line naming ``needle``, no traceback, ``keep`` untouched,
    no temporary file left beside them."""
    before = {p: p.read_bytes() for p in keep if p.is_file()}
    capsys.readouterr()
    assert run_cli(args) == 2, args
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err, err
    for p, data in before.items():
        assert p.read_bytes() == data, f"{p} changed"
        assert not list(p.parent.glob(f".{p.name}.*.tmp")), "temporary file left behind"
    return err


# ---------------------------------------------------------------- one output guard


def test_an_output_that_is_its_own_input_is_refused(tmp_path, capsys):
    src = _jsonl(tmp_path / "routing.jsonl")
    refused(capsys, ["convert", "format=jsonl", f"in={src}", f"out={src}"], "is also input=", [src])
    alias = tmp_path / "alias.jsonl"
    alias.symlink_to(src)
    refused(capsys, ["convert", "format=jsonl", f"in={src}", f"out={alias}"], "is also input=", [src])
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("def f():\n")
    refused(capsys, ["capture", f"prompts={prompts}", f"out={prompts}"], "out=", [prompts])


def test_an_output_directory_or_unwritable_place_is_refused(tmp_path, capsys):
    src = _jsonl(tmp_path / "routing.jsonl")
    (tmp_path / "d").mkdir()
    refused(capsys, ["convert", "format=jsonl", f"in={src}", f"out={tmp_path / 'd'}"], "is a directory")
    refused(capsys, ["convert", "format=jsonl", f"in={src}", f"out={tmp_path / 'no' / 'x.parquet'}"], "does not exist")
    refused(capsys, ["convert", "format=jsonl", f"in={src}", "out=/proc/hobbit-test.parquet"], "/proc/hobbit-test")
    refused(capsys, ["trace-info", str(tmp_path / "missing.parquet")], "missing.parquet")
    src.with_name("a-file").write_text("x")
    refused(
        capsys,
        ["sim", f"hydra.run.dir={src.with_name('a-file')}"],
        "is a file, not a directory",
        [src.with_name("a-file")],
    )


def test_a_failed_convert_leaves_an_existing_trace_as_it_was(tmp_path, capsys):
    good = write_first_requests(tmp_path, 1)
    bad = _jsonl(tmp_path / "bad.jsonl", rows=[{**ROW, "gate_weights": [0.6, -0.4]}])
    err = refused(capsys, ["convert", "format=jsonl", f"in={bad}", f"out={good}"], str(bad), [good])
    assert "line 2" in err and "gate_weights" in err
    read_trace(good)


def test_a_trace_is_verified_before_it_replaces_anything(tmp_path):
    """Metadata that only a read-back refuses (an unknown schema version) never reaches the final name."""
    good = write_first_requests(tmp_path, 1)
    before = good.read_bytes()
    tr = bundled(1)
    with pytest.raises(TraceError, match="nothing was replaced"):
        write_trace(good, tr.arrays, dataclasses.replace(tr.meta, schema_version=99))
    assert good.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == [good.name]


# ---------------------------------------------------------------- numbers where configs are typed


@pytest.mark.parametrize(
    "knob",
    [
        "hardware.link_gbps=nan",
        "hardware.link_gbps=inf",
        "hardware.link_gbps=0",
        "hardware.device_tflops=-1",
        "system.precision.t1=1.5",
        "system.cache.high_fraction=2",
        "model.top_k=0",
    ],
)
def test_numbers_out_of_range_are_refused_naming_the_knob(small_trace, tmp_path, capsys, knob):
    refused(capsys, ["sim", f"trace={small_trace}", knob, f"hydra.run.dir={tmp_path / 'r'}"], knob.split("=")[0])
    assert not (tmp_path / "r" / "results.json").exists()


def test_command_counts_are_checked(small_trace, tmp_path, capsys):
    refused(capsys, ["tune", f"trace={small_trace}", "trials=-1", f"hydra.run.dir={tmp_path / 'r'}"], "trials=-1")
    refused(capsys, ["validate", "requests=0", f"hydra.run.dir={tmp_path / 'v'}"], "requests=0")


@pytest.mark.parametrize(
    "header,rows,needle",
    [
        ({**HEADER, "model": {**HEADER["model"], "top_k": 2.5}}, None, "top_k"),
        (HEADER, [{**ROW, "gate_weights": [0.0, 0.0]}], "sum to 0"),
        (HEADER, [{**ROW, "gate_weights": [0.7, 0.7]}], "weight_rule=softmax_renorm"),
        (HEADER, [{**ROW, "request_id": 2**40}], "request_id"),
        (HEADER, [{**ROW, "layer": 3}], "layer"),
        # a misspelt key would have dropped every row's predictions (issue 51, root cause 4)
        ({**HEADER, "lookahed_depth": 2}, None, "field 'lookahed_depth'"),
        ({**HEADER, "lookahed_depth": 2}, None, "did you mean lookahead_depth?"),
        ({**HEADER, "model": {**HEADER["model"], "topk": 2}}, None, "field 'model.topk'"),
    ],
)
def test_trace_headers_and_gate_weights_are_checked(tmp_path, capsys, header, rows, needle):
    src = _jsonl(tmp_path / "in.jsonl", header, rows)
    out = tmp_path / "out.parquet"
    err = refused(capsys, ["convert", "format=jsonl", f"in={src}", f"out={out}"], needle)
    assert str(src) in err and str(out) not in err.split("error:")[1] and not out.exists()


# ---------------------------------------------------------------- the result cache checks itself


def _sim(trace: Path, run: Path, cache: Path | str, *more: str) -> list[str]:
    return [
        "sim",
        f"trace={trace}",
        "system=on-demand",
        "engine=plain",
        f"cache_dir={cache}",
        f"hydra.run.dir={run}",
        *more,
    ]


def test_a_corrupt_cache_entry_is_ignored_and_replaced(small_trace, tmp_path, capsys):
    cache = tmp_path / "cache"
    assert run_cli(_sim(small_trace, tmp_path / "a", cache)) == 0
    (entry,) = (cache / "sim").iterdir()
    good = (entry / "results.json").read_text()
    (entry / "results.json").write_text(good[: len(good) // 2])  # a truncated entry
    with pytest.warns(UserWarning, match="corrupt, partial or holds another run's results"):
        assert run_cli(_sim(small_trace, tmp_path / "b", cache)) == 0
    again = json.loads((tmp_path / "b" / "results.json").read_text())
    assert {**again, "wall_s": 0} == {**json.loads(good), "wall_s": 0}
    assert not (tmp_path / "b" / ".cached").exists()  # simulated again, not copied
    assert json.loads((entry / "results.json").read_text()) == again  # and the entry replaced
    assert run_cli(_sim(small_trace, tmp_path / "c", cache)) == 0
    assert (tmp_path / "c" / ".cached").exists()


def test_a_cache_entry_copied_under_another_key_is_not_served(small_trace, tmp_path):
    """An entry proves its key (issue 51, root cause 5): t1=0.3's results copied under t1=0.75's key, checksums
    and all, are refused and t1=0.75 is simulated; the entry then holds t1=0.75's own results."""
    cache = tmp_path / "cache"
    assert run_cli(_sim(small_trace, tmp_path / "a", cache, "system=hobbit", "system.precision.t1=0.3")) == 0
    (low,) = (cache / "sim").iterdir()
    assert run_cli(_sim(small_trace, tmp_path / "b", cache, "system=hobbit", "system.precision.t1=0.75")) == 0
    (high,) = set((cache / "sim").iterdir()) - {low}
    truth = json.loads((high / "results.json").read_text())
    shutil.rmtree(high)
    shutil.copytree(low, high)  # the other key's files, with their own (true) checksums
    with pytest.warns(UserWarning, match="holds another run's results"):
        assert run_cli(_sim(small_trace, tmp_path / "c", cache, "system=hobbit", "system.precision.t1=0.75")) == 0
    got = json.loads((tmp_path / "c" / "results.json").read_text())
    assert not (tmp_path / "c" / ".cached").exists()
    assert got["system_config"]["precision"]["t1"] == 0.75
    assert {**got, "wall_s": 0} == {**truth, "wall_s": 0}


def test_an_unwritable_cache_degrades_to_no_cache(small_trace, tmp_path):
    with pytest.warns(UserWarning, match="not writable"):
        assert run_cli(_sim(small_trace, tmp_path / "r", "/proc/hobbit-cache")) == 0
    json.loads((tmp_path / "r" / "results.json").read_text())


def test_results_json_is_strict_json(tmp_path):
    from hobbit.traces.io import atomic_write_json

    p = atomic_write_json(tmp_path / "r.json", {"a": float("nan"), "b": [float("inf"), 1.5]})
    assert json.loads(p.read_text(), parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}")) == {
        "a": None,
        "b": [None, 1.5],
    }


KILLED_MID_WRITE = """
import os, signal, sys, time
from pathlib import Path
from hobbit.traces.io import file_writer, write_together

def slow(f):
    f.write("half")
    f.flush()
    os.write(1, b"writing\\n")
    time.sleep(60)

out = Path(sys.argv[1])
try:
    write_together([(out / "a.json", file_writer(lambda f: f.write("{}"))), (out / "b.json", file_writer(slow))])
except KeyboardInterrupt:
    sys.exit(130)
"""


@pytest.mark.parametrize("handler", ["default", "ignored"])
def test_a_write_killed_part_way_leaves_no_temporary_file(tmp_path, handler):
    """``kill`` of a process that left SIGTERM at its default action (a sweep's worker between two jobs) in the
    middle of a write: the write unwinds, neither final name appears and no hidden temporary file is left. A process
    that ignores SIGTERM keeps ignoring it; ``kill -9`` then leaves the temporary files, which the next write of the
    same names removes."""
    import signal
    import subprocess
    import sys

    from hobbit.traces.io import atomic_write_text

    before = signal.getsignal(signal.SIGTERM)
    ignore = "import signal; signal.signal(signal.SIGTERM, signal.SIG_IGN)\n" if handler == "ignored" else ""
    proc = subprocess.Popen([sys.executable, "-c", ignore + KILLED_MID_WRITE, str(tmp_path)], stdout=subprocess.PIPE)
    tmps = [f".a.json.{proc.pid}.tmp", f".b.json.{proc.pid}.tmp"]
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"writing\n"
        assert sorted(p.name for p in tmp_path.iterdir()) == tmps
        proc.send_signal(signal.SIGTERM)
        if handler == "ignored":
            with pytest.raises(subprocess.TimeoutExpired):
                proc.wait(timeout=1)
            proc.kill()
        assert proc.wait(timeout=30) == (130 if handler == "default" else -signal.SIGKILL)
    finally:
        proc.kill()
    assert sorted(p.name for p in tmp_path.iterdir()) == ([] if handler == "default" else tmps)
    atomic_write_text(tmp_path / "a.json", "{}")
    atomic_write_text(tmp_path / "b.json", "{}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "b.json"]
    assert signal.getsignal(signal.SIGTERM) == before  # this process's own: restored after each write


KILLED_MID_TRACE = """
import os, sys, time
from pathlib import Path
from hobbit.traces.io import TraceWriter, read_trace
from hobbit.traces.tiny import bundled_trace

tr = read_trace(bundled_trace())
try:
    with TraceWriter(Path(sys.argv[1]) / "trace.parquet", tr.meta) as w:
        w.write(tr.arrays)
        os.write(1, b"writing\\n")
        time.sleep(60)
except KeyboardInterrupt:
    sys.exit(130)
"""


def test_a_trace_writer_killed_part_way_leaves_no_file(tmp_path):
    """``kill`` of a script writing a trace through ``TraceWriter`` (SIGTERM at its default action, a row group
    down): the write unwinds through ``abort``, so neither the trace nor its hidden temporary file is left."""
    import signal
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", KILLED_MID_TRACE, str(tmp_path)], stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"writing\n"
        assert [p.name for p in tmp_path.iterdir()] == [f".trace.parquet.{proc.pid}.tmp"]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 130
    finally:
        proc.kill()
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- paths resolve where the user stands


def test_a_study_resumes_from_where_tune_was_run(small_trace, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert (
        run_cli(["tune", f"trace={small_trace}", "trials=2", "study=mine.db", f"hydra.run.dir={tmp_path / 'one'}"]) == 0
    )
    err = capsys.readouterr().err
    assert f"study={tmp_path / 'mine.db'}" in err  # the resolved path is printed
    assert (tmp_path / "mine.db").is_file() and not (tmp_path / "one" / "mine.db").exists()
    assert (
        run_cli(["tune", f"trace={small_trace}", "trials=3", "study=mine.db", f"hydra.run.dir={tmp_path / 'two'}"]) == 0
    )
    assert "3 trials (2 from earlier runs)" in capsys.readouterr().out


def test_a_file_that_is_not_a_study_is_refused_and_kept(small_trace, tmp_path, capsys):
    study = tmp_path / "notes.db"
    study.write_text("my notes\n")
    refused(
        capsys,
        ["tune", f"trace={small_trace}", f"study={study}", f"hydra.run.dir={tmp_path / 'r'}"],
        "is not an Optuna study",
        [study],
    )


# ---------------------------------------------------------------- inputs of the wrong kind


def test_converter_inputs_of_the_wrong_kind(small_trace, tmp_path, capsys):
    out = tmp_path / "o.parquet"
    refused(capsys, ["convert", "format=vllm", f"in={small_trace}", f"out={out}"], str(small_trace))
    (tmp_path / "meta.jsonl").write_text('{"type": "meta"}\n')
    refused(capsys, ["convert", "format=vllm", f"in={tmp_path / 'meta.jsonl'}", f"out={out}"], "route")
    (tmp_path / "junk.parquet").write_bytes(b"PAR1 not really")
    refused(capsys, ["convert", "format=flame", f"in={tmp_path / 'junk.parquet'}", f"out={out}"], "junk.parquet")
    assert not out.exists()


def test_a_checkpoint_without_model_type_is_refused(tmp_path, capsys):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(json.dumps({"hidden_size": 8}))
    refused(capsys, ["capture", f"model={ckpt}", f"out={tmp_path / 't.parquet'}"], "model_type 'None'")
    refused(capsys, ["quality", f"checkpoint={ckpt}", f"hydra.run.dir={tmp_path / 'q'}"], "model_type 'None'")


def test_report_on_a_directory_without_runs(tmp_path, capsys):
    refused(capsys, ["report", f"dir={tmp_path}"], "no results.json")
    assert not (tmp_path / "report").exists()


def test_fitted_profile_coefficients_may_be_negative_but_not_missing_numbers():
    """A calibration's least-squares fit can give a slightly negative slope: that is a real profile."""
    from hobbit.sim.config import HardwareConfig, ProfileConfig
    from hobbit.traces.knobs import KnobError, check_knobs

    prof = ProfileConfig(
        model="m",
        hidden_size=8,
        expert_ffn=8,
        link_gbps=10.0,
        dense_s=[4.7e-4, -4.4e-7, 2.3e-8],
        expert_tokens=[1],
        expert_high_s=[1e-4],
        expert_low_s=[1e-4],
    )
    check_knobs(HardwareConfig(profile=prof), "hardware.")
    with pytest.raises(KnobError, match="hardware.profile.dense_s"):
        check_knobs(HardwareConfig(profile=dataclasses.replace(prof, dense_s=[float("nan"), 0, 0])), "hardware.")


# ---------------------------------------------------------------- inputs read through one helper (issue 51, 3)


def _binary(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(bytes(range(128, 256)) * 20)  # no UTF-8 text, no JSON, no archive
    return path


def test_inputs_that_are_not_what_they_should_be_are_refused_naming_them(tmp_path, capsys):
    """A binary prompts or held-out text file, a junk FLAME .pt, a binary vLLM log or hardware YAML: one line naming
    the file and what it should be, exit 2, no traceback, nothing written (``hobbit.traces.inputs.reading``)."""
    out = tmp_path / "o.parquet"
    prompts = _binary(tmp_path / "prompts.txt")
    err = refused(capsys, ["capture", f"prompts={prompts}", f"out={out}"], f"{prompts}: the prompts file", [prompts])
    assert "not UTF-8 text" in err and not out.exists()
    text = _binary(tmp_path / "heldout.txt")
    err = refused(capsys, ["quality", f"text={text}", f"hydra.run.dir={tmp_path / 'q'}"], f"{text}: the held-out")
    assert "not UTF-8 text" in err
    pt = _binary(tmp_path / "flame" / "layer0.pt")
    err = refused(capsys, ["convert", f"in={pt.parent}", "format=flame", f"out={out}"], f"{pt}: a FLAME trace file")
    assert "cannot be read" in err and not out.exists()
    log = _binary(tmp_path / "route.jsonl")
    refused(capsys, ["convert", f"in={log}", "format=vllm", f"out={out}"], f"{log}: a vLLM routing log cannot be read")
    yml = _binary(tmp_path / "hw.yaml")
    refused(capsys, ["plan", f"profile={yml}", f"hydra.run.dir={tmp_path / 'p'}"], f"{yml}: profile=, a hardware YAML")


def test_a_truncated_checkpoint_is_refused_naming_it(tiny_checkpoints, tmp_path, capsys):
    """A model.safetensors cut short (a download that stopped): the checkpoint named, its weights unread, exit 2."""
    import shutil

    src = next(iter(tiny_checkpoints.values()))
    ckpt = tmp_path / "ckpt"
    shutil.copytree(src, ckpt)
    weights = next(ckpt.glob("*.safetensors"))
    weights.write_bytes(weights.read_bytes()[:5000])
    out = tmp_path / "o.parquet"
    err = refused(capsys, ["capture", f"model={ckpt}", f"out={out}", "max_prompts=1", "max_new_tokens=2"], str(ckpt))
    assert "the checkpoint's weights cannot be read" in err and not out.exists()


# ---------------------------------------------------------------- every value checked before any work (issue 51, 4)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["sim", "system.precision.t1=abc"], "system.precision.t1=abc: system.precision.t1 takes a number"),
        (["tune", "trials=2.5"], "trials=2.5: trials takes a whole number"),
        (["sim", "use_cache=maybe"], "use_cache=maybe: use_cache is true or false"),
        (["sim", "hardware.link_gbps=inf"], "hardware.link_gbps=inf must be a finite number"),
    ],
)
def test_a_value_of_the_wrong_kind_is_one_line(args, needle, tmp_path, capsys):
    """Where Hydra printed 5-25 lines ending in its HYDRA_FULL_ERROR hint: one line naming the knob (exit 2)."""
    err = refused(capsys, [*args, f"hydra.run.dir={tmp_path / 'r'}"], needle)
    assert len([ln for ln in err.splitlines() if ln.strip()]) == 1 and "HYDRA_FULL_ERROR" not in err
    assert not (tmp_path / "r").exists()


def test_a_sweep_with_a_bad_value_in_its_list_runs_no_point(small_trace, tmp_path, capsys):
    """t1=0.3,1.5,0.6: the middle value is refused before the sweep starts, so 0.3 is not simulated either."""
    sweep = tmp_path / "sweep"
    args = ["sim", "-m", f"trace={small_trace}", "system.precision.t1=0.3,1.5,0.6", f"hydra.sweep.dir={sweep}"]
    refused(capsys, args, "system.precision.t1=1.5 must be in [0, 1] (a value of the sweep's list)")
    assert not sweep.exists()


def test_more_checks_that_came_too_late_or_not_at_all(small_trace, tmp_path, capsys):
    """A backwards timeline range (an empty timeline), two traces to trace-info (the first went unreported), a
    quantisation group that does not divide the checkpoint's widths (silently another group): one line, exit 2,
    before any work."""
    run = tmp_path / "r"
    refused(
        capsys,
        ["sim", f"trace={small_trace}", "timeline=true", "timeline_tokens=64:0", f"hydra.run.dir={run}"],
        "timeline_tokens='64:0' selects no pass",
    )
    assert not (run / "results.json").exists()
    refused(capsys, ["trace-info", str(small_trace), str(small_trace)], "one trace at a time")
    refused(capsys, ["quality", "group=7", f"hydra.run.dir={tmp_path / 'q'}"], "group=7 does not divide")


def test_trace_info_json_is_strict(small_trace, capsys):
    assert run_cli(["trace-info", str(small_trace), "--json"]) == 0
    json.loads(capsys.readouterr().out, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))


def test_a_tec_trace_of_an_unknown_version_is_refused(tmp_path, capsys):
    """llama-router-trace's header carries a version; a layout this reader does not know is refused, not misread."""
    from hobbit.traces.tec_format import HEADER, MAGIC

    src = tmp_path / "router.bin"
    src.write_bytes(HEADER.pack(MAGIC, 8, 3) + bytes(64))
    out = tmp_path / "o.parquet"
    err = refused(capsys, ["convert", f"in={src}", "format=tec", f"out={out}"], "header_version 3")
    assert str(src) in err and not out.exists()


# ---------------------------------------------------------------- messages name what the user wrote (issue 51, 7)


def test_a_long_output_name_is_written_not_blamed_on_its_temporary_file(small_trace, tmp_path, capsys):
    """A 240-character name fits a file system's 255 bytes; its hidden temporary file would not, and is shortened
    (a head and a hash) rather than refusing the name."""
    out = tmp_path / ("x" * 236 + ".jsonl")
    assert run_cli(["export", f"trace={small_trace}", f"out={out}"]) == 0
    assert out.is_file() and not list(tmp_path.glob(".*.tmp"))


def test_a_killed_writers_temporary_file_is_cleaned_by_the_next_write(small_trace, tmp_path):
    """A temporary file left by a process that is gone (kill -9 mid-write) goes when the same output is written."""
    out = tmp_path / "o.jsonl"
    stale = tmp_path / f".{out.name}.999999999.tmp"  # no such pid
    stale.write_text("half")
    other = tmp_path / ".other.jsonl.999999999.tmp"  # another output's: left alone
    other.write_text("half")
    assert run_cli(["export", f"trace={small_trace}", f"out={out}"]) == 0
    assert out.is_file() and not stale.exists() and other.exists()


def test_messages_name_the_input_and_the_knob_the_user_wrote(small_trace, tmp_path, capsys, monkeypatch):
    # a vLLM layer of -1: the log and its line, not the output the check would have failed on
    log = tmp_path / "route.jsonl"
    log.write_text(
        '{"type": "meta", "model_name": "x"}\n'
        '{"type": "route", "layer": -1, "token_idx": 0, "topk_ids": [1, 2], "topk_weights": [0.6, 0.4]}\n'
    )
    out = tmp_path / "o.parquet"
    args = ["convert", f"in={log}", "format=vllm", f"out={out}", "num_layers=4", "num_experts=8"]
    err = refused(capsys, args, f"{log}: line 2: field 'layer': -1 is negative")
    assert str(out) not in err.split("hobbit: error:")[1]
    # a profile's non-finite number: the file named, not only the knob
    bad = tmp_path / "hw.yaml"
    text = (Path(__file__).parents[1] / "conf" / "hardware" / "rtx4090-pcie4.yaml").read_text()
    bad.write_text(re.sub(r"(?m)^link_gbps: .*$", "link_gbps: .nan", text))
    args = ["compare", f"profile={bad}", f"trace={small_trace}", "tune_trials=0", f"hydra.run.dir={tmp_path / 'c'}"]
    refused(capsys, args, f"profile={bad}: hardware.link_gbps=nan")
    # HOBBIT_CACHE: the warning names it, and '~' is the home directory, not a folder called '~'
    monkeypatch.setenv("HOBBIT_CACHE", "/proc/hobbit-cache")
    with pytest.warns(UserWarning, match="fix: HOBBIT_CACHE="):
        assert run_cli(_sim(small_trace, tmp_path / "a", "")) == 0
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HOBBIT_CACHE", "~/cache")
    monkeypatch.chdir(tmp_path)
    assert run_cli(_sim(small_trace, tmp_path / "b", "")) == 0
    assert (tmp_path / "home" / "cache" / "sim").is_dir() and not (tmp_path / "~").exists()


# ---------------------------------------------------------------- a guard that knows what a path is (issue 51, 1)


def test_fifos_devices_and_symlink_loops_are_refused_before_anything_opens_them(small_trace, tmp_path, capsys):
    """A FIFO as input would block the command forever; as output a rename would replace it with a regular file, as
    it would a device node; a symlink loop ended in a traceback. Each: one line naming the knob, exit 2, the node
    still what it was."""
    import stat as st

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    refused(capsys, ["trace-info", str(fifo)], f"path={fifo} is a FIFO, not a file or directory")
    refused(capsys, ["export", f"trace={small_trace}", f"out={fifo}"], f"out={fifo} is a FIFO, not a regular file")
    assert st.S_ISFIFO(fifo.stat().st_mode)
    loop_a, loop_b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    loop_a.symlink_to(loop_b)
    loop_b.symlink_to(loop_a)
    refused(capsys, ["trace-info", str(loop_a)], "cannot be resolved")
    refused(capsys, ["export", f"trace={small_trace}", f"out={loop_a}"], "cannot be resolved")
    dev = tmp_path / "null"
    try:
        os.mknod(dev, 0o666 | st.S_IFCHR, os.makedev(1, 3))  # /dev/null's numbers, in the test's own directory
    except (PermissionError, OSError):
        return  # not allowed here (no root): the FIFO case covers the rule
    refused(capsys, ["export", f"trace={small_trace}", f"out={dev}"], "is a character device, not a regular file")
    assert st.S_ISCHR(dev.stat().st_mode)


def test_outputs_stay_out_of_inputs_and_run_records(tiny_checkpoints, small_trace, tmp_path, capsys):
    """capture model=DIR out=DIR/model.safetensors would overwrite the checkpoint's weights; an output inside a run's
    .hydra record would corrupt it; calibrate name=../../x would write outside the run directory; a study file of
    another program would gain Optuna's tables. Refused, the files byte-identical."""
    import hashlib
    import shutil
    import sqlite3

    ckpt = tmp_path / "ckpt"
    shutil.copytree(next(iter(tiny_checkpoints.values())), ckpt)
    weights = next(ckpt.glob("*.safetensors"))
    before = hashlib.sha256(weights.read_bytes()).hexdigest()
    refused(capsys, ["capture", f"model={ckpt}", f"out={weights}"], f"lies inside model={ckpt}", [weights])
    assert hashlib.sha256(weights.read_bytes()).hexdigest() == before
    record = tmp_path / "run" / ".hydra"
    record.mkdir(parents=True)
    refused(capsys, ["export", f"trace={small_trace}", f"out={record / 'x.jsonl'}"], "inside a run's .hydra record")
    refused(capsys, ["calibrate", "name=../../x", f"hydra.run.dir={tmp_path / 'cal'}"], "name=../../x: the profile's")
    assert not (tmp_path / "x.yaml").exists()
    other = tmp_path / "notes.sqlite"
    with contextlib.closing(sqlite3.connect(other)) as db:
        db.execute("CREATE TABLE notes (x)")
        db.commit()
    args = ["tune", f"trace={small_trace}", f"study={other}", "trials=1", f"hydra.run.dir={tmp_path / 't'}"]
    refused(capsys, args, "is an SQLite database of something else (tables notes)", [other])


def test_a_killed_tunes_running_trial_is_marked_failed_on_resume(small_trace, tmp_path, capsys):
    """kill -9 of hobbit tune leaves its trial RUNNING forever; the next run of the study marks it FAIL (its process
    is gone from this host) and finishes the trials asked for (issue 51, root cause 6)."""
    import optuna
    from optuna.trial import TrialState

    from hobbit.sim.tune import owner

    db = tmp_path / "s.db"
    args = ["tune", f"trace={small_trace}", f"study={db}"]
    assert run_cli([*args, "trials=1", f"hydra.run.dir={tmp_path / 'one'}"]) == 0
    study = optuna.load_study(study_name="hobbit", storage=f"sqlite:///{db}")
    orphan = study.ask()  # what a killed run leaves: a trial RUNNING, its owner a pid that is gone
    orphan.set_user_attr("owner", owner().rpartition(":")[0] + ":999999999")
    alive = study.ask()  # a live process's (this one's) trial is left alone
    alive.set_user_attr("owner", owner())
    assert run_cli([*args, "trials=2", f"hydra.run.dir={tmp_path / 'two'}"]) == 0
    states = {t.number: t.state for t in optuna.load_study(study_name="hobbit", storage=f"sqlite:///{db}").trials}
    assert states[orphan.number] == TrialState.FAIL and states[alive.number] == TrialState.RUNNING
    assert sum(s == TrialState.COMPLETE for s in states.values()) == 2


# ---------------------------------------------------------------- a probe's findings (issue 51; benchmarks/bad_inputs.py)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["convert", "in={jsonl}", "out="], "out= is empty (fix: out=PATH"),
        (["sim", "trace={trace}", "~system"], "~system: a knob of hobbit sim cannot be removed"),
        (["sim", "trace={trace}", "system=hobbit,nosuch", "-m"], "system=hobbit,nosuch: conf/system has no nosuch"),
        (["sim", "trace={trace}", "system.precision.t1=range(0.9,0.1,0.1)", "-m"], "the sweep gives no value"),
        (["sim", "trace={trace}", "system.precision.t1=range(0.1,1.9,0.5)", "-m"], "system.precision.t1=1.1 must be"),
        (["sim", "trace={trace}", "system.precision.t1=interval(0.1,0.5)", "-m"], "interval() is a search's range"),
        (["sim", "trace={trace}", "system.precision.t1=0.3,0.6", "-m", "hydra.sweeper.chunk_size=-1"], "chunk_size=-1"),
        (["sim", "trace={trace}", "seed=-1"], "seed=-1 must be >= 0"),
        (["sim", "trace={trace}", "system.precision.t1=[0.3"], "system.precision.t1=[0.3: not an override"),
        (["sim", "trace={trace}", "system.precision.t1=0.3,0.6"], "a list of values is a sweep (fix: add -m"),
        (["sim", "trace={trace}", "hydra.run.dir="], "hydra.run.dir= is empty"),
        (["plan", "model=mixtral-8x7b", "hardware=rtx4090-pcie4", "weights=q4_k_n"], "weights=q4_k_n: weights format"),
        (
            ["plan", "model=qwen3-30b-a3b", "hardware=rtx4090-pcie4", "trace={trace}"],
            "does not fit model=qwen3-30b-a3b",
        ),
        (["plan", "model={gguf}", "hardware=rtx4090-pcie4"], "not a readable GGUF file (IndexError"),
        (["simulate", "trace={trace}"], "unknown command 'simulate' (did you mean sim?"),
        ([], "no command given"),
        (["sim", "trace={trace}", "--fast"], "--fast: not a flag of hobbit sim"),
        (["sim", "trace={trace}", "--cfg", "job", "system.precision.t1=0.3,0.6", "-m"], "--cfg and -m: Hydra takes"),
        (["compare", "trace={trace}", "profile={empty}", "tune_trials=0"], "is empty (fix: the YAML hobbit calibrate"),
        (["capture", "prompts={badjson}", "out={out}"], "line 1: not JSON (Expecting value) (fix: a JSON array"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_what_a_probe_of_bad_input_found(small_trace, tmp_path, capsys, monkeypatch, args, needle):
    """Each case ended in a traceback, Hydra's usage text or 6-line explanation, or ran on what the user did not
    mean (an empty sweep, a plan whose every row failed, results in the current directory). Now one line, exit 2,
    before any work, the run's directory left empty."""
    monkeypatch.chdir(tmp_path)
    jsonl = tmp_path / "x.jsonl"
    assert run_cli(["export", f"trace={small_trace}", f"out={jsonl}"]) == 0
    gguf = tmp_path / "e.gguf"
    gguf.write_bytes(b"GGUF")
    empty, badjson = tmp_path / "empty.yaml", tmp_path / "prompts.json"
    empty.write_text("")
    badjson.write_text('{"prompt": ')
    values = {"trace": str(small_trace), "jsonl": str(jsonl), "gguf": str(gguf), "empty": str(empty)}
    values |= {"badjson": str(badjson), "out": str(tmp_path / "run" / "t.parquet")}
    args = [a.format(**values) if "{" in a and "(" not in a else a for a in args]
    run = tmp_path / "run"
    if args and args[0] in ("sim", "plan", "compare", "capture") and not any(a.startswith("hydra.") for a in args):
        args.append(f"hydra.run.dir={run}")
    before = sorted(p.name for p in tmp_path.iterdir())
    err = refused(capsys, args, needle, [jsonl, gguf, empty, badjson])
    assert len([ln for ln in err.splitlines() if ln.startswith("hobbit: error:")]) == 1, err
    assert "usage:" not in err and "HYDRA_FULL_ERROR" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir() if p != run) == before, "something was written"
    if run.exists():  # a refusal inside the command comes after Hydra has recorded the run: that record only
        written = [p.relative_to(run).parts for p in run.rglob("*") if p.is_file()]
        assert all(parts[0] == ".hydra" or parts[-1].endswith(".log") for parts in written), written


def test_a_timeline_past_the_trace_and_a_report_of_unreadable_runs_write_nothing(small_trace, tmp_path, capsys):
    """A timeline range past the trace's end was an empty timeline.json beside the results; a report of a directory
    whose only run cannot be read was an empty report. Both refused, nothing written."""
    run = tmp_path / "run"
    args = ["sim", f"trace={small_trace}", "timeline=true", "timeline_tokens=5000:6000", f"hydra.run.dir={run}"]
    refused(capsys, args, "timeline_tokens='5000:6000' selects none of the run's")
    assert not (run / "results.json").exists() and not (run / "timeline.json").exists()
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "results.json").write_text("{")
    refused(capsys, ["report", f"dir={broken}"], "no run could be read", [broken / "results.json"])
    assert not (broken / "report").exists()


def test_the_bad_input_probe_runs(tmp_path):
    """benchmarks/bad_inputs.py, on its trace-info cases and one case of another's (JSONL of unseen cases)."""
    import subprocess
    import sys

    more = tmp_path / "more.jsonl"
    more.write_text(
        json.dumps({"name": "trace-info unseen", "args": ["trace-info", "{csv}"], "expect": "refuse"}) + "\n"
    )
    script = Path(__file__).parents[1] / "benchmarks" / "bad_inputs.py"
    r = subprocess.run(
        [sys.executable, str(script), "--only", "trace-info", "--cases", str(more), "--jobs", "2"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    last = r.stdout.strip().splitlines()[-1]
    n = int(re.search(r"cases=(\d+)", last)[1])  # type: ignore[index]
    assert n >= 15 and f"behaved={n} " in last, r.stdout


def test_jsonl_saved_by_a_windows_editor_converts_as_it_is(small_trace, tmp_path):
    """A UTF-8 BOM before the header and CRLF line ends (a file saved on Windows): the same trace as the plain file."""
    plain = tmp_path / "x.jsonl"
    assert run_cli(["export", f"trace={small_trace}", f"out={plain}"]) == 0
    lines = plain.read_text().splitlines()
    windows = tmp_path / "w.jsonl"
    windows.write_bytes(b"\xef\xbb\xbf" + ("\r\n".join(lines) + "\r\n").encode())
    for src, out in ((plain, tmp_path / "p.parquet"), (windows, tmp_path / "w.parquet")):
        assert run_cli(["convert", f"in={src}", f"out={out}"]) == 0
    a, b = read_trace(tmp_path / "p.parquet").arrays, read_trace(tmp_path / "w.parquet").arrays
    assert all((getattr(a, f) == getattr(b, f)).all() for f in ("request_id", "step", "layer", "expert_ids"))


def test_a_partial_profile_is_named_and_warnings_are_one_line(small_trace, tmp_path):
    """A hardware YAML without the machine's memory and compute ran on the schema's defaults (an RTX 4090's) without
    a word; now a warning names what it lacks and the values taken. On the command line hobbit's warnings are one
    line each, as its errors are (Python's form names a source line the user never wrote)."""
    import subprocess
    import sys

    part = tmp_path / "mine.yaml"
    part.write_text("name: mine\nlink_gbps: 16\n")
    args = ["compare", f"trace={small_trace}", f"profile={part}", "tune_trials=0", "systems=[on-demand]"]
    r = subprocess.run(
        [sys.executable, "-m", "hobbit", *args, f"hydra.run.dir={tmp_path / 'c'}"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    line = f"hobbit: warning: profile={part} sets no device_memory_bytes, device_mem_gbps, device_tflops: taken as"
    assert line in r.stderr and "UserWarning" not in r.stderr, r.stderr
