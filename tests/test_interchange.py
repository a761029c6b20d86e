"""Import and export of llama.cpp moe-trace CSV and TEC router traces (and export to JSONL)."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from hobbit.traces.convert import ConvertConfig, convert
from hobbit.traces.export import ExportConfig, export
from hobbit.traces.io import Trace, read_trace, write_trace
from hobbit.traces.llamacpp_csv import read_llamacpp_csv
from hobbit.traces.schema import TraceError
from hobbit.traces.tec_format import read_tec

from conftest import run_cli
from sim_helpers import bundled, first_requests

FORMATS = ("llamacpp_csv", "tec")
SUFFIX = {"llamacpp_csv": ".csv", "tec": ".bin", "jsonl": ".jsonl"}


def _write(tr: Trace, path) -> str:
    write_trace(path, tr.arrays, tr.meta)
    return str(path)


def _canonical(ids: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Each row's ids ordered by (weight desc, id): what survives a format that stores no rank order."""
    return np.take_along_axis(ids, np.lexsort((ids, -w), axis=-1), 1)


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> dict:
    """The bundled trace's first 3 requests and, when present, the first 4 of a shared real trace."""
    d = tmp_path_factory.mktemp("interchange")
    out = {"bundled": _write(bundled(3), d / "bundled.parquet")}
    from conftest import REAL_TRACES

    src = REAL_TRACES / "flame-moe-290m-iter5473" / "flame_moe_290m_prefill_2048tok.parquet"
    if src.is_file():
        full = read_trace(
            convert(ConvertConfig("flame", str(src), str(d / "flame_all.parquet"), teacher_forced_as="decode"))
        )
        out["real"] = _write(first_requests(full, 4), d / "flame.parquet")
    return out


def _round_trip(path: str, fmt: str, tmp_path, **knobs) -> tuple[Trace, Trace, bytes, bytes]:
    orig = read_trace(path)
    first = tmp_path / f"a{SUFFIX[fmt]}"
    export(ExportConfig(path, fmt, str(first)))
    back = read_trace(
        convert(
            ConvertConfig(
                fmt, str(first), str(tmp_path / "back.parquet"), num_experts=orig.meta.model.num_experts, **knobs
            )
        )
    )
    second = tmp_path / f"b{SUFFIX[fmt]}"
    assert back.path is not None
    export(ExportConfig(back.path, fmt, str(second)))
    return orig, back, first.read_bytes(), second.read_bytes()


