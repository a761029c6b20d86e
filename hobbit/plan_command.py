"""``hobbit plan``: for one model on one machine, each runtime's best settings and its predicted speed, ranked.

``plan(model, hardware, ...)`` (and the command) searches each runtime's own setting over what fits the machine's
memory (``sim.memory``'s rules, the ones every run checks): llama.cpp's and ik_llama.cpp's GPU/CPU split of the
experts (``--n-cpu-moe``, ``-ot``), KTransformers' ``--kt-num-gpu-experts``, llama.cpp's expert cache (PR #27861)
``--moe-expert-cache``, and HOBBIT's T1/T2, cache split and cache weights (``hobbit tune``'s search) at a range of
cache sizes. Each setting is predicted (``hobbit.plan.predict_config``) on the user's trace, or on synthetic routing
at conf/routing.yaml's ``typical`` locality; the chosen setting of each runtime (its fastest decode) is predicted
again at the ``low`` and ``high`` localities, the range a user without a trace should expect. Runtimes rank by
predicted decode speed; each row says what bounds it (the link, the CPU's memory bandwidth, the SSD, the GPU) or
why it cannot run. Writes plan.md, plan.json and plan.png/.svg (tok/s against the GPU memory a setting takes, one
line per runtime, the chosen points marked).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from hydra.core.hydra_config import HydraConfig
from tqdm import tqdm

from hobbit.analysis.plots import pyplot, save
from hobbit.api import configure, trace_of
from hobbit.glue import CONF, compose, hydra_command, load_hardware
from hobbit.phases import require
from hobbit.plan import DECODE_TOKENS, Prediction, locality_knobs, predict_config, synthetic_trace
from hobbit.sim.config import ConfigError, HardwareConfig, ModelConfig, SimConfig, SystemConfig, policy_knobs
from hobbit.sim.flags import apply_flags
from hobbit.sim.formats import FORMATS, weights
from hobbit.sim.machine import hardware_config
from hobbit.sim.memory import GiB, check_device, fit, gib
from hobbit.sim.run import check_topology
from hobbit.sim.tune import TuneConfig, best_trials, open_study, suggest, tune
from hobbit.sim.walk_copies import general_walks
from hobbit.traces.io import atomic_write_json, atomic_write_text

LOCALITIES = ("low", "high")  # conf/routing.yaml's presets a chosen setting is predicted again at: its range


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


@dataclass(frozen=True)
class PlanConfig:
    """Knobs of ``hobbit plan`` (conf/plan.yaml)."""

    LIMITS: ClassVar[dict[str, str]] = {
        "context": ">=0",
        "prompt": ">=1",
        "gen": ">=1",
        "points": ">=2",
        "tune_trials": ">=0",
        "quality_budget": "[0,1]",
        "window_tokens": ">=0",
    }

    # path knobs and their roles (hobbit/guard.py)
    PATHS: ClassVar[dict[str, str]] = {"trace": "in", "profile": "in", "out_dir": "outdir"}

    model: ModelConfig = field(default_factory=ModelConfig)
    """The model (config group ``model=NAME``, conf/model/, or ``model=path/to/model.gguf``)."""
    hardware: HardwareConfig = field(default_factory=HardwareConfig)
    """The machine (config group ``hardware=NAME``, conf/hardware/); ``profile`` or the machine keys (``gpu=``,
    ``ram=``, ...) name it instead (given with them, ``hardware=`` or a ``hardware.*`` knob is refused)."""
    profile: str | None = None
    """A hardware YAML (written by ``hobbit hardware`` or ``hobbit calibrate``) used instead of ``hardware``."""
    gpu: str = ""
    """The machine by what its owner knows (``hobbit hardware``'s keys): a GPU of conf/parts.yaml (rtx4090,
    rtx4060ti-16gb, ...); the machine keys build the machine alone, so ``hardware=`` and ``profile=`` are refused
    beside them."""
    vram: str = ""
    """The GPU's memory, a size (16GB, 24GiB); overrides the data sheet's."""
    pcie: str = ""
    """The GPU's PCIe link, generation x lanes (4x16, 5x8); empty: the card's own."""
    ram: str = ""
    """Host RAM, capacity[:type-MT/s x channels] (64GB:ddr5-6000x2)."""
    ram_gbps: str = ""
    """A measured host memory bandwidth, GB/s; overrides what ``ram``'s type gives."""
    ssd: str = ""
    """The NVMe drive by name (samsung-990-pro) or its read rate (7GB/s)."""
    cpu: str = ""
    """A CPU of conf/parts.yaml (ryzen9-7950x, epyc-9175f, ...): its cores, memory channels and DDR speed."""
    weights: str = "q4_k_m"
    """The file type the llama.cpp family and KTransformers run (a GGUF type: q4_k_m, q8_0, iq4_xs, ...); HOBBIT,
    MoE-Infinity and Fiddler run their own formats (fp16 experts; HOBBIT's int4 copies). A model read from a GGUF
    runs as its file holds it."""
    kv_cache: str = "auto"
    """The KV cache's type for the llama.cpp family (-ctk/-ctv): f16 | q8_0 | auto (q8_0 where the f16 cache of
    context + prompt + gen tokens would take more than an eighth of the GPU's memory, as long-context users run it;
    f16 otherwise)."""
    context: int = 0
    """Tokens already in the KV cache when the prompt arrives (a conversation's history)."""
    prompt: int = 512
    """Prompt tokens: the prefill speed is over a prompt of this many (llama-bench's pp512)."""
    gen: int = 128
    """Tokens generated after the prompt; the KV cache is sized for context + prompt + gen (llama.cpp's -c)."""
    trace: str | None = None
    """A schema-v1 routing trace of the model (Parquet): the plan replays it instead of synthetic routing, and has
    no locality range."""
    runtimes: list[str] = field(default_factory=list)
    """The runtimes planned (llama.cpp, ik_llama.cpp, ktransformers, llama.cpp-expert-cache, hobbit, moe-infinity,
    fiddler); []: every one whose released code runs the model."""
    points: int = 5
    """Settings predicted per runtime along its setting (the plot's points); the best is among them."""
    tune_trials: int = 12
    """Optuna trials tuning HOBBIT's T1/T2, cache split and cache weights (``hobbit tune``); 0: its preset's."""
    quality_budget: float = 0.25
    """The tuning's limit on the gate mass HOBBIT serves in low precision or skips (quality_proxy.degraded_mass)."""
    seed: int = 0
    """Seed of the synthetic routing and of the tuning's sampler."""
    out_dir: str = "."
    """Where plan.md, plan.json and plan.png go (the command's run directory)."""
    window_tokens: int = 0
    """With ``trace``: 0 reads it whole, once; N: each prediction (and each tuning trial) reads the trace file N
    tokens at a time (``sim.windowed``: the same results, the memory a window's, for traces longer than memory)."""


