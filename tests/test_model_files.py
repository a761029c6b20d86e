"""sim.model_files: a model's shapes from a config.json (every supported family) and from a GGUF file's header."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hobbit.catalogue.model_files import ARCHS, from_gguf, from_hf_config, load_model
from hobbit.sim.config import ConfigError, ModelConfig

SMALL: dict[str, Any] = dict(
    vocab_size=128,
    hidden_size=64,
    num_attention_heads=4,
    num_key_value_heads=2,
    pad_token_id=0,
    bos_token_id=None,
    eos_token_id=None,
)
MLA: dict[str, Any] = dict(kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=8)
LINEAR: dict[str, Any] = dict(
    linear_num_value_heads=4, linear_num_key_heads=2, linear_key_head_dim=8, linear_value_head_dim=8, head_dim=16
)
# DeepSeek's MoE shapes (V2 and V3 alike): a dense first layer, a shared expert, MLA
DEEPSEEK: dict[str, Any] = dict(
    num_hidden_layers=4,
    intermediate_size=48,
    moe_intermediate_size=16,
    n_routed_experts=8,
    num_experts_per_tok=2,
    first_k_dense_replace=1,
    n_shared_experts=1,
    **MLA,
)
# model_type -> (config class, its fields, expected (MoE layers, experts, top-k, expert FFN, dense layers))
TINY: dict[str, tuple[str, dict[str, Any], tuple[int, int, int, int, int]]] = {
    "mixtral": (
        "MixtralConfig",
        dict(num_hidden_layers=3, intermediate_size=32, num_local_experts=4),
        (3, 4, 2, 32, 0),
    ),
    "phimoe": ("PhimoeConfig", dict(num_hidden_layers=3, intermediate_size=24, num_local_experts=6), (3, 6, 2, 24, 0)),
    "qwen2_moe": (
        "Qwen2MoeConfig",
        dict(
            num_hidden_layers=3,
            moe_intermediate_size=16,
            shared_expert_intermediate_size=32,
            num_experts=6,
            num_experts_per_tok=2,
        ),
        (3, 6, 2, 16, 0),
    ),
    "qwen3_moe": (
        "Qwen3MoeConfig",
        dict(num_hidden_layers=3, moe_intermediate_size=16, num_experts=6, num_experts_per_tok=3, head_dim=16),
        (3, 6, 3, 16, 0),
    ),
    "olmoe": (
        "OlmoeConfig",
        dict(num_hidden_layers=2, intermediate_size=8, num_experts=5, num_experts_per_tok=2),
        (2, 5, 2, 8, 0),
    ),
    "deepseek_v2": ("DeepseekV2Config", dict(**DEEPSEEK, q_lora_rank=None), (3, 8, 2, 16, 1)),  # V2-Lite: no q LoRA
    "deepseek_v3": ("DeepseekV3Config", dict(**DEEPSEEK, n_group=2, topk_group=1, q_lora_rank=24), (3, 8, 2, 16, 1)),
    "gpt_oss": (
        "GptOssConfig",
        dict(
            num_hidden_layers=4,
            intermediate_size=16,
            num_local_experts=4,
            num_experts_per_tok=2,
            head_dim=16,
            sliding_window=8,
        ),
        (4, 4, 2, 16, 0),
    ),
    "glm4_moe": (
        "Glm4MoeConfig",
        dict(
            num_hidden_layers=3,
            intermediate_size=48,
            moe_intermediate_size=16,
            n_routed_experts=8,
            num_experts_per_tok=2,
            first_k_dense_replace=2,
            head_dim=16,
        ),
        (1, 8, 2, 16, 2),
    ),
    "glm4_moe_lite": (
        "Glm4MoeLiteConfig",
        dict(
            num_hidden_layers=3,
            intermediate_size=48,
            moe_intermediate_size=16,
            n_routed_experts=8,
            num_experts_per_tok=2,
            first_k_dense_replace=1,
            q_lora_rank=24,
            **MLA,
        ),
        (2, 8, 2, 16, 1),
    ),
    "qwen3_next": (
        "Qwen3NextConfig",
        dict(
            num_hidden_layers=4,
            moe_intermediate_size=16,
            shared_expert_intermediate_size=16,
            num_experts=8,
            num_experts_per_tok=2,
            **LINEAR,
        ),
        (4, 8, 2, 16, 0),
    ),
    "qwen3_5_moe": (
        "Qwen3_5MoeConfig",
        dict(
            text_config=dict(
                num_hidden_layers=4,
                moe_intermediate_size=16,
                shared_expert_intermediate_size=16,
                num_experts=8,
                num_experts_per_tok=2,
                **SMALL,
                **LINEAR,
            )
        ),
        (4, 8, 2, 16, 0),
    ),
    "kimi_linear": (
        "KimiLinearConfig",
        dict(
            num_hidden_layers=4,
            intermediate_size=48,
            moe_intermediate_size=16,
            num_experts=8,
            num_experts_per_token=2,
            first_k_dense_replace=1,
            linear_num_heads=4,
            linear_head_dim=8,
            layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"],
            **MLA,
        ),
        (3, 8, 2, 16, 1),
    ),
}


def _tiny_config(model_type: str) -> Any:
    import transformers

    cls, fields, _ = TINY[model_type]
    return getattr(transformers, cls)(**({} if "text_config" in fields else SMALL), **fields)


def _meta_total(cfg: Any) -> int:
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg.get_text_config())
    return sum(p.numel() for p in model.parameters())


def _sums(m: ModelConfig) -> tuple[int, int]:
    """The total the fields imply, and the tensors' sum plus the routed experts."""
    experts = m.num_layers * m.num_experts * m.expert_params
    implied = m.num_layers * m.dense_params_per_layer + experts + m.other_params
    return implied, sum(sum(v) for v in m.tensors.values()) + experts


