"""Fuzzing the trace reader and the JSONL and FLAME converters (Hypothesis).

Most generated inputs are malformed. The only outcome besides success is the project's own
error (``TraceError``, an ``InputError``), and a failure neither creates the output nor changes
one that was there. ``HOBBIT_FUZZ_CASES`` sets the total number of cases across the three
targets (default 10,200; e.g. 300 for a quick run).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hobbit.traces.convert import ConvertConfig, convert
from hobbit.traces.io import read_trace
from hobbit.traces.schema import InputError

from sim_helpers import write_first_requests

TOTAL = int(os.environ.get("HOBBIT_FUZZ_CASES", "10200"))
CASES = max(TOTAL // 3, 1)
FUZZ = settings(
    max_examples=CASES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
WORK = Path(tempfile.mkdtemp(prefix="hobbit-fuzz-"))
OLD = b"a file the user had here\n"
TALLY: dict[str, int] = {"ok": 0, "refused": 0}


def _outcome(run, out: Path, keep_old: bool) -> str:
    """Run a conversion or read; 'ok' or 'refused'. Anything else (another exception) fails the test."""
    out.unlink(missing_ok=True)
    if keep_old:
        out.write_bytes(OLD)
    try:
        run()
    except InputError:
        assert (out.read_bytes() == OLD) if keep_old else not out.exists(), "a failure touched the output"
        assert not list(out.parent.glob(f".{out.name}.*.tmp")), "a failure left a temporary file"
        TALLY["refused"] += 1
        return "refused"
    TALLY["ok"] += 1
    return "ok"


# ---------------------------------------------------------------- the trace reader


@pytest.fixture(scope="module")
def good_trace_bytes(tmp_path_factory) -> bytes:
    return write_first_requests(tmp_path_factory.mktemp("fuzz"), 1).read_bytes()


@FUZZ
@given(data=st.data())
def test_the_reader_refuses_corrupt_files_cleanly(good_trace_bytes, data):
    raw = bytearray(good_trace_bytes)
    kind = data.draw(st.sampled_from(["flip", "truncate", "splice", "garbage"]))
    if kind == "flip":
        for _ in range(data.draw(st.integers(1, 8))):
            i = data.draw(st.integers(0, len(raw) - 1))
            raw[i] ^= 1 << data.draw(st.integers(0, 7))
    elif kind == "truncate":
        raw = raw[: data.draw(st.integers(0, len(raw) - 1))]
    elif kind == "splice":
        i = data.draw(st.integers(0, len(raw)))
        raw[i:i] = data.draw(st.binary(min_size=1, max_size=64))
    else:
        raw = bytearray(data.draw(st.binary(max_size=256)))
    path = WORK / "read.parquet"
    path.write_bytes(bytes(raw))
    try:
        read_trace(path)
    except InputError:
        pass


# ---------------------------------------------------------------- the JSONL converter

NUM = st.one_of(
    st.integers(-3, 40),
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([2.5, 1e308, -0.0, 1.0]),
)
ANY = st.one_of(NUM, st.text(max_size=5), st.none(), st.booleans(), st.lists(NUM, max_size=4))
ROW_KEYS = [
    "request_id",
    "phase",
    "step",
    "position",
    "layer",
    "expert_ids",
    "gate_weights",
    "pred_ids",
    "pred_weights",
]


def _token_rows(draw, layers: int, experts: int, k: int) -> list[dict]:
    """A well-formed prefill of a few tokens: every token has every layer, k distinct experts, weights
    highest first summing to 1."""
    rows = []
    for pos in range(draw(st.integers(1, 3))):
        for layer in range(layers):
            ids = draw(st.permutations(range(experts)))[:k]
            raw = sorted(draw(st.lists(st.floats(0.01, 1.0), min_size=k, max_size=k)), reverse=True)
            rows.append(
                {
                    "request_id": 0,
                    "phase": "prefill",
                    "step": 0,
                    "position": pos,
                    "layer": layer,
                    "expert_ids": ids,
                    "gate_weights": [w / sum(raw) for w in raw],
                }
            )
    return rows


@st.composite
def jsonl_text(draw) -> str:
    """One case in four well-formed; the others break the header, fields, values or the text itself. Some
    carry predicted experts (a lookahead depth of 1 or 2; a prediction may be empty: ``[]`` and ``[]``)."""
    model = {"name": "x", "num_layers": 2, "num_experts": 4, "top_k": 2, "weight_rule": "softmax_renorm"}
    depth = draw(st.sampled_from([0, 0, 1, 2]))
    header = {"hobbit_trace_header": 1, "model": model, "lookahead_depth": depth}
    rows = _token_rows(draw, 2, 4, 2)
    for r in rows:
        if depth:
            preds = [
                draw(st.one_of(st.just(([], [])), st.tuples(st.permutations(range(4)), st.floats(0.5, 1.0))))
                for _ in range(depth)
            ]
            r["pred_ids"] = [list(p[0][:2]) for p in preds]
            r["pred_weights"] = [[p[1], 1 - p[1]] if p[0] else [] for p in preds]
    if draw(st.integers(0, 3)):
        for key in draw(st.lists(st.sampled_from(["num_layers", "num_experts", "top_k", "weight_rule"]), max_size=2)):
            model[key] = draw(st.one_of(ANY, st.sampled_from(["bogus", 2.5, 0, "2"])))
        if not draw(st.integers(0, 4)):
            header[draw(st.sampled_from(["hobbit_trace_header", "lookahead_depth", "model"]))] = draw(ANY)
        for _ in range(draw(st.integers(1, 3))):
            row = rows[draw(st.integers(0, len(rows) - 1))]
            key = draw(st.sampled_from(ROW_KEYS))
            if draw(st.booleans()):
                row.pop(key, None)
            else:
                row[key] = draw(ANY)
        if not draw(st.integers(0, 4)):
            rows.pop(draw(st.integers(0, len(rows) - 1)))  # a token loses a layer
    lines = [json.dumps(header, allow_nan=True), *(json.dumps(r, allow_nan=True) for r in rows)]
    if not draw(st.integers(0, 9)):
        i = draw(st.integers(0, len(lines) - 1))
        lines[i] = lines[i][: draw(st.integers(0, len(lines[i])))]  # a cut line
    return "\n".join(lines) + "\n"


@FUZZ
@given(text=jsonl_text(), keep_old=st.booleans())
def test_the_jsonl_converter_refuses_cleanly(text, keep_old):
    src, out = WORK / "in.jsonl", WORK / "out.parquet"
    src.write_text(text)
    if _outcome(lambda: convert(ConvertConfig("jsonl", str(src), str(out))), out, keep_old) == "ok":
        read_trace(out)


@st.composite
def jsonl_laid_out(draw) -> bytes:
    """``jsonl_text``'s cases with other line ends ("\r\n"), blank lines, a line break that ``str.splitlines``
    knows and JSON does not ("\u2028" in a string), or a row whose numbers Arrow refuses and the JSON module
    takes (``2.0`` for 2)."""
    lines = draw(jsonl_text()).splitlines()
    for _ in range(draw(st.integers(0, 2))):
        lines.insert(draw(st.integers(0, len(lines))), draw(st.sampled_from(["", "  ", "\t"])))
    if not draw(st.integers(0, 4)):
        i = draw(st.integers(0, len(lines) - 1))
        lines[i] = lines[i].replace('"x"', '"x\u2028y"').replace('"layer": 1', '"layer": 1.0')
    end = draw(st.sampled_from(["\n", "\n", "\r\n"]))
    return (end.join(lines) + draw(st.sampled_from(["", end, end * 2]))).encode()


def _read_outcome(path: Path, arrow: bool) -> tuple:
    from hobbit.traces.jsonl_format import read_generic_jsonl

    try:
        a, meta = read_generic_jsonl(path, arrow=arrow)
    except InputError as exc:
        return "refused", str(exc), getattr(exc, "row", None), getattr(exc, "field", None)
    return (
        "ok",
        meta.lookahead_depth,
        {f: (v.dtype.str, v.shape, v.tobytes()) for f, v in vars(a).items() if v is not None},
    )


@settings(FUZZ, max_examples=max(CASES // 4, 1))
@given(data=jsonl_laid_out(), piece=st.sampled_from([48, 1 << 24]))
def test_the_jsonl_reader_reads_what_the_line_by_line_reader_reads(data, piece):
    """Arrow's reader, a piece of the file at a time (down to a line or two each), accepts exactly what the JSON
    module read a line at a time over the whole file accepts, into the same arrays, and refuses the rest with the
    same message, line and field."""
    from hobbit.traces import jsonl_format

    src = WORK / "laid-out.jsonl"
    src.write_bytes(data)
    want = _read_outcome(src, arrow=False)
    before = jsonl_format.PIECE_BYTES
    jsonl_format.PIECE_BYTES = piece
    try:
        got = _read_outcome(src, arrow=True)
    finally:
        jsonl_format.PIECE_BYTES = before
    assert got == want


# ---------------------------------------------------------------- the FLAME converter


@st.composite
def flame_table(draw) -> pa.Table | bytes:
    """One case in four a well-formed FLAME table (raw softmax mass over 64 experts); the others
    break columns, values, or are not Parquet at all."""
    if not draw(st.integers(0, 9)):
        return draw(st.binary(max_size=128))
    rows = _token_rows(draw, 2, 64, 2)
    cols = {
        "seq": [r["request_id"] for r in rows],
        "pos": [r["position"] for r in rows],
        "layer": [r["layer"] + 2 for r in rows],
        "expert_ids": [r["expert_ids"] for r in rows],
        "gate_probs": [[0.5 * w for w in r["gate_weights"]] for r in rows],
    }
    if draw(st.integers(0, 3)):
        for key in draw(st.lists(st.sampled_from(sorted(cols)), min_size=1, max_size=2)):
            i = draw(st.integers(0, len(rows) - 1))
            choice = draw(st.integers(0, 3))
            if choice == 0:
                cols.pop(key, None)
            elif choice == 1 and key in cols:
                cols[key][i] = draw(
                    st.one_of(
                        st.lists(st.integers(-1, 70), max_size=3), st.just([float("nan")] * 2), st.just([-0.5, 0.2])
                    )
                    if key in ("expert_ids", "gate_probs")
                    else st.integers(-1, 9)
                )
            elif key in cols:
                cols[key] = [draw(st.text(max_size=3)) for _ in rows]
    try:
        return pa.table(cols)
    except pa.ArrowException:  # columns of mixed kinds: not even a table, so the bytes of one that is not
        return b"PAR1" + json.dumps(cols, default=str).encode()[:100]


@FUZZ
@given(table=flame_table(), keep_old=st.booleans())
def test_the_flame_converter_refuses_cleanly(table, keep_old):
    src, out = WORK / "flame.parquet", WORK / "flame-out.parquet"
    if isinstance(table, bytes):
        src.write_bytes(table)
    else:
        pq.write_table(table, src)
    if _outcome(lambda: convert(ConvertConfig("flame", str(src), str(out))), out, keep_old) == "ok":
        read_trace(out)


def test_the_converter_cases_were_mostly_malformed_and_some_valid():
    """The generators reach both outcomes (run after the two converter tests, as pytest orders them)."""
    if not sum(TALLY.values()):
        pytest.skip("run with the converter fuzz tests")
    print(f"fuzz outcomes: {TALLY}")
    assert TALLY["refused"] > TALLY["ok"] > 0, TALLY
