"""What mixed precision and skipping cost in accuracy, measured on a real model.

Every MoE block's experts are replaced by ``MixedExperts``: per token and expert the
precision class comes from the same rule the simulator uses (``sim.policies.precision``)
on the weights the router applied; a high-precision expert runs with the model's own
weights (or int8 on the Jetson pair), a low one with its group-wise quantised copy (int4,
or int2), a skipped one not at all. ``renormalize`` (the paper is silent) rescales the
remaining weights to the original sum. Against the unmodified model on the same held-out
windows: perplexity, next-token top-1 agreement and the mean KL divergence.
Legend: T tokens, K top-k, E experts, H hidden, F expert FFN, V vocabulary.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch
from torch import nn
from tqdm import tqdm
from transformers import AutoModelForCausalLM, AutoTokenizer

from hobbit.executor.config import PAIRS, QualityConfig, QualityError
from hobbit.executor.quant import fake_quantize
from hobbit.sim.policies.base import HIGH, LOW, SKIP
from hobbit.sim.policies.precision import classes_for
from hobbit.sim.precisions import quant_group
from hobbit.sim.system_checks import check_system
from hobbit.traces.families import checkpoint_family, find_routers
from hobbit.traces.inputs import read_text, reading
from hobbit.traces.tiny import bundled_heldout_text, bundled_model_dir

__all__ = ["PAIRS", "QualityError", "install", "measure", "run_quality", "windows"]


def token_classes(weights: torch.Tensor, mode: str, t1: float, t2: float) -> torch.Tensor:
    """The rule per (token, slot): weights [T, K] in router order -> classes [T, K] (HIGH/LOW/SKIP)."""
    w = weights.detach().float()
    order = torch.argsort(-w, dim=-1, stable=True)
    sorted_w = torch.gather(w, -1, order).cpu().numpy()
    cls_sorted = torch.from_numpy(classes_for(sorted_w, mode, t1, t2)).to(torch.long)
    return torch.empty_like(cls_sorted).scatter_(-1, order.cpu(), cls_sorted)


class MixedExperts(nn.Module):
    """Stand-in for a transformers experts module (stacked ``gate_up_proj`` [E, 2F, H] and
    ``down_proj`` [E, H, F]) that serves each (token, expert) at the rule's precision."""

    def __init__(
        self, experts: nn.Module, pair: tuple[str, str], mode: str, t1: float, t2: float, renormalize: bool, group: int
    ) -> None:
        super().__init__()
        self.inner = experts
        self.mode, self.t1, self.t2, self.renormalize = mode, t1, t2, renormalize
        self.enabled = True
        self.mass = torch.zeros(3, dtype=torch.float64)  # gate mass served [high, low, skipped]
        # transformers' experts module: stacked parameters, read through nn.Module's attribute lookup
        gu, down = cast(torch.Tensor, experts.gate_up_proj).detach(), cast(torch.Tensor, experts.down_proj).detach()
        self.weights = {}  # class -> (gate_up [E, 2F, H], down [E, H, F])
        for cls, precision in ((HIGH, pair[0]), (LOW, pair[1])):
            if precision == "fp16" and cls == HIGH:
                self.weights[cls] = (gu, down)  # the model's own weights, untouched
                continue
            self.weights[cls] = (
                torch.stack([fake_quantize(m, precision, group) for m in gu]),
                torch.stack([fake_quantize(m, precision, group) for m in down]),
            )

    def forward(self, hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor):
        if not self.enabled:
            return self.inner(hidden_states, top_k_index, top_k_weights)
        cls = token_classes(top_k_weights, self.mode, self.t1, self.t2).to(top_k_index.device)  # [T, K]
        w = top_k_weights
        norm = w.float() / w.float().sum(dim=-1, keepdim=True).clamp(min=1e-30)
        for c in (HIGH, LOW, SKIP):
            self.mass[c] += float(norm[cls == c].sum())
        if self.renormalize:
            kept = w * (cls != SKIP)
            w = kept * (w.sum(-1, keepdim=True) / kept.sum(-1, keepdim=True).clamp(min=1e-30))
        out = torch.zeros_like(hidden_states)
        act = cast("Callable[[torch.Tensor], torch.Tensor]", self.inner.act_fn)
        for e in torch.unique(top_k_index).tolist():
            for c in (HIGH, LOW):
                tok, slot = torch.where((top_k_index == e) & (cls == c))
                if tok.numel() == 0:
                    continue
                gu, down = self.weights[c]
                gate, up = nn.functional.linear(hidden_states[tok], gu[e]).chunk(2, dim=-1)
                y = nn.functional.linear(act(gate) * up, down[e]) * w[tok, slot, None]
                out.index_add_(0, tok, y.to(out.dtype))
        return out


