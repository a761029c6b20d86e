"""The executor: same decisions as the simulator, kernels against the reference, the cache
within its slots, calibrate and validate end to end, and bad input refused before any work."""

from __future__ import annotations

import dataclasses
import json
import threading

import numpy as np
import pandas as pd
import pytest
import torch

from hobbit.executor.kernels import ExpertKernel, reference
from hobbit.executor.link import Copy, CopyEngine
from hobbit.executor.replay import Replayer
from hobbit.executor.validate import replay_rules
from hobbit.executor.weights import build_store, reduce_model
from hobbit.sim.policies.base import HIGH, LOW
from hobbit.sim.run import simulate
from hobbit.sim.workload import build_workload

from conftest import run_cli
from sim_helpers import bundled, compose_sim

pytestmark = pytest.mark.serial  # replays timed on this machine: alone (make test)

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def small():
    """Mixtral's routing at 1/32 width (hidden 128, expert FFN 448) on the bundled trace's first request."""
    cfg = compose_sim("system=hobbit")
    model = reduce_model(cfg.model, 32)
    store = build_store(model, ("bf16", "int4"), CPU, progress=False)
    return cfg, model, store, bundled(1)


@pytest.mark.parametrize("precision", ["bf16", "int4", "int8", "int2"])
def test_kernels_match_the_dequantised_reference(precision):
    g = torch.Generator().manual_seed(1)
    h, f = 256, 512
    gu, down = torch.randn(2 * f, h, generator=g) * h**-0.5, torch.randn(h, f, generator=g) * f**-0.5
    k = ExpertKernel(precision, h, f, CPU)
    buf = k.pack(gu, down)
    assert buf.dtype == torch.uint8 and buf.numel() == k.nbytes
    for n in (1, 7, 64):
        x = (torch.randn(n, h, generator=g) * 0.5).to(torch.bfloat16)
        got, want = k.forward(x, k.views(buf)).float(), reference(x.float(), gu, down, precision)
        # bf16 activations, outputs and scales: within 2 % of the output scale
        assert (got - want).abs().max() <= 0.02 * want.abs().max(), precision


def test_expert_bytes_match_the_simulators(small):
    _, model, store, _ = small
    assert store.nbytes(HIGH) == model.expert_bytes("bf16")
    assert store.nbytes(LOW) == model.expert_bytes("int4")


@pytest.mark.parametrize("staging", [0, 4])  # prefetches pinned in their pool (the paper), or in staging slots
def test_replay_runs_the_simulators_decisions_and_respects_the_slots(small, staging):
    cfg, model, store, trace = small
    eb = (store.nbytes(HIGH), store.nbytes(LOW))
    system = dataclasses.replace(
        cfg.system,
        cache=dataclasses.replace(cfg.system.cache, high_bytes=20 * eb[0], low_bytes=30 * eb[1]),
        prefetch=dataclasses.replace(cfg.system.prefetch, staging_slots=staging),
    )
    hw = cfg.hardware
    a = simulate(trace, model, hw, system, keep_log=True)
    b = simulate(trace, model, hw, system, keep_log=True)
    assert a.decisions.log == b.decisions.log  # the decisions are a pure function of trace and config
    from hobbit.sim.workload import build_workload

    wl = build_workload(trace)
    rep = Replayer(wl, a.decisions, store)
    tl = rep.run()
    log = a.decisions.log
    assert log is not None
    acts = {act for *_, act, _ in log}
    assert {"hit", "load", "prefetch", "skip", "evict"} <= acts, acts
    # the replay executed the decisions, pass by pass: every load and prefetch copied at its
    # precision, every hit and load computed at it, every eviction freed, nothing skipped computed
    executed = {"hit": ["compute"], "load": ["load", "compute"], "prefetch": ["prefetch"], "evict": ["evict"]}
    want = [(p, lay, e, x, prec) for p, lay, e, act, prec in log for x in executed.get(act, [])]
    assert sorted(rep.log) == sorted(want)
    # the pools: allocated up front, never more resident than the decisions' slots
    slots = a.decisions.slots
    assert slots == (20 - staging, 30) and a.decisions.staging == staging
    assert 0 < rep.cache.peak[HIGH] <= slots[0] and 0 < rep.cache.peak[LOW] <= slots[1]
    assert rep.cache.allocated[HIGH] >= 20 and rep.cache.allocated[LOW] >= 30
    # what the replay holds in its cache is exactly what the decisions' cache holds
    assert set(rep.cache.resident) == _resident_after(a.decisions.steps)
    # every load the decisions made was copied (or cancelled before it started)
    loads = sum(len(s.loads) for s in a.decisions.steps)
    assert tl.bytes_moved <= a.decisions.bytes_requested and tl.bytes_moved > 0
    assert loads == sum(1 for x in log if x[3] in ("load", "prefetch"))
    assert np.all(tl.pass_end > tl.pass_start) and np.all(np.diff(tl.pass_start) > 0)


