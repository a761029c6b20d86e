"""Typed configs of the simulator: model, hardware, system (frozen dataclasses).

Hydra composes ``conf/{model,hardware,system}/*.yaml`` over these schemas (registered in
its ConfigStore by the application layer, ``hobbit.glue``); the core never sees a ``DictConfig``. Units are in the
names: ``_bytes``, ``_s``, ``_gbps`` (1e9 bytes/s), ``_tflops`` (1e12 flop/s).
"""

from __future__ import annotations

from dataclasses import dataclass, field, make_dataclass
from typing import Any, ClassVar

from hobbit.sim.policies.registry import EVICTION, PREFETCH, knobs_types
from hobbit.traces.schema import InputError

# Group-wise formats as this project's executor packs them (executor/quant.py): codes plus an fp16 scale and
# zero per group of ``quant_group_size`` inputs (ModelConfig.quant_meta_bytes_per_group).
_BITS = {"fp16": 16, "bf16": 16, "int8": 8, "int4": 4, "int2": 2}
# Other systems' formats, in bits per weight with their scales (block layouts):
FORMAT_BPW = {
    "q8_0": 8.5,  # llama.cpp block_q8_0: fp16 scale + 32 int8 codes = 34 B / 32 weights (ggml-common.h)
    "q4_0": 4.5,  # llama.cpp block_q4_0: fp16 scale + 16 B of codes = 18 B / 32 weights (ggml-common.h)
    "q2_k": 2.625,  # llama.cpp block_q2_K: 84 B / 256 weights (ggml-common.h)
    "hqq2": 3.02,  # HQQ 2-bit, group 16, 8-bit quantised scales and zeros (mixtral-offloading's experts,
    # hqq/core/quantize.py at the commit it pins): 2 + 0.5 + 0.5 + ~0.02 bits
}
PRECISIONS = (*_BITS, *FORMAT_BPW)


def quant_group(k: int, group: int = 128) -> int:
    """The quantisation group for a layer with ``k`` input features: ``group`` when it divides
    ``k``, else the largest of 64 or 32 that does (what int4 kernels take), else ``k`` itself."""
    for g in (group, 64, 32):
        if g <= group and k % g == 0:
            return g
    return k


class ConfigError(InputError):
    """A knob out of range, named in the message; raised before any simulation work."""