MACHINE_KEYS = ("gpu", "vram", "pcie", "ram", "ram_gbps", "ssd", "cpu")


@dataclass
class Point:
    """One setting of one runtime, and what it is predicted to do."""

    runtime: str
    value: float
    """The setting's value along the runtime's axis (layers, experts, slots, GiB)."""
    flags: str
    """What the user types: the runtime's flags (hobbit's knobs for HOBBIT)."""
    system: SystemConfig
    prediction: Prediction | None = None
    error: str = ""
    """Why it cannot run (the memory rules' message), when it cannot."""
    gpu_bytes: int = 0
    """Device memory the setting takes: non-expert weights, KV cache and the experts it keeps there."""
    host_bytes: int = 0
    """Host RAM the experts it keeps there take (what does not fit stays on the SSD)."""
    ssd_share: float = 0.0
    """The share of host-side expert reads served from the SSD."""
    low: Prediction | None = None
    high: Prediction | None = None

    @property
    def decode(self) -> float:
        return self.prediction.decode_tok_s if self.prediction else 0.0

    @property
    def prefill(self) -> float:
        return self.prediction.prefill_tok_s if self.prediction else 0.0


def ctx_tokens(cfg: PlanConfig) -> int:
    """The KV cache the plan sizes (llama.cpp's -c): context, prompt and generated tokens."""
    return cfg.context + cfg.prompt + cfg.gen