def _resident_after(steps) -> set:
    """The copies the decisions' cache holds after ``steps``: one is resident when it was, plus the times the
    cache took it in, less the times it pushed it out, is positive (in either order within a step)."""
    from collections import Counter

    held: set = set()
    for step in steps:
        taken, out = Counter(step.kept), Counter(step.evicted)
        held = {k for k in held | set(taken) | set(out) if (k in held) + taken[k] - out[k] > 0}
    return held


@pytest.fixture(scope="module")
def four_layers():
    from hobbit.executor.weights import first_layers

    cfg = compose_sim("system=hobbit")
    model = reduce_model(cfg.model, 32, 4)
    return cfg, model, build_store(model, ("bf16", "int4"), CPU, progress=False), first_layers(bundled(1), 4)


@pytest.mark.parametrize(
    "system",
    [
        "moe-offloading",
        "moe-infinity",
        "hobbit-lru",
        "on-demand",
        "fiddler",
        "hobbit-cpu",
        "freetoken",
        "tec",
        "llama-cpp-lru",
    ],
)
def test_every_system_replays_within_its_slots(four_layers, system):
    """Pools of 11 experts for 4 layers of 8, so that a prefill's victim is needed again in its own layer
    (evicted, then loaded again within one step): the replay holds exactly the decisions' cache."""
    cfg, model, store, trace = four_layers
    eb = (store.nbytes(HIGH), store.nbytes(LOW))
    sc = compose_sim(f"system={system}").system
    sc = dataclasses.replace(sc, cache=dataclasses.replace(sc.cache, high_bytes=11 * eb[0], low_bytes=11 * eb[1]))
    res = simulate(trace, model, cfg.hardware, sc, profile_share=0.0)
    rep = Replayer(build_workload(trace), res.decisions, store, **replay_rules(sc))
    tl = rep.run()
    slots = res.decisions.slots
    assert rep.cache.peak[HIGH] <= slots[0] and rep.cache.peak[LOW] <= slots[1]
    assert set(rep.cache.resident) - {k for k in rep.cache.resident if k in _static(res)} == _resident_after(
        res.decisions.steps
    )
    assert np.all(tl.pass_end > tl.pass_start)


def test_moe_offloading_replays_as_released_swapping_on_the_compute_stream(four_layers):
    """MoE-Offloading's release (write_back, copy_stream=compute) replayed as simulated: every copy moves its buffer's
    old contents back first (twice the bytes), and a layer's experts start once every copy it issued has landed."""
    cfg, model, store, trace = four_layers
    eb = (store.nbytes(HIGH), store.nbytes(LOW))
    sc = compose_sim("system=moe-offloading").system
    sc = dataclasses.replace(sc, cache=dataclasses.replace(sc.cache, high_bytes=11 * eb[0], low_bytes=11 * eb[1]))
    res = simulate(trace, model, cfg.hardware, sc, profile_share=0.0)
    wl = build_workload(trace)
    rep = Replayer(wl, res.decisions, store, record=True, **replay_rules(sc))
    tl = rep.run()
    copied = sum(ld.nbytes for s in res.decisions.steps for ld in s.loads)
    assert copied > 0 and tl.bytes_moved == 2 * copied == res.summary["bytes_loaded"]
    assert rep.work is not None
    landed: dict[int, float] = {}  # step -> when its last copy landed
    for i, s in enumerate(res.decisions.steps):
        if s.loads:
            landed[i] = max(rep.copy_times[ld.tid][1] for ld in s.loads)
    starts = [(i, t0) for i, kind, t0, _, _ in rep.work if kind == "expert" and i in landed]
    assert starts and all(t0 >= landed[i] for i, t0 in starts)


