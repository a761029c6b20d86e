"""Configs: every group option composes into typed configs, and the model shapes are right."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from hobbit.sim.config import HardwareConfig, ModelConfig, SystemConfig
from hobbit.sim.system_checks import check_system

from sim_helpers import compose_sim

CONF = Path(__file__).parents[1] / "conf"


def _options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def test_the_groups_hold_what_the_simulator_needs():
    assert set(_options("model")) >= {
        "mixtral-8x7b",
        "phi-3.5-moe",
        "qwen1.5-moe-a2.7b",
        "qwen3-30b-a3b",
        "olmoe-1b-7b",
        "deepseek-v3",
        "qwen3.5-397b-a17b",
        "tiny",
    }
    assert set(_options("hardware")) >= {"rtx4090-pcie4", "jetson-agx-orin", "h200-pcie5", "gh200-c2c", "a100-pcie4"}
    assert set(_options("system")) >= {
        "hobbit",
        "moe-offloading",
        "moe-infinity",
        "fiddler",
        "llama-cpp",
        "on-demand",
        "hobbit-oracle",
        "hobbit-cpu",
        "hobbit-no-mixed",
        "hobbit-no-prefetch",
        "hobbit-lru",
    }


@pytest.mark.parametrize("group,option", [(g, o) for g in ("model", "hardware", "system") for o in _options(g)])
def test_every_option_composes(group, option):
    cfg = compose_sim(f"{group}={option}")
    node = getattr(cfg, group)
    assert isinstance(node, {"model": ModelConfig, "hardware": HardwareConfig, "system": SystemConfig}[group])
    assert node.name == option
    if group == "system":
        check_system(node)
    if group in ("model", "hardware"):
        assert node.source, f"{group}/{option} must cite its source"


def test_ablations_differ_from_hobbit_in_one_part_only():
    base = compose_sim("system=hobbit").system
    assert compose_sim("system=hobbit-no-mixed").system.precision.mode == "high"
    assert compose_sim("system=hobbit-no-prefetch").system.prefetch.kind == "none"
    lru = compose_sim("system=hobbit-lru").system
    assert lru.cache.policy == "lru" and lru.prefetch == base.prefetch and lru.precision == base.precision


def test_expert_bytes_include_the_quantisation_scales():
    m = compose_sim("model=mixtral-8x7b").model
    params = 3 * 4096 * 14336
    assert m.expert_bytes("fp16") == 2 * params == 352_321_536  # docs/references.md: 352.3 MB
    assert m.expert_bytes("int4") == params // 2 + params // 128 * 4  # 88.1 MB + an fp16 scale and zero per 128
    assert m.expert_bytes("int8") == params + params // 128 * 4
    assert m.expert_bytes("int2") == params // 4 + params // 128 * 4


def _meta_model(name: str):
    import transformers
    from transformers import AutoModelForCausalLM

    c = {
        "mixtral-8x7b": transformers.MixtralConfig(
            vocab_size=32000,
            hidden_size=4096,
            intermediate_size=14336,
            num_hidden_layers=2,
            num_attention_heads=32,
            num_key_value_heads=8,
            num_local_experts=8,
            num_experts_per_tok=2,
        ),
        "phi-3.5-moe": transformers.PhimoeConfig(
            vocab_size=32064,
            hidden_size=4096,
            intermediate_size=6400,
            num_hidden_layers=2,
            num_attention_heads=32,
            num_key_value_heads=8,
            num_local_experts=16,
            num_experts_per_tok=2,
            attention_bias=True,
            lm_head_bias=True,
        ),
        "qwen1.5-moe-a2.7b": transformers.Qwen2MoeConfig(
            vocab_size=151936,
            hidden_size=2048,
            intermediate_size=5632,
            num_hidden_layers=2,
            num_attention_heads=16,
            num_key_value_heads=16,
            moe_intermediate_size=1408,
            shared_expert_intermediate_size=5632,
            num_experts=60,
            num_experts_per_tok=4,
            qkv_bias=True,
        ),
        "qwen3-30b-a3b": transformers.Qwen3MoeConfig(
            vocab_size=151936,
            hidden_size=2048,
            intermediate_size=6144,
            num_hidden_layers=2,
            num_attention_heads=32,
            num_key_value_heads=4,
            head_dim=128,  # pyright: ignore[reportCallIssue]  # kept as an extra key; the signature omits it
            moe_intermediate_size=768,
            num_experts=128,
            num_experts_per_tok=8,
        ),
        "olmoe-1b-7b": transformers.OlmoeConfig(
            vocab_size=50304,
            hidden_size=2048,
            intermediate_size=1024,
            num_hidden_layers=2,
            num_attention_heads=16,
            num_key_value_heads=16,
            num_experts=64,
            num_experts_per_tok=8,
        ),
        "deepseek-v3": transformers.DeepseekV3Config(
            vocab_size=129280,
            hidden_size=7168,
            intermediate_size=18432,
            moe_intermediate_size=2048,
            num_hidden_layers=4,
            first_k_dense_replace=3,
            n_routed_experts=256,
            num_experts_per_tok=8,
            n_shared_experts=1,
            num_attention_heads=128,
            num_key_value_heads=128,
            q_lora_rank=1536,
            kv_lora_rank=512,
            qk_rope_head_dim=64,
            qk_nope_head_dim=128,
            v_head_dim=128,
            n_group=8,
            topk_group=4,
        ),
    }[name]
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(c)


@pytest.mark.parametrize(  # the presets counted from a config.json: tests/test_presets.py
    "name", ["mixtral-8x7b", "phi-3.5-moe", "qwen1.5-moe-a2.7b", "olmoe-1b-7b"]
)
def test_model_shapes_match_transformers(name):
    """Parameter counts in conf/model against transformers' own modules for the published shapes."""
    y = yaml.safe_load((CONF / "model" / f"{name}.yaml").read_text())
    m = _meta_model(name)
    layer = m.model.layers[-1]
    tensors = dict(layer.named_parameters()) | dict(layer.named_buffers())
    expert = sum(t.numel() for n, t in tensors.items() if ".experts." in n) // y["num_experts"]
    dense = sum(t.numel() for n, t in tensors.items() if ".experts." not in n and "rotary" not in n)
    other = sum(p.numel() for n, p in m.named_parameters() if ".layers." not in n)
    assert expert == 3 * y["hidden_size"] * y["expert_ffn"]
    assert dense == y["dense_params_per_layer"]
    assert other == y["other_params"]


def test_tiny_model_config_matches_the_bundled_checkpoint():
    from transformers import AutoModelForCausalLM

    from hobbit.traces.tiny import bundled_model_dir

    y = yaml.safe_load((CONF / "model" / "tiny.yaml").read_text())
    m = AutoModelForCausalLM.from_pretrained(bundled_model_dir())
    layer = m.model.layers[0]
    assert sum(p.numel() for n, p in layer.named_parameters() if ".experts." not in n) == y["dense_params_per_layer"]
    assert sum(p.numel() for n, p in m.named_parameters() if ".layers." not in n) == y["other_params"]
