"""Traces longer than memory: a trace file read a window of whole passes at a time (``traces.window``) and simulated
window by window (``sim.windowed``), against the same trace read whole."""

from __future__ import annotations

import dataclasses
import itertools
import json
import tracemalloc
from pathlib import Path
from unittest import mock

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hobbit.sim import fast
from hobbit.sim.config import ConfigError
from hobbit.sim.policies.compiled import NEVER
from hobbit.sim.run import configure as setup_of
from hobbit.sim.run import simulate
from hobbit.sim.windowed import simulate_file
from hobbit.sim.workload import RequestMatrices, build_workload
from hobbit.traces import window
from hobbit.traces.io import METADATA_KEY, Trace, read_trace, write_trace
from hobbit.traces.schema import TraceError

from conftest import run_cli
from sim_helpers import BUNDLED, bundled, compose_sim

SYSTEMS = sorted(p.stem for p in (Path(__file__).parents[1] / "conf" / "system").glob("*.yaml"))


def same_run(a, b) -> list:
    """What differs between two runs' results (their wall time and the windowed run's own key aside)."""
    bad = [(k, a.summary[k], b.summary.get(k)) for k in a.summary if k != "wall_s" and a.summary[k] != b.summary.get(k)]
    for k, col in a.pass_columns.items():
        if not np.array_equal(np.asarray(col, float), np.asarray(b.pass_columns[k], float), equal_nan=True):
            bad.append(("passes." + k, col[:4], b.pass_columns[k][:4]))
    for k, col in a.layer_columns.items():
        if not np.array_equal(col, b.layer_columns[k]):
            bad.append(("layers." + k, col, b.layer_columns[k]))
    return bad


def test_a_scan_counts_the_tokens_requests_and_passes_a_whole_read_lays_out():
    tr = bundled()
    wl = build_workload(tr, "none")
    s = window.scan(BUNDLED)
    assert s.tokens == tr.num_tokens and s.passes == len(wl.pass_start)
    assert s.requests.tolist() == sorted(set(wl.pass_request))
    sizes = {}
    for ph, a, b in zip(wl.pass_phase, wl.pass_start, wl.pass_end):
        sizes[ph, b - a] = sizes.get((ph, b - a), 0) + 1
    assert s.pass_sizes == sizes
    assert s.request_tokens.sum() == tr.num_tokens
    ends = {r: c for r, c in zip(wl.pass_request, wl.pass_context)}
    assert s.request_context.tolist() == [ends[r] for r in s.requests.tolist()]


@pytest.mark.parametrize("tokens", [1, 5, 64, 10**6])
def test_windows_are_whole_passes_and_together_the_trace(tokens):
    tr = bundled()
    L = len(tr.meta.layers)
    parts = list(window.windows(BUNDLED, tr.meta, tokens))
    assert len(parts) >= (2 if tokens < 64 else 1)
    for a, b in itertools.pairwise(parts):  # a pass (request, step) never spans two windows
        assert (a.request_id[-1], a.step[-1]) != (b.request_id[0], b.step[0])
    for name, col in vars(tr.arrays).items():
        if isinstance(col, np.ndarray):
            assert np.array_equal(
                np.concatenate([getattr(p, name) for p in parts]), col, equal_nan=col.dtype.kind == "f"
            ), name
    for p in parts:  # each about ``tokens`` tokens: past them only by the rest of its last pass
        last = (p.request_id[-1], p.step[-1])
        head = len(p) - int(np.sum((p.request_id == last[0]) & (p.step == last[1])))
        assert head < tokens * L


def test_windows_skip_and_stop_at_a_requests_edge():
    tr = bundled()
    s = window.scan(BUNDLED)
    cut = int(s.request_tokens[:2].sum())
    head = list(window.windows(BUNDLED, tr.meta, 7, 0, cut))
    tail = list(window.windows(BUNDLED, tr.meta, 7, cut))
    L = len(tr.meta.layers)
    assert sum(len(a) for a in head) == cut * L and sum(len(a) for a in tail) == len(tr.arrays) - cut * L
    assert set(np.concatenate([a.request_id for a in head]).tolist()) == set(s.requests[:2].tolist())
    assert tail[0].request_id[0] == s.requests[2]