@pytest.mark.parametrize("which", ["bundled", "real"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_round_trip_is_byte_stable_and_keeps_ids(sources, fmt, which, tmp_path):
    if which not in sources:
        pytest.skip("../shared/real-traces is absent")
    orig, back, b1, b2 = _round_trip(sources[which], fmt, tmp_path)
    assert b1 == b2  # export -> import -> export: identical bytes
    a, b = orig.arrays, back.arrays
    assert len(a) == len(b) and np.array_equal(a.layer, b.layer)
    assert back.meta.model.top_k == orig.meta.model.top_k
    assert back.meta.model.num_layers == len(orig.meta.layers)
    if fmt == "llamacpp_csv":  # ids in rank order; weights absent, and said so
        assert np.array_equal(a.expert_ids, b.expert_ids)
        assert back.meta.source["weights"] == "absent" and back.meta.model.weight_rule == "unknown"
        assert np.all(b.gate_weights == np.float32(1 / orig.meta.model.top_k))
        # requests that start with a prefill of 2+ tokens come back as requests (others merge: documented)
        L = len(orig.meta.layers)
        prefill = [int(((a.request_id == r) & (a.phase == 0)).sum()) // L for r in np.unique(a.request_id)]
        if min(prefill) >= 2:
            assert np.array_equal(a.request_id, b.request_id)
            assert np.array_equal(a.phase, b.phase) and np.array_equal(a.step, b.step)
        else:
            assert len(np.unique(b.request_id)) <= len(np.unique(a.request_id))
    else:  # ids and weights exactly; rank order of equal weights is not stored (ties read by expert id)
        assert np.array_equal(a.gate_weights, b.gate_weights)
        assert np.array_equal(_canonical(a.expert_ids, a.gate_weights), b.expert_ids)
        untied = (a.gate_weights[:, 1:] != a.gate_weights[:, :-1]).all(axis=1)
        assert np.array_equal(a.expert_ids[untied], b.expert_ids[untied])
        assert "weights" not in back.meta.source


def test_csv_layout_is_the_moe_trace_tool_s(tmp_path):
    """Two blocks (3 and 5: dense blocks have no rows), top-2: a 2-token prefill, then 2 decode passes."""
    rows = [
        "3,1",
        "3,0",
        "3,2",
        "3,1",
        "5,0",
        "5,3",
        "5,1",
        "5,3",  # prefill: block 3 tokens 0,1 then block 5
        "3,2",
        "3,1",
        "5,3",
        "5,0",  # decode 1
        "3,0",
        "3,2",
        "5,1",
        "5,2",
    ]  # decode 2
    f = tmp_path / "moe_trace.csv"
    f.write_text("\n".join(rows) + "\n")
    a, meta = read_llamacpp_csv(f)
    assert (meta.model.top_k, meta.model.num_layers, meta.model.num_experts) == (2, 2, 4)
    assert meta.source["llamacpp_blocks"] == [3, 5] and meta.source["pass_sizes"] == [2, 1, 1]
    assert a.expert_ids.tolist() == [[1, 0], [0, 3], [2, 1], [1, 3], [2, 1], [3, 0], [0, 2], [1, 2]]
    assert a.phase.tolist() == [0, 0, 0, 0, 1, 1, 1, 1] and a.step.tolist() == [0, 0, 0, 0, 1, 1, 2, 2]
    assert a.position.tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    out = tmp_path / "again.csv"
    write = __import__("hobbit.traces.llamacpp_csv", fromlist=["x"]).write_llamacpp_csv
    write(a, meta, out)
    assert out.read_text() == f.read_text()  # block numbers and row order as the tool wrote them


def test_csv_prompt_in_ubatch_chunks_keeps_its_passes(tmp_path):
    """Blocks 3 and 7, top-1: a prompt run as a 3-token and a 2-token ubatch (two passes of 2+ tokens), then two
    decode passes. The chunks are the prefill's steps 0 and 1, decode steps 2 and 3; the simulator replays the
    prompt in those two passes, and the file writes back as read."""
    from hobbit.sim.workload import build_workload, chunk_prefill
    from hobbit.traces.io import Trace

    passes = [[0, 1, 2], [3, 0], [1], [2]]  # each pass's tokens' expert, the same in both blocks
    rows = [f"{b},{e}" for ids in passes for b in (3, 7) for e in ids]
    f = tmp_path / "moe_trace.csv"
    f.write_text("\n".join(rows) + "\n")
    a, meta = read_llamacpp_csv(f, ConvertConfig("llamacpp_csv", str(f), "", top_k=1, num_experts=4))
    assert meta.source["pass_sizes"] == [3, 2, 1, 1]
    tok = slice(None, None, 2)  # a row per token and block
    assert a.phase[tok].tolist() == [0, 0, 0, 0, 0, 1, 1] and a.step[tok].tolist() == [0, 0, 0, 1, 1, 2, 3]
    assert a.position[tok].tolist() == list(range(7)) and a.request_id.tolist() == [0] * 14
    wl = build_workload(Trace(meta, a, f), "none")
    assert (wl.pass_start, wl.pass_end, wl.pass_phase) == ([0, 3, 5, 6], [3, 5, 6, 7], [0, 0, 1, 1])
    assert wl.pass_context == [3, 5, 6, 7]
    # a runtime with -ub 2 splits the 3-token chunk again; each part attends over what came before it
    ub = chunk_prefill(wl, 2)
    assert (ub.pass_start, ub.pass_end, ub.pass_context) == ([0, 2, 3, 5, 6], [2, 3, 5, 6, 7], [2, 3, 5, 6, 7])
    out = tmp_path / "again.csv"
    write = __import__("hobbit.traces.llamacpp_csv", fromlist=["x"]).write_llamacpp_csv
    write(a, meta, out)
    assert out.read_text() == f.read_text()


def test_tec_layout_is_fitz_tec_s(tmp_path):
    """RTRACE01 as fitz-tec's load_trace reads it: header, then (token_idx, layer_idx, probs[E]) records."""
    e = 4
    probs = np.array(
        [[0.1, 0.6, 0.2, 0.1], [0.5, 0.1, 0.1, 0.3], [0.25, 0.25, 0.4, 0.1], [0.7, 0.1, 0.1, 0.1]], dtype="<f4"
    )
    body = b"".join(
        struct.pack("<ii", t, layer) + p.tobytes() for (t, layer), p in zip([(0, 1), (0, 4), (1, 1), (1, 4)], probs)
    )
    f = tmp_path / "router_trace.bin"
    f.write_bytes(b"RTRACE01" + struct.pack("<ii", e, 0) + body)
    with pytest.raises(TraceError, match="top_k"):
        read_tec(f)
    cfg = ConvertConfig("tec", str(f), "", top_k=2)
    a, meta = read_tec(f, cfg)
    assert meta.source["llamacpp_blocks"] == [1, 4] and meta.model.weight_rule == "softmax"
    assert a.expert_ids.tolist() == [[1, 2], [0, 3], [2, 0], [0, 1]]  # tie 0.25/0.25 -> lower id first
    assert np.allclose(a.gate_weights, [[0.6, 0.2], [0.5, 0.3], [0.4, 0.25], [0.7, 0.1]])
    assert a.phase.tolist() == [0, 0, 1, 1] and a.step.tolist() == [0, 0, 1, 1]


def test_cli_export_and_convert(sources, tmp_path, capsys):
    src = sources["bundled"]
    for fmt in ("jsonl", *FORMATS):
        out = tmp_path / f"t{SUFFIX[fmt]}"
        assert run_cli(["export", f"trace={src}", f"format={fmt}", f"out={out}"]) == 0
        err = capsys.readouterr().err
        assert "cannot carry" in err and str(out) in err
        knobs = ["num_experts=8"] if fmt != "jsonl" else []
        back = tmp_path / f"{fmt}.parquet"
        assert run_cli(["convert", f"format={fmt}", f"in={out}", f"out={back}", *knobs]) == 0
        err = capsys.readouterr().err
        if fmt == "llamacpp_csv":  # the import says what cannot run, naming the file
            assert str(out) in err and "no gate weights" in err and "T1/T2" in err
        else:
            assert "warning" not in err
    # guard: an output that is the input is refused, and the input is left as it was
    before = (tmp_path / "t.csv").read_bytes()
    assert run_cli(["export", f"trace={src}", "format=llamacpp_csv", f"out={src}"]) == 2
    assert run_cli(["convert", "format=llamacpp_csv", f"in={tmp_path / 't.csv'}", f"out={tmp_path / 't.csv'}"]) == 2
    assert (tmp_path / "t.csv").read_bytes() == before
    assert run_cli(["export", f"trace={src}", "format=parquet", f"out={tmp_path / 'x'}"]) == 2
    assert run_cli(["export", f"trace={tmp_path / 't.csv'}", "format=tec", f"out={tmp_path / 'x'}"]) == 2
    assert not list(tmp_path.glob(".*.tmp"))


@pytest.mark.parametrize(
    "fmt, content, where",
    [
        ("llamacpp_csv", "0,1\n0,2\n1,x\n", "line 3"),
        ("llamacpp_csv", "0,1\n0,2\n1,3\n1,0\n0,1\n0,2\n2,3\n2,0\n", "line 5"),  # second pass has other layers
        ("llamacpp_csv", "0,1\n0,2\n1,3\n", "top_k"),  # one pass: top_k cannot be told
        ("llamacpp_csv", b"\xff\xfe0,1\n", "not a text file"),
        ("tec", b"RTRACE02" + struct.pack("<ii", 4, 0), "magic"),
        ("tec", b"RTRACE01" + struct.pack("<ii", 4, 0) + struct.pack("<ii", 0, 0) + b"\0" * 7, "record 0"),
        ("tec", b"RTRACE01" + struct.pack("<ii", 2, 0) + struct.pack("<iiff", 0, 0, float("nan"), 0.5), "record 0"),
    ],
)
def test_malformed_file_exits_2_naming_it(tmp_path, capsys, fmt, content, where):
    f = tmp_path / ("bad.csv" if fmt == "llamacpp_csv" else "bad.bin")
    (f.write_bytes if isinstance(content, bytes) else f.write_text)(content)
    knobs = ["top_k=2"] if fmt == "tec" else []
    assert run_cli(["convert", f"format={fmt}", f"in={f}", f"out={tmp_path / 'o.parquet'}", *knobs]) == 2
    err = capsys.readouterr().err
    assert str(f) in err and where in err and "Traceback" not in err
    assert not (tmp_path / "o.parquet").exists()


def test_a_trace_without_weights_runs_what_can_run(sources, tmp_path, capsys):
    """A CSV carries no gate weights: HOBBIT's T1/T2 rule is refused on it, naming the trace and the fix
    (exit 2); uniform-precision systems run; ``hobbit compare`` runs those and says which it left out."""
    csv = tmp_path / "t.csv"
    export(ExportConfig(sources["bundled"], "llamacpp_csv", str(csv)))
    blind = convert(ConvertConfig("llamacpp_csv", str(csv), str(tmp_path / "blind.parquet"), num_experts=8))
    assert run_cli(["sim", f"trace={blind}", f"out_dir={tmp_path / 'h'}", "use_cache=false"]) == 2
    err = capsys.readouterr().err
    assert "no gate weights" in err and str(blind) in err and "system.precision.mode=high" in err
    assert run_cli(["sim", f"trace={blind}", "system=on-demand", f"out_dir={tmp_path / 'o'}", "use_cache=false"]) == 0
    from hobbit.plumbing.glue import compose
    from hobbit.studies.compare import CompareConfig, compare

    cfg = compose("compare", CompareConfig, [f"out_dir={tmp_path / 'c'}", "systems=[hobbit,on-demand,tec]"])
    s = compare(read_trace(blind), cfg, tmp_path / "c")
    import json

    rows = json.loads((tmp_path / "c" / "compare.json").read_text())["systems"]
    assert {r["system"] for r in rows} == {"on-demand", "tec"}
    assert "hobbit not run" in s["note"] and "HOBBIT not tuned" in s["note"]


def test_jsonl_keeps_the_mark_of_absent_weights(sources, tmp_path):
    """A weightless trace exported to JSONL says so in its header and reads back weightless: its placeholders
    never pass for gate weights."""
    csv, jl = tmp_path / "t.csv", tmp_path / "t.jsonl"
    export(ExportConfig(sources["bundled"], "llamacpp_csv", str(csv)))
    blind = convert(ConvertConfig("llamacpp_csv", str(csv), str(tmp_path / "blind.parquet"), num_experts=8))
    export(ExportConfig(str(blind), "jsonl", str(jl)))
    back = read_trace(convert(ConvertConfig("jsonl", str(jl), str(tmp_path / "back.parquet"))))
    assert back.meta.source.get("weights") == "absent"
    export(ExportConfig(sources["bundled"], "jsonl", str(tmp_path / "w.jsonl")))
    full = read_trace(convert(ConvertConfig("jsonl", str(tmp_path / "w.jsonl"), str(tmp_path / "w.parquet"))))
    assert "weights" not in full.meta.source
