"""Schema v1 I/O: lossless round trip, validation errors with rows, atomic writes."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from hobbit.traces.arrays import TraceArrays, to_table
from hobbit.traces.io import TraceWriter, read_meta, read_trace, write_trace
from hobbit.traces.schema import METADATA_KEY, TraceError

from conftest import run_cli


def _raw_write(arrays: TraceArrays, meta, path) -> None:
    """Write without validation, as a foreign tool might."""
    pq.write_table(to_table(arrays, meta), path, compression="zstd")


def _copy(a: TraceArrays) -> TraceArrays:
    return dataclasses.replace(a, **{f: v.copy() for f in a.__dataclass_fields__ if (v := getattr(a, f)) is not None})


def test_round_trip_is_lossless(tmp_path, synthetic_small):
    arrays, meta = synthetic_small
    path = write_trace(tmp_path / "t.parquet", arrays, meta)
    tr = read_trace(path)
    assert tr.meta == meta
    for f in arrays.__dataclass_fields__:
        x, y = getattr(arrays, f), getattr(tr.arrays, f)
        assert x.dtype == y.dtype, f
        assert np.array_equal(x, y, equal_nan=True), f
    # the stored Arrow types are exactly schema v1's
    schema = pq.read_schema(path)
    assert str(schema.field("expert_ids").type) == "list<element: int16>"
    assert str(schema.field("pred_ids").type) == "list<element: list<element: int16>>"
    assert pq.ParquetFile(path).metadata.row_group(0).column(0).compression == "ZSTD"
    assert json.loads(schema.metadata[METADATA_KEY])["schema_version"] == 1


def test_write_sorts_rows_and_missing_predictions_are_empty_lists(tmp_path, synthetic_small):
    arrays, meta = synthetic_small
    rng = np.random.default_rng(0)
    shuffled = arrays.take(rng.permutation(len(arrays)))
    tr = read_trace(write_trace(tmp_path / "t.parquet", shuffled, meta))
    assert np.array_equal(tr.arrays.expert_ids, arrays.expert_ids)
    last = pq.read_table(tmp_path / "t.parquet").column("pred_ids")[len(arrays) - 1].as_py()
    assert last == [[], [], []]  # the last layer predicts nothing


def test_recorded_layers_subset_round_trips(tmp_path, synthetic_small):
    arrays, meta = synthetic_small
    keep = np.isin(arrays.layer, (0, 2, 5))
    sub = arrays.take(np.flatnonzero(keep))
    sub.pred_ids = sub.pred_weights = None
    m = dataclasses.replace(meta, lookahead_depth=0, recorded_layers=(0, 2, 5))
    tr = read_trace(write_trace(tmp_path / "t.parquet", sub, m))
    assert tr.meta.layers == (0, 2, 5)
    assert tr.num_tokens == len(sub) // 3


def _expect(tmp_path, arrays, meta, field: str, row: int | None, capsys=None):
    path = tmp_path / "bad.parquet"
    _raw_write(arrays, meta, path)
    with pytest.raises(TraceError) as ei:
        read_trace(path)
    err = ei.value
    assert err.field == field and err.row == row and str(path) in str(err), str(err)
    assert run_cli(["trace-info", str(path)]) == 2
    if capsys is not None:
        assert str(path) in capsys.readouterr().err
    return err


def test_expert_id_out_of_range(tmp_path, synthetic_small, capsys):
    arrays, meta = synthetic_small
    a = _copy(arrays)
    a.expert_ids[40, 1] = meta.model.num_experts
    err = _expect(tmp_path, a, meta, "expert_ids", 40, capsys)
    assert "out of range" in str(err)


def test_missing_layer(tmp_path, synthetic_small):
    arrays, meta = synthetic_small
    drop = np.flatnonzero((arrays.request_id == 1) & (arrays.position == 3) & (arrays.layer == 4))
    a = arrays.take(np.setdiff1d(np.arange(len(arrays)), drop))
    first_row_of_token = int(np.flatnonzero((a.request_id == 1) & (a.position == 3))[0])
    err = _expect(tmp_path, a, meta, "layer", first_row_of_token)
    assert "missing layer(s) [4]" in str(err)


def test_wrong_schema_version(tmp_path, synthetic_small, capsys):
    arrays, meta = synthetic_small
    path = tmp_path / "v2.parquet"
    table = to_table(arrays, meta)
    md = json.loads(table.schema.metadata[METADATA_KEY])
    md["schema_version"] = 2
    pq.write_table(table.replace_schema_metadata({METADATA_KEY: json.dumps(md)}), path)
    with pytest.raises(TraceError) as ei:
        read_meta(path)
    assert ei.value.field == "schema_version" and "2" in str(ei.value)
    assert run_cli(["trace-info", str(path)]) == 2
    assert "schema_version" in capsys.readouterr().err


def test_corrupt_file(tmp_path, synthetic_small, capsys):
    arrays, meta = synthetic_small
    path = write_trace(tmp_path / "t.parquet", arrays, meta)
    data = bytearray(path.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 64] = b"\x00" * 64  # smash the middle
    bad = tmp_path / "corrupt.parquet"
    bad.write_bytes(bytes(data))
    trunc = tmp_path / "truncated.parquet"
    trunc.write_bytes(bytes(data[: len(data) // 3]))
    for p in (trunc, bad):
        with pytest.raises(TraceError) as ei:
            read_trace(p)
        assert str(p) in str(ei.value)
        assert run_cli(["trace-info", str(p)]) == 2


def test_not_a_trace(tmp_path):
    path = tmp_path / "plain.parquet"
    import pyarrow as pa

    pq.write_table(pa.table({"x": [1, 2]}), path)
    with pytest.raises(TraceError, match="hobbit convert"):
        read_trace(path)


@pytest.mark.parametrize(
    "mutate,field",
    [
        (lambda a: a.gate_weights.__setitem__((11, slice(None)), [0.2, 0.8]), "gate_weights"),
        (lambda a: a.expert_ids.__setitem__((12, 1), a.expert_ids[12, 0]), "expert_ids"),
        (lambda a: a.phase.__setitem__(slice(0, 6), 1), "step"),
        (lambda a: a.gate_weights.__setitem__((13, 0), np.nan), "gate_weights"),
    ],
)
def test_row_level_errors(tmp_path, synthetic_small, mutate, field):
    arrays, meta = synthetic_small
    a = _copy(arrays)
    mutate(a)
    path = tmp_path / "bad.parquet"
    _raw_write(a, meta, path)
    with pytest.raises(TraceError) as ei:
        read_trace(path)
    assert ei.value.field == field and ei.value.row is not None


def test_unordered_rows_are_rejected_on_read(tmp_path, synthetic_small):
    arrays, meta = synthetic_small
    a = arrays.take(np.r_[1, 0, np.arange(2, len(arrays))])
    path = tmp_path / "bad.parquet"
    _raw_write(a, meta, path)
    with pytest.raises(TraceError, match="ordered") as ei:
        read_trace(path)
    assert ei.value.row == 1


def test_writer_aborts_without_a_final_file(tmp_path, synthetic_small):
    arrays, meta = synthetic_small
    final = tmp_path / "t.parquet"
    with pytest.raises(KeyboardInterrupt), TraceWriter(final, meta) as w:
        w.write(arrays.take(np.flatnonzero(arrays.request_id == 0)))
        assert w.tmp.exists() and not final.exists()
        raise KeyboardInterrupt
    assert not final.exists()
    assert list(tmp_path.iterdir()) == []


def test_writer_rejects_batches_out_of_order(tmp_path, synthetic_small):
    arrays, meta = synthetic_small
    with pytest.raises(TraceError, match="previous batch"), TraceWriter(tmp_path / "t.parquet", meta) as w:
        w.write(arrays.take(np.flatnonzero(arrays.request_id == 1)))
        w.write(arrays.take(np.flatnonzero(arrays.request_id == 0)))
    assert list(tmp_path.iterdir()) == []


def test_writer_validates_each_batch(tmp_path, synthetic_small):
    arrays, meta = synthetic_small
    a = _copy(arrays)
    a.expert_ids[0, 0] = 99
    with pytest.raises(TraceError, match="out of range"):
        write_trace(tmp_path / "t.parquet", a, meta)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("field", ["num_layers", "num_experts"])
def test_a_header_declaring_more_layers_or_experts_than_int16_is_refused(field, tmp_path):
    """Layer and expert ids are int16 columns: a larger model is refused from its header, before anything is
    sized by it (a JSONL header with num_layers = 2**40 would exhaust memory)."""
    from hobbit.traces.convert import ConvertConfig, convert
    from hobbit.traces.schema import InputError

    model = {"name": "x", "num_layers": 2, "num_experts": 4, "top_k": 2, "weight_rule": "softmax_renorm", field: 2**40}
    rows = [
        {
            "request_id": 0,
            "phase": "prefill",
            "step": 0,
            "position": 0,
            "layer": layer,
            "expert_ids": [0, 1],
            "gate_weights": [0.6, 0.4],
        }
        for layer in range(2)
    ]
    src = tmp_path / "big.jsonl"
    src.write_text(
        "\n".join(json.dumps(x) for x in [{"hobbit_trace_header": 1, "model": model, "lookahead_depth": 0}, *rows])
        + "\n"
    )
    with pytest.raises(InputError, match=f"model.{field} must fit in int16"):
        convert(ConvertConfig("jsonl", str(src), str(tmp_path / "out.parquet")))


def test_columns_to_and_from_arrow_without_pandas_keep_slices_and_types():
    """``to_numpy`` views a column's buffer (sliced arrays start at their offset, chunks are joined, nulls and other
    types go through pyarrow); ``arrow_of`` builds an array on a numpy buffer, numbers only."""
    import pyarrow as pa

    from hobbit.traces.arrays import flat_values, list_lengths, to_numpy
    from hobbit.traces.io import arrow_of

    for dt in (np.int8, np.int16, np.int32, np.int64, np.float32, np.float64):
        x = (np.arange(10) * 3 - 7).astype(dt)
        a = pa.array(x)
        assert to_numpy(a).dtype == dt and np.array_equal(to_numpy(a), x)
        assert np.array_equal(to_numpy(a.slice(3, 4)), x[3:7])
        assert np.array_equal(to_numpy(pa.chunked_array([a.slice(0, 2), a.slice(5)])), np.r_[x[:2], x[5:]])
        b = arrow_of(x[::2])  # not contiguous: copied first
        assert b.type == pa.from_numpy_dtype(np.dtype(dt)) and b.to_pylist() == x[::2].tolist()
    assert to_numpy(pa.array([1, None, 3])).tolist()[::2] == [1.0, 3.0]  # a null: pyarrow's own path
    assert len(to_numpy(pa.array([], pa.int32()))) == 0
    assert arrow_of(np.array(["a", "b"])).to_pylist() == ["a", "b"]
    assert arrow_of(np.array([np.nan, 1.0])).to_pylist()[1] == 1.0
    lists = pa.array([[1, 2], [3], [4, 5, 6], []], pa.list_(pa.int16())).slice(1, 2)
    assert list_lengths(lists).tolist() == [1, 3]
    assert flat_values(lists).tolist() == [3, 4, 5, 6]


def test_list_values_is_arrows_flatten_on_slices_and_nulls():
    """``list_values`` (no ``pyarrow.compute`` import) gives ``ListArray.flatten``'s values: sliced arrays whose
    offsets do not start at 0, nested lists, empty lists, and null lists (which ``flatten`` skips)."""
    import pyarrow as pa

    from hobbit.traces.arrays import list_values

    nested = pa.array([[[1, 2], []], [[3]], [], [[4, 5, 6], [7]]], pa.list_(pa.list_(pa.int16())))
    cases = [
        nested,
        nested.slice(1),
        nested.slice(1, 2),
        nested.slice(4),
        nested.slice(3, 1)[0:0],
        pa.array([[1.0], None, [2.0, 3.0]], pa.list_(pa.float32())).slice(1),
    ]
    for arr in cases:
        got, want = list_values(arr), arr.flatten()
        assert got.equals(want), (arr, got, want)
        if pa.types.is_list(arr.type.value_type):
            assert list_values(got).equals(want.flatten())


def _without(a: TraceArrays, rows) -> TraceArrays:
    return a.take(np.setdiff1d(np.arange(len(a)), rows))


def _extra_layer(a: TraceArrays) -> TraceArrays:
    """A token of request 0 with a seventh row, layer 6 (the model has 6): ordered, but not the recorded layers."""
    i = int(np.flatnonzero(a.layer == 5)[4])
    b = a.take(np.r_[np.arange(i + 1), i, np.arange(i + 1, len(a))])
    b.layer[i + 1] = 6
    return b


def _chunked(a: TraceArrays) -> TraceArrays:
    """Request 0's prompt (5 tokens, rows 0-29) run in two chunks, steps 0 and 1; its decode steps move up one."""
    b = _copy(a)
    b.step[18:30] = 1
    b.step[30:72] += 1
    return b