@dataclass(frozen=True)
class ModelConfig:
    """An MoE model's shapes, from which every byte count and flop count is derived.

    An expert is three matrices (SwiGLU): 3 * hidden_size * expert_ffn parameters.
    ``dense_params_per_layer`` counts what every MoE layer also runs on every token
    (attention, router, norms, shared experts); ``other_params`` what stays resident
    and runs once per token (embeddings, LM head, dense FFN layers).
    """

    LIMITS: ClassVar[dict[str, str]] = {
        "num_layers": ">=1",
        "num_experts": ">=1",
        "top_k": ">=1",
        "hidden_size": ">=1",
        "expert_ffn": ">=1",
        "dense_params_per_layer": ">=0",
        "other_params": ">=0",
        "kv_bytes_per_token": ">=0",
        "quant_group_size": ">=1",
        "quant_meta_bytes_per_group": ">=0",
    }

    name: str = "unnamed"
    num_layers: int = 1  # MoE layers
    num_experts: int = 8
    top_k: int = 2
    hidden_size: int = 4096
    expert_ffn: int = 14336
    dense_params_per_layer: int = 0
    other_params: int = 0
    kv_bytes_per_token: int = 0  # all layers, at 16 bit
    quant_group_size: int = 128
    quant_meta_bytes_per_group: int = 4  # an fp16 scale and an fp16 zero per group
    source: str = ""

    @property
    def expert_params(self) -> int:
        return 3 * self.hidden_size * self.expert_ffn

    def expert_bytes(self, precision: str) -> int:
        """Bytes of one expert at ``precision``, quantisation scales and zeros included."""
        if precision in FORMAT_BPW:
            return round(self.expert_params * FORMAT_BPW[precision] / 8)
        if precision not in _BITS:
            raise ConfigError(f"precision '{precision}' is not one of {', '.join(PRECISIONS)}")
        p = self.expert_params
        raw = p * _BITS[precision] // 8
        if _BITS[precision] == 16:
            return raw
        h, f, g = self.hidden_size, self.expert_ffn, self.quant_group_size
        groups = 2 * f * (h // quant_group(h, g)) + h * (f // quant_group(f, g))  # gate/up over hidden, down over FFN
        return raw + groups * self.quant_meta_bytes_per_group

    def dense_bytes_per_layer(self) -> int:
        return 2 * self.dense_params_per_layer

    def resident_bytes(self) -> int:
        """Weights that never leave the device: dense parts of every layer plus the rest."""
        return 2 * (self.dense_params_per_layer * self.num_layers + self.other_params)


@dataclass(frozen=True)
class ProfileConfig:
    """Costs measured by ``hobbit calibrate`` on one machine for one model's shapes.

    When a hardware config carries a profile, the cost model uses it instead of the
    roofline: copies t0 + bytes / B; the dense part of a layer a + b*T + c*T*C (T tokens,
    C context) plus the executor's per-layer overhead; the LM head and an expert's SwiGLU
    interpolated in the token count (the head a + b*T in profiles without ``head_s``); ``step_*`` added to each call
    of a part. Contention (``busy_*``): copies and compute measured while the other runs; the engines charge them
    over the time both overlap.
    """

    LIMITS: ClassVar[dict[str, str]] = {
        "hidden_size": ">=1",
        "expert_ffn": ">=1",
        "link_t0_s": ">=0",
        "link_gbps": ">0",
        "layer_overhead_s": ">=0",
        "expert_tokens": ">=1",
        "expert_high_s": ">=0",
        "expert_low_s": ">=0",
        "cpu_expert_s": ">=0",
        "head_s": ">=0",
        "copy_issue_s": ">=0",
        "busy_link_gbps": ">=0",
        "busy_dense_factor": ">0",
        "busy_expert_high_factor": ">0",
        "busy_expert_low_factor": ">0",
        "step_dense_s": ">=0",
        "step_expert_high_s": ">=0",
        "step_expert_low_s": ">=0",  # dense_s and other_s are fitted coefficients: finite, of either sign
    }

    model: str = ""  # what it was measured for: name and the two widths that set every size
    hidden_size: int = 0
    expert_ffn: int = 0
    device: str = ""
    link_t0_s: float = 0.0
    link_gbps: float = 0.0
    dense_s: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])  # a, b, c
    other_s: list[float] = field(default_factory=lambda: [0.0, 0.0])  # a, b
    head_s: list[float] = field(default_factory=list)  # the LM head per expert_tokens count (replaces other_s)
    layer_overhead_s: float = 0.0  # the replay loop per layer beyond its measured parts
    copy_issue_s: float = 0.0  # the compute stream's time per copy: issuing it and the cache's bookkeeping for it
    expert_tokens: list[int] = field(default_factory=list)
    expert_high_s: list[float] = field(default_factory=list)
    expert_low_s: list[float] = field(default_factory=list)
    cpu_expert_s: list[float] = field(default_factory=list)
    # contention, measured with copies and compute running together (0 / 1: not measured, none charged)
    busy_link_gbps: float = 0.0  # the link's bandwidth while experts compute
    busy_dense_factor: float = 1.0  # the dense part's time while a copy runs, over its time alone
    busy_expert_high_factor: float = 1.0  # a high-precision expert's, likewise
    busy_expert_low_factor: float = 1.0  # a low-precision expert's, likewise
    # what a part costs more per call inside a decode step (dense, a high and a low expert in turn, as the replay
    # runs them) than its own probe measures back to back: caches, predictors and TLBs as the other parts leave
    # them; added to every call of the part (0: not measured)
    step_dense_s: float = 0.0
    step_expert_high_s: float = 0.0
    step_expert_low_s: float = 0.0