def _static(res) -> set:
    """Experts a static placement preloaded (hits with transfer -1), outside the pools."""
    return {(lay, e, cls) for s in res.decisions.steps for (tid, cls, _), (lay, e) in zip(s.gpu, s.gpu_keys) if tid < 0}


def test_the_device_cache_refuses_more_than_its_slots(small):
    from hobbit.executor.cache import CacheOverflow, DeviceCache

    store = small[2]
    cache = DeviceCache(store, (2, 1), staging=1)
    assert cache.allocated == [3, 1] and [len(f) for f in cache.free] == [3, 1]
    bufs = [cache.take(HIGH) for _ in range(3)]
    cache.admit((0, 0, HIGH), bufs[0])
    cache.admit((0, 1, HIGH), bufs[1])
    with pytest.raises(CacheOverflow, match="2 slots"):
        cache.admit((0, 2, HIGH), bufs[2])
    assert cache.evict((0, 0, HIGH)) and not cache.evict((0, 0, HIGH))
    cache.admit((0, 2, HIGH), bufs[2])
    assert cache.peak[HIGH] == 2 and cache.take(HIGH) is bufs[0] and cache.allocated == [3, 1]


def test_weights_from_a_checkpoint_are_the_checkpoints():
    from transformers import AutoModelForCausalLM

    from hobbit.traces.tiny import bundled_model_dir

    cfg = compose_sim("model=tiny")
    store = build_store(cfg.model, ("bf16", "int4"), CPU, checkpoint_dir=str(bundled_model_dir()), progress=False)
    ref = AutoModelForCausalLM.from_pretrained(bundled_model_dir(), dtype=torch.float32)
    k = store.kernels[HIGH]
    v = k.views(store.experts[(5, 3, HIGH)])
    assert torch.equal(v["gu"], ref.model.layers[5].mlp.experts.gate_up_proj[3].to(torch.bfloat16))
    assert torch.equal(v["down"], ref.model.layers[5].mlp.experts.down_proj[3].to(torch.bfloat16))
    with pytest.raises(Exception, match="hidden"):
        build_store(compose_sim().model, ("bf16", "int4"), CPU, checkpoint_dir=str(bundled_model_dir()), progress=False)


def test_calibrate_writes_a_profile_hobbit_sim_accepts(tmp_path, capsys):
    run = tmp_path / "cal"
    assert run_cli(["calibrate", "scale=32", "rounds=4", f"hydra.run.dir={run}"]) == 0
    out = capsys.readouterr().out
    assert "use: hobbit sim" in out
    hw_file = next((run / "hardware").glob("*.yaml"))
    model_file = next((run / "model").glob("*.yaml"))
    from sim_helpers import write_first_requests

    trace = write_first_requests(tmp_path, 1)
    sim_dir = tmp_path / "sim"
    assert (
        run_cli(
            [
                "sim",
                f"trace={trace}",
                f"hydra.searchpath=[file://{run}]",
                f"hardware={hw_file.stem}",
                f"model={model_file.stem}",
                f"hydra.run.dir={sim_dir}",
            ]
        )
        == 0
    )
    r = json.loads((sim_dir / "results.json").read_text())
    assert r["hardware"] == hw_file.stem and r["model"] == model_file.stem
    # a profile measured for other shapes is refused, naming both
    assert (
        run_cli(
            [
                "sim",
                f"trace={trace}",
                f"hydra.searchpath=[file://{run}]",
                f"hardware={hw_file.stem}",
                f"hydra.run.dir={tmp_path / 'x'}",
            ]
        )
        == 2
    )
    assert "was calibrated for model" in capsys.readouterr().err
    assert run_cli(["validate", f"profile={hw_file}", "scale=16", f"hydra.run.dir={tmp_path / 'y'}"]) == 2
    assert "was calibrated for model" in capsys.readouterr().err
    # the profile it was calibrated for is taken as it is, without calibrating again; a profile
    # holds for the widths, so it serves the model's first 8 layers too
    z = tmp_path / "z"
    assert (
        run_cli(
            ["validate", f"profile={hw_file}", "scale=32", "layers=8", "requests=1", "replays=2", f"hydra.run.dir={z}"]
        )
        == 0
    )
    assert "calibrating" not in capsys.readouterr().out
    v = json.loads((z / "results.json").read_text())
    import yaml

    assert v["profile"]["link_gbps"] == yaml.safe_load(hw_file.read_text())["profile"]["link_gbps"]
    assert v["model"] == "mixtral-8x7b/32-L8"
    for part in ("sim", "replay"):
        assert sorted(pd.read_parquet(z / part / "layers.parquet").layer.unique()) == list(range(8))
    assert run_cli(["validate", "scale=32", "layers=33", f"hydra.run.dir={tmp_path / 'w'}"]) == 2
    assert "layers=33 must be between 1 and" in capsys.readouterr().err