def _set(field: str, at, value):
    def mutate(a: TraceArrays) -> TraceArrays:
        b = _copy(a)
        getattr(b, field)[at] = value(b) if callable(value) else value
        return b

    return mutate


# one defect each: (what it does, the (field, row) of the error; None: the trace is good)
DEFECTS = {
    "none": (lambda a: a, None),
    "expert id past the experts": (_set("expert_ids", (40, 1), 8), ("expert_ids", 40)),
    "negative expert id": (_set("expert_ids", (77, 0), -1), ("expert_ids", 77)),
    "expert twice": (_set("expert_ids", (12, 1), lambda b: b.expert_ids[12, 0]), ("expert_ids", 12)),
    "weights not highest first": (_set("gate_weights", (11, slice(None)), [0.2, 0.8]), ("gate_weights", 11)),
    "NaN weight": (_set("gate_weights", (13, 0), np.nan), ("gate_weights", 13)),
    "negative weight": (_set("gate_weights", (90, 1), -0.1), ("gate_weights", 90)),
    "weights summing to 0.5": (_set("gate_weights", (95, slice(None)), [0.3, 0.2]), ("gate_weights", 95)),
    "phase 2": (_set("phase", 50, 2), ("phase", 50)),
    "decode rows at step 0": (_set("phase", slice(0, 6), 1), ("step", 0)),
    "prefill in two chunks": (_chunked, None),
    "a prefill row after a decode row": (_set("phase", slice(36, 42), 0), ("phase", 36)),
    "a step both prefill and decode": (lambda a: _set("step", slice(30, 36), 1)(_chunked(a)), ("phase", 30)),
    "negative request": (_set("request_id", 0, -1), ("request_id", 0)),
    "negative position": (_set("position", 0, -3), ("position", 0)),
    "first rows swapped": (lambda a: a.take(np.r_[1, 0, np.arange(2, len(a))]), ("layer", 1)),
    "rows 100, 101 swapped": (
        lambda a: a.take(np.r_[np.arange(100), 101, 100, np.arange(102, len(a))]),
        ("layer", 101),
    ),
    "a row twice": (lambda a: a.take(np.r_[np.arange(61), 60, np.arange(61, len(a))]), ("layer", 61)),
    "a middle layer missing": (
        lambda a: _without(a, np.flatnonzero((a.request_id == 1) & (a.position == 3) & (a.layer == 4))),
        ("layer", 90),
    ),
    "a first layer missing": (
        lambda a: _without(a, np.flatnonzero((a.request_id == 2) & (a.position == 6) & (a.layer == 0))),
        ("layer", 180),
    ),
    "the last row missing": (lambda a: _without(a, [len(a) - 1]), ("layer", 210)),
    "a layer past the recorded ones": (_extra_layer, ("layer", 24)),
    "predicted expert past the experts": (_set("pred_ids", (30, 0, 0), 9), ("pred_ids", 30)),
    "a reachable layer's prediction missing": (
        lambda a: _set("pred_weights", (31, 0), np.nan)(_set("pred_ids", (31, 0), -1)(a)),
        ("pred_ids", 31),
    ),
}