@dataclass(frozen=True)
class HardwareConfig:
    """A machine: device memory and compute, the link experts cross, the host CPU.

    ``unified_memory``: device and host share one DRAM (Jetson); experts then come from
    the SSD and every byte moved also spends the shared DRAM bandwidth.
    ``contention_compute`` / ``contention_link``: how much longer compute takes while a copy
    runs, and a copy while the device computes (1.0: they do not meet); the engines charge
    the factors over the time both overlap (sim.timeline).
    """

    LIMITS: ClassVar[dict[str, str]] = {
        "device_memory_bytes": ">0",
        "device_mem_gbps": ">0",
        "device_tflops": ">0",
        "kernel_overhead_s": ">=0",
        "compute_efficiency": "(0,1]",
        "link_gbps": ">0",
        "link_t0_s": ">=0",
        "ssd_gbps": ">0",
        "ssd_t0_s": ">=0",
        "cpu_tflops": ">0",
        "cpu_mem_gbps": ">0",
        "low_precision_efficiency": "(0,1]",
        "reserve_bytes": ">=0",
        "contention_compute": ">=1",
        "contention_link": ">=1",
    }

    name: str = "unnamed"
    device_memory_bytes: int = 24 * 2**30
    device_mem_gbps: float = 1008.0
    device_tflops: float = 165.0  # dense 16-bit
    kernel_overhead_s: float = 10e-6  # per kernel launch
    compute_efficiency: float = 0.8  # fraction of peak bandwidth / flops that batch-1 kernels reach
    link_gbps: float = 25.0  # host -> device, pinned, achieved
    link_t0_s: float = 6e-6  # per copy
    expert_source: str = "host"  # host | ssd
    ssd_gbps: float = 3.0
    ssd_t0_s: float = 80e-6
    unified_memory: bool = False
    cpu_tflops: float = 1.0  # host CPU, 16-bit GEMV-bound work
    cpu_mem_gbps: float = 60.0
    high_precision: str = "fp16"
    low_precision: str = "int4"
    low_precision_efficiency: float = 0.8  # a low-bit kernel's bandwidth relative to a 16-bit one (dequant)
    reserve_bytes: int = 2 * 2**30  # runtime, activations, fragmentation
    contention_compute: float = 1.0  # compute time while a copy runs, over its time alone (1.0: none)
    contention_link: float = 1.0  # a copy's time while the device computes, over its time alone (1.0: none)
    source: str = ""
    profile: ProfileConfig | None = None  # measured costs (hobbit calibrate) replace the roofline


@dataclass(frozen=True)
class PrecisionConfig:
    """How a missing expert is loaded. ``mode``: hobbit (T1/T2 rule) | high | low."""

    LIMITS: ClassVar[dict[str, str]] = {"t1": "[0,1]", "t2": "[0,1]"}

    mode: str = "hobbit"
    t1: float = 0.6  # paper default (Mixtral)
    t2: float = 0.9
    serve_any_cached: bool = True  # a cached copy of either precision serves a hit
    multi_token: str = "max"  # a pass with many tokens loads an expert at the highest precision any needs;
    # high: at high precision (with mode hobbit: a uniform mode serves every token at its precision)


def with_policy_nodes(base: type, name: str, registry: dict[str, str]) -> type:
    """``base`` plus one config node per registered policy that has knobs, named after it and typed
    by its ``Knobs`` dataclass (``system.cache.multidim.w_fld``): a policy's knobs live with it and
    arrive here without an edit."""
    nodes = [(n, k, field(default_factory=k)) for n, k in knobs_types(registry).items()]
    cls = make_dataclass(name, nodes, bases=(base,), frozen=True)
    cls.__module__, cls.__qualname__, cls.__doc__ = __name__, name, base.__doc__
    return cls


@dataclass(frozen=True)
class PrefetchBase:
    """What is loaded ahead. ``kind``: a name of ``policies.registry.PREFETCH``; its knobs, if any,
    are the node ``system.prefetch.<kind>``."""

    LIMITS: ClassVar[dict[str, str]] = {"max_depth": ">=1", "fallback_accuracy": "[0,1]", "staging_slots": ">=0"}

    kind: str = "hobbit"
    max_depth: int = 2  # p: layers looked ahead (paper: adaptive in [1, 3], default 2)
    fallback: str = "oracle"  # predictor when the trace has no predictions: oracle | history | none
    fallback_accuracy: float = 0.9  # top-1 accuracy of the oracle fallback
    precision: str = "rule"  # a prefetch's precision: rule (T1/T2 on the predicted weights, paper §3.3) | high | low
    # 0: a prefetched expert enters its pool, pinned until its layer has run (paper §3.3-3.4); N > 0: it waits in
    # one of N staging slots carved from the high pool's memory and enters the cache only when used (prefetches
    # beyond N free staging slots are not issued)
    staging_slots: int = 0