def test_validate_reports_the_error(tmp_path, capsys):
    run = tmp_path / "val"
    assert (
        run_cli(
            ["validate", "scale=32", "requests=1", "replays=2", "rounds=6", "timeline=true", f"hydra.run.dir={run}"]
        )
        == 0
    )
    v = json.loads((run / "results.json").read_text())["validation"]
    assert set(v) >= {"mape", "bias", "noise_mape", "prefill_mape", "p50_abs_ms", "p95_abs_ms", "tokens", "device"}
    assert v["tokens"] > 0 and v["device"] == "cpu" and v["mape"] >= 0 and v["noise_mape"] >= 0
    assert v["prefills"] == 1 and v["prefill_mape"] >= 0 and abs(v["bias"]) <= v["mape"] + 1e-12
    tokens = pd.read_parquet(run / "tokens.parquet")
    rel = (tokens.simulated_ms - tokens.measured_ms) / tokens.measured_ms
    assert v["bias"] == pytest.approx(rel.mean()) and v["mape"] == pytest.approx(rel.abs().mean())
    for part in ("sim", "replay"):
        r = json.loads((run / part / "results.json").read_text())
        assert {"decode_ms_per_token", "hit_rate", "served_mix", "prefetch", "bytes_loaded"} <= set(r)
    sim_r = json.loads((run / "sim" / "results.json").read_text())
    rep_r = json.loads((run / "replay" / "results.json").read_text())
    # the same decisions; whether a prefetch landed in time is each timing's own (the replay's is measured)
    assert sim_r["served_mix"] == rep_r["served_mix"]
    for k in ("issued", "used", "behind_cpu"):
        assert sim_r["prefetch"][k] == rep_r["prefetch"][k], k
    hits = sim_r["served_mix"]["high_hit"] + sim_r["served_mix"]["low_hit"]
    for r in (sim_r, rep_r):
        assert r["hit_rate"] <= hits / (1 - r["served_mix"]["skipped"]) + 1e-12
    for f in ("validation.png", "validation.svg", "report.md", "tokens.parquet", "gantt.png", "gantt.svg"):
        assert (run / f).is_file()
    assert "MAPE" in capsys.readouterr().out
    assert "![schedule](gantt.png)" in (run / "report.md").read_text()
    _check_validation_timeline(run, pd.read_parquet(run / "sim" / "passes.parquet"))


