"""The bundled tiny MoE: present, small, trained, and its routing is learned, not random."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from hobbit.traces.capture import CaptureConfig, capture
from hobbit.traces.io import read_trace
from hobbit.traces.stats import summarize
from hobbit.traces.tiny import build_byte_tokenizer, bundled_model_dir, bundled_prompts_path

MAX_BYTES = 20 * 1024 * 1024


def test_bundled_files_are_complete_and_small():
    d = bundled_model_dir()
    for name in [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "prompts.jsonl",
        "training_log.json",
        "loss_curve.png",
        "README.md",
    ]:
        assert (d / name).is_file(), name
    assert (d / "model.safetensors").stat().st_size <= MAX_BYTES
    cfg = json.loads((d / "config.json").read_text())
    assert (cfg["model_type"], cfg["num_hidden_layers"], cfg["num_local_experts"], cfg["num_experts_per_tok"]) == (
        "mixtral",
        32,
        8,
        2,
    )
    log = json.loads((d / "training_log.json").read_text())
    assert log["config"]["seed"] == 1234 and len(log["curve"]) == log["config"]["steps"]
    evals = [r["eval_loss"] for r in log["curve"] if "eval_loss" in r]
    assert evals[-1] < 0.5 * evals[0]  # it learned: held-out bytes cost far less than at the start
    prompts = [json.loads(x) for x in bundled_prompts_path().read_text().splitlines()]
    assert len(prompts) >= 32 and all(p["prompt"] and p["source"] for p in prompts)


def test_byte_tokenizer_is_the_identity_on_bytes():
    tok = build_byte_tokenizer()
    text = "def f(x):\n\treturn x  # é 漢\n"
    ids = tok(text)["input_ids"]
    assert ids == list(text.encode()) and tok.decode(ids) == text


def _rerandomised(src: Path, dst: Path, seed: int) -> Path:
    """Same architecture and per-tensor weight statistics, values drawn at random."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * p.std() + p.mean())
    model.save_pretrained(dst)
    build_byte_tokenizer().save_pretrained(dst)
    return dst


def _routing_stats(model: Path | None, out: Path) -> dict:
    res = capture(
        CaptureConfig(
            model=None if model is None else str(model),
            prompts=str(bundled_prompts_path()),
            out=str(out),
            max_prompts=6,
            max_new_tokens=24,
            lookahead=1,
            batch_size=6,
            progress=False,
        )
    )
    s = summarize(read_trace(res.path))
    la, reuse = s["lookahead"][0], s["next_token_reuse"]
    return {
        "lookahead_top1": la["top1"],
        "lookahead_lift": la["top1"] / la["baseline_top1"],
        "reuse": reuse["all"],
        "reuse_lift": reuse["all"] / reuse["baseline"],
        "entropy": float(sum(s["expert_load"]["entropy"]) / len(s["expert_load"]["entropy"])),
    }


def _hf_init(dst: Path) -> Path:
    """The same architecture as transformers initialises it."""
    from transformers import MixtralForCausalLM

    from hobbit.traces.tiny import build_tiny_config

    torch.manual_seed(0)
    MixtralForCausalLM(build_tiny_config()).save_pretrained(dst)
    build_byte_tokenizer().save_pretrained(dst)
    return dst


def test_routing_is_learned_not_random(tmp_path):
    """Against the same architecture at random init: transformers' own initialisation, and
    random weights at the trained model's per-tensor scale.

    A deep random transformer collapses its token representations: tokens look alike and
    route alike, to a few experts. Its raw next-token reuse is then high and its lookahead
    guesses often right by popularity alone, so the sound comparisons are against what the
    layer's expert load alone implies (``*_lift``, see ``traces.stats``).
    The bundled checkpoint on 6 prompts x 24 tokens: lookahead top-1 0.84 (5.5x chance given
    the load), reuse 0.42 (1.58x); the controls 0.68-0.78 (1.4-1.9x), reuse 0.65-0.82
    (1.25-1.35x): the margins asserted below.
    """
    trained = _routing_stats(None, tmp_path / "trained.parquet")
    controls = [_routing_stats(_hf_init(tmp_path / "hf"), tmp_path / "hf.parquet")]
    controls += [
        _routing_stats(_rerandomised(bundled_model_dir(), tmp_path / f"r{seed}", seed), tmp_path / f"r{seed}.pq")
        for seed in (0, 1)
    ]
    for control in controls:
        assert trained["lookahead_top1"] > control["lookahead_top1"] + 0.03, (trained, control)
        assert trained["lookahead_lift"] > 2 * control["lookahead_lift"], (trained, control)
        assert trained["reuse_lift"] > control["reuse_lift"] + 0.15, (trained, control)
        assert trained["entropy"] > control["entropy"] + 0.15
    assert trained["entropy"] > 0.95  # balanced: no layer sends everything to one expert


@pytest.mark.slow
def test_training_script_runs(tmp_path):
    from hobbit.traces.train_tiny import main

    main(
        [
            "--out",
            str(tmp_path),
            "--steps",
            "2",
            "--eval-every",
            "2",
            "--eval-batches",
            "1",
            "--batch-size",
            "2",
            "--seq-len",
            "32",
            "--num-prompts",
            "3",
        ]
    )
    log = json.loads((tmp_path / "training_log.json").read_text())
    assert log["tokens_seen"] == 2 * 2 * 32 and len(log["curve"]) == 2
    assert len((tmp_path / "prompts.jsonl").read_text().splitlines()) == 3
    res = capture(
        CaptureConfig(
            model=str(tmp_path),
            prompts=str(tmp_path / "prompts.jsonl"),
            out=str(tmp_path / "t.parquet"),
            max_new_tokens=2,
            progress=False,
        )
    )
    assert read_trace(res.path).meta.model.num_layers == 32


def test_training_writes_its_files_whole_or_not_at_all(tmp_path, monkeypatch):
    """The checkpoint's files are written aside and renamed into ``--out`` at the end: a run that stops while
    writing leaves ``--out`` as it was (its other files kept) and no hidden folder; a run that ends adds its files
    beside them."""
    from transformers import MixtralForCausalLM

    from hobbit.traces import train_tiny
    from hobbit.traces.tiny import build_tiny_config

    src = tmp_path / "heldout.py"
    src.write_text("def f(x):\n    return x + 1\n\n\nclass A:\n    pass\n" * 20)
    out = tmp_path / "ckpt"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    cfg = train_tiny.TrainConfig(out=str(out), steps=1, num_prompts=1)
    model = MixtralForCausalLM(build_tiny_config("mixtral"))
    curve = [
        {"step": 1, "train_loss": 5.0, "balance_loss": 0.1, "eval_loss": 5.0}
        | {"routing_entropy_mean": 0.9, "routing_entropy_min": 0.8}
    ]
    args = (model, cfg, curve, [("heldout.py", src)], "0" * 64, 10, 10, 1.0)

    def stop(*_a, **_k):
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(train_tiny, "write_model_card", stop)
        with pytest.raises(KeyboardInterrupt):
            train_tiny._save(*args)
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]

    log = train_tiny._save(*args)
    names = {p.name for p in out.iterdir()}
    assert {"notes.txt", "model.safetensors", "config.json", "training_log.json", "prompts.jsonl", "README.md"} <= names
    assert not any(n.startswith(".") for n in names)
    assert json.loads((out / "training_log.json").read_text())["tokens_seen"] == log["tokens_seen"]