@dataclass(frozen=True)
class CacheBase:
    """The device expert cache. ``policy``: a name of ``policies.registry.EVICTION``; its knobs, if
    any, are the node ``system.cache.<policy>``.

    Sizes: ``high_bytes``/``low_bytes`` when >= 0; otherwise the device memory left after
    resident weights, KV cache and the reserve, split by ``high_fraction``.
    """

    LIMITS: ClassVar[dict[str, str]] = {
        "high_bytes": ">=-1",
        "low_bytes": ">=-1",
        "high_fraction": "[0,1]",
        "layer_slots": ">=0",
        "layer_share": "[0,1]",
        "layer_pinned": "[0,1]",
    }

    policy: str = "multidim"
    high_bytes: int = -1
    low_bytes: int = -1
    high_fraction: float = 0.75  # the paper keeps the high-precision pool larger
    per_layer: bool = False  # split each pool evenly across layers (MoE-Offloading)
    # caps on a pool's slots per layer, the memory permitting (0: none): a count (llama.cpp's --moe-expert-cache N),
    # or a share of a layer's experts, at least 4 x top-k (TEC's capacity rule, -c)
    layer_slots: int = 0
    layer_share: float = 0.0
    # this share of each layer's high-precision slots holds the layer's most used experts in the profiling
    # requests, pinned for good; the rest are the cache (TEC's pin list: -P, default half its slots, which it
    # applies in its unified-memory mode); 0: none
    layer_pinned: float = 0.0


PrefetchConfig = with_policy_nodes(PrefetchBase, "PrefetchConfig", PREFETCH)
CacheConfig = with_policy_nodes(CacheBase, "CacheConfig", EVICTION)


def policy_knobs(node: Any, name: str) -> Any:
    """The knobs node of policy ``name`` in a cache or prefetch config (None: it has none)."""
    return getattr(node, name, None)


@dataclass(frozen=True)
class SystemConfig:
    """An offloading system: precision, prefetch and cache policies, and CPU help."""

    LIMITS: ClassVar[dict[str, str]] = {
        "n_cpu_moe": ">=-1",
        "cpu_kernel_efficiency": "(0,1]",
        "cpu_insert": ">=0",
        "split_threshold": ">=0",
        "split_max_fetch": ">=-1",
    }

    name: str = "hobbit"
    precision: PrecisionConfig = field(default_factory=PrecisionConfig)
    prefetch: PrefetchConfig = field(default_factory=PrefetchConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)
    demand_first: bool = True  # a demand load goes ahead of queued (not in-flight) prefetches
    # a miss not skipped: never (loaded) | always (computed on the CPU from host memory) | faster (on the CPU when
    # that beats loading it and computing on the device, by the cost model: Fiddler, HOBBIT's CPU mode) | split
    # (FreeToken's hybrid backend: a layer's misses split between copies and the CPU by the two bandwidths)
    cpu_misses: str = "never"
    # a miss computed on the CPU is also copied into the cache behind it, evicting, up to this many per layer and
    # forward pass (llama.cpp's --moe-expert-cache-inserts); 0: none (cpu_misses=faster still fills empty slots)
    cpu_insert: int = 0
    # split: the CPU takes misses only where a copy takes at least this many times as long as the CPU's computation
    # of the expert (FreeToken's auto backend: CPU bandwidth over twice the link's); split_max_fetch caps the copies per
    # layer and pass (-1: none, its --moe-hybrid-max-fetch)
    split_threshold: float = 2.0
    split_max_fetch: int = -1
    # this system's CPU expert kernel relative to the hardware's cpu_* figures (which describe Fiddler's
    # AVX512 kernel: HOBBIT quotes ~3 ms per Mixtral expert for Fiddler and ~5 ms for llama.cpp)
    cpu_kernel_efficiency: float = 1.0
    placement: str = "cache"  # cache | static (llama.cpp) | popular (Fiddler: the most used experts, for good)
    n_cpu_moe: int = -1  # static: experts of the first N MoE layers stay on the CPU; -1 = as few as fit