@pytest.mark.parametrize("defect", DEFECTS)
def test_a_read_in_chunks_finds_what_a_whole_read_finds(tmp_path, synthetic_small, monkeypatch, defect):
    """The reader checks a file a chunk of rows at a time (``validate.CHUNK_ROWS``), the rows' order and the tokens'
    layers across chunks. Whatever the chunk (one row, a few, not a token's length, the whole file) and the file's
    row groups (50 rows), a defect is reported at the same row, field and message, and a good trace reads the same."""
    from hobbit.traces import validate

    arrays, meta = synthetic_small
    mutate, want = DEFECTS[defect]
    path = tmp_path / "t.parquet"
    pq.write_table(to_table(mutate(arrays), meta), path, row_group_size=50)
    seen = []
    for rows in (1 << 20, 1, 2, 7, 64):
        monkeypatch.setattr(validate, "CHUNK_ROWS", rows)
        try:
            got = read_trace(path).arrays
            seen.append(tuple(getattr(got, f).tobytes() for f in got.__dataclass_fields__))
        except TraceError as exc:
            seen.append((exc.field, exc.row, exc.message))
    assert all(s == seen[0] for s in seen), seen
    if want is None:
        good = mutate(arrays)
        for f in arrays.__dataclass_fields__:
            assert np.array_equal(getattr(got, f), getattr(good, f), equal_nan=True), f
    else:
        assert seen[0][:2] == want, seen[0]


