"""The runtimes a plan searches (``RUNTIMES``), each runtime's settings that fit the machine, as the flags its users
type (``settings``). What a predicted setting takes and what bounds it is the simulator's answer
(``hobbit.sim.results.account``).

A runtime new to the planner is a ``Runtime`` line here, its search axis in ``settings`` when it varies something of
its own, its preset in conf/system/ and, when it has flags of its own, its ``Grammar`` in ``hobbit.sim.flags``."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from hobbit.planner.config import PlanConfig, Point, ctx_tokens
from hobbit.sim.config import ConfigError, HardwareConfig, ModelConfig, SystemConfig, policy_knobs
from hobbit.sim.flags import apply_flags
from hobbit.sim.memory import GiB, check_device, fit, gib


@dataclass(frozen=True)
class Runtime:
    """A runtime the plan searches: its conf/system preset, the grammar of its flags and the setting it varies."""

    label: str
    """How tables and plots name it."""
    preset: str
    """Its preset of conf/system."""
    grammar: str
    """``system.runtime``: whose command line its flags are (empty: hobbit's own knobs)."""
    setting: str
    """What the search varies, as its users know it."""
    families: tuple[str, ...] = ()
    """Model names (prefixes) its released code runs; empty: any."""


RUNTIMES: dict[str, Runtime] = {
    "llama.cpp": Runtime("llama.cpp", "llama-cpp", "llama.cpp", "--n-cpu-moe (expert layers on the CPU)"),
    "ik_llama.cpp": Runtime("ik_llama.cpp", "llama-cpp", "ik_llama.cpp", "-ot (expert layers on the CPU)"),
    "ktransformers": Runtime("KTransformers", "ktransformers", "ktransformers", "--kt-num-gpu-experts"),
    "llama.cpp-expert-cache": Runtime(
        "llama.cpp + PR #27861", "llama-cpp-lru", "llama.cpp", "--moe-expert-cache (slots per layer)"
    ),
    "hobbit": Runtime("HOBBIT", "hobbit", "", "expert cache (GiB), T1/T2 and cache weights tuned"),
    "moe-infinity": Runtime("MoE-Infinity", "moe-infinity", "", "expert cache (all free memory)"),
    "fiddler": Runtime("Fiddler", "fiddler", "", "popular experts on the GPU (all free memory)", ("mixtral",)),
}


def block_regex(n: int) -> str:
    """A regex of the block numbers 0..n-1 (n >= 1), by decades: 24 -> ([0-9]|1[0-9]|2[0-3])."""
    parts = [f"[0-{min(n, 10) - 1}]" if n > 1 else "0"]
    tens, rest = divmod(n, 10)
    if tens >= 2:
        parts.append(f"[1-{tens - 1}][0-9]" if tens > 2 else "1[0-9]")
    if tens >= 1 and rest:
        parts.append(f"{tens}[0-{rest - 1}]" if rest > 1 else f"{tens}0")
    return parts[0] if len(parts) == 1 else "(" + "|".join(parts) + ")"


def _spread(lo: int, hi: int, n: int) -> list[int]:
    """``n`` whole numbers from ``lo`` to ``hi``, both ends included, evenly apart."""
    return sorted({round(x) for x in np.linspace(lo, hi, max(n, 2))})


KV_SHARE = 1 / 8  # kv_cache=auto: q8_0 where the f16 cache would take more than this share of the GPU's memory


def kv_type(cfg: PlanConfig, model: ModelConfig, hw: HardwareConfig) -> str:
    """The KV cache type the llama.cpp family runs with (``kv_cache``; auto: by ``KV_SHARE``)."""
    if cfg.kv_cache not in ("auto", "f16", "q8_0"):
        raise ConfigError(f"kv_cache={cfg.kv_cache} must be auto, f16 or q8_0")
    if cfg.kv_cache != "auto":
        return cfg.kv_cache
    return "q8_0" if model.kv_bytes_per_token * ctx_tokens(cfg) > KV_SHARE * hw.device_memory_bytes else "f16"


def _kv_flags(grammar: str, kv: str) -> str:
    """-ctk/-ctv at ``kv``, with flash attention, which a quantised V cache needs (llama.cpp's -fa takes on|off|auto
    since 2025-08; ik_llama.cpp's is a switch)."""
    if kv == "f16":
        return ""
    return f" -fa{' on' if grammar == 'llama.cpp' else ''} -ctk {kv} -ctv {kv}"


def _layer_flags(grammar: str, cpu_layers: int, model: ModelConfig, ctx: int, kv: str = "f16") -> str:
    """The llama.cpp family's command line keeping the experts of the first ``cpu_layers`` MoE layers on the CPU."""
    tail = f" -c {ctx}" + _kv_flags(grammar, kv)
    if cpu_layers == 0:
        return "-ngl 999" + tail
    if cpu_layers >= model.num_layers:
        return "-ngl 999 --cpu-moe" + tail
    blocks = cpu_layers + model.dense_layers  # llama.cpp counts the dense-first blocks (common/arg.cpp)
    if grammar == "llama.cpp":
        return f"-ngl 999 --n-cpu-moe {blocks}" + tail
    return f'-ngl 999 -ot "blk\\.{block_regex(blocks)}\\.ffn_.*_exps=CPU"' + tail


def _with_flags(base: SystemConfig, rt: Runtime, flags: str) -> SystemConfig:
    return dataclasses.replace(base, runtime=rt.grammar, flags=flags)


def free_for_experts(model: ModelConfig, hw: HardwareConfig, system: SystemConfig, ctx: int) -> tuple[int, float]:
    """Device memory free for experts under ``system`` (its flags applied) at ``ctx`` tokens, and one expert's mean
    bytes; raises ConfigError where the resident part or the host's share cannot fit."""
    applied = apply_flags(system, model.num_layers, model.dense_layers, model.num_experts).system
    mem = fit(model, hw, applied, ctx)
    if mem.free_bytes < 0:
        check_device(mem, model, hw)
    return mem.free_bytes, sum(mem.expert_bytes) / len(mem.expert_bytes)


def settings(rt: Runtime, base: SystemConfig, model: ModelConfig, hw: HardwareConfig, cfg: PlanConfig) -> list[Point]:
    """The settings of ``rt`` the plan predicts, from the most the GPU holds down (raises ConfigError where none can
    run: the model's resident part or its host share does not fit)."""
    ctx, L, E = ctx_tokens(cfg), model.num_layers, model.num_experts
    name = next(k for k, v in RUNTIMES.items() if v is rt)
    kv = kv_type(cfg, model, hw)
    if rt.preset == "llama-cpp":
        probe = _with_flags(base, rt, _layer_flags(rt.grammar, L, model, ctx, kv))
        applied = apply_flags(probe, L, model.dense_layers, E).system
        mem = fit(model, hw, dataclasses.replace(applied, cpu_moe_layers=[], n_cpu_moe=-1), ctx)
        check_device(mem, model, hw)  # the resident part fits, or this runtime cannot run
        least = L - mem.gpu_layers_fitting(E)
        values = _spread(least, L, cfg.points)
        return [
            Point(name, n, f := _layer_flags(rt.grammar, n, model, ctx, kv), _with_flags(base, rt, f)) for n in values
        ]
    if rt.preset == "ktransformers":
        free, mean = free_for_experts(model, hw, _with_flags(base, rt, "--kt-num-gpu-experts 0"), ctx)
        most = min(int(free // (mean * L)), E)
        flags = "--kt-method LLAMAFILE --kt-num-gpu-experts {}"
        return [Point(name, n, f := flags.format(n), _with_flags(base, rt, f)) for n in _spread(0, most, cfg.points)]
    if rt.preset == "llama-cpp-lru":
        tail = f" -c {ctx}" + _kv_flags(rt.grammar, kv)
        free, mean = free_for_experts(model, hw, _with_flags(base, rt, "-ngl 999 --cpu-moe" + tail), ctx)
        most = min(int(free // (mean * L)), E)
        if most < 1:
            raise ConfigError(f"no slot of --moe-expert-cache fits: {gib(free)} free for experts")
        flags = "-ngl 999 --cpu-moe --moe-expert-cache {}" + tail
        return [
            Point(name, n, f := flags.format(n), _with_flags(base, rt, f))
            for n in _spread(max(1, most // 8), most, cfg.points)
        ]
    free, _ = free_for_experts(model, hw, base, ctx)
    shares = [1.0] if rt.preset != "hobbit" else [float(s) for s in np.linspace(1.0 / cfg.points, 1.0, cfg.points)]
    out = []
    for share in shares:
        system = base
        if share < 1.0:
            high = int(free * share * base.cache.high_fraction)
            system = dataclasses.replace(
                base, cache=dataclasses.replace(base.cache, high_bytes=high, low_bytes=int(free * share) - high)
            )
        out.append(Point(name, round(free * share / GiB, 2), hobbit_knobs(system, rt), system))
    return out


def hobbit_knobs(system: SystemConfig, rt: Runtime) -> str:
    """The knobs that set ``system`` on the command line of ``hobbit sim`` (HOBBIT's setting has no other flags)."""
    if rt.preset != "hobbit":
        return ""
    p, c = system.precision, system.cache
    w = policy_knobs(c, "multidim")
    knobs = [
        f"system.precision.t1={p.t1:.2f}",
        f"system.precision.t2={p.t2:.2f}",
        f"system.cache.high_fraction={c.high_fraction:.2f}",
        f"system.cache.multidim.w_lru={w.w_lru:.2f}",
        f"system.cache.multidim.w_lfu={w.w_lfu:.2f}",
        f"system.cache.multidim.w_lhu={w.w_lhu:.2f}",
        f"system.cache.multidim.w_fld={w.w_fld:.2f}",
    ]
    if c.high_bytes >= 0:
        knobs += [f"system.cache.high_bytes={c.high_bytes}", f"system.cache.low_bytes={c.low_bytes}"]
    if system.host_load != "load":
        knobs.append(f"system.host_load={system.host_load}")
    return "system=hobbit " + " ".join(knobs)
