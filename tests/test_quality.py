"""`hobbit quality` on the bundled model: what mixed precision and skipping cost, measured."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from hobbit.executor.config import QualityConfig
from hobbit.executor.quality import run_quality
from hobbit.executor.quant import dequantize, fake_quantize, pack, quantize, unpack
from hobbit.sim.config import SystemConfig
from hobbit.sim.precisions import PrecisionConfig

from conftest import run_cli


def _run(mode="hobbit", t1=0.6, t2=0.9, **kw):
    system = SystemConfig(precision=PrecisionConfig(mode=mode, t1=t1, t2=t2))
    cfg = QualityConfig(system=system, context_length=128, max_windows=8, **kw)
    return run_quality(cfg)["quality"]


@pytest.fixture(scope="module")
def default():
    return _run()


def test_all_high_reproduces_the_model_exactly():
    q = _run(mode="high")
    assert q["ppl"] == q["ppl_reference"] and q["top1_agreement"] == 1.0 and q["kl_mean"] == 0.0
    assert q["proxy"] == 0.0


def _independent_low_ppl(context=128, windows=8) -> float:
    """All experts at int4 the plain way: numpy min-max codes per group, weights overwritten, stock forward."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hobbit.traces.tiny import bundled_heldout_text, bundled_model_dir

    model = AutoModelForCausalLM.from_pretrained(bundled_model_dir(), dtype=torch.float32).eval()

    def q4(w: np.ndarray) -> np.ndarray:
        n, k = w.shape
        g = 128 if k % 128 == 0 else k
        x = w.reshape(n, k // g, g)
        lo, hi = x.min(-1, keepdims=True), x.max(-1, keepdims=True)
        scale = np.maximum(hi - lo, 1e-12) / 15
        return (np.clip(np.round((x - lo) / scale), 0, 15) * scale + lo).reshape(n, k)

    with torch.no_grad():
        for layer in model.model.layers:
            ex = layer.mlp.experts
            for p in (ex.gate_up_proj, ex.down_proj):
                p.copy_(torch.from_numpy(np.stack([q4(m.numpy().astype(np.float32)) for m in p])))
    ids = AutoTokenizer.from_pretrained(bundled_model_dir())(bundled_heldout_text().read_text())["input_ids"]
    x = torch.tensor(ids[: windows * context + 1]).unfold(0, context + 1, context)[:windows]
    with torch.no_grad():
        lp = torch.log_softmax(model(input_ids=x[:, :-1]).logits.double(), -1)
    return float(torch.exp(-lp.gather(-1, x[:, 1:, None]).mean()))


def test_all_low_costs_what_an_independent_dequantised_model_costs():
    q = _run(mode="low")
    assert q["ppl"] != q["ppl_reference"] and q["top1_agreement"] < 1.0 and q["proxy"] == pytest.approx(1.0)
    assert q["ppl"] == pytest.approx(_independent_low_ppl(), rel=1e-4)


def test_skipping_every_non_top1_expert_is_worse_than_the_defaults(default):
    skip = _run(t1=0.0, t2=0.0)
    assert skip["ppl_rel_change"] > default["ppl_rel_change"] + 0.01
    assert skip["top1_agreement"] < default["top1_agreement"] and skip["kl_mean"] > default["kl_mean"]
    assert skip["skip_mass"] > 0.3 and default["skip_mass"] < 0.05


def test_proxy_is_monotone_in_t1_and_t2():
    grid = {(t1, t2): _run(t1=t1, t2=t2) for t1 in (0.3, 0.6, 0.9) for t2 in (0.9, 0.95, 1.0)}
    for t2 in (0.9, 0.95, 1.0):
        proxies = [grid[(t1, t2)]["proxy"] for t1 in (0.3, 0.6, 0.9)]
        assert proxies == sorted(proxies, reverse=True)  # higher T1: more served high
    for t1 in (0.3, 0.6, 0.9):
        skips = [grid[(t1, t2)]["skip_mass"] for t2 in (0.9, 0.95, 1.0)]
        assert skips == sorted(skips, reverse=True) and skips[-1] == 0.0  # higher T2: fewer skipped


def test_uniform_baselines_order(default):
    top1_high = _run(t1=0.0, t2=1.0)
    low = _run(mode="low")
    assert top1_high["skip_mass"] == 0.0 and 0 < top1_high["low_mass"] < low["low_mass"]
    assert top1_high["kl_mean"] < low["kl_mean"]


def test_int8_int2_pair_runs_and_costs_more_than_int4(default):
    q = _run(precision_pair="int8-int2")
    assert q["kl_mean"] > default["kl_mean"]


@pytest.mark.parametrize("bits", [8, 4, 2])
def test_pack_round_trips_and_dequantize_bounds_the_error(bits):
    g = torch.Generator().manual_seed(bits)
    w = torch.randn(16, 256, generator=g)
    qw = quantize(w, bits, 128)
    assert qw.packed.shape == (16, 256 * bits // 8) and qw.packed.dtype == torch.uint8
    codes = unpack(qw.packed, bits, 256)
    assert torch.equal(unpack(pack(codes, bits), bits, 256), codes)
    err = (dequantize(qw) - w).abs().reshape(16, 2, 128)
    step = qw.scale[..., None]
    assert bool((err <= step / 2 + 1e-6).all())  # at most half a quantisation step
    assert torch.equal(fake_quantize(w, f"int{bits}"), dequantize(qw))


def test_bad_inputs_exit_2(tmp_path, capsys):
    short = tmp_path / "short.txt"
    short.write_text("def f(): pass\n")
    assert run_cli(["quality", f"text={short}", f"hydra.run.dir={tmp_path / 'a'}"]) == 2
    assert "fewer than context_length" in capsys.readouterr().err
    assert run_cli(["quality", "system.precision.t1=0.95", f"hydra.run.dir={tmp_path / 'b'}"]) == 2
    assert "t1=0.95" in capsys.readouterr().err
    assert run_cli(["quality", "precision_pair=fp8-fp4", f"hydra.run.dir={tmp_path / 'c'}"]) == 2
    assert "precision_pair" in capsys.readouterr().err


def test_unsupported_checkpoint_exits_2(tmp_path, capsys):
    import transformers

    from hobbit.traces.tiny import build_byte_tokenizer

    cfg = transformers.LlamaConfig(
        vocab_size=257,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
    )
    transformers.AutoModelForCausalLM.from_config(cfg).save_pretrained(tmp_path / "llama")
    build_byte_tokenizer().save_pretrained(tmp_path / "llama")
    assert run_cli(["quality", f"checkpoint={tmp_path / 'llama'}", f"hydra.run.dir={tmp_path / 'r'}"]) == 2
    assert "model_type 'llama'" in capsys.readouterr().err


def test_quality_grid_joins_simulated_latency_in_the_report(tmp_path, capsys):
    from hobbit.traces.io import write_trace

    from sim_helpers import bundled

    tr = bundled(1)
    trace = write_trace(tmp_path / "one.parquet", tr.arrays, tr.meta)
    root = tmp_path / "study"
    grid = ["system.precision.t1=0.4,0.8", "system.precision.t2=0.9"]
    assert (
        run_cli(
            [
                "quality",
                "-m",
                *grid,
                "context_length=64",
                "max_windows=4",
                "hydra.launcher.n_jobs=1",
                f"hydra.sweep.dir={root / 'quality'}",
            ]
        )
        == 0
    )
    assert run_cli(["sim", "-m", f"trace={trace}", *grid, "engine=plain", f"hydra.sweep.dir={root / 'sim'}"]) == 0
    q = [json.loads(p.read_text())["quality"] for p in sorted((root / "quality").glob("*/results.json"))]
    assert len(q) == 2 and all(
        set(x) >= {"ppl_reference", "ppl", "ppl_rel_change", "top1_agreement", "kl_mean", "proxy"} for x in q
    )
    assert run_cli(["report", f"dir={root}"]) == 0
    md = (root / "report" / "report.md").read_text()
    assert "Measured quality joined to 2 simulated runs" in md
    svg = (root / "report" / "latency_quality.svg").read_text()
    assert "perplexity change (measured)" in svg