def test_every_supported_family_is_covered():
    assert set(TINY) == set(ARCHS)


@pytest.mark.parametrize("model_type", sorted(TINY))
def test_tiny_config_json(model_type, tmp_path):
    cfg = _tiny_config(model_type)
    cfg.to_json_file(tmp_path / "config.json")
    m = from_hf_config(tmp_path)
    total = _meta_total(cfg)
    assert _sums(m) == (total, total)
    layers, experts, top_k, ffn, dense = TINY[model_type][2]
    assert (m.num_layers, m.num_experts, m.top_k, m.expert_ffn, m.dense_layers) == (layers, experts, top_k, ffn, dense)
    assert m.hidden_size == 64
    n_blocks = layers + dense
    assert all(
        len(v) == (1 if k in ("token_embd", "output", "output_norm", "output_norm.bias") else n_blocks)
        for k, v in m.tensors.items()
    )
    assert not {"unmapped", "unmapped_top"} & m.tensors.keys()  # every tensor has its GGUF name
    assert m.tensors["token_embd"] == [128 * 64]
    assert m.name == tmp_path.name and f"model_type {model_type}" in m.source


def test_attention_caches_by_hand(tmp_path):
    gqa = from_hf_config(_tiny_config("qwen3_moe").to_dict())
    assert (gqa.attention, gqa.kv_bytes_per_token, gqa.state_bytes) == ("gqa", 3 * 2 * (2 * 16) * 2, 0)
    mla = from_hf_config(_tiny_config("deepseek_v3").to_dict())  # the latent: kv_lora_rank + rope dims
    assert (mla.attention, mla.kv_bytes_per_token, mla.state_bytes) == ("mla", 4 * (16 + 8) * 2, 0)
    assert mla.tensors["attn_kv_a_mqa"] == [64 * 24] * 4 and mla.tensors["ffn_gate"] == [64 * 48, 0, 0, 0]
    nxt = from_hf_config(_tiny_config("qwen3_next").to_dict())  # layers 0-2 linear, 3 full
    conv = (2 * 2 * 8 + 4 * 8) * (4 - 1)  # q, k, v channels x (kernel - 1)
    assert (nxt.attention, nxt.kv_bytes_per_token) == ("hybrid", 2 * (2 * 16) * 2)
    assert nxt.state_bytes == 3 * 2 * (conv + 4 * 8 * 8)
    kimi = from_hf_config(_tiny_config("kimi_linear").to_dict())  # KDA layers 0-2, MLA layer 3
    assert (kimi.attention, kimi.kv_bytes_per_token) == ("hybrid", (16 + 8) * 2)
    assert kimi.state_bytes == 3 * 2 * (3 * 4 * 8 * 3 + 4 * 8 * 8)
    oss = from_hf_config(_tiny_config("gpt_oss").to_dict())  # layers 0, 2 slide over 8 tokens
    assert (oss.kv_bytes_per_token, oss.state_bytes) == (2 * 2 * (2 * 16) * 2, 2 * 8 * 2 * (2 * 16) * 2)
    # experts' biases stay out of the experts, in the layer's dense parameters: gate+up 2F, down H per expert
    assert oss.tensors["ffn_gate_exps.bias"] == [4 * 16] * 4 and oss.tensors["ffn_down_exps.bias"] == [4 * 64] * 4
    assert "biases" in oss.source