def test_a_window_that_breaks_the_schema_names_the_files_row(tmp_path):
    """A bad row past the first window: the error names its row in the file, not in its window."""
    tr = bundled()
    a = dataclasses.replace(tr.arrays)
    a.expert_ids = a.expert_ids.copy()
    bad = len(a) - 3
    a.expert_ids[bad, 0] = tr.meta.model.num_experts + 5
    table = pq.read_table(BUNDLED)
    col = table.column("expert_ids").to_pylist()
    col[bad][0] = int(a.expert_ids[bad, 0])
    table = table.set_column(
        table.schema.get_field_index("expert_ids"), "expert_ids", pa.array(col, pa.list_(pa.int16()))
    )
    path = tmp_path / "bad.parquet"
    pq.write_table(table.replace_schema_metadata({METADATA_KEY: table.schema.metadata[METADATA_KEY]}), path)
    with pytest.raises(TraceError) as e:
        list(window.windows(path, tr.meta, 4))
    assert e.value.row == bad and e.value.field == "expert_ids" and str(path) in str(e.value)


def test_windows_out_of_order_are_refused_where_they_meet(tmp_path):
    """Two windows whose rows go backwards where they meet (each in order alone): the first row out of order."""
    tr = bundled(2)
    a = tr.arrays
    first = np.flatnonzero(a.request_id == a.request_id[0])
    later = np.flatnonzero(a.request_id != a.request_id[0])
    rows = np.concatenate([later, first])  # the second request's rows, then the first's
    table = pq.read_table(write_trace(tmp_path / "ok.parquet", a, tr.meta)).take(pa.array(rows))
    path = tmp_path / "swapped.parquet"
    pq.write_table(table, path, row_group_size=len(later))
    with pytest.raises(TraceError) as e:
        list(window.windows(path, tr.meta, 10**6))  # one window: validate's own order check
    assert e.value.row == len(later)
    with pytest.raises(TraceError) as e:
        list(window.windows(path, tr.meta, 3))
    assert e.value.row == len(later) and "ordered" in str(e.value)


@pytest.mark.parametrize("system", SYSTEMS)
def test_a_windowed_run_gives_a_whole_runs_results(system):
    """Every registered system (Belady's next uses too), windows of 5 tokens (a request's passes across many of them):
    the same results.json, passes and layers as the trace read whole, streamed."""
    cfg = compose_sim(f"system={system}")
    whole = simulate(read_trace(BUNDLED), cfg.model, cfg.hardware, cfg.system, keep_decisions=False)
    win = simulate_file(BUNDLED, cfg.model, cfg.hardware, cfg.system, window_tokens=5)
    assert win.summary["windows"]["count"] > 100
    assert same_run(whole, win) == []


@pytest.mark.parametrize(
    "system,knobs",
    [
        ("hobbit", ["system.prefetch.fallback=history", "system.ubatch=64", "context=100"]),
        ("moe-infinity", ["system.prefetch.fallback=history"]),
        ("fiddler", []),
        ("llama-cpp", ["system.ubatch=16"]),
        ("hobbit-oracle", ["system.ubatch=64"]),
        ("moe-offloading", ["system.cache.policy=belady"]),
    ],
)
def test_a_windowed_run_of_real_routing_gives_a_whole_runs_results(real_converted, system, knobs):
    """Qwen1.5-MoE's vLLM routing (prompts of many tokens, batched, no predictions), windows of 37 tokens: a
    prompt's prefill split by ``ubatch`` across windows, a context before each request, a profile read apart."""
    tr = real_converted["qwen"]
    cfg = compose_sim("model=qwen1.5-moe-a2.7b", f"system={system}", *knobs)
    whole = simulate(tr, cfg.model, cfg.hardware, cfg.system, keep_decisions=False, context=cfg.context)
    win = simulate_file(tr.path, cfg.model, cfg.hardware, cfg.system, window_tokens=37, context=cfg.context)
    assert same_run(whole, win) == []


