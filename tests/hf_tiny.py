"""Tiny random configs of every supported transformers MoE family (for capture tests)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

COMMON: dict[str, Any] = dict(
    vocab_size=257,
    hidden_size=32,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
    pad_token_id=256,
    eos_token_id=256,
    bos_token_id=None,
)

# model_type -> (config class name, kwargs, expected MoE layers)
TINY: dict[str, tuple[str, dict[str, Any], int]] = {
    "mixtral": (
        "MixtralConfig",
        dict(num_hidden_layers=3, intermediate_size=16, num_local_experts=8, num_experts_per_tok=2),
        3,
    ),
    "qwen2_moe": (
        "Qwen2MoeConfig",
        dict(
            num_hidden_layers=4,
            intermediate_size=32,
            moe_intermediate_size=16,
            shared_expert_intermediate_size=16,
            num_experts=12,
            num_experts_per_tok=4,
            mlp_only_layers=[1],
        ),
        3,
    ),
    "qwen3_moe": (
        "Qwen3MoeConfig",
        dict(
            num_hidden_layers=3,
            intermediate_size=32,
            moe_intermediate_size=16,
            num_experts=10,
            num_experts_per_tok=3,
            norm_topk_prob=True,
            head_dim=8,
        ),
        3,
    ),
    "olmoe": ("OlmoeConfig", dict(num_hidden_layers=3, intermediate_size=16, num_experts=16, num_experts_per_tok=4), 3),
    "phimoe": (
        "PhimoeConfig",
        dict(num_hidden_layers=3, intermediate_size=16, num_local_experts=6, num_experts_per_tok=2),
        3,
    ),
    "deepseek_v3": (
        "DeepseekV3Config",
        dict(
            num_hidden_layers=4,
            intermediate_size=32,
            moe_intermediate_size=16,
            n_routed_experts=16,
            num_experts_per_tok=4,
            n_group=4,
            topk_group=2,
            first_k_dense_replace=1,
            n_shared_experts=1,
            kv_lora_rank=16,
            q_lora_rank=None,
            qk_rope_head_dim=8,
            qk_nope_head_dim=8,
            v_head_dim=8,
            num_key_value_heads=4,
        ),
        3,
    ),
    "gpt_oss": (
        "GptOssConfig",
        dict(
            num_hidden_layers=3,
            intermediate_size=16,
            num_local_experts=8,
            num_experts_per_tok=2,
            head_dim=8,
            sliding_window=16,
        ),
        3,
    ),
    "granitemoe": (
        "GraniteMoeConfig",
        dict(num_hidden_layers=3, intermediate_size=16, num_local_experts=8, num_experts_per_tok=2),
        3,
    ),
}


def save_tiny(model_type: str, out: Path, seed: int = 0) -> Path:
    """Save a random-init tiny checkpoint of ``model_type`` with the byte tokenizer into ``out``."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM

    from hobbit.traces.tiny import build_byte_tokenizer

    cls_name, kwargs, _ = TINY[model_type]
    cfg = getattr(transformers, cls_name)(**{**COMMON, **kwargs})
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg)
    with torch.no_grad():  # routers are zero-initialised in some families: give them real scores
        for name, p in model.named_parameters():
            if p.dim() >= 2 or "bias" in name:
                p.normal_(0.0, 0.2)
    model.save_pretrained(out)
    build_byte_tokenizer().save_pretrained(out)
    return out