def install(model: Any, family: Any, **knobs: Any) -> list[MixedExperts]:
    """Replace the experts of every MoE block; returns the new modules."""
    parent_path = family.router_path.rsplit(".", 1)[0]
    blocks = getattr(model, "model", model).layers
    mixed = []
    for i, _ in find_routers(model, family):
        parent = blocks[i]
        for part in parent_path.split("."):
            parent = getattr(parent, part)
        experts = getattr(parent, "experts", None)
        if (
            experts is None
            or not hasattr(experts, "gate_up_proj")
            or getattr(experts, "gate_up_proj_bias", None) is not None
            or experts.gate_up_proj.shape[1] != 2 * experts.down_proj.shape[2]
        ):
            raise QualityError(
                f"{type(model).__name__}: layer {i}'s experts are not stacked gate_up/down "
                f"projections without bias; quality supports mixtral, qwen2_moe, qwen3_moe, olmoe, "
                f"phimoe, deepseek_v3 and granitemoe"
            )
        m = MixedExperts(experts, **knobs)
        parent.experts = m
        mixed.append(m)
    return mixed


@dataclass
class Measure:
    """Running sums of one comparison."""

    nll_ref: float = 0.0
    nll: float = 0.0
    agree: int = 0
    kl: float = 0.0
    tokens: int = 0

    def add(self, ref_logits: torch.Tensor, logits: torch.Tensor, labels: torch.Tensor) -> None:
        lp_ref = torch.log_softmax(ref_logits.double(), -1)  # [B, T, V]
        lp = torch.log_softmax(logits.double(), -1)
        self.nll_ref -= float(lp_ref.gather(-1, labels[..., None]).sum())
        self.nll -= float(lp.gather(-1, labels[..., None]).sum())
        self.agree += int((ref_logits.argmax(-1) == logits.argmax(-1)).sum())
        self.kl += float((lp_ref.exp() * (lp_ref - lp)).sum())
        self.tokens += labels.numel()

    def result(self, mass: torch.Tensor) -> dict[str, float]:
        ppl_ref, ppl = math.exp(self.nll_ref / self.tokens), math.exp(self.nll / self.tokens)
        total = float(mass.sum()) or 1.0
        return {
            "ppl_reference": ppl_ref,
            "ppl": ppl,
            "ppl_rel_change": ppl / ppl_ref - 1.0,
            "top1_agreement": self.agree / self.tokens,
            "kl_mean": self.kl / self.tokens,
            "proxy": float(mass[LOW] + mass[SKIP]) / total,
            "low_mass": float(mass[LOW]) / total,
            "skip_mass": float(mass[SKIP]) / total,
            "tokens": self.tokens,
        }