def test_the_fallback_predictions_are_drawn_a_window_at_a_time(real_converted):
    """A trace without predictions under the oracle fallback: other draws than a whole run's, the same accuracy."""
    tr = real_converted["qwen"]
    cfg = compose_sim("model=qwen1.5-moe-a2.7b", "system=hobbit")
    whole = simulate(tr, cfg.model, cfg.hardware, cfg.system, keep_decisions=False)
    win = simulate_file(tr.path, cfg.model, cfg.hardware, cfg.system, window_tokens=37)
    assert win.summary["prefetch"] != whole.summary["prefetch"]
    w, g = whole.summary["prefetch"]["accuracy"], win.summary["prefetch"]["accuracy"]
    assert abs(w - g) < 0.02, (w, g)


def test_beladys_window_ends_with_each_keys_next_use_after_it():
    """A window's lists (``fast.window_future``): each key's steps in the window, in the trace's numbers, then its
    first use after the window; a window without them is refused for Belady, not walked on a short future."""
    tr = bundled()
    wl = build_workload(tr, "none")
    cut = len(wl.pass_start) // 2
    fields = ("pass_request", "pass_start", "pass_end", "pass_phase", "pass_context")
    head = dataclasses.replace(wl, **{f: getattr(wl, f)[:cut] for f in fields})
    tail = dataclasses.replace(wl, **{f: getattr(wl, f)[cut:] for f in fields})
    after = fast.first_uses(tail, 0)  # tail's steps numbered from 0: shift them as the trace numbers them
    after = np.where(after == NEVER, after, after + cut * wl.num_layers)
    off, steps = fast.window_future(head, 0, after)
    w_off, w_steps = fast.future_csr(wl)
    L = wl.num_layers
    for key in range(len(off) - 1):
        mine = steps[off[key] : off[key + 1]].tolist()
        whole = w_steps[w_off[key] : w_off[key + 1]].tolist()
        inside = [x for x in whole if x < cut * L]
        later = [x for x in whole if x >= cut * L]
        assert mine == [*inside, later[0] if later else NEVER]
    cfg = compose_sim("system=hobbit-oracle")
    s = setup_of(wl, tr.meta.layers, cfg.model, cfg.hardware, cfg.system, max(wl.pass_context), None, lambda m: m)
    with pytest.raises(ValueError, match="Window.future"):
        fast.stream_windows(
            [fast.Window(head), fast.Window(tail, cut, head.pass_request[-1])],
            fast.Run(cfg.system, s.slots, s.per_layer),
            s.cost,
            lambda c: None,
        )


def test_request_matrices_added_a_window_at_a_time_are_the_whole_traces():
    tr = bundled()
    m = RequestMatrices()
    for a in window.windows(BUNDLED, tr.meta, 3):
        m.add(build_workload(Trace(tr.meta, a, tr.path), "none"))
    want = build_workload(tr, "none").request_matrices()
    assert len(m.request_matrices()) == len(want)
    assert all(np.array_equal(x, y) for x, y in zip(m.request_matrices(), want))


def test_a_windowed_run_holds_a_window_not_the_trace():
    """Scale: a windowed run's allocations peak at a fraction of the trace's arrays, which a whole read holds
    (numpy's allocations, traced; the compiled code loaded first)."""
    tr = bundled()
    own = sum(v.nbytes for v in vars(tr.arrays).values() if isinstance(v, np.ndarray))
    cfg = compose_sim("system=hobbit")
    simulate_file(BUNDLED, cfg.model, cfg.hardware, cfg.system, window_tokens=16)
    tracemalloc.start()
    try:
        simulate_file(BUNDLED, cfg.model, cfg.hardware, cfg.system, window_tokens=16)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < own / 4, (peak, own)


def test_a_windowed_run_refuses_what_needs_the_whole_trace():
    """A policy the compiled walk does not implement runs on the reference walk, which reads the whole trace: refused
    with the fix, as is a window of no tokens."""
    cfg = compose_sim("system=hobbit")
    with (
        mock.patch.object(fast, "unsupported", return_value="cache policy mine"),
        pytest.raises(ConfigError, match="cache policy mine.*window_tokens=0"),
    ):
        simulate_file(BUNDLED, cfg.model, cfg.hardware, cfg.system, window_tokens=8)
    with pytest.raises(ConfigError, match="window_tokens"):
        simulate_file(BUNDLED, cfg.model, cfg.hardware, cfg.system, window_tokens=0)