def _block_regex(n: int) -> str:
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
    return f'-ngl 999 -ot "blk\\.{_block_regex(blocks)}\\.ffn_.*_exps=CPU"' + tail


def _with_flags(base: SystemConfig, rt: Runtime, flags: str) -> SystemConfig:
    return dataclasses.replace(base, runtime=rt.grammar, flags=flags)


def _free(model: ModelConfig, hw: HardwareConfig, system: SystemConfig, ctx: int) -> tuple[int, float]:
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
        free, mean = _free(model, hw, _with_flags(base, rt, "--kt-num-gpu-experts 0"), ctx)
        most = min(int(free // (mean * L)), E)
        flags = "--kt-method LLAMAFILE --kt-num-gpu-experts {}"
        return [Point(name, n, f := flags.format(n), _with_flags(base, rt, f)) for n in _spread(0, most, cfg.points)]
    if rt.preset == "llama-cpp-lru":
        tail = f" -c {ctx}" + _kv_flags(rt.grammar, kv)
        free, mean = _free(model, hw, _with_flags(base, rt, "-ngl 999 --cpu-moe" + tail), ctx)
        most = min(int(free // (mean * L)), E)
        if most < 1:
            raise ConfigError(f"no slot of --moe-expert-cache fits: {gib(free)} free for experts")
        flags = "-ngl 999 --cpu-moe --moe-expert-cache {}" + tail
        return [
            Point(name, n, f := flags.format(n), _with_flags(base, rt, f))
            for n in _spread(max(1, most // 8), most, cfg.points)
        ]
    free, _ = _free(model, hw, base, ctx)
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


def _memory(point: Point, model: ModelConfig, hw: HardwareConfig) -> None:
    """The point's device and host memory, from its run's summary."""
    assert point.prediction is not None
    s = point.prediction.summary
    m = s["memory"]
    applied = apply_flags(point.system, model.num_layers, model.dense_layers, model.num_experts).system
    expert = m["expert_bytes"]
    L, E = model.num_layers, model.num_experts
    if applied.placement == "static":
        kept = (L - len(s.get("placement", {}).get("cpu_moe_layers", []))) * E * expert
    elif applied.cpu_misses == "always" and not applied.cpu_insert:  # KTransformers: nothing cached, N pinned
        kept = applied.gpu_experts * L * expert
    elif applied.cache.layer_slots and applied.cache.per_layer:
        kept = min(applied.cache.layer_slots, E) * L * expert
    else:
        kept = s["cache"]["high_bytes"] + s["cache"]["low_bytes"]
    point.gpu_bytes = int(m["resident_bytes"] + m["kv_bytes"] + kept)
    host = m["host_expert_bytes"]
    if hw.expert_source == "ssd":  # the machine reads experts off the GPU from its SSD (HOBBIT's Jetson setting)
        point.host_bytes, point.ssd_share = 0, 1.0 if host else 0.0
        return
    ram = max(m["host_bytes"] - hw.host_reserve_bytes, 0) if m["host_bytes"] else host
    point.host_bytes = int(min(host, ram))
    point.ssd_share = 1.0 - float(m["ram_share"])


def bound_by(point: Point, hw: HardwareConfig, model: ModelConfig) -> str:
    """What the point's decode time goes to, in plain words: the SSD, the link, the CPU's memory or the GPU."""
    if point.prediction is None:
        return "does not fit: " + point.error
    s = point.prediction.summary
    ms = s["decode_ms_per_token"]["mean"]
    applied = apply_flags(point.system, model.num_layers, model.dense_layers, model.num_experts).system
    L, E = model.num_layers, model.num_experts
    slots = s["cache"]["high_slots"] + s["cache"]["low_slots"]
    cpu_layers = len(s.get("placement", {}).get("cpu_moe_layers", [])) if applied.placement == "static" else 0
    if applied.placement == "static":
        off_gpu = cpu_layers > 0
    elif applied.gpu_experts and applied.cpu_misses == "always":
        off_gpu = applied.gpu_experts < E
    else:
        off_gpu = slots < L * E
    if not off_gpu:
        return "GPU-bound: every expert on the GPU"
    if hw.expert_source == "ssd":
        return f"SSD-bound: experts off the GPU are read from the SSD ({hw.ssd_gbps:g} GB/s)"
    if point.ssd_share > 0.01:
        return (
            f"SSD-bound: {point.ssd_share:.0%} of the host-side experts' reads page in from the SSD "
            f"({hw.ssd_fault_gbps or hw.ssd_gbps:g} GB/s)"
        )
    if cpu_layers:
        return f"CPU-memory-bound: the experts of {cpu_layers} of {L} layers run on the CPU ({hw.cpu_mem_gbps:g} GB/s)"
    if 0 < applied.gpu_experts < E and applied.cpu_misses == "always":
        return (
            f"CPU-memory-bound: {E - min(applied.gpu_experts, E)} of {E} experts per layer run on the CPU "
            f"({hw.cpu_mem_gbps:g} GB/s)"
        )
    if applied.cpu_misses != "never":
        held = f"{slots // L} of {E} experts per layer" if slots >= L else f"{slots} of {L * E} experts"
        return f"CPU-memory-bound: the GPU's cache holds {held}; misses run on the CPU ({hw.cpu_mem_gbps:g} GB/s)"
    stall = s["stall_ms_per_token"] / ms if ms else 0.0
    if stall > 0.25 or s["link_busy_fraction"] > 0.5:
        return (
            f"link-bound: expert copies over the link ({hw.link_gbps:g} GB/s) keep it busy "
            f"{s['link_busy_fraction']:.0%} of the time; {stall:.0%} of each token waits for them"
        )
    return f"GPU-bound: {s['hit_rate']:.0%} of expert uses served from GPU memory without waiting for a copy"


@dataclass
class Plan:
    """What ``plan`` found: every point predicted, each runtime's chosen one ranked, and the files written."""

    title: str
    model: str
    hardware: str
    rows: list[dict[str, Any]]
    points: list[Point]
    notes: list[str]
    trace: Path
    """The routing the settings were predicted on (the user's trace, or the synthetic one at typical locality)."""
    chosen: dict[str, Point]
    """Each runtime that fits: its chosen setting."""
    files: list[Path] = field(default_factory=list)
    wall_s: float = 0.0


def _tuned(trace_path: Path, base: SystemConfig, cfg: PlanConfig, model: ModelConfig, hw: HardwareConfig, out: Path):
    """HOBBIT tuned on the plan's trace (``hobbit tune``'s search, resumed from out/tune/study.db), and a note."""
    import optuna  # lazy: only a plan that tunes HOBBIT loads it (and SQLAlchemy)

    tcfg = TuneConfig(
        model=model,
        hardware=hw,
        system=base,
        trials=cfg.tune_trials,
        seed=cfg.seed,
        objective="budget",
        quality_budget=cfg.quality_budget,
        study=str(out / "tune" / "study.db"),
        out_dir=str(out / "tune"),
    )
    summary = tune(trace_of(trace_path, cfg.window_tokens if cfg.trace else 0), tcfg)
    best = best_trials(open_study(tcfg, out / "tune" / "study.db"), tcfg)
    if not best:
        return base, f"HOBBIT: no trial of {summary['trials']} met the quality budget; its preset's T1/T2 kept"
    system = suggest(optuna.trial.FixedTrial(best[0].params), base)
    return system, f"HOBBIT tuned: trial {best[0].number} of {summary['trials']} (quality budget {cfg.quality_budget})"


def machine(cfg: PlanConfig, named: list[str] | tuple[str, ...] = ()) -> HardwareConfig:
    """The machine a plan is for: the machine keys when any is given, else ``profile``, else ``hardware``.
    ``named``: the ``hardware=`` / ``hardware.*`` settings the caller gave, which machine keys would silently
    replace; with any machine key they are refused, as ``profile`` is."""
    keys = {k: getattr(cfg, k) for k in MACHINE_KEYS if getattr(cfg, k)}
    if keys:
        given = " ".join(f"{k}={v}" for k, v in keys.items())
        other = [f"profile={cfg.profile}"] if cfg.profile else list(named)
        if other:
            raise ConfigError(
                f"{' '.join(other)} and {given} both name the machine; the machine keys build it alone and would "
                f"drop the rest (fix: the machine keys, or {other[0].split('=')[0]}= without them)"
            )
        return hardware_config(**keys)
    return load_hardware(cfg.profile) if cfg.profile else cfg.hardware


def chosen_runtimes(cfg: PlanConfig, model: ModelConfig) -> tuple[list[str], list[str]]:
    """The runtimes planned, and notes on those left out (their released code does not run the model)."""
    unknown = sorted(set(cfg.runtimes) - set(RUNTIMES))
    if unknown:
        raise ConfigError(f"runtimes={unknown} are not runtimes the plan knows (fix: some of {', '.join(RUNTIMES)})")
    names = list(dict.fromkeys(cfg.runtimes)) or list(RUNTIMES)
    keep, notes = [], []
    for n in names:
        fam = RUNTIMES[n].families
        if fam and not any(model.name.lower().startswith(f) for f in fam) and not cfg.runtimes:
            notes.append(f"{RUNTIMES[n].label} left out: its released code runs {', '.join(fam)} models only")
            continue
        keep.append(n)
    return keep, notes


@general_walks()  # many systems: each policy's general copy of the walk, compiled once
def plan(
    cfg: PlanConfig, out: Path | None = None, progress: bool = True, named: list[str] | tuple[str, ...] = ()
) -> Plan:
    """Every runtime's settings on ``cfg``'s model and machine, predicted; each runtime's best chosen and ranked by
    decode speed; plan.md, plan.json and plan.png written to ``out`` when given (HOBBIT's tuning study resumes
    there). ``named``: the hardware settings the caller gave (``machine``)."""

    t0 = time.perf_counter()
    model, hw = cfg.model, machine(cfg, named)
    names, notes = chosen_runtimes(cfg, model)
    ctx = ctx_tokens(cfg)
    if kv_type(cfg, model, hw) != "f16":
        kv_gib = model.kv_bytes_per_token * ctx / GiB
        notes.append(f"the llama.cpp family's KV cache at q8_0 (-ctk/-ctv; at f16 it would take {kv_gib:.1f} GiB)")
    work = out if out is not None else Path(tempfile.mkdtemp(prefix="hobbit-plan-"))
    try:  # before any runtime is tried: a failure there is that runtime's row, not the user's knob
        weights(model, cfg.weights)
    except ConfigError as exc:
        near = difflib.get_close_matches(cfg.weights.lower(), [f.lower() for f in FORMATS], n=1)
        hint = f"did you mean {near[0]}? " if near else ""
        raise ConfigError(f"weights={cfg.weights}: {exc} (fix: {hint}a GGUF type such as q4_k_m, or bpw<N>)") from None
    if cfg.trace is not None:
        trace_path = Path(cfg.trace)
        trace = trace_of(trace_path, cfg.window_tokens)
        require(trace, "plan", "it ranks runtimes by decode speed", decode=True)
        check_topology(trace, model)
        notes.append(f"routing from {trace_path}")
    else:
        trace_path = synthetic_trace(model, cfg.prompt, DECODE_TOKENS, locality_knobs("typical"), cfg.seed)
        notes.append("routing synthetic, at conf/routing.yaml's typical locality; ranges span its low and high presets")
    points: list[Point] = []
    bases: dict[str, SimConfig] = {}
    failed: dict[str, str] = {}
    todo: list[tuple[str, Point]] = []
    for name in names:
        rt = RUNTIMES[name]
        try:
            sim = configure(model, hw, rt.preset, context=cfg.context, seed=cfg.seed)
            base = sim.system
            if rt.grammar and base.weights != "fp16":
                base = dataclasses.replace(base, weights=cfg.weights)
            if name == "hobbit":  # built on llama.cpp: what RAM cannot hold can stay in the mmapped file
                try:
                    _free(model, hw, base, ctx)
                except ConfigError:
                    base = dataclasses.replace(base, host_load="mmap")
                    _free(model, hw, base, ctx)
                    notes.append("HOBBIT: its experts do not fit in RAM; run with mmap (system.host_load=mmap)")
            if name == "hobbit" and cfg.tune_trials > 0:  # it fits (checked above) before it is tuned
                base, note = _tuned(trace_path, base, cfg, model, hw, work)
                notes.append(note)
            # a user's trace file is read a window at a time when asked; the synthetic routing is short
            bases[name] = dataclasses.replace(sim, system=base, window_tokens=cfg.window_tokens if cfg.trace else 0)
            todo += [(name, p) for p in settings(rt, base, model, hw, cfg)]
        except ConfigError as exc:
            failed[name] = str(exc)
    bar = tqdm(todo, desc="plan", unit="setting", disable=None if progress else True)
    for name, p in bar:
        try:
            p.prediction = predict_config(
                dataclasses.replace(bases[name], system=p.system), prompt=cfg.prompt, trace=trace_path
            )
            _memory(p, model, hw)
        except ConfigError as exc:
            p.error = str(exc)
        points.append(p)
    rows = []
    chosen: dict[str, Point] = {}
    for name in names:
        rt = RUNTIMES[name]
        mine = [p for p in points if p.runtime == name and p.prediction is not None]
        if not mine:
            why = failed.get(name) or next((p.error for p in points if p.runtime == name and p.error), "no setting")
            rows.append({"runtime": name, "label": rt.label, "fits": False, "why": "does not fit: " + why})
            continue
        best = chosen[name] = max(mine, key=lambda p: (round(p.decode, 3), p.prefill))
        if cfg.trace is None:
            for loc in LOCALITIES:
                pred = predict_config(
                    dataclasses.replace(bases[name], system=best.system), prompt=cfg.prompt, locality=loc
                )
                setattr(best, loc, pred)
        rows.append(_row(name, rt, best, hw, model))
    fits = sorted((r for r in rows if r["fits"]), key=lambda r: -r["decode_tok_s"])
    rows = fits + [r for r in rows if not r["fits"]]
    for i, r in enumerate(rows, 1):
        r["rank"] = i if r["fits"] else None
        if r["fits"] and i > 1:
            ratio = fits[0]["decode_tok_s"] / r["decode_tok_s"]
            than = f"{ratio:.2f}x slower than" if ratio >= 1.005 else "as fast as"
            r["why"] = f"{than} {fits[0]['label']}; " + r["why"]
    title = (
        f"{model.name} on {hw.name}: {cfg.prompt}-token prompt, {cfg.gen} generated, {cfg.context:,} tokens of "
        f"context before it"
    )
    result = Plan(title, model.name, hw.name, rows, points, notes, trace_path, chosen, wall_s=time.perf_counter() - t0)
    if out is not None:
        result.files = write_plan(result, cfg, hw, out)
    return result


def plan_for(
    model: str, hardware: str | None = None, *, out: Path | None = None, progress: bool = False, **knobs: Any
) -> Plan:
    """``plan`` from Python as the command line takes it: ``plan_for("qwen3-30b-a3b", gpu="rtx4060ti-16gb",
    ram="64GB:ddr5-6000x2", context=4096)``; ``hardware``: a preset (None: conf/plan.yaml's, unless machine keys are
    given); ``out``: where plan.md, plan.json and plan.png go (None: nowhere)."""
    named = [f"hardware={hardware}"] if hardware else []
    over = [f"model={model}", f"out_dir={out or '.'}", *named]
    for key, value in knobs.items():
        text = "[" + ",".join(map(str, value)) + "]" if isinstance(value, (list, tuple)) else value
        over.append(f"{key}={'null' if text is None else text}")
    named += [o for o in over if o.startswith("hardware.")]
    return plan(compose("plan", PlanConfig, over), out, progress=progress, named=named)


def _row(name: str, rt: Runtime, p: Point, hw: HardwareConfig, model: ModelConfig) -> dict[str, Any]:
    assert p.prediction is not None
    spread = [x for x in (p.low, p.prediction, p.high) if x is not None]
    return {
        "runtime": name,
        "label": rt.label,
        "fits": True,
        "setting": rt.setting,
        "value": p.value,
        "flags": p.flags,
        "decode_tok_s": p.decode,
        "prefill_tok_s": p.prefill,
        "decode_range": [min(x.decode_tok_s for x in spread), max(x.decode_tok_s for x in spread)],
        "prefill_range": [min(x.prefill_tok_s for x in spread), max(x.prefill_tok_s for x in spread)],
        "gpu_bytes": p.gpu_bytes,
        "gpu_capacity_bytes": hw.device_memory_bytes,
        "host_bytes": p.host_bytes,
        "ssd_share": p.ssd_share,
        "weights": p.prediction.summary["memory"]["weights_format"],
        "shown": _shown(rt, p),
        "why": bound_by(p, hw, model) + _quality(p),
        "notes": p.prediction.summary["memory"]["notes"],
    }


def _shown(rt: Runtime, p: Point) -> str:
    """The setting as the table shows it: the flags, or for HOBBIT (whose knobs are hobbit's own, in plan.json) its
    thresholds and cache split."""
    if rt.preset != "hobbit":
        return f"`{p.flags}`" if p.flags else "(its defaults)"
    pr, c = p.system.precision, p.system.cache
    return f"T1 {pr.t1:.2f}, T2 {pr.t2:.2f}, {c.high_fraction:.0%} of the cache fp16 (hobbit knobs: plan.json)"


def _quality(p: Point) -> str:
    """HOBBIT's price: the gate mass it serves in low precision or skips."""
    assert p.prediction is not None
    q = p.prediction.summary["quality_proxy"]["degraded_mass"]
    return f"; {q:.0%} of the gate mass served in int4 or skipped" if q > 0 else ""


def _rate(x: float, lo: float, hi: float) -> str:
    def f(v: float) -> str:
        return f"{v:,.0f}" if v >= 100 else f"{v:.1f}" if v >= 10 else f"{v:.2f}"

    if math.isclose(lo, hi, rel_tol=1e-3):
        return f(x)
    return f"{f(x)} ({f(lo)}-{f(hi)})"


def plan_table(rows: list[dict[str, Any]]) -> str:
    """The plan's ranked table (markdown)."""
    out = [
        "| rank | runtime | flags | GPU memory | host RAM | prefill tok/s | decode tok/s | bound by / why not |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if not r["fits"]:
            out.append(f"| - | {r['label']} | | | | | | {r['why']} |")
            continue
        ssd = f" (+{r['ssd_share']:.0%} of reads from SSD)" if r["ssd_share"] > 0.01 else ""
        host = gib(r["host_bytes"]) + ssd if r["host_bytes"] else "experts on the SSD" if ssd else "-"
        flags = r["shown"]
        out.append(
            f"| {r['rank']} | {r['label']} ({r['weights']}) | {flags} | {gib(r['gpu_bytes'])} of "
            f"{gib(r['gpu_capacity_bytes'])} | {host} | "
            f"{_rate(r['prefill_tok_s'], *r['prefill_range'])} | {_rate(r['decode_tok_s'], *r['decode_range'])} | "
            f"{r['why']} |"
        )
    return "\n".join(out)


def plot_plan(result: Plan, hw: HardwareConfig, out: Path) -> list[Path]:
    """plan.png/.svg: decode and prefill tok/s against the GPU memory each setting takes, one line per runtime, the
    chosen settings starred."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.6))
    chosen = {(r["runtime"], r["flags"]) for r in result.rows if r["fits"]}
    for i, name in enumerate(dict.fromkeys(p.runtime for p in result.points)):
        mine = sorted((p for p in result.points if p.runtime == name and p.prediction), key=lambda p: p.gpu_bytes)
        if not mine:
            continue
        x = [p.gpu_bytes / GiB for p in mine]
        for ax, attr in zip(axes, ("decode", "prefill")):
            ax.plot(x, [getattr(p, attr) for p in mine], marker="o", ms=4, color=f"C{i}", label=RUNTIMES[name].label,
                    ls="-" if i % 2 == 0 else "--")  # fmt: skip  # dashed: a line that lies on another shows
            for p in mine:
                if (p.runtime, p.flags) in chosen:
                    ax.scatter([p.gpu_bytes / GiB], [getattr(p, attr)], marker="*", s=220, color=f"C{i}", zorder=4,
                               edgecolors="k")  # fmt: skip
    for ax, what in zip(axes, ("decode", "prefill")):
        ax.axvline(hw.device_memory_bytes / GiB, color="k", ls="--", lw=0.8, label="the GPU's memory")
        ax.set_xlabel("GPU memory the setting takes (GiB)")
        ax.set_ylabel(f"{what} tokens/s")
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))  # outside: lines run anywhere
    fig.suptitle(result.title + " (stars: each runtime's chosen setting)", fontsize=9)
    return save(fig, out, "plan")


def write_plan(result: Plan, cfg: PlanConfig, hw: HardwareConfig, out: Path) -> list[Path]:
    """plan.md, plan.json and the plot under ``out``."""
    plots = plot_plan(result, hw, out)
    best = next((r for r in result.rows if r["fits"]), None)
    head = (
        f"Run **{best['label']}**: `{best['flags'] or '(its defaults)'}`, about {best['decode_tok_s']:.1f} tokens/s "
        f"decoding and {best['prefill_tok_s']:,.0f} tokens/s on the prompt."
        if best
        else "No runtime can run this model on this machine."
    )
    md = (
        f"# {result.title}\n\n{head}\n\n{'; '.join(result.notes)}. Ranked by predicted decode speed; each runtime's "
        f"setting is the fastest of those that fit (figures in parentheses: the range over the plausible locality of "
        f"routing, conf/routing.yaml's low and high presets).\n\n{plan_table(result.rows)}\n\n![plan](plan.png)\n"
    )
    points = [
        {
            "runtime": p.runtime,
            "value": p.value,
            "flags": p.flags,
            "gpu_bytes": p.gpu_bytes,
            "host_bytes": p.host_bytes,
            "ssd_share": p.ssd_share,
            "prefill_tok_s": p.prefill if p.prediction else None,
            "decode_tok_s": p.decode if p.prediction else None,
            "error": p.error,
        }
        for p in result.points
    ]
    doc = {
        "title": result.title,
        "model": result.model,
        "hardware": result.hardware,
        "context": cfg.context,
        "prompt": cfg.prompt,
        "gen": cfg.gen,
        "weights": cfg.weights,
        "trace": cfg.trace,
        "notes": result.notes,
        "ranked": result.rows,
        "points": points,
    }
    atomic_write_json(out / "plan.json", doc)
    atomic_write_text(out / "plan.md", md)
    return [out / "plan.md", out / "plan.json", *plots]


@hydra_command(CONF, "plan", PlanConfig)
def plan_main(cfg: PlanConfig) -> None:
    """The best settings and predicted speed of each runtime for a model on a machine, ranked."""
    out = Path(cfg.out_dir)
    task = list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []
    named = [o for o in task if o.lstrip("+~").split("=")[0].split(".")[0] == "hardware"]
    result = plan(cfg, out, named=named)
    print(f"# {result.title}\n")
    print(plan_table(result.rows))
    print(f"\n{'; '.join(result.notes)}; done in {result.wall_s:.0f} s")
    for p in result.files:
        print(f"  {Path(p).resolve()}")


__all__ = ["RUNTIMES", "Plan", "PlanConfig", "Point", "plan", "plan_for", "plan_table"]
