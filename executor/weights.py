"""Expert and dense weights for replay, at full or reduced width, in host memory.

Every expert is kept on the host once per precision as one contiguous byte buffer in the
layout the device kernel reads (``kernels.ExpertKernel``), so a load is a single copy;
on CUDA the buffers are pinned, allocated once. Weights are synthetic (seeded) or taken
from a checkpoint of the same shapes (the bundled model). Legend: E experts, L layers,
H hidden, F expert FFN, D dense width.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from hobbit.executor.kernels import ExpertKernel
from hobbit.sim.config import ConfigError, ModelConfig
from hobbit.sim.policies.base import HIGH, LOW
from hobbit.traces.inputs import reading
from hobbit.traces.io import Trace


def reduce_model(model: ModelConfig, scale: int, layers: int = 0) -> ModelConfig:
    """``model`` with hidden and expert widths divided by ``scale`` (attention and the shared
    parts shrink with the square of the width, embeddings with it) and, when ``layers`` > 0,
    only its first ``layers`` MoE layers; the routing of the layers kept is unchanged."""
    if scale < 1 or model.hidden_size % scale or model.expert_ffn % scale:
        raise ConfigError(
            f"scale={scale} must divide hidden_size {model.hidden_size} and expert_ffn {model.expert_ffn}"
        )
    if layers < 0 or layers > model.num_layers:
        raise ConfigError(
            f"layers={layers} must be between 1 and model={model.name}'s {model.num_layers} MoE layers (0: all of them)"
        )
    if scale > 1:
        model = dataclasses.replace(
            model,
            name=f"{model.name}/{scale}",
            hidden_size=model.hidden_size // scale,
            expert_ffn=model.expert_ffn // scale,
            dense_params_per_layer=model.dense_params_per_layer // scale**2,
            other_params=model.other_params // scale,
            kv_bytes_per_token=model.kv_bytes_per_token // scale,
        )
    if 0 < layers < model.num_layers:  # the KV cache per token is per layer: it shrinks with them
        model = dataclasses.replace(
            model,
            name=f"{model.name}-L{layers}",
            num_layers=layers,
            kv_bytes_per_token=model.kv_bytes_per_token * layers // model.num_layers,
        )
    return model


def first_layers(trace: Trace, layers: int) -> Trace:
    """``trace`` with only its first ``layers`` MoE layers, as a trace of a ``layers``-layer model."""
    meta = trace.meta
    if layers <= 0 or layers >= meta.model.num_layers:
        return trace
    if meta.recorded_layers is not None:
        raise ConfigError(
            f"layers={layers}: trace {trace.path} recorded only layers {list(meta.recorded_layers)}; "
            f"use layers=0 with a partial trace"
        )
    keep = trace.arrays.take(np.flatnonzero(trace.arrays.layer < layers))
    meta = dataclasses.replace(meta, model=dataclasses.replace(meta.model, num_layers=layers))
    return Trace(meta, keep, trace.path)


def kv_width(model: ModelConfig) -> int:
    """Width of one layer's K (or V) projection, from the KV cache size per token."""
    return max(model.kv_bytes_per_token // (2 * 2 * max(model.num_layers, 1)), 64)


@dataclass
class HostStore:
    """Every expert's bytes per precision class, plus the dense weights of one layer."""

    model: ModelConfig
    kernels: dict[int, ExpertKernel]
    experts: dict[tuple[int, int, int], torch.Tensor]  # (layer, expert, class) -> uint8 buffer
    dense: dict[str, torch.Tensor]  # shared by every layer: the same shapes, the same work
    device: torch.device

    def nbytes(self, cls: int) -> int:
        return self.kernels[cls].nbytes


def _expert_tensors(model: ModelConfig, checkpoint: Any, layer: int, expert: int, g: torch.Generator):
    h, f = model.hidden_size, model.expert_ffn
    if checkpoint is not None:
        ex = checkpoint.model.layers[layer].mlp.experts
        return ex.gate_up_proj[expert].detach().float(), ex.down_proj[expert].detach().float()
    std = h**-0.5
    return torch.randn(2 * f, h, generator=g) * std, torch.randn(h, f, generator=g) * f**-0.5


def build_store(
    model: ModelConfig,
    pair: tuple[str, str],
    device: torch.device,
    checkpoint_dir: str | None = None,
    seed: int = 0,
    group: int = 128,
    progress: bool = True,
) -> HostStore:
    """Quantise and lay out every expert once (pinned host memory on CUDA)."""
    from tqdm import tqdm

    checkpoint = None
    if checkpoint_dir is not None:
        from transformers import AutoModelForCausalLM

        with reading(checkpoint_dir, "the checkpoint's weights", "a whole Hugging Face checkpoint, its files as saved"):
            checkpoint = AutoModelForCausalLM.from_pretrained(checkpoint_dir, dtype=torch.float32)
        cfg = checkpoint.config
        if (cfg.hidden_size, cfg.intermediate_size) != (model.hidden_size, model.expert_ffn):
            raise ConfigError(
                f"checkpoint {checkpoint_dir} has hidden {cfg.hidden_size}, expert FFN "
                f"{cfg.intermediate_size}; model={model.name} wants {model.hidden_size}, {model.expert_ffn}"
            )
    kernels: dict[int, ExpertKernel] = {
        cls: ExpertKernel(prec, model.hidden_size, model.expert_ffn, device, group)
        for cls, prec in ((HIGH, pair[0]), (LOW, pair[1]))
    }
    g = torch.Generator().manual_seed(seed)
    experts = {}
    pin = device.type == "cuda"
    keys = [(layer, e) for layer in range(model.num_layers) for e in range(model.num_experts)]
    for layer, e in tqdm(keys, desc="expert weights", unit="expert", disable=None if progress else True):
        gu, down = _expert_tensors(model, checkpoint, layer, e, g)
        for cls, k in kernels.items():
            buf = k.pack(gu, down)
            experts[(layer, e, cls)] = buf.pin_memory() if pin else buf
    return HostStore(model, kernels, experts, dense_weights(model, device, g), device)


def dense_weights(model: ModelConfig, device: torch.device, g: torch.Generator) -> dict[str, torch.Tensor]:
    """One layer's dense part at the model's shapes (q, k, v, o, router, shared experts) and the LM head."""
    h, kv, e = model.hidden_size, kv_width(model), model.num_experts
    attn = 2 * h * h + 2 * h * kv + h * e
    shared = max(model.dense_params_per_layer - attn, 0) // (3 * h)  # width of shared experts, if any
    vocab = max(model.other_params // (2 * h), 1)
    shapes = {"q": (h, h), "k": (kv, h), "v": (kv, h), "o": (h, h), "router": (e, h), "lm_head": (vocab, h)}
    if shared:
        shapes |= {"shared_gu": (2 * shared, h), "shared_down": (h, shared)}
    return {n: (torch.randn(*s, generator=g) * s[1] ** -0.5).to(torch.bfloat16).to(device) for n, s in shapes.items()}