def test_hobbit_sim_reads_a_trace_a_window_at_a_time(tmp_path):
    whole, win = tmp_path / "whole", tmp_path / "win"
    assert run_cli(["sim", "use_cache=false", f"hydra.run.dir={whole}"]) == 0
    assert run_cli(["sim", "use_cache=false", "window_tokens=9", f"hydra.run.dir={win}"]) == 0
    a, b = (json.loads((d / "results.json").read_text()) for d in (whole, win))
    assert b["windows"]["tokens"] == 9
    assert {k: v for k, v in a.items() if k != "wall_s"} == {
        k: v for k, v in b.items() if k not in ("wall_s", "windows")
    }
    pa_, pb = pq.read_table(whole / "passes.parquet"), pq.read_table(win / "passes.parquet")
    assert pa_.column_names == pb.column_names
    assert all(np.array_equal(pa_.column(c).to_numpy(), pb.column(c).to_numpy()) for c in pa_.column_names)
    # a timeline draws a whole run's decisions: refused before any work, exit code 2
    assert run_cli(["sim", "window_tokens=9", "timeline=true", f"hydra.run.dir={tmp_path / 't'}"]) == 2
    assert not (tmp_path / "t" / "results.json").exists()


def test_a_chunk_names_its_window_and_passes():
    """``stream_windows``' chunks: consecutive passes, each within its window, the windows' passes numbered on."""
    tr = bundled()
    cfg = compose_sim("system=hobbit")
    wl = build_workload(tr, "oracle", 0.9, 3, np.random.default_rng(0))
    s = setup_of(wl, tr.meta.layers, cfg.model, cfg.hardware, cfg.system, max(wl.pass_context), None, lambda m: m)
    parts = [build_workload(Trace(tr.meta, a, tr.path), "none") for a in window.windows(BUNDLED, tr.meta, 50)]
    wins, first, prev = [], 0, -1
    for w in parts:
        wins.append(fast.Window(w, first, prev))
        first, prev = first + len(w.pass_start), w.pass_request[-1]
    seen = []
    fast.stream_windows(wins, fast.Run(cfg.system, s.slots, s.per_layer), s.cost, seen.append, chunk_steps=64)
    assert [c.p0 for c in seen] == [0] + [c.p1 for c in seen[:-1]] and seen[-1].p1 == first
    for c in seen:
        assert c.window.first_pass <= c.p0 < c.p1 <= c.window.first_pass + len(c.window.wl.pass_start)
        assert len(c.start) == len(c.stall) == len(c.bound) == c.p1 - c.p0


def test_a_sweep_reads_its_trace_a_window_at_a_time_per_point():
    """``hobbit.sweep(path, grid, window_tokens=N)``: every point over the file read a window at a time, the same
    rows as the sweep over the trace read whole; a sweep's preload holds no trace then."""
    from hobbit import api

    grid = {"system": ["hobbit", "on-demand"], "system.cache.high_fraction": [0.5]}
    whole = api.sweep(BUNDLED, grid, progress=False)
    win = api.sweep(BUNDLED, grid, progress=False, window_tokens=11)
    assert (win["windows.tokens"] == 11).all()
    cols = [c for c in whole.columns if c != "wall_s"]
    assert whole[cols].equals(win[cols])
    with mock.patch.object(api, "read_trace", side_effect=AssertionError("read whole")):
        api.preload(compose_sim("window_tokens=11"))