def windows(ids: list[int], context: int, max_windows: int) -> torch.Tensor:
    """Non-overlapping windows of context + 1 tokens: [W, context + 1]."""
    n = min((len(ids) - 1) // context, max_windows)
    if n < 1:
        raise QualityError(
            f"the text has {len(ids)} tokens, fewer than context_length + 1 = {context + 1} "
            f"(fix: a longer text= or a smaller context_length=)"
        )
    return torch.tensor(ids[: n * context + 1]).unfold(0, context + 1, context)[:n]


def measure(model: Any, mixed: list[MixedExperts], batches: torch.Tensor, batch_size: int) -> dict[str, float]:
    """Run each batch of windows through the reference and the mixed model."""
    m = Measure()
    with torch.no_grad():
        for i in tqdm(range(0, len(batches), batch_size), desc="quality", unit="batch", disable=None):
            x = batches[i : i + batch_size]
            inputs, labels = x[:, :-1], x[:, 1:]
            for mod in mixed:
                mod.enabled = False
            ref = model(input_ids=inputs).logits
            for mod in mixed:
                mod.enabled = True
            m.add(ref, model(input_ids=inputs).logits, labels)
    return m.result(sum((mod.mass for mod in mixed), torch.zeros(3, dtype=torch.float64)))


def run_quality(cfg: QualityConfig) -> dict:
    """Check every input, then load, patch and measure; returns results.json's content."""
    check_system(cfg.system)
    if cfg.precision_pair not in PAIRS:
        raise QualityError(f"precision_pair={cfg.precision_pair} must be one of {sorted(PAIRS)}")
    for name in ("context_length", "max_windows", "batch_size", "group"):
        if getattr(cfg, name) < 1:
            raise QualityError(f"{name}={getattr(cfg, name)} must be >= 1")
    ckpt = Path(cfg.checkpoint) if cfg.checkpoint else bundled_model_dir()
    if not (ckpt / "config.json").is_file():
        raise QualityError(f"checkpoint={ckpt}: no config.json (fix: a Hugging Face checkpoint directory)")
    conf, family = checkpoint_family(ckpt, f"checkpoint={ckpt}")
    widths = {w for w in (getattr(conf, "hidden_size", 0), getattr(conf, "moe_intermediate_size", 0) or
                          getattr(conf, "intermediate_size", 0)) if w}  # fmt: skip
    uneven = sorted(w for w in widths if w >= cfg.group and w % cfg.group)  # a narrower layer uses its width
    if uneven:  # the quantiser would take another group there (quant_group), not the one asked for
        used = sorted({quant_group(w, cfg.group) for w in uneven})
        raise QualityError(
            f"group={cfg.group} does not divide the experts' input widths {sorted(widths)} of checkpoint={ckpt}: "
            f"their quantisation would use groups of {', '.join(map(str, used))} instead (fix: a group dividing "
            f"{', '.join(map(str, sorted(widths)))}, e.g. {math.gcd(*widths, 128) if widths else 32})"
        )
    text_path = Path(cfg.text) if cfg.text else bundled_heldout_text()
    if not text_path.is_file():
        raise QualityError(f"text={text_path} does not exist")
    text = read_text(text_path, "the held-out text", "a UTF-8 text file")
    ids = AutoTokenizer.from_pretrained(ckpt)(text)["input_ids"]
    batches = windows(ids, cfg.context_length, cfg.max_windows)
    with reading(ckpt, "the checkpoint's weights", "a whole Hugging Face checkpoint, its files as saved"):
        model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32).eval()
    p = cfg.system.precision
    mixed = install(
        model,
        family,
        pair=PAIRS[cfg.precision_pair],
        mode=p.mode,
        t1=p.t1,
        t2=p.t2,
        renormalize=cfg.renormalize,
        group=cfg.group,
    )
    quality = measure(model, mixed, batches, cfg.batch_size)
    return {
        "quality": quality,
        "system": cfg.system.name,
        "system_config": dataclasses.asdict(cfg.system),
        "checkpoint": str(ckpt),
        "text": str(text_path),
        "precision_pair": cfg.precision_pair,
        "renormalize": cfg.renormalize,
        "context_length": cfg.context_length,
        "windows": len(batches),
    }