def test_a_read_holds_the_arrays_and_a_chunk_more(monkeypatch):
    """Reading the bundled trace (real routing, 62,656 rows) a chunk of 4,096 rows at a time allocates its arrays
    and about a chunk's temporaries, not temporaries of the whole table (numpy's allocations, traced: checks over
    the whole trace at once would hold temporaries of its size beside its arrays)."""
    import tracemalloc

    from hobbit.traces import validate
    from hobbit.traces.tiny import bundled_trace

    monkeypatch.setattr(validate, "CHUNK_ROWS", 4096)
    read_trace(bundled_trace())  # imports and first uses out of the count
    tracemalloc.start()
    try:
        a = read_trace(bundled_trace()).arrays
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    held = sum(getattr(a, f).nbytes for f in a.__dataclass_fields__)
    per_row = held / len(a)
    assert held < peak < held + 8 * 4096 * per_row, (peak, held)


@pytest.mark.parametrize("column,row", [("step", 70), ("expert_ids", 33), ("pred_weights", 150)])
def test_a_null_is_found_at_its_row_in_any_chunk(tmp_path, synthetic_small, monkeypatch, column, row):
    import pyarrow as pa

    from hobbit.traces import validate

    arrays, meta = synthetic_small
    table = to_table(arrays, meta)
    values = table.column(column).to_pylist()
    values[row] = None
    i = table.schema.get_field_index(column)
    path = tmp_path / "t.parquet"
    typ = table.schema.field(i).type
    pq.write_table(table.set_column(i, pa.field(column, typ), pa.array(values, typ)), path, row_group_size=50)
    for rows in (1 << 20, 1, 7):
        monkeypatch.setattr(validate, "CHUNK_ROWS", rows)
        with pytest.raises(TraceError, match="null value") as ei:
            read_trace(path)
        assert (ei.value.field, ei.value.row) == (column, row)


