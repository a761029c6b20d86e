"""Converters on the shared real traces, and the generic JSONL format."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from hobbit.traces.convert import ConvertConfig, convert, vllm_passes
from hobbit.traces.io import read_trace
from hobbit.traces.jsonl_format import write_generic_jsonl
from hobbit.traces.schema import DECODE, PREFILL, TraceError
from hobbit.traces.stats import summarize

from conftest import run_cli

FLAME = "flame-moe-290m-iter5473"
QWEN = "qwen1.5-moe-a2.7b-chat-gsm8k"


def test_flame_parquet(real_traces, tmp_path, capsys):
    src = real_traces / FLAME / "flame_moe_290m_prefill_2048tok.parquet"
    out = tmp_path / "flame.parquet"
    assert run_cli(["convert", "format=flame", f"in={src}", f"out={out}"]) == 0
    tr = read_trace(out)
    m = tr.meta.model
    assert (m.num_experts, m.top_k, m.num_layers) == (64, 6, 8)
    assert tr.num_tokens == 2048 and tr.meta.source["source_layers"] == [2, 9]
    # row-for-row the same decisions as the source (layer 2 -> MoE layer 0)
    raw = pq.read_table(src).to_pandas().sort_values(["seq", "pos", "layer"])
    assert np.array_equal(np.stack(raw.expert_ids.to_numpy()), tr.arrays.expert_ids)
    assert np.allclose(np.stack(raw.gate_probs.to_numpy()), tr.arrays.gate_weights)
    assert np.array_equal(raw.layer.to_numpy() - 2, tr.arrays.layer)
    capsys.readouterr()
    assert run_cli(["trace-info", str(out), "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["requests"] == 32 and s["tokens"] == {"total": 2048, "prefill": 2048, "decode": 0}
    assert s["model"]["num_experts"] == 64 and s["model"]["top_k"] == 6 and len(s["recorded_layers"]) == 8
    # sane: every layer spreads its load over the 64 experts; weights are raw softmax mass (< 1)
    assert min(s["expert_load"]["entropy"]) > 0.9 and max(s["expert_load"]["top_share"]) < 0.1
    assert 0.2 < s["gate"]["mean_weight_sum"] < 0.7
    assert s["next_token_reuse"]["all"] > 6 / 64  # above chance: routing has temporal locality
    assert s["lookahead"] == []


def test_flame_pt_folders_match_the_derived_parquet(real_traces, tmp_path):
    pt = real_traces / FLAME / "original_pt"
    a = read_trace(convert(ConvertConfig("flame", str(pt / "prefill_32x64"), str(tmp_path / "a.parquet"))))
    b = read_trace(
        convert(
            ConvertConfig(
                "flame",
                str(real_traces / FLAME / "flame_moe_290m_prefill_2048tok.parquet"),
                str(tmp_path / "b.parquet"),
            )
        )
    )
    assert np.array_equal(a.arrays.expert_ids, b.arrays.expert_ids)
    assert np.allclose(a.arrays.gate_weights, b.arrays.gate_weights, atol=1e-6)
    # the ten per-position folders together are the derived first-10-positions file
    pos_root = tmp_path / "positions"
    pos_root.mkdir()
    for d in sorted(pt.glob("position_*")):
        (pos_root / d.name).symlink_to(d)
    c = read_trace(convert(ConvertConfig("flame", str(pos_root), str(tmp_path / "c.parquet"))))
    d = read_trace(
        convert(
            ConvertConfig(
                "flame",
                str(real_traces / FLAME / "flame_moe_290m_first10pos_64seq.parquet"),
                str(tmp_path / "d.parquet"),
            )
        )
    )
    assert c.num_tokens == 640 and np.array_equal(c.arrays.expert_ids, d.arrays.expert_ids)
    with pytest.raises(TraceError, match="one kind"):
        convert(ConvertConfig("flame", str(pt), str(tmp_path / "e.parquet")))
    assert not (tmp_path / "e.parquet").exists()


def test_vllm_logs_drop_warmup(real_traces, tmp_path, capsys):
    out = tmp_path / "qwen.parquet"
    assert run_cli(["convert", "format=vllm", f"in={real_traces / QWEN / 'raw'}", f"out={out}"]) == 0
    tr = read_trace(out)
    src = tr.meta.source
    assert src["warmup_passes_dropped"] == 3  # 8192-row and 256-row dummy runs, the 65-row warm-up
    assert tr.meta.layers == (0, 8, 12, 18, 23) and tr.meta.model.num_layers == 24
    assert (tr.meta.model.num_experts, tr.meta.model.top_k, tr.meta.model.weight_rule) == (60, 4, "softmax")
    s = summarize(tr)
    assert s["tokens"]["prefill"] == 1406
    assert s["tokens"]["decode"] == sum(src["pass_sizes"][4:])
    assert s["requests"] == 26  # the batched prefill + 25 decode slots
    a = tr.arrays
    assert np.all(a.request_id[a.phase == PREFILL] == 0)
    assert np.unique(a.request_id[a.phase == DECODE]).tolist() == list(range(1, 26))
    # the dummy passes routed every row identically; what is left is real, varied routing
    assert len({tuple(r) for r in a.expert_ids[a.layer == 0]}) > 500
    # against the derived parquet of the same logs (prefill pass = forward_pass 3)
    raw = pq.read_table(real_traces / QWEN / "qwen15moe_batch_routing.parquet").to_pandas()
    ref = raw[(raw.forward_pass == 3) & (raw.layer == 8)].sort_values("pos_in_batch")
    got = a.expert_ids[(a.phase == PREFILL) & (a.layer == 8)]
    assert np.array_equal(np.stack(ref.expert_ids.to_numpy()), got)
    assert run_cli(["trace-info", str(out)]) == 0
    assert "recorded 5 of 24" in capsys.readouterr().out


def test_vllm_unknown_model_needs_its_shape(real_traces, tmp_path):
    log = tmp_path / "log.jsonl"
    lines = (real_traces / QWEN / "raw" / "moe_layer0.jsonl").read_text().splitlines()
    meta = json.loads(lines[0])
    meta["model_id"] = "someone/unknown-moe"
    log.write_text("\n".join([json.dumps(meta), *lines[1:20000]]) + "\n")
    with pytest.raises(TraceError, match="num_layers= and num_experts="):
        convert(ConvertConfig("vllm", str(log), str(tmp_path / "o.parquet")))
    tr = read_trace(
        convert(ConvertConfig("vllm", str(log), str(tmp_path / "o.parquet"), num_layers=24, num_experts=60))
    )
    assert tr.meta.layers == (0,) and tr.meta.model.name == "someone/unknown-moe"


def test_vllm_pass_detection_rule():
    sizes = [8192, 256, 65, 1406, 25, 25, 24, 11]
    assert vllm_passes(sizes, [True, True] + [False] * 6, "auto") == 3
    # a dummy pass larger than the prefill is still dropped: it routes every row alike
    assert vllm_passes([4096, 1406, 25], [True, False, False], "auto") == 1
    assert vllm_passes(sizes, [False] * 8, "2") == 2


def test_generic_jsonl_round_trip(tmp_path, synthetic_small):
    arrays, meta = synthetic_small
    src = tmp_path / "t.jsonl"
    write_generic_jsonl(arrays, meta, src)
    out = tmp_path / "t.parquet"
    assert run_cli(["convert", "format=jsonl", f"in={src}", f"out={out}"]) == 0
    tr = read_trace(out)
    assert tr.meta.model == meta.model and tr.meta.lookahead_depth == meta.lookahead_depth
    for f in arrays.__dataclass_fields__:
        assert np.array_equal(getattr(arrays, f), getattr(tr.arrays, f), equal_nan=True), f


def test_generic_jsonl_read_in_pieces_as_line_by_line(real_traces, tmp_path, monkeypatch):
    """A real trace (FLAME-MoE, 2048 tokens x 8 layers, top-6 of 64) exported to JSONL and read back a piece at a
    time by Arrow's reader: the arrays the JSON module gives read a line at a time, the source's arrays; a value
    gone wrong deep in the file is named by its line, as the line-by-line reader names it."""
    from hobbit.traces import jsonl_format

    src = read_trace(
        convert(
            ConvertConfig(
                "flame",
                str(real_traces / FLAME / "flame_moe_290m_prefill_2048tok.parquet"),
                str(tmp_path / "flame.parquet"),
            )
        )
    )
    jl = tmp_path / "flame.jsonl"
    write_generic_jsonl(src.arrays, src.meta, jl)
    monkeypatch.setattr(jsonl_format, "PIECE_BYTES", 1 << 16)  # the file is 4.3 MB: 66 pieces
    arrow, _ = jsonl_format.read_generic_jsonl(jl)
    by_line, _ = jsonl_format.read_generic_jsonl(jl, arrow=False)
    for f in src.arrays.__dataclass_fields__:
        a, b, want = getattr(arrow, f), getattr(by_line, f), getattr(src.arrays, f)
        if want is None:
            assert a is None and b is None, f
            continue
        assert a is not None and b is not None, f
        assert (
            a.dtype == b.dtype == want.dtype
            and np.array_equal(a, b, equal_nan=True)
            and np.array_equal(a, want, equal_nan=True)
        ), f
    lines = jl.read_text().splitlines()
    assert len(lines) == 2048 * 8 + 1
    bad = json.loads(lines[12_345 - 1])
    bad["expert_ids"][3] = 64
    lines[12_345 - 1] = json.dumps(bad)
    jl.write_text("\n".join(lines) + "\n")
    for arrow in (True, False):
        with pytest.raises(TraceError) as ei:
            jsonl_format.read_generic_jsonl(jl, arrow=arrow)
        assert (ei.value.row, ei.value.field, ei.value.unit) == (12_345, "expert_ids", "line")


def test_generic_jsonl_sorts_rows_and_experts(tmp_path):
    header = {
        "hobbit_trace_header": 1,
        "model": {"name": "x", "num_layers": 2, "num_experts": 4, "top_k": 2, "weight_rule": "softmax"},
    }
    rows = [
        dict(request_id=0, phase="decode", step=1, position=1, layer=1, expert_ids=[0, 1], gate_weights=[0.1, 0.5]),
        dict(request_id=0, phase="prefill", step=0, position=0, layer=1, expert_ids=[2, 3], gate_weights=[0.6, 0.2]),
        dict(request_id=0, phase="prefill", step=0, position=0, layer=0, expert_ids=[1, 2], gate_weights=[0.3, 0.3]),
        dict(request_id=0, phase="decode", step=1, position=1, layer=0, expert_ids=[3, 0], gate_weights=[0.9, 0.05]),
    ]
    p = tmp_path / "x.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in [header, *rows]) + "\n")
    tr = read_trace(convert(ConvertConfig("jsonl", str(p), str(tmp_path / "x.parquet"))))
    assert tr.arrays.expert_ids.tolist() == [[1, 2], [2, 3], [3, 0], [1, 0]]
    assert tr.arrays.layer.tolist() == [0, 1, 0, 1]


@pytest.mark.parametrize(
    "line,row,field",
    [
        (
            '{"request_id": 0, "phase": "prefill", "step": 0, "position": 0, "layer": 0, "expert_ids": [1, 9], '
            '"gate_weights": [0.5, 0.5]}',
            2,
            "expert_ids",
        ),
        (
            '{"request_id": 0, "phase": "warmup", "step": 0, "position": 0, "layer": 0, "expert_ids": [1, 2], '
            '"gate_weights": [0.5, 0.5]}',
            2,
            "phase",
        ),
        (
            '{"request_id": 0, "phase": "prefill", "step": 0, "position": 0, "expert_ids": [1, 2], '
            '"gate_weights": [0.5, 0.5]}',
            2,
            "layer",
        ),
        (
            '{"request_id": 0, "phase": "prefill", "step": 0, "position": 0, "layer": 0, "expert_ids": [1], '
            '"gate_weights": [0.5]}',
            2,
            "expert_ids",
        ),
        ("{not json", 2, None),
    ],
)
def test_generic_jsonl_errors_name_line_and_field(tmp_path, capsys, line, row, field):
    header = {"hobbit_trace_header": 1, "model": {"name": "x", "num_layers": 1, "num_experts": 4, "top_k": 2}}
    p = tmp_path / "bad.jsonl"
    p.write_text(json.dumps(header) + "\n" + line + "\n")
    with pytest.raises(TraceError) as ei:
        convert(ConvertConfig("jsonl", str(p), str(tmp_path / "o.parquet")))
    assert (ei.value.row, ei.value.field) == (row, field)
    assert run_cli(["convert", "format=jsonl", f"in={p}", f"out={tmp_path / 'o.parquet'}"]) == 2
    assert f"{p}: line {row}" in capsys.readouterr().err
    assert not (tmp_path / "o.parquet").exists()


def test_jsonl_errors_found_after_sorting_name_the_input_line(tmp_path):
    """A token missing a layer is found only once rows are sorted: the error still names the input
    file and the line the bad row came from, not the Parquet being written or a sorted row."""
    header = {"hobbit_trace_header": 1, "model": {"name": "x", "num_layers": 2, "num_experts": 4, "top_k": 2}}
    row = {"request_id": 0, "phase": "prefill", "step": 0, "expert_ids": [1, 2], "gate_weights": [0.6, 0.4]}
    rows = [
        {**row, "position": 1, "layer": 1},
        {**row, "position": 0, "layer": 1},
        {**row, "position": 0, "layer": 0},
        {**row, "position": 0, "layer": 0, "request_id": 1},
    ]  # position 1 (line 2) and request 1 lack a layer
    p = tmp_path / "sorted-late.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in [header, *rows]) + "\n")
    with pytest.raises(TraceError) as ei:
        convert(ConvertConfig("jsonl", str(p), str(tmp_path / "o.parquet")))
    assert ei.value.file == str(p) and ei.value.unit == "line" and ei.value.field == "layer"
    assert ei.value.row == 2, ei.value  # sorted first comes request 0's position 1, which is on line 2
    assert "o.parquet" not in str(ei.value) and not (tmp_path / "o.parquet").exists()


def test_convert_bad_arguments_exit_2(tmp_path, capsys):
    (tmp_path / "in").mkdir()
    assert run_cli(["convert", "format=nope", f"in={tmp_path / 'in'}", f"out={tmp_path / 'o.parquet'}"]) == 2
    assert run_cli(["convert", "format=jsonl", f"in={tmp_path / 'missing.jsonl'}", f"out={tmp_path / 'o'}"]) == 2
    assert run_cli(["convert", "format=jsonl"]) == 2  # in= and out= are mandatory
    err = capsys.readouterr().err
    assert "format=nope" in err and "does not exist" in err


def test_flame_replayed_as_generation(real_traces, tmp_path):
    src = real_traces / FLAME / "flame_moe_290m_prefill_2048tok.parquet"
    tr = read_trace(convert(ConvertConfig("flame", str(src), str(tmp_path / "d.parquet"), teacher_forced_as="decode")))
    s = summarize(tr)
    assert s["tokens"] == {"total": 2048, "prefill": 32, "decode": 2016}
    a = tr.arrays
    assert np.array_equal(a.step[a.phase == DECODE], a.position[a.phase == DECODE])
    pre = read_trace(convert(ConvertConfig("flame", str(src), str(tmp_path / "p.parquet"))))
    assert np.array_equal(pre.arrays.expert_ids, a.expert_ids)  # same routing, other pass structure