def check_system(s: SystemConfig) -> None:
    """Reject bad knobs before the run, naming them."""
    p, c = s.precision, s.cache
    if p.mode not in ("hobbit", "high", "low"):
        raise ConfigError(f"system.precision.mode={p.mode} must be hobbit, high or low")
    if not 0.0 <= p.t1 <= p.t2 <= 1.0:
        raise ConfigError(f"system.precision.t1={p.t1}, t2={p.t2}: need 0 <= t1 <= t2 <= 1")
    if p.multi_token not in ("max", "high"):
        raise ConfigError(f"system.precision.multi_token={p.multi_token} must be max or high")
    for group, chosen, registry in (("prefetch.kind", s.prefetch.kind, PREFETCH), ("cache.policy", c.policy, EVICTION)):
        if chosen not in registry:
            raise ConfigError(f"system.{group}={chosen} is not one of {', '.join(sorted(registry))}")
    for where, node, chosen in (("prefetch", s.prefetch, s.prefetch.kind), ("cache", c, c.policy)):
        knobs = policy_knobs(node, chosen)
        for problem in getattr(knobs, "problems", list)():  # what a policy's knob ranges cannot say
            raise ConfigError(f"system.{where}.{chosen}.{problem}")
    if s.prefetch.precision not in ("rule", "high", "low"):
        raise ConfigError(f"system.prefetch.precision={s.prefetch.precision} must be rule, high or low")
    if s.prefetch.fallback not in ("oracle", "history", "none"):
        raise ConfigError(f"system.prefetch.fallback={s.prefetch.fallback} must be oracle, history or none")
    if not 1 <= s.prefetch.max_depth <= 8:
        raise ConfigError(f"system.prefetch.max_depth={s.prefetch.max_depth} must be in 1..8")
    if not 0.0 <= s.prefetch.fallback_accuracy <= 1.0:
        raise ConfigError(f"system.prefetch.fallback_accuracy={s.prefetch.fallback_accuracy} must be in [0, 1]")
    if s.cpu_misses not in ("never", "always", "faster", "split"):
        raise ConfigError(f"system.cpu_misses={s.cpu_misses} must be never, always, faster or split")
    if s.placement not in ("cache", "static", "popular"):
        raise ConfigError(f"system.placement={s.placement} must be cache, static or popular")
    if not 0.0 <= c.high_fraction <= 1.0:
        raise ConfigError(f"system.cache.high_fraction={c.high_fraction} must be in [0, 1]")


@dataclass(frozen=True)
class SimConfig:
    """``hobbit sim``: one trace x model x hardware x system run (conf/sim.yaml)."""

    # path knobs and their roles (hobbit/guard.py)
    PATHS: ClassVar[dict[str, str]] = {"trace": "in", "profile_trace": "in", "out_dir": "outdir", "cache_dir": "cache"}
    LIMITS: ClassVar[dict[str, str]] = {"profile_share": "[0,1)"}

    trace: str | None = None  # None: the trace of the bundled model (traces/tiny/trace.parquet)
    model: ModelConfig = field(default_factory=ModelConfig)
    hardware: HardwareConfig = field(default_factory=HardwareConfig)
    system: SystemConfig = field(default_factory=SystemConfig)
    engine: str = "fast"  # fast (the compiled core) | plain (the Python reference) | simpy (the discrete-event reference): the same decisions and times
    seed: int = 0  # for fallback predictions when the trace has none
    out_dir: str = "."
    # What systems learn offline (Fiddler's popular experts, MoE-Infinity's activation matrices) comes from a
    # profiling trace, or else from the first ``profile_share`` of the trace's requests; every system is then
    # timed on the remaining requests only, so ratios always compare the same requests.
    profile_trace: str | None = None
    profile_share: float = 0.25
    cache_dir: str | None = None  # finished runs by resolved config; None: $HOBBIT_CACHE or ~/.cache/hobbit/sim
    use_cache: bool = True  # skip a configuration already simulated (an interrupted sweep resumes)
    timeline: bool = False  # also write timeline.json (Chrome Trace Event format) and gantt.png/.svg
    timeline_tokens: str = "0:64"  # the passes the timeline keeps, A:B (a decode token is a pass; ':' for all)
    sweep_chunk: str | None = None  # set by the hobbit sweeper (hobbit/sweeper.py): a file of sweep points to run