def test_replays_run_between_the_calibrations_rounds(four_layers, monkeypatch):
    """The replays (resident, copy probe and validate's own) run between the calibration's rounds, spread
    evenly, so that they meet the machine in the states the calibration meets; the profile carries the
    loop overhead and the copy cost measured there."""
    import hobbit.executor.validate as V

    _, _, store, trace = four_layers
    events: list = []
    real = V.calibrate

    def spy(*args, between=None, **kw):
        def note(r):
            events.append(("round", r))
            if between is not None:
                between(r)

        return real(*args, between=note, **kw)

    monkeypatch.setattr(V, "calibrate", spy)
    hw = V.full_profile(
        store,
        CPU,
        ("bf16", "int4"),
        trace,
        lambda _: None,
        samples=2,
        replay=lambda rough: events.append(("replay", rough.profile is not None and rough.profile.link_gbps > 0)),
        rounds=4,
    )
    assert V.slots(4, 2) == [0, 1, 0, 1] and V.slots(15, 5) == [0, 0, 1] * 5 and sum(V.slots(3, 7)) == 7
    # more replays, more rounds: the grouped minimum keeps three groups of as many samples as a token's
    assert V.calibration_rounds(5) == 15 and V.calibration_rounds(2) == 15 and V.calibration_rounds(10) == 30
    from hobbit.executor.calibrate import pick

    r = np.arange(30.0)[::-1]  # 30 rounds, 10 replays: groups of every third round, the mean of their minima
    assert pick(r, "min", axis=0, group=10) == np.mean([r[j::3].min() for j in range(3)])
    # the one-round profile the decisions come from, then four rounds with a replay after the 2nd and the 4th
    assert events == [
        ("round", 0),
        ("round", 0),
        ("round", 1),
        ("replay", True),
        ("round", 2),
        ("round", 3),
        ("replay", True),
    ]
    assert hw.profile is not None and hw.profile.layer_overhead_s > 0 and hw.profile.copy_issue_s > 0