@pytest.mark.parametrize("host_cache", ["lru", "uniform"])
def test_host_ram_past_its_size_is_replayed_over_the_windows(host_cache):
    """RAM for a third of fp16 Mixtral's experts (``test_memory``'s set-up): the page cache replayed over the
    windows' reads gives the whole trace's share of reads from RAM, and the run its times."""
    cfg = compose_sim(
        "model=mixtral-8x7b", "system=ktransformers", "system.weights=fp16", f"system.host_cache={host_cache}"
    )
    m = cfg.model
    hw = dataclasses.replace(cfg.hardware, host_memory_bytes=m.num_layers * 8 * m.expert_bytes("fp16") // 3)
    hw = dataclasses.replace(hw, host_reserve_bytes=0)
    whole = simulate(read_trace(BUNDLED), m, hw, cfg.system, keep_decisions=False)
    win = simulate_file(BUNDLED, m, hw, cfg.system, window_tokens=13)
    assert whole.summary["memory"]["ram_share"] < 1
    assert same_run(whole, win) == []


def test_hobbit_sim_refuses_a_whole_read_past_the_memory_available(tmp_path, capsys):
    """A trace whose run read whole would take more memory than the machine has available: exit code 2 and the fix
    (``window_tokens``), before any read; with the fix, the run."""
    from hobbit.sim import windowed

    with mock.patch.object(windowed, "free_memory", return_value=2**20):
        assert run_cli(["sim", "use_cache=false", f"hydra.run.dir={tmp_path / 'a'}"]) == 2
        assert f"window_tokens={windowed.WINDOW_TOKENS}" in capsys.readouterr().err
        assert run_cli(["sim", "use_cache=false", "window_tokens=64", f"hydra.run.dir={tmp_path / 'b'}"]) == 0
    assert (tmp_path / "b" / "results.json").is_file() and not (tmp_path / "a" / "results.json").exists()


def test_a_profile_trace_is_read_a_window_at_a_time_too(tmp_path):
    """Fiddler's popular experts from a profiling trace of its own (the bundled trace's first requests): the same
    placement and results as the whole run given that trace read whole."""
    from sim_helpers import write_first_requests

    prof = write_first_requests(tmp_path, 3)
    cfg = compose_sim("system=fiddler")
    whole = simulate(
        read_trace(BUNDLED), cfg.model, cfg.hardware, cfg.system, keep_decisions=False, profile=read_trace(prof)
    )
    win = simulate_file(BUNDLED, cfg.model, cfg.hardware, cfg.system, profile=prof, window_tokens=7)
    assert same_run(whole, win) == []


def test_a_scan_stops_at_a_requests_edge_and_counts_each_phase(tmp_path):
    """``scan(path, stop_tokens)`` (a ``TraceFile``'s ``head``) is the scan of a file of those requests alone, and its
    phases (``Phases.of``, ``of_requests``) are those the trace read whole counts."""
    from hobbit.plumbing.phases import Phases

    from sim_helpers import write_first_requests

    whole = window.TraceFile.open(BUNDLED, 7)
    head = whole.head(5)
    alone = window.scan(write_first_requests(tmp_path, 5))
    assert head.stop_tokens == int(whole.scan.request_tokens[:5].sum()) < whole.scan.tokens
    assert head.scan.tokens == alone.tokens and head.scan.pass_sizes == alone.pass_sizes
    for k in ("requests", "request_tokens", "request_context", "request_decode"):
        assert np.array_equal(getattr(head.scan, k), getattr(alone, k)), k
    assert Phases.of(head) == Phases.of(bundled(5)) and Phases.of(whole) == Phases.of(bundled())
    tail, first = Phases.of_requests(whole.scan, 2, 5), Phases.of(bundled(2))
    assert tail.requests == 3
    assert tail.decode_tokens == Phases.of(head).decode_tokens - first.decode_tokens > 0
    assert tail.prefill_tokens == Phases.of(head).prefill_tokens - first.prefill_tokens > 0


def test_compare_reads_its_trace_a_window_at_a_time(tmp_path):
    """``hobbit compare window_tokens=N``: every system's row, the tuned HOBBIT's too (its trials read the profiling
    requests a window at a time), as the trace read whole gives them, and the trace is never read whole."""
    from hobbit import api
    from hobbit.plumbing.glue import compose
    from hobbit.studies.compare import TUNED, CompareConfig, compare
    from hobbit.traces import io as trace_io

    from sim_helpers import write_first_requests

    path = write_first_requests(tmp_path, 8)
    over = ["systems=[hobbit,fiddler,moe-infinity]", "tune_trials=3", "quality_budget=1.0"]
    runs = {}
    for name, tokens in (("whole", 0), ("win", 13)):
        out = tmp_path / name
        cfg = compose("compare", CompareConfig, [f"out_dir={out}", f"window_tokens={tokens}", *over])
        if tokens:
            with (
                mock.patch.object(trace_io, "read_trace", side_effect=AssertionError("read whole")),
                mock.patch.object(window, "scan", wraps=window.scan) as scans,
            ):
                runs[name] = compare(api.trace_of(path, tokens), cfg, out)
            assert scans.call_count == 2  # the file's and its profiling requests': each run reuses one of them
        else:
            runs[name] = compare(api.trace_of(path, tokens), cfg, out)
    whole, win = (json.loads((tmp_path / n / "compare.json").read_text()) for n in ("whole", "win"))
    assert {r["system"] for r in win["systems"]} == {"hobbit", "fiddler", "moe-infinity", TUNED}
    assert "2 requests held apart" in win["note"] and "hobbit-tuned: trial" in win["note"]
    assert win["note"].replace(str(tmp_path / "win"), "") == whole["note"].replace(str(tmp_path / "whole"), "")
    assert {**win, "note": ""} == {**whole, "note": ""}
    detail = json.loads((tmp_path / "win" / "systems" / "fiddler" / "results.json").read_text())
    assert detail["windows"]["tokens"] == 13 and detail["windows"]["count"] > 10


def test_tune_reads_its_trace_a_window_at_a_time(tmp_path):
    """``hobbit tune window_tokens=N``: each trial's latency and quality as over the trace read whole (the same
    requests held apart and timed), so the same search."""
    from sim_helpers import write_first_requests

    path = write_first_requests(tmp_path, 4)
    trials = {}
    for tokens in (0, 11):
        run = tmp_path / f"t{tokens}"
        args = ["tune", f"trace={path}", "trials=3", f"window_tokens={tokens}", f"hydra.run.dir={run}"]
        assert run_cli(args) == 0
        trials[tokens] = pq.read_table(run / "trials.parquet").to_pandas()
    cols = ["trial", "t1", "latency_ms", "degraded_mass"]
    assert trials[11][cols].equals(trials[0][cols]) and len(trials[0]) == 3


def test_a_windowed_compare_holds_a_window_not_the_trace(tmp_path):
    """Scale: ``hobbit compare`` over a trace file read a window at a time (the bundled trace eight times over)
    allocates at its peak a fraction of the trace's arrays, which a whole read holds (numpy's and Python's
    allocations, traced; the compiled code loaded first). Its tables, plot and results are written as ever."""
    from hobbit import api
    from hobbit.plumbing.glue import compose
    from hobbit.studies.compare import CompareConfig, compare
    from hobbit.traces.arrays import TraceArrays

    tr = bundled()
    a, copies = tr.arrays, 8
    big = a.take(np.tile(np.arange(len(a)), copies))
    big = TraceArrays(**{f: getattr(big, f) for f in TraceArrays.__dataclass_fields__})
    shift = np.repeat(np.arange(copies, dtype=np.int64) * (int(a.request_id.max()) + 1), len(a))
    big.request_id = (big.request_id + shift).astype(a.request_id.dtype)
    path = write_trace(tmp_path / "big.parquet", big, tr.meta)
    own = sum(v.nbytes for v in vars(big).values() if isinstance(v, np.ndarray))
    del big

    def run(out: Path) -> None:
        over = [f"out_dir={out}", "window_tokens=64", "systems=[hobbit,on-demand]", "tune_trials=0"]
        compare(api.trace_of(path, 64), compose("compare", CompareConfig, over), out)

    run(tmp_path / "warm")
    api._READ.clear()  # no trace a whole read kept: a run that read it whole would allocate it again here
    tracemalloc.start()
    try:
        run(tmp_path / "run")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (tmp_path / "run" / "compare.json").is_file()
    assert peak < own / 4, (peak, own)


@pytest.mark.parametrize("command", ["compare", "tune"])
def test_commands_of_many_runs_refuse_a_whole_read_past_the_memory_available(command, tmp_path, capsys):
    """``hobbit compare`` and ``hobbit tune``, as ``hobbit sim``: a trace whose runs read whole would not fit the
    memory available is refused before any work, exit code 2, with the fix (``window_tokens``)."""
    from hobbit.sim import windowed

    with mock.patch.object(windowed, "free_memory", return_value=2**20):
        assert run_cli([command, f"hydra.run.dir={tmp_path / 'a'}"]) == 2
    assert f"window_tokens={windowed.WINDOW_TOKENS}" in capsys.readouterr().err
    assert not any((tmp_path / "a").glob("*.json"))
