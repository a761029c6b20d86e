"""The bundled tiny PhiMoE: present, small, PhiMoE-shaped, trained, and it routes deterministically."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest
import torch

from hobbit.traces.io import read_trace
from hobbit.traces.tiny import TINY_PHIMOE_CONFIG, bundled_phimoe_dir, bundled_phimoe_trace

MAX_BYTES = 20_000_000  # 20 MB, decimal


@pytest.fixture(scope="module")
def model():
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(bundled_phimoe_dir(), dtype=torch.float32).eval()


def test_files_topology_and_size():
    d = bundled_phimoe_dir()
    for name in [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "prompts.jsonl",
        "heldout.txt",
        "training_log.json",
        "loss_curve.png",
        "README.md",
        "trace.parquet",
    ]:
        assert (d / name).is_file(), name
    assert (d / "model.safetensors").stat().st_size <= MAX_BYTES
    cfg = json.loads((d / "config.json").read_text())
    assert (cfg["model_type"], cfg["num_hidden_layers"], cfg["num_local_experts"], cfg["num_experts_per_tok"]) == (
        "phimoe",
        32,
        16,
        2,
    )
    assert (cfg["hidden_size"], cfg["vocab_size"], cfg["input_jitter_noise"]) == (64, 257, 0.0)
    assert cfg["intermediate_size"] == TINY_PHIMOE_CONFIG["intermediate_size"]  # checkpoint matches the code
    assert cfg["intermediate_size"] % 8 == 0  # transformers' grouped_mm experts: 16-byte strides in 16-bit dtypes
    log = json.loads((d / "training_log.json").read_text())
    assert log["config"]["arch"] == "phimoe" and log["config"]["seed"] == 1234
    assert len(log["curve"]) == log["config"]["steps"]


def test_loads_as_phimoe_and_routes_deterministically(model):
    from transformers import PhimoeForCausalLM

    assert isinstance(model, PhimoeForCausalLM) and not model.training
    layers: Any = model.model.layers  # nn.Module's attribute lookup reads each block's parts as Tensor | Module
    assert type(layers[0].mlp.router).__name__ == "PhimoeTopKRouter"
    ids = torch.tensor([list(b"def add(a, b):\n    return a + b\n")])
    with torch.no_grad():
        a = model(input_ids=ids, output_router_logits=True)
        b = model(input_ids=ids, output_router_logits=True)
        x = torch.randn(16, 64, generator=torch.Generator().manual_seed(0))
        r1, r2 = layers[5].mlp.router(x), layers[5].mlp.router(x)
    assert torch.equal(a.logits, b.logits)
    assert len(a.router_logits) == 32 and all(torch.equal(p, q) for p, q in zip(a.router_logits, b.router_logits))
    assert torch.equal(r1[2], r2[2]) and torch.equal(r1[1], r2[1])
    # eval routing is the top-2 of the router logits
    assert torch.equal(r1[2].sort(-1).values, r1[0].topk(2, dim=-1).indices.sort(-1).values)


def test_heldout_loss_is_far_below_uniform(model):
    # 8 windows of 256 bytes, the training length (both tiny models get worse past it)
    data = (bundled_phimoe_dir() / "heldout.txt").read_bytes()
    ids = torch.tensor([list(data[i * 256 : (i + 1) * 256]) for i in range(8)])
    with torch.no_grad():
        loss = model(input_ids=ids, labels=ids).loss.item()
    assert loss < 0.4 * math.log(257), loss  # the bundled checkpoint: 0.94 nats/byte; uniform: 5.55


def test_bundled_trace():
    t = read_trace(bundled_phimoe_trace())
    m = t.meta.model
    assert (m.name, m.architecture, m.num_layers, m.num_experts, m.top_k, m.weight_rule) == (
        "hobbit-tiny-phimoe",
        "PhimoeForCausalLM",
        32,
        16,
        2,
        "sparsemixer",
    )
    src = t.meta.source
    assert (src["num_prompts"], src["max_new_tokens"], src["batch_size"], t.meta.lookahead_depth) == (32, 64, 8, 3)
    layer, ids = t.arrays.layer, t.arrays.expert_ids
    for l in range(32):
        used = np.unique(ids[layer == l])
        assert len(used) >= 8, (l, used)  # not collapsed onto a few experts