def test_deepseek_v3_at_full_size():
    from transformers import DeepseekV3Config

    m = from_hf_config(DeepseekV3Config().to_dict(), name="DeepSeek-V3")
    assert (m.num_layers, m.num_experts, m.top_k, m.dense_layers, m.expert_ffn) == (58, 256, 8, 3, 2048)
    assert _sums(m) == (671_026_404_352, 671_026_404_352)
    assert m.kv_bytes_per_token == 61 * (512 + 64) * 2 and m.attention == "mla"
    assert m.name == "DeepSeek-V3"


# The tiny GGUF: deepseek2, 4 blocks (block 0 dense), 4 experts of 256 x 512, block 2's ffn_down_exps as Q6_K.
Q4K, Q6K = 144, 210  # bytes per 256 weights (ggml-common.h block_q4_K, block_q6_K)
H, F, E, VOCAB, LATENT = 256, 512, 4, 32, 80


def _write_gguf(path: Path, split: int = 0, experts: bool = True) -> None:
    import gguf

    q4, q6 = gguf.GGMLQuantizationType.Q4_K, gguf.GGMLQuantizationType.Q6_K
    w = gguf.GGUFWriter(path, "deepseek2", split_max_tensors=split)
    w.add_name("tiny-ds")
    w.add_block_count(4)
    w.add_uint32("deepseek2.leading_dense_block_count", 1)
    w.add_uint32("deepseek2.expert_count", E)
    w.add_uint32("deepseek2.expert_used_count", 2)
    w.add_uint32("deepseek2.embedding_length", H)
    w.add_uint32("deepseek2.expert_feed_forward_length", F)
    w.add_uint32("general.file_type", 15)

    def quant(name: str, shape: tuple[int, ...], kind: gguf.GGMLQuantizationType, per_256: int) -> None:
        byte_shape = (*shape[:-1], shape[-1] // 256 * per_256)  # numpy order; the last axis in bytes
        w.add_tensor(name, np.zeros(byte_shape, np.uint8), raw_shape=byte_shape, raw_dtype=kind)

    quant("token_embd.weight", (VOCAB, H), q4, Q4K)
    w.add_tensor("output_norm.weight", np.zeros(H, np.float32))
    quant("output.weight", (VOCAB, H), q6, Q6K)
    for i in range(4):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.zeros(H, np.float32))
        w.add_tensor(f"blk.{i}.attn_kv_a_mqa.weight", np.zeros((LATENT, H), np.float16))
        if i == 0 or not experts:
            quant(f"blk.{i}.ffn_gate.weight", (F, H), q4, Q4K)
            quant(f"blk.{i}.ffn_up.weight", (F, H), q4, Q4K)
            quant(f"blk.{i}.ffn_down.weight", (H, F), q4, Q4K)
            continue
        w.add_tensor(f"blk.{i}.ffn_gate_inp.weight", np.zeros((E, H), np.float32))
        quant(f"blk.{i}.ffn_gate_exps.weight", (E, F, H), q4, Q4K)
        quant(f"blk.{i}.ffn_up_exps.weight", (E, F, H), q4, Q4K)
        down, size = (q6, Q6K) if i == 2 else (q4, Q4K)
        quant(f"blk.{i}.ffn_down_exps.weight", (E, H, F), down, size)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_gguf_bytes_exact(tmp_path):
    _write_gguf(tmp_path / "tiny.gguf")
    m = load_model(tmp_path / "tiny.gguf")
    q4_exp, q6_down = E * F * H // 256 * Q4K, E * H * F // 256 * Q6K
    assert m.layer_expert_bytes == [3 * q4_exp // E, (2 * q4_exp + q6_down) // E, 3 * q4_exp // E]
    assert m.layer_expert_bytes == [221_184, 254_976, 221_184]
    top = VOCAB * Q4K + H * 4 + VOCAB * Q6K
    blocks = 4 * (H * 4 + LATENT * H * 2) + 3 * (F * H // 256 * Q4K) + 3 * E * H * 4
    assert m.file_resident_bytes == top + blocks == 413_760
    assert (m.file_type, m.name, m.num_layers, m.num_experts, m.top_k) == ("Q4_K_M", "tiny-ds", 3, E, 2)
    assert (m.hidden_size, m.expert_ffn, m.dense_layers, m.attention) == (H, F, 1, "mla")
    assert m.kv_bytes_per_token == 4 * LATENT * 2
    assert m.dense_params_per_layer == H + LATENT * H + E * H
    assert m.other_params == 2 * VOCAB * H + H + (H + LATENT * H + 3 * F * H)
    assert m.tensors["ffn_gate"] == [F * H, 0, 0, 0] and m.tensors["attn_kv_a_mqa"] == [LATENT * H] * 4
    assert m.tensors["token_embd"] == [VOCAB * H] and "ffn_gate_exps" not in m.tensors
    total = 2 * VOCAB * H + H + 4 * (H + LATENT * H) + 3 * F * H + 3 * (E * H + 3 * E * F * H)
    assert _sums(m) == (total, total)


def test_gguf_split_parts_read_together(tmp_path):
    _write_gguf(tmp_path / "whole.gguf")
    _write_gguf(tmp_path / "tiny.gguf", split=7)
    parts = sorted(tmp_path.glob("tiny-*-of-*.gguf"))
    assert len(parts) == 4
    whole, split = load_model(tmp_path / "whole.gguf"), from_gguf(parts[2])  # any part finds the others
    assert split.layer_expert_bytes == whole.layer_expert_bytes
    assert (split.file_resident_bytes, split.tensors) == (whole.file_resident_bytes, whole.tensors)
    parts[3].unlink()
    with pytest.raises(ConfigError, match="00004-of-00004"):
        load_model(parts[0])


def test_errors_name_the_path(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 64}))
    with pytest.raises(ConfigError, match=r"config\.json: model_type='llama'.*qwen3_moe"):
        load_model(tmp_path)
    with pytest.raises(ConfigError, match="missing.gguf"):
        load_model(tmp_path / "missing.gguf")
    with pytest.raises(ConfigError, match="nowhere.*does not exist"):
        load_model(tmp_path / "nowhere")
    _write_gguf(tmp_path / "dense.gguf", experts=False)
    with pytest.raises(ConfigError, match=r"dense\.gguf: no routed-expert tensors"):
        load_model(tmp_path / "dense.gguf")
    (tmp_path / "junk.gguf").write_bytes(b"not a gguf file")
    with pytest.raises(ConfigError, match=r"junk\.gguf: not a readable GGUF"):
        load_model(tmp_path / "junk.gguf")