def test_decisions_the_profile_changes_are_replayed_again(tmp_path, capsys, monkeypatch):
    """Where the calibrated profile's decisions differ from those replayed between the rounds (a choice made
    on the costs: misses computed on the CPU), they are replayed again after the calibration, and the replay
    executes the decisions simulated with the calibrated profile."""
    import hobbit.executor.validate as V

    monkeypatch.setattr(V, "same_decisions", lambda a, b: False)
    rounds, real = [], V.calibrate
    monkeypatch.setattr(V, "calibrate", lambda *a, **kw: rounds.append(kw["rounds"]) or real(*a, **kw))
    run = tmp_path / "val"
    assert (
        run_cli(
            [
                "validate",
                "system=fiddler",
                "scale=32",
                "layers=4",
                "requests=1",
                "replays=2",
                "rounds=6",
                f"hydra.run.dir={run}",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "between its rounds" in out and "replaying them again" in out
    assert rounds == [1, 6]  # the one-round profile the first decisions come from, then rounds=6 (3 per replay)
    sim_r = json.loads((run / "sim" / "results.json").read_text())
    rep_r = json.loads((run / "replay" / "results.json").read_text())
    assert sim_r["served_mix"] == rep_r["served_mix"] and sim_r["served_mix"]["cpu"] > 0


def _check_validation_timeline(run, sim_passes):
    """timeline.json of a validation: simulated (pid 1) and measured (pid 2), pass p starting at the same time in
    both; the simulated slices add up to the simulated latency, the measured layers and head to the measured."""
    from timeline_check import check_format, load, tokens

    doc = load(run / "timeline.json")
    threads = check_format(doc)
    procs = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"}
    assert procs[1] == "simulated" and procs[2].startswith("measured") and doc["otherData"]["aligned"]
    sim, real = tokens(threads, 1), tokens(threads, 2)
    assert len(sim) == len(real) == min(64, len(sim_passes))
    for (s_tok, _, s_work), (r_tok, r_marks, r_work), row in zip(sim, real, sim_passes.itertuples()):
        assert s_tok["ts"] == r_tok["ts"] and s_tok["args"]["pass"] == r_tok["args"]["pass"]  # aligned
        assert s_tok["dur"] / 1e3 == pytest.approx(row.latency_ms, rel=1e-9, abs=1e-5)
        assert sum(e["dur"] for e in s_work) == pytest.approx(s_tok["dur"], rel=1e-9, abs=1e-3 * len(s_work))
        assert sum(e["dur"] for e in r_marks) == pytest.approx(r_tok["dur"], rel=1e-9, abs=1e-3 * len(r_marks))
        assert sum(e["dur"] for e in r_work) <= r_tok["dur"] + 1e-3 * len(r_work)  # the loop's own time: gaps
        # the same work in both: one slice per expert computed, per copy that ran
        assert sorted(e["name"] for e in s_work if e["cat"] == "expert") == sorted(
            e["name"] for e in r_work if e["cat"] == "expert"
        )
    s_copies = sorted(e["args"]["tid"] for e in threads.get((1, 2), []))
    r_copies = sorted(e["args"]["tid"] for e in threads.get((2, 2), []))
    assert s_copies and set(r_copies) <= set(s_copies)  # a measured run may cancel a prefetch the model ran


def test_bad_input_is_refused_before_work(tmp_path, capsys):
    if not torch.cuda.is_available():
        assert run_cli(["calibrate", "device=cuda", f"hydra.run.dir={tmp_path / 'a'}"]) == 2
        assert "no CUDA device" in capsys.readouterr().err
    assert run_cli(["calibrate", "scale=1", f"hydra.run.dir={tmp_path / 'b'}"]) == 2  # full Mixtral: too big
    assert "host memory" in capsys.readouterr().err
    assert run_cli(["validate", f"profile={tmp_path / 'missing.yaml'}", f"hydra.run.dir={tmp_path / 'c'}"]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert run_cli(["calibrate", "scale=7", f"hydra.run.dir={tmp_path / 'd'}"]) == 2
    assert "scale=7" in capsys.readouterr().err
    assert run_cli(["validate", "rounds=0", f"hydra.run.dir={tmp_path / 'e'}"]) == 2
    assert "rounds" in capsys.readouterr().err
    # a system timed by a rule the replay does not run (llama.cpp of 2024's whole CPU layers) is refused
    assert run_cli(["validate", "system=llama-cpp-2024", f"hydra.run.dir={tmp_path / 'f'}"]) == 2
    assert "system.cpu_layer_scope=whole" in capsys.readouterr().err


def test_the_copy_engine_drops_the_prefetches_a_step_did_not_start():
    """``CopyEngine.clear`` (MoE-Infinity's cleared queue, as the simulator's ``requeue``): queued prefetches leave
    and are never copied; one a use names comes back as a demand copy and is."""
    eng = CopyEngine(torch.device("cpu"))
    src = [torch.full((4,), float(i)) for i in range(3)]
    dst = [torch.zeros(4) for _ in range(3)]
    with eng.cv:  # the copy thread waits on this (re-entrant) lock: nothing starts until it is let go
        eng.submit([Copy(i, src[i], dst[i], demand=False) for i in range(3)])
        eng.clear([1, 7])
        assert [c.tid for c in eng.queue] == [1] and eng.queue[0].demand and set(eng.gone) == {0, 2}
    eng.wait(1)
    eng.close()
    assert torch.equal(dst[1], src[1]) and not dst[0].any() and not dst[2].any()
    assert eng.cancelled == 2 and not eng.copies[0].done.is_set()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_kernels_match_the_reference():
    g = torch.Generator().manual_seed(2)
    h, f = 512, 1024
    gu, down = torch.randn(2 * f, h, generator=g) * h**-0.5, torch.randn(h, f, generator=g) * f**-0.5
    dev = torch.device("cuda")
    for precision in ("bf16", "int4"):
        k = ExpertKernel(precision, h, f, dev)
        buf = k.pack(gu, down).to(dev)
        x = (torch.randn(8, h, generator=g) * 0.5).to(torch.bfloat16)
        got = k.forward(x.to(dev), k.views(buf)).float().cpu()
        want = reference(x.float(), gu, down, precision)
        assert (got - want).abs().max() <= 0.02 * want.abs().max()


def test_calibration_fits_and_replay_statistics_drop_disturbances():
    from hobbit.executor.calibrate import _relative_fit
    from hobbit.executor.validate import _combine_runs, noise
    from hobbit.sim.timeline import Timeline

    # a + b*T + c*T*C, recovered exactly; in relative error a one-token point weighs as much as a long prefill
    shapes = np.array([[1.0, t, t * c] for t in (1, 8, 256) for c in (t + 64, t + 320)])
    truth = np.array([6e-4, 2e-6, 1e-7])
    assert np.allclose(_relative_fit(shapes, shapes @ truth), truth, rtol=1e-9)
    noisy = shapes @ truth * np.array([1, 1, 1, 1, 1.5, 1.5])  # long prefills 50 % slow
    rel = _relative_fit(shapes, noisy)
    absolute, *_ = np.linalg.lstsq(shapes, noisy, rcond=None)
    assert abs(rel[0] + rel[1] - 6.02e-4) < abs(absolute[0] + absolute[1] - 6.02e-4)

    # per token, the median or the min of three replays: one run's slow spell drops out
    def runs():
        out = []
        for spell in ((0, 0, 0), (0, 5, 0), (0, 0, 9)):
            out.append(
                Timeline(np.arange(3.0) * 10, np.arange(3.0) * 10 + 1 + np.array(spell), np.zeros(1), np.zeros(1))
            )
        return out

    for statistic in ("median", "min"):
        assert np.allclose(_combine_runs(runs(), statistic).pass_end - np.arange(3.0) * 10, 1.0)
    # the replays' own spread: the mean over ordered pairs of the per-token MAPE between two replays
    wl = dataclasses.make_dataclass("W", ["pass_phase"])([1, 1, 1])
    a, b = runs()[:2]  # latencies (1, 1, 1) and (1, 6, 1)
    assert noise(wl, [a, b]) == pytest.approx(((5 / 6) / 3 + 5 / 3) / 2)
    assert noise(wl, [a, a]) == 0.0


def test_a_profiles_minimum_takes_as_many_samples_as_a_replayed_tokens():
    """The minimum of more samples is lower: 15 calibration rounds reduce to the mean of three minima of
    five, what a token's minimum over five replays estimates; a group takes every third round, so that
    it spans the calibration as the replays between its rounds do."""
    from hobbit.executor.calibrate import pick

    rounds = np.array([[5, 4, 3, 2, 1, 9, 8, 7, 6, 6, 3, 3, 3, 3, 3.0]]).T * [1, 10]  # [rounds, values]
    # groups: rounds 0, 3, 6, 9, 12 (min 2), 1, 4, 7, 10, 13 (min 1), 2, 5, 8, 11, 14 (min 3)
    assert np.allclose(pick(rounds, "min", axis=0, group=5), [(2 + 1 + 3) / 3, (20 + 10 + 30) / 3])
    drift = np.array([2.0] * 5 + [1.0] * 10)  # a slow spell over the first third: every group meets the fast state
    assert pick(drift, "min", axis=0, group=5) == 1.0
    assert np.allclose(pick(rounds, "min", axis=0), [1, 10])
    assert np.allclose(pick(rounds, "median", axis=0, group=5), [3, 30])
    assert pick(rounds[:7, 0], "min", axis=0, group=5) == 1  # fewer than two groups: the plain minimum
    rng = np.random.default_rng(0)  # on noise, the grouped minimum estimates the minimum of five
    x = rng.normal(1.0, 0.1, (300_000, 1))
    assert pick(x, "min", axis=0, group=5)[0] == pytest.approx(
        np.min(x[:5000].reshape(1000, 5), axis=1).mean(), abs=0.005
    )


def test_the_copy_engine_names_the_copy_it_finishes_first_while_its_queue_moves():
    """``CopyEngine.first``: a copy not queued (in flight or done) first, then queue order (a demand copy ahead of
    queued prefetches). The replayer asks while the engine's thread pops the queue: it reads the queue under the
    engine's lock (iterated unlocked, a pop in between would raise "deque mutated during iteration")."""
    link = CopyEngine(torch.device("cpu"), dry=True)
    link.close()  # no thread serves the queue: the test moves it
    t = torch.zeros(1)
    link.submit([Copy(1, t, t, demand=False), Copy(2, t, t, demand=False), Copy(3, t, t, demand=True)])
    assert [c.tid for c in link.queue] == [3, 1, 2]
    assert link.first([2, 1]) == 1 and link.first([1, 3]) == 3 and link.first([2, 9, 3]) == 9
    stop = threading.Event()

    def churn() -> None:  # the engine's thread, as fast as it can: a copy in, the oldest out, under its lock
        tid = 100
        while not stop.is_set():
            with link.cv:
                link.queue.append(Copy(tid, t, t, demand=False))
                link.queue.popleft()
            tid += 1

    for _ in range(60):
        link.queue.append(Copy(10, t, t, demand=False))
    mover = threading.Thread(target=churn)
    mover.start()
    try:
        for _ in range(20_000):
            assert link.first([1, 2]) in (1, 2)
    finally:
        stop.set()
        mover.join()
