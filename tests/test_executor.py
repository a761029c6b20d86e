"""The executor: same decisions as the simulator, kernels against the reference, the cache
within its slots, calibrate and validate end to end, and bad input refused before any work."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

from conftest import run_cli
from executor.kernels import ExpertKernel, reference
from executor.replay import Replayer
from executor.weights import build_store, reduce_model
from sim.policies.base import HIGH, LOW
from sim.run import simulate
from sim_helpers import bundled, compose_sim

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


def test_replay_runs_the_simulators_decisions_and_respects_the_slots(small):
    cfg, model, store, trace = small
    eb = (store.nbytes(HIGH), store.nbytes(LOW))
    system = dataclasses.replace(cfg.system, cache=dataclasses.replace(cfg.system.cache, high_bytes=20 * eb[0],
                                                                       low_bytes=30 * eb[1]))
    hw = cfg.hardware
    a = simulate(trace, model, hw, system, keep_log=True)
    b = simulate(trace, model, hw, system, keep_log=True)
    assert a.decisions.log == b.decisions.log  # the decisions are a pure function of trace and config
    from sim.workload import build_workload

    wl = build_workload(trace)
    rep = Replayer(wl, a.decisions, store)
    tl = rep.run()
    # what the replay holds in its cache is exactly what the decisions' cache holds
    log = a.decisions.log
    kept: set = set()
    for step in a.decisions.steps:
        kept -= set(step.evicted)
        kept |= set(step.kept)
    assert set(rep.resident) == kept
    high = sum(1 for k in rep.resident if k[2] == HIGH)
    low = sum(1 for k in rep.resident if k[2] == LOW)
    assert high <= 20 - system.prefetch.max_depth * 2 and low <= 30
    # every load the decisions made was copied (or cancelled before it started)
    loads = sum(len(s.loads) for s in a.decisions.steps)
    assert tl.bytes_moved <= a.decisions.bytes_requested and tl.bytes_moved > 0
    assert loads == sum(1 for x in log if x[3] in ("load", "prefetch"))
    assert np.all(tl.pass_end > tl.pass_start) and np.all(np.diff(tl.pass_start) > 0)


def test_calibrate_writes_a_profile_hobbit_sim_accepts(tmp_path, capsys):
    run = tmp_path / "cal"
    assert run_cli(["calibrate", "scale=32", f"hydra.run.dir={run}"]) == 0
    out = capsys.readouterr().out
    assert "use: hobbit sim" in out
    hw_file = next((run / "hardware").glob("*.yaml"))
    model_file = next((run / "model").glob("*.yaml"))
    from sim_helpers import write_first_requests

    trace = write_first_requests(tmp_path, 1)
    sim_dir = tmp_path / "sim"
    assert run_cli(["sim", f"trace={trace}", f"hydra.searchpath=[file://{run}]", f"hardware={hw_file.stem}",
                    f"model={model_file.stem}", f"hydra.run.dir={sim_dir}"]) == 0
    r = json.loads((sim_dir / "results.json").read_text())
    assert r["hardware"] == hw_file.stem and r["model"] == model_file.stem
    # a profile measured for other shapes is refused, naming both
    assert run_cli(["sim", f"trace={trace}", f"hydra.searchpath=[file://{run}]", f"hardware={hw_file.stem}",
                    f"hydra.run.dir={tmp_path / 'x'}"]) == 2
    assert "was calibrated for model" in capsys.readouterr().err


def test_validate_reports_the_error(tmp_path, capsys):
    run = tmp_path / "val"
    assert run_cli(["validate", "scale=32", "requests=1", f"hydra.run.dir={run}"]) == 0
    v = json.loads((run / "results.json").read_text())["validation"]
    assert set(v) >= {"mape", "p50_abs_ms", "p95_abs_ms", "tokens", "device"}
    assert v["tokens"] > 0 and v["device"] == "cpu" and v["mape"] >= 0
    for part in ("sim", "replay"):
        r = json.loads((run / part / "results.json").read_text())
        assert {"decode_ms_per_token", "hit_rate", "served_mix", "prefetch", "bytes_loaded"} <= set(r)
    sim_r = json.loads((run / "sim" / "results.json").read_text())
    rep_r = json.loads((run / "replay" / "results.json").read_text())
    assert sim_r["served_mix"] == rep_r["served_mix"] and sim_r["hit_rate"] == rep_r["hit_rate"]
    for f in ("validation.png", "validation.svg", "report.md", "tokens.parquet"):
        assert (run / f).is_file()
    assert "MAPE" in capsys.readouterr().out


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
