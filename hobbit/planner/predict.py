"""Predicted prefill and decode speed of a runtime's setting on a machine, from synthetic routing when there is no trace.

``predict(model, hardware, system, prompt=, gen=, context=)`` runs the simulator on routing drawn for the model's
topology (``synthetic_trace``: ``traces.synthetic`` at a locality of hobbit/catalogue/data/routing.yaml, written once per shape to the
system's temporary directory) and returns a :class:`Prediction`: prefill tokens/s over the prompt, decode tokens/s
at the context, the memory the setting takes, and what the run's time went to. ``predict_setting`` does the same for
a published measurement read by ``hobbit.planner.published`` (its model, format, runtime flags and machine).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from hobbit.api import configure, read_trace, simulate_config, simulate_file_config, synthetic_file
from hobbit.catalogue.machine import hardware_config
from hobbit.sim.config import HardwareConfig, ModelConfig, SimConfig, SystemConfig

DECODE_TOKENS = 32  # decode passes timed per request: enough for the cache to settle, few enough to stay quick
REQUESTS = 2  # requests of a synthetic trace: the second finds the cache as the first left it
DEFAULT_PROMPT = 512  # llama-bench's pp512, when a measurement or a question gives no prompt length
LOCALITY = "typical"  # the routing preset a prediction is made at; "low" and "high" bound its range


@functools.cache
def routing_presets() -> dict[str, dict[str, float]]:
    """hobbit/catalogue/data/routing.yaml's locality presets (low, typical, high): SyntheticConfig knobs fitted to real traces
    (``benchmarks/routing_fit.py``, ``hobbit.planner.locality``), each of one trace, cited there."""
    text = (resources.files("hobbit.catalogue") / "data" / "routing.yaml").read_text()
    presets = yaml.safe_load(text)["presets"]
    return {name: {k: float(v) for k, v in p.items() if k != "trace"} for name, p in presets.items()}


def locality_knobs(locality: str | dict[str, float] | None) -> dict[str, float]:
    """SyntheticConfig knobs of a preset name of hobbit/catalogue/data/routing.yaml, or the knobs as given (None: ``LOCALITY``)."""
    if isinstance(locality, dict):
        return locality
    name = locality or LOCALITY
    presets = routing_presets()
    if name not in presets:
        raise ValueError(
            f"locality={name} is not a preset of hobbit/catalogue/data/routing.yaml ({', '.join(presets)})"
        )
    return presets[name]


@dataclass(frozen=True)
class Prediction:
    """What a setting is predicted to do."""

    prefill_tok_s: float
    """Prompt tokens per second over the prompt (its passes summed)."""
    decode_tok_s: float
    """Decode tokens per second at the context."""
    prompt: int
    """Prompt tokens the prefill figure is over."""
    context: int
    """Tokens in the KV cache before the prompt."""
    summary: dict[str, Any] = field(repr=False)
    """The run's results.json summary (memory, placement, flags, served mix)."""


def synthetic_trace(model: ModelConfig, prompt: int, decode: int, locality: dict[str, float], seed: int = 0) -> Path:
    """A synthetic trace of ``model``'s topology: ``REQUESTS`` requests of ``prompt`` prompt tokens and ``decode``
    decode tokens, routing drawn at ``locality`` (SyntheticConfig's zipf, reuse, cross_layer), written once per shape
    to a folder of the system's temporary directory. No lookahead predictions: a system that prefetches fills them
    by its fallback (``system.prefetch.fallback``)."""
    knobs = "-".join(f"{k}{v:g}" for k, v in sorted(locality.items()))
    shape = {"requests": REQUESTS, "prompt_tokens": max(prompt, 1), "decode_tokens": decode, "lookahead_depth": 0}
    return synthetic_file(model, {**shape, **locality}, seed, tag=f"-p{prompt}-d{decode}-r{REQUESTS}-{knobs}")


def predict(
    model: str | ModelConfig,
    hardware: str | HardwareConfig,
    system: str | SystemConfig,
    *,
    prompt: int = DEFAULT_PROMPT,
    decode: int = DECODE_TOKENS,
    context: int = 0,
    locality: str | dict[str, float] | None = None,
    seed: int = 0,
    trace: str | Path | None = None,
    **knobs: Any,
) -> Prediction:
    """Prefill and decode speed of ``system`` running ``model`` on ``hardware`` (names or typed configs, plus knobs
    by path as ``hobbit.configure`` takes them): over ``trace`` when given, else synthetic routing at ``locality``
    with ``prompt`` prompt tokens and ``decode`` decode tokens per
    request; ``locality``: a preset of hobbit/catalogue/data/routing.yaml (None: ``LOCALITY``) or SyntheticConfig's knobs; ``context``
    tokens already in the KV cache."""
    cfg = configure(model, hardware, system, context=context, seed=seed, **knobs)
    return predict_config(cfg, prompt=prompt, decode=decode, locality=locality, trace=trace)


def predict_config(
    cfg: SimConfig,
    *,
    prompt: int = DEFAULT_PROMPT,
    decode: int = DECODE_TOKENS,
    locality: str | dict[str, float] | None = None,
    trace: str | Path | None = None,
    walks: str | None = None,
) -> Prediction:
    """``predict`` for a composed ``SimConfig`` (its context and seed are the run's; with ``window_tokens``, the trace
    file is read that many tokens at a time); ``walks``: which compiled copy of the policy's walk runs
    (``hobbit.sim.walk_copies``)."""
    seed, context = cfg.seed, cfg.context
    path = trace if trace is not None else synthetic_trace(cfg.model, prompt, decode, locality_knobs(locality), seed)
    if cfg.window_tokens:
        s = simulate_file_config(path, cfg, walks=walks).summary
    else:
        s = simulate_config(read_trace(path), cfg, keep_decisions=False, walks=walks).summary
    prefill_ms = s["prefill_ms_per_request"]["mean"]
    prompt_tokens = s["tokens"]["prefill"] / max(s["requests"], 1)
    decode_ms = s["decode_ms_per_token"]["mean"]
    return Prediction(
        prefill_tok_s=prompt_tokens / (prefill_ms / 1000.0) if prefill_ms else float("nan"),
        decode_tok_s=1000.0 / decode_ms if decode_ms else float("nan"),
        prompt=round(prompt_tokens),
        context=context,
        summary=s,
    )


def setting_system(setting: Any, base: SystemConfig) -> SystemConfig:
    """``base`` (the setting's conf/system preset) with the setting's weights format, runtime and flags."""
    return dataclasses.replace(
        base, weights=setting.weights, runtime=setting.runtime or base.runtime, flags=setting.flags
    )


def predict_setting(
    setting: Any, locality: str | dict[str, float] | None = None, seed: int = 0, **system_knobs: Any
) -> Prediction:
    """``predict`` for a published measurement read by ``hobbit.planner.published.parse_row`` (a ``Setting``);
    ``system_knobs``: SystemConfig fields to set on its preset (a calibration's trial values)."""
    hw = hardware_config(**setting.hardware)
    cfg = configure(setting.model, hw, setting.system, context=setting.context, seed=seed)  # composed once
    system = dataclasses.replace(setting_system(setting, cfg.system), **system_knobs)
    return predict_config(
        dataclasses.replace(cfg, system=system), prompt=setting.prompt_tokens or DEFAULT_PROMPT, locality=locality
    )