@pytest.mark.parametrize("chunk", [1 << 20, 3])
def test_sorted_is_the_stable_order_and_skips_sorting_rows_already_in_it(synthetic_small, monkeypatch, chunk):
    """``TraceArrays.sorted`` (what a write does to its rows) gives the stable (request_id, step, position, layer)
    order, and the rows themselves when they are in it already, ties included (checked without sorting, a chunk of
    rows at a time: ``ORDER_CHUNK``)."""
    import hobbit.traces.arrays

    monkeypatch.setattr(hobbit.traces.arrays, "ORDER_CHUNK", chunk)
    arrays, _ = synthetic_small
    assert arrays.is_sorted() and arrays.sorted() is arrays
    rng = np.random.default_rng(3)
    for _ in range(20):
        a = arrays.take(rng.permutation(len(arrays))[: rng.integers(1, len(arrays))])
        a.layer[rng.integers(len(a))] = a.layer[0]  # ties, some of them
        want = np.lexsort((a.layer, a.position, a.step, a.request_id))
        got = a.sorted()
        assert got.is_sorted() and a.is_sorted() == bool(np.all(np.diff(want) > 0))
        for f in ("request_id", "step", "position", "layer", "expert_ids"):
            assert np.array_equal(getattr(got, f), getattr(a, f)[want]), f
    tied = arrays.take(np.r_[0, 0, 1])
    assert tied.is_sorted() and tied.sorted() is tied
    for i in (0, 2, 3, len(arrays) // 2):  # two layers of one token swapped: out of order in the last key alone
        a = arrays.take(np.r_[np.arange(i), i + 1, i, np.arange(i + 2, len(arrays))])
        assert not a.is_sorted() and np.array_equal(a.sorted().layer, arrays.layer)


@pytest.mark.parametrize(
    "defect",
    [
        "none",
        "expert id past the experts",
        "a middle layer missing",
        "a reachable layer's prediction missing",
        "weights summing to 0.5",
    ],
)
def test_a_write_in_slices_of_whole_tokens_checks_and_writes_what_a_whole_write_does(
    tmp_path, synthetic_small, monkeypatch, defect
):
    """A write converts, checks and writes its rows a slice of whole tokens at a time (about ``CHUNK_ROWS`` rows,
    a row group each), then checks the file it wrote without keeping its arrays. Whatever the slice, a good trace
    reads back the same and a bad one is refused at the same row of the batch, leaving nothing behind."""
    from hobbit.traces import validate

    arrays, meta = synthetic_small
    mutate, want = DEFECTS[defect]
    batch = mutate(arrays)
    for rows in (1 << 20, 1, 7, 64):
        monkeypatch.setattr(validate, "CHUNK_ROWS", rows)
        path = tmp_path / f"t{rows}.parquet"
        if want is None:
            got = read_trace(write_trace(path, batch, meta)).arrays
            for f in arrays.__dataclass_fields__:
                assert np.array_equal(getattr(got, f), getattr(arrays, f), equal_nan=True), (rows, f)
            groups = pq.ParquetFile(path).num_row_groups
            per = -(-rows // len(meta.layers)) * len(meta.layers)  # whole tokens of 6 rows: 6, 12, 66, ...
            assert groups == -(-len(arrays) // per), (rows, groups)
        else:
            with pytest.raises(TraceError) as ei:
                write_trace(path, batch, meta)
            assert (ei.value.field, ei.value.row) == want, (rows, str(ei.value))
            assert list(tmp_path.iterdir()) == [p for p in tmp_path.iterdir() if p.name.startswith("t1048576")]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the pool is chosen on Linux only")
@pytest.mark.parametrize("env, pool", [(None, "jemalloc"), ("mimalloc", "mimalloc"), ("system", "system")])
def test_arrows_buffers_come_from_jemalloc_unless_the_environment_chooses(env, pool):
    """traces.schema.use_jemalloc_pool (what the command line and hobbit.configure_runtime call): jemalloc instead of
    mimalloc's huge-page arena; ARROW_DEFAULT_MEMORY_POOL decides when set. In a fresh process."""
    environ = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    if env:
        environ["ARROW_DEFAULT_MEMORY_POOL"] = env
    code = (
        "import pyarrow as pa, numpy as np; from hobbit.traces.io import read_trace; import hobbit; "
        "hobbit.configure_runtime(); read_trace('traces/tiny/trace.parquet'); "
        "print(pa.default_memory_pool().backend_name)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=environ,
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).parents[1],
    )
    assert out.stdout.split() == [pool]
