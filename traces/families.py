"""The Hugging Face MoE families capture supports, and how to read their routers.

In transformers 5 every supported router is its own module returning
``(router_logits [T, E], weights [T, K], ids [T, K])``; it sits at ``router_path``
under each decoder layer that is an MoE layer (dense layers have no such module).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hobbit.traces.schema import InputError, ModelSpec


def _norm_rule(cfg: Any) -> str:
    return "softmax_renorm" if getattr(cfg, "norm_topk_prob", False) else "softmax"


@dataclass(frozen=True)
class Family:
    """One supported architecture (keyed by ``config.model_type``)."""

    model_type: str
    architecture: str
    router_path: str  # attribute path from a decoder layer to its router
    weight_rule: Callable[[Any], str]
    experts_attr: tuple[str, ...] = ("num_local_experts", "num_experts", "n_routed_experts")
    ffn_attr: tuple[str, ...] = ("moe_intermediate_size", "intermediate_size")
    shared_experts: Callable[[Any], int] = lambda cfg: 0


FAMILIES: dict[str, Family] = {
    f.model_type: f
    for f in [
        Family("mixtral", "MixtralForCausalLM", "mlp.gate", lambda c: "softmax_renorm"),
        Family(
            "qwen2_moe",
            "Qwen2MoeForCausalLM",
            "mlp.gate",
            _norm_rule,
            shared_experts=lambda c: int(getattr(c, "shared_expert_intermediate_size", 0) > 0),
        ),
        Family("qwen3_moe", "Qwen3MoeForCausalLM", "mlp.gate", _norm_rule),
        Family("olmoe", "OlmoeForCausalLM", "mlp.gate", _norm_rule),
        Family("phimoe", "PhimoeForCausalLM", "mlp.router", lambda c: "sparsemixer"),
        Family(
            "deepseek_v3",
            "DeepseekV3ForCausalLM",
            "mlp.gate",
            lambda c: "sigmoid_group",
            shared_experts=lambda c: int(getattr(c, "n_shared_experts", 0) or 0),
        ),
        Family("gpt_oss", "GptOssForCausalLM", "mlp.router", lambda c: "topk_softmax"),
        Family("granitemoe", "GraniteMoeForCausalLM", "block_sparse_moe.router", lambda c: "topk_softmax"),
    ]
}


class UnsupportedModelError(InputError):
    """The checkpoint's architecture has no router capture knows."""


def checkpoint_family(directory: str | Path, where: str) -> tuple[Any, Family]:
    """(transformers config, family) of a local checkpoint, or ``UnsupportedModelError`` naming it:
    a missing or unreadable config.json, or one without a supported ``model_type``."""
    from transformers import AutoConfig  # lazy: transformers is heavy and only checkpoints need it

    path = Path(directory) / "config.json"
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UnsupportedModelError(f"{where}: {path} is not a readable JSON config ({exc})") from None
    if (mt := raw.get("model_type") if isinstance(raw, dict) else None) not in FAMILIES:
        raise _unsupported(mt, where)
    try:
        config = AutoConfig.from_pretrained(directory)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UnsupportedModelError(f"{where}: transformers cannot read {path} ({exc})".replace("\n", " ")) from None
    return config, family_for(config, where)


def _unsupported(mt: Any, where: str) -> UnsupportedModelError:
    supported = ", ".join(f"{f.model_type} ({f.architecture})" for f in FAMILIES.values())
    return UnsupportedModelError(f"{where}: model_type '{mt}' is not a supported MoE family; supported: {supported}")


def family_for(config: Any, where: str) -> Family:
    mt = getattr(config, "model_type", None)
    if mt not in FAMILIES:
        raise _unsupported(mt, where)
    return FAMILIES[mt]


def _first_attr(cfg: Any, names: tuple[str, ...]) -> int | None:
    for n in names:
        v = getattr(cfg, n, None)
        if v:
            return int(v)
    return None


def _get_path(obj: Any, path: str) -> Any:
    for part in path.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def find_routers(model: Any, family: Family) -> list[tuple[int, Any]]:
    """(decoder block index, router module) of every MoE layer, in order."""
    decoder = getattr(model, "model", model)
    blocks = getattr(decoder, "layers", None)
    if blocks is None:
        raise UnsupportedModelError(f"{type(model).__name__} has no .model.layers")
    routers = []
    for i, block in enumerate(blocks):
        router = _get_path(block, family.router_path)
        if router is not None and type(router).__name__.lower().endswith("router"):
            routers.append((i, router))
    if not routers:
        raise UnsupportedModelError(f"no router modules at layers.*.{family.router_path}")
    return routers


def model_spec(config: Any, family: Family, num_moe_layers: int, name: str) -> ModelSpec:
    """The trace's model spec, read from the HF config."""
    return ModelSpec(
        name=name,
        architecture=family.architecture,
        num_layers=num_moe_layers,
        num_experts=int(_first_attr(config, family.experts_attr) or 0),
        top_k=int(config.num_experts_per_tok),
        weight_rule=family.weight_rule(config),
        hidden_size=int(config.hidden_size),
        moe_intermediate_size=_first_attr(config, family.ffn_attr),
        shared_experts=family.shared_experts(config),
    )