def test_dense_layers_between_moe_layers_are_refused():
    cfg = _tiny_config("qwen2_moe").to_dict()
    with pytest.raises(ConfigError, match=r"layers \[1\] are dense"):
        from_hf_config({**cfg, "mlp_only_layers": [1]})


def test_gguf_hybrid_caches(tmp_path):
    """A qwen3next-like file at F16: block 0 linear attention (a convolution and a recurrent state), block 1 full."""
    import gguf

    h, f, e, conv_ch, kernel = 16, 8, 2, 64, 4
    w = gguf.GGUFWriter(tmp_path / "hybrid.gguf", "qwen3next")
    w.add_block_count(2)
    for key, value in (("expert_count", e), ("expert_used_count", 1), ("embedding_length", h)):
        w.add_uint32(f"qwen3next.{key}", value)
    w.add_uint32("qwen3next.ssm.state_size", 8)  # key head dim
    w.add_uint32("qwen3next.ssm.inner_size", 32)  # value heads x value head dim
    w.add_uint32("general.file_type", 1)
    w.add_tensor("token_embd.weight", np.zeros((10, h), np.float16))
    w.add_tensor("blk.0.ssm_conv1d.weight", np.zeros((conv_ch, kernel), np.float32))  # ne: kernel, channels
    w.add_tensor("blk.1.attn_k.weight", np.zeros((32, h), np.float16))
    w.add_tensor("blk.1.attn_v.weight", np.zeros((32, h), np.float16))
    for i in range(2):
        w.add_tensor(f"blk.{i}.ffn_gate_up_exps.weight", np.zeros((e, 2 * f, h), np.float16))
        w.add_tensor(f"blk.{i}.ffn_down_exps.weight", np.zeros((e, h, f), np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    m = from_gguf(tmp_path / "hybrid.gguf")
    assert (m.attention, m.kv_bytes_per_token) == ("hybrid", 2 * (32 + 32))
    assert m.state_bytes == 2 * ((kernel - 1) * conv_ch + 8 * 32) == 896
    assert (m.layer_expert_bytes, m.expert_ffn, m.file_type, m.name) == ([3 * f * h * 2] * 2, f, "F16", "hybrid")
    assert m.file_resident_bytes == 10 * h * 2 + conv_ch * kernel * 4 + 2 * 32 * h * 2
