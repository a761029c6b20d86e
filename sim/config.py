"""Typed configs of the simulator: model, hardware, system (frozen dataclasses).

Hydra composes ``conf/{model,hardware,system}/*.yaml`` over these schemas (registered in
its ConfigStore by the application layer, ``hobbit.plumbing.glue``); the core never sees a ``DictConfig``. Units are in the
names: ``_bytes``, ``_s``, ``_gbps`` (1e9 bytes/s), ``_tflops`` (1e12 flop/s).
"""

from __future__ import annotations

from dataclasses import dataclass, field, make_dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from hobbit.sim.policies.registry import EVICTION, PREFETCH, knobs_types
from hobbit.sim.precisions import BITS, FORMAT_BPW, PRECISIONS, PrecisionConfig, quant_group
from hobbit.traces.schema import InputError


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
        "dense_layers": ">=0",
        "state_bytes": ">=0",
        "file_resident_bytes": ">=-1",
    }

    name: str = "unnamed"
    """The model's name, as results and plots label it."""
    num_layers: int = 1
    """MoE layers (dense layers are not counted)."""
    num_experts: int = 8
    """Routed experts per MoE layer (shared experts are counted in ``dense_params_per_layer``)."""
    top_k: int = 2
    """Experts each token is routed to in each MoE layer."""
    hidden_size: int = 4096
    """The model's hidden width: an expert's input and output."""
    expert_ffn: int = 14336
    """An expert's intermediate (FFN) width; an expert holds 3 * hidden_size * expert_ffn weights."""
    dense_params_per_layer: int = 0
    """Parameters every MoE layer runs on every token besides its routed experts: attention, router, norms,
    shared experts."""
    other_params: int = 0
    """Parameters that stay resident and run once per token: embeddings, LM head, dense FFN layers."""
    kv_bytes_per_token: int = 0
    """KV cache bytes one token adds, all layers together, at 16 bit."""
    quant_group_size: int = 128
    """Inputs per quantisation group of a low-bit expert (each group adds ``quant_meta_bytes_per_group``)."""
    quant_meta_bytes_per_group: int = 4
    """Bytes of scale and zero per quantisation group: an fp16 scale and an fp16 zero."""
    dense_layers: int = 0
    """Leading decoder layers with a dense FFN instead of experts (DeepSeek-V3's first_k_dense_replace); their
    weights are in ``other_params``."""
    attention: str = "gqa"
    """The attention kind: gqa (multi-head or grouped-query) | mla (multi-head latent: a compressed KV) | hybrid
    (linear attention in most layers, full attention in some: only those grow a KV cache)."""
    state_bytes: int = 0
    """Fixed per-sequence state of linear-attention layers (convolution and recurrent state), bytes, all layers."""
    tensors: dict[str, list[int]] = field(default_factory=dict)
    """Parameters of each non-expert tensor kind, by its GGUF name (attn_v, ffn_down_shexp, token_embd, ...): one
    entry per decoder layer (dense-first layers included) for a block's tensors, one for the rest; read from a
    config.json (``sim.model_files``) so that a quantiser's per-tensor rules (``sim.formats``) can pick each one's
    type. Empty: ``dense_params_per_layer`` and ``other_params`` at the weights' base type."""
    layer_expert_bytes: list[int] = field(default_factory=list)
    """One routed expert's bytes in each MoE layer as a model file stores it (read from a GGUF); empty: from the
    shapes and the system's weights format."""
    file_resident_bytes: int = -1
    """The bytes of every other tensor of that file (-1: no file; from the shapes and the weights format)."""
    file_type: str = ""
    """The file's own name for its format (Q4_K_M); empty: no file."""
    source: str = ""
    """Where these shapes come from (a config.json, a paper table)."""

    def __hash__(self) -> int:  # the per-tensor tables are a dict and lists: hash what the fields print as
        return hash(repr(self))

    @property
    def expert_params(self) -> int:
        return 3 * self.hidden_size * self.expert_ffn

    def expert_bytes(self, precision: str) -> int:
        """Bytes of one expert at ``precision``, quantisation scales and zeros included."""
        if precision in FORMAT_BPW:
            return round(self.expert_params * FORMAT_BPW[precision] / 8)
        if precision not in BITS:
            raise ConfigError(f"precision '{precision}' is not one of {', '.join(PRECISIONS)}")
        p = self.expert_params
        raw = p * BITS[precision] // 8
        if BITS[precision] == 16:
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

    model: str = ""
    """The model the profile was measured for (with the two widths below, which set every size)."""
    hidden_size: int = 0
    """The measured model's hidden width."""
    expert_ffn: int = 0
    """The measured model's expert FFN width."""
    device: str = ""
    """The device measured (cpu, or cuda with its name)."""
    link_t0_s: float = 0.0
    """A copy's fixed cost: copies take link_t0_s + bytes / link_gbps."""
    link_gbps: float = 0.0
    """The link's measured bandwidth, GB/s (1e9 bytes/s)."""
    dense_s: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    """The dense part of a layer, a + b*T + c*T*C seconds (T tokens, C context)."""
    other_s: list[float] = field(default_factory=lambda: [0.0, 0.0])
    """What runs once per pass outside the layers (the LM head), a + b*T seconds; profiles with ``head_s``
    use that instead."""
    head_s: list[float] = field(default_factory=list)
    """The LM head's seconds at each of ``expert_tokens`` token counts (replaces ``other_s``)."""
    layer_overhead_s: float = 0.0
    """The replay loop's own time per layer beyond its measured parts."""
    copy_issue_s: float = 0.0
    """The compute stream's time per copy: issuing it and the cache's bookkeeping for it."""
    expert_tokens: list[int] = field(default_factory=list)
    """The token counts the expert times were measured at (interpolated between)."""
    expert_high_s: list[float] = field(default_factory=list)
    """A high-precision expert's seconds at each of ``expert_tokens``."""
    expert_low_s: list[float] = field(default_factory=list)
    """A low-precision expert's seconds at each of ``expert_tokens``."""
    cpu_expert_s: list[float] = field(default_factory=list)
    """An expert computed on the host CPU, seconds at each of ``expert_tokens``."""
    busy_link_gbps: float = 0.0
    """The link's bandwidth while experts compute (0: not measured, no contention charged)."""
    busy_dense_factor: float = 1.0
    """The dense part's time while a copy runs, over its time alone (1: none)."""
    busy_expert_high_factor: float = 1.0
    """A high-precision expert's time while a copy runs, over its time alone (1: none)."""
    busy_expert_low_factor: float = 1.0
    """A low-precision expert's time while a copy runs, over its time alone (1: none)."""
    step_dense_s: float = 0.0
    """What the dense part costs more per call inside a decode step than its own probe measures back to back
    (caches, predictors and TLBs as the other parts leave them); added to every call (0: not measured)."""
    step_expert_high_s: float = 0.0
    """Likewise for a high-precision expert."""
    step_expert_low_s: float = 0.0
    """Likewise for a low-precision expert."""


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
        "numa_nodes": ">=1",
        "low_precision_efficiency": "(0,1]",
        "reserve_bytes": ">=0",
        "host_memory_bytes": ">=0",
        "host_reserve_bytes": ">=0",
        "cpu_cores": ">=0",
        "ssd_fault_gbps": ">=0",
        "contention_compute": ">=1",
        "contention_link": ">=1",
    }

    name: str = "unnamed"
    """The machine's name, as results and plots label it."""
    device_memory_bytes: int = 24 * 2**30
    """The accelerator's memory, bytes."""
    device_mem_gbps: float = 1008.0
    """The accelerator's memory bandwidth, GB/s (1e9 bytes/s)."""
    device_tflops: float = 165.0
    """The accelerator's dense 16-bit throughput, TFLOP/s."""
    kernel_overhead_s: float = 10e-6
    """Seconds per kernel launch."""
    compute_efficiency: float = 0.8
    """The fraction of peak bandwidth and flops that batch-1 kernels reach."""
    link_gbps: float = 25.0
    """Host-to-device bandwidth a pinned copy achieves, GB/s."""
    link_t0_s: float = 6e-6
    """A copy's fixed cost, seconds: a copy takes link_t0_s + bytes / link_gbps."""
    expert_source: str = "host"
    """Where experts that are not on the device live: host (RAM, over the link) | ssd."""
    ssd_gbps: float = 3.0
    """The SSD's read bandwidth, GB/s (with ``expert_source=ssd`` or unified memory)."""
    ssd_t0_s: float = 80e-6
    """An SSD read's fixed cost, seconds."""
    unified_memory: bool = False
    """Device and host share one DRAM (Jetson): experts come from the SSD and every byte moved also spends the
    shared DRAM bandwidth."""
    cpu_tflops: float = 1.0
    """The host CPU's throughput on compute-bound expert work, TFLOP/s (``cpu=`` gives its fp32 vector FMA peak,
    hobbit/catalogue/data/parts.yaml; a runtime's kernels reach ``system.cpu_flops_efficiency`` of it)."""
    cpu_mem_gbps: float = 60.0
    """The host CPU's memory bandwidth, GB/s (every NUMA node's together)."""
    numa_nodes: int = 1
    """NUMA nodes (CPU sockets) whose memory channels ``cpu_mem_gbps`` sums; a runtime that keeps one copy of the
    experts reads them at one node's share (``system.numa``)."""
    low_precision_efficiency: float = 0.8
    """A low-bit kernel's bandwidth relative to a 16-bit one (its dequantisation's cost)."""
    reserve_bytes: int = 2 * 2**30
    """Device memory held back for the runtime, activations and fragmentation."""
    host_memory_bytes: int = 0
    """The host's RAM, bytes; 0: not stated (nothing is checked against it, and results say so)."""
    host_reserve_bytes: int = 4 * 2**30
    """Host RAM held back for the operating system and the runtime's own buffers."""
    cpu_cores: int = 0
    """The host CPU's physical cores (0: not stated)."""
    ssd_fault_gbps: float = 0.0
    """The rate a memory-mapped file's pages fault in from the SSD, GB/s (reads of a few hundred KB with the
    kernel's read-ahead, below the sequential rate); 0: ``ssd_gbps``."""
    contention_compute: float = 1.0
    """Compute time while a copy runs, over its time alone (1.0: they do not meet)."""
    contention_link: float = 1.0
    """A copy's time while the device computes, over its time alone (1.0: they do not meet)."""
    source: str = ""
    """Where these numbers come from (data sheets, measurements; docs/references.md)."""
    profile: ProfileConfig | None = None
    """Costs measured by ``hobbit calibrate`` (a profile YAML): they replace the roofline."""


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
    """The prefetcher, a name of the prefetch registry (hobbit, next-layer, eam, none, ...)."""
    max_depth: int = 2
    """p: layers looked ahead while the predicted experts are all cached (paper §3.3: adaptive in [1, 3])."""
    fallback: str = "oracle"
    """The predictor when the trace holds no predictions: oracle (right with ``fallback_accuracy``) | history |
    none."""
    fallback_accuracy: float = 0.9
    """The oracle fallback's top-1 accuracy."""
    precision: str = "rule"
    """A prefetch's precision: rule (T1/T2 on the predicted weights, paper §3.3) | high | low."""
    staging_slots: int = 0
    """0: a prefetched expert enters its pool, pinned until its layer has run (paper §3.3-3.4); N > 0: it waits in
    one of N staging slots carved from the high pool's memory and enters the cache only when used (prefetches
    beyond N free staging slots are not issued)."""
    clear_queue: bool = False
    """Each layer's prefetches replace those still waiting: at every layer step, the copies ahead that have not
    started leave the link's queue, dropped in the timing (MoE-Infinity at 350f0dd: ``replace_cache_candidates``
    clears its prefetch queues, ``task_scheduler.h``). A later use of a dropped copy loads it then, as a demand
    copy queued at its layer's router (its use is late: ``prefetch.late``)."""


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
    """The eviction policy, a name of the eviction registry (multidim, lru, lfu, s3fifo, belady, ...)."""
    high_bytes: int = -1
    """The high-precision pool's bytes; -1: ``high_fraction`` of the device memory left after resident weights,
    KV cache and the reserve."""
    low_bytes: int = -1
    """The low-precision pool's bytes; -1: the rest of that memory."""
    high_fraction: float = 0.75
    """The high-precision pool's share of the cache memory (the paper keeps it the larger)."""
    per_layer: bool = False
    """Split each pool across layers by ``layer_partition``: a copy of a layer's expert takes only its layer's slots
    (MoE-Offloading's per-layer LRU, llama.cpp's --moe-expert-cache)."""
    layer_partition: str = "slots"
    """per_layer: how a pool's bytes are split over the layers, in whole experts of each layer's own size (a GGUF's
    layers differ: some store ``ffn_down_exps`` at a wider type). slots (every layer the same number of slots, as
    many as the pool's bytes over the sum of one expert of each layer: llama.cpp's --moe-expert-cache N,
    MoE-Offloading's offload_per_layer) | bytes (every layer the same bytes, holding as many of its own experts as
    fit). What the rule leaves unused is reported in results.json ``memory.notes``."""
    wide_step: str = "keep"
    """per_layer: a forward pass whose layer selects more distinct experts than the layer has slots (a prefill):
    keep (its misses are admitted like any other and evict one another: MoE-Offloading's released cache) | bypass
    (its misses in that layer are used once and not kept; the layer's cache stays as decoding left it)."""
    layer_slots: int = 0
    """A cap on a pool's slots per layer, the memory permitting (llama.cpp's --moe-expert-cache N); 0: none."""
    layer_share: float = 0.0
    """A cap on a pool's slots per layer as a share of the layer's experts, at least 4 x top-k (TEC's capacity
    rule, -c); 0: none."""
    layer_pinned: float = 0.0
    """This share of each layer's high-precision slots holds the layer's most used experts in the profiling
    requests, pinned for good; the rest are the cache (TEC's pin list, -P); 0: none."""


if TYPE_CHECKING:  # a checker sees the bases; a policy's node is reached by name (policy_knobs)
    PrefetchConfig = PrefetchBase
    CacheConfig = CacheBase
else:
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
        "cpu_flops_efficiency": "[0,1]",
        "gpu_efficiency": "[0,1]",
        "gpu_flops_efficiency": "[0,1]",
        "launch_overhead_s": ">=-1",
        "cpu_insert": ">=0",
        "split_threshold": ">=0",
        "split_max_fetch": ">=-1",
        "kv_context": ">=0",
        "gpu_experts": ">=0",
        "kv_bits": ">0",
        "ubatch": ">=0",
        "offload_min_batch": ">=0",
    }

    name: str = "hobbit"
    """The system's name, as results and plots label it."""
    weights: str = "fp16"
    """The format of the model file the runtime runs: every non-expert weight, and every expert it loads or computes
    at high precision, is in it. fp16 | bf16 | fp8 | a llama.cpp file type (q4_k_m, q8_0, iq4_xs, mxfp4_moe, ...: its
    quantiser's type for each tensor) | a ggml type (q4_k, ...) | int8, int4 (this project's executor) | file (the
    sizes of a model read from a GGUF, ``model=path/to/model.gguf``) | bpw<N> (every weight at N bits: a file of its
    own mix known by its average, bpw3.9)."""
    host_load: str = "load"
    """How the runtime holds the experts it does not keep on the device: load (read into RAM at start; they must fit
    in the host's RAM: llama.cpp's --no-mmap, the PyTorch offloaders) | mmap (the file is memory-mapped: what does not
    fit in RAM stays on the SSD and faults in on use, at ``hardware.ssd_fault_gbps``; llama.cpp's default) | stream
    (the runtime reads experts that are not in RAM from the SSD itself, at ``hardware.ssd_gbps``)."""
    host_cache: str = "lru"
    """What RAM holds of the experts when they do not all fit (host_load=mmap or stream): lru (the page cache, least
    recently used, replayed over the trace's reads of host-side experts) | uniform (RAM's share of their bytes, as if
    every expert were equally likely: the pessimistic end)."""
    precision: PrecisionConfig = field(default_factory=PrecisionConfig)
    """How a missing expert is loaded: at high or low precision, or skipped (paper §3.2)."""
    prefetch: PrefetchConfig = field(default_factory=PrefetchConfig)
    """What is loaded ahead of its layer (paper §3.3)."""
    cache: CacheConfig = field(default_factory=CacheConfig)
    """The device's expert cache: pools, sizes, eviction (paper §3.4)."""
    demand_first: bool = True
    """A demand load goes ahead of queued (not in-flight) prefetches."""
    copy_stream: str = "separate"
    """Where the runtime's copies run: separate (their own stream or copy thread, overlapping compute) | compute (on
    the compute stream itself, in order: a layer's experts compute only once every copy its router issued has landed,
    and no copy overlaps compute: mixtral-offloading, whose ``src/expert_cache.py`` copies with ``copy_(...,
    non_blocking=True)`` on the current CUDA stream and creates no other)."""
    write_back: bool = False
    """Every copy onto the device also copies the expert it replaces back to host memory, the same bytes, after it on
    the same stream (mixtral-offloading's ``ExpertCache._swap`` swaps an on-device expert with an offloaded one through
    pinned buffers, so a load moves its expert's bytes twice); the copy's time and the bytes moved count both."""
    cpu_misses: str = "never"
    """A miss not skipped: never (loaded) | always (computed on the CPU from host memory) | faster (on the CPU when
    that beats loading it and computing on the device, by the cost model: Fiddler, HOBBIT's CPU mode) | split
    (FreeToken's hybrid backend: a layer's misses split between copies and the CPU by the two bandwidths)."""
    cpu_insert: int = 0
    """A miss computed on the CPU is also copied into the cache behind it, evicting, up to this many per layer and
    forward pass (llama.cpp's --moe-expert-cache-inserts); 0: none (cpu_misses=faster still fills empty slots)."""
    split_threshold: float = 2.0
    """cpu_misses=split: the CPU takes misses only where a copy takes at least this many times as long as the
    CPU's computation of the expert (FreeToken's auto backend: CPU bandwidth over twice the link's)."""
    split_max_fetch: int = -1
    """cpu_misses=split: a cap on the copies per layer and pass (FreeToken's --moe-hybrid-max-fetch); -1: none."""
    gpu_efficiency: float = 0.0
    """This runtime's GPU kernels' share of the GPU's peak memory bandwidth, replacing ``hardware.compute_efficiency``
    (which describes the executor's PyTorch kernels) for work bound by bytes (decoding); 0: the hardware's. The
    llama.cpp presets' value is a fit to published measurements (docs/results/published.md)."""
    gpu_flops_efficiency: float = 0.0
    """This runtime's GPU kernels' share of the GPU's peak FLOPs (work bound by compute: a prompt's passes); 0:
    ``hardware.compute_efficiency``. The llama.cpp presets' value is a fit (docs/results/published.md)."""
    launch_overhead_s: float = -1.0
    """This runtime's cost of one GPU kernel launch, seconds (a runtime that replays CUDA graphs launches for less);
    -1: ``hardware.kernel_overhead_s``. The llama.cpp presets' value is a fit to published measurements
    (docs/results/published.md)."""
    numa: str = "single"
    """How the CPU experts use a machine of several NUMA nodes (``hardware.numa_nodes``): single (one copy of the
    experts, in one node's memory, read at that node's bandwidth: llama.cpp's mmapped file, whose --numa options
    place threads, not weights; the PyTorch offloaders) | replicate (each node holds a copy of the experts its
    threads compute, and reads its own channels: KTransformers' USE_NUMA=1)."""
    cpu_flops_efficiency: float = 0.0
    """This runtime's CPU expert kernels' share of ``hardware.cpu_tflops`` on compute-bound work (a prompt's experts
    on the CPU); 0: ``cpu_kernel_efficiency``, as for work bound by memory. The KTransformers preset's value is a fit
    to published measurements (docs/results/published.md)."""
    cpu_kernel_efficiency: float = 1.0
    """This system's CPU expert kernel relative to the hardware's cpu_* figures, which describe Fiddler's AVX512
    kernel (HOBBIT quotes ~3 ms per Mixtral expert for Fiddler and ~5 ms for llama.cpp)."""
    placement: str = "cache"
    """cache (experts come and go) | static (llama.cpp: ``n_cpu_moe`` layers' experts stay on the CPU) | popular
    (Fiddler: the most used experts stay on the device for good)."""
    n_cpu_moe: int = -1
    """placement=static: the experts of the first N MoE layers stay on the CPU (llama.cpp's --n-cpu-moe); -1: as
    few as fit."""
    cpu_layer_scope: str = "experts"
    """placement=static: what of a CPU layer runs on the CPU: experts (its routed experts only, attention and the
    KV cache stay on the GPU: llama.cpp's --n-cpu-moe and -ot exps=CPU, since 2025) | whole (the whole layer, attention
    and its KV cache too: -ngl below the layer count, all llama.cpp had before -ot, PR #11397, and --n-cpu-moe, PR
    #15077). A whole CPU layer's dense part runs on the CPU (``CostModel.layer_dense_s``), or, in a pass of
    ``offload_min_batch`` tokens or more, on the GPU after its weights' copy."""
    gpu_experts: int = 0
    """Routed experts per MoE layer kept on the GPU for good, the rest computed where ``cpu_misses`` says
    (KTransformers' --kt-num-gpu-experts); 0: none."""
    gpu_experts_strategy: str = "uniform"
    """Which experts ``gpu_experts`` keeps (KTransformers' --kt-expert-placement-strategy): uniform (experts 0..N-1 of
    every layer: its default) | frequency (the N x layers most used (layer, expert) pairs in the profiling requests) |
    front-loading (whole layers' experts from the first MoE layer on, as many as N x layers)."""
    cpu_moe_layers: list[int] = field(default_factory=list)
    """placement=static: the MoE layers (0-based) whose experts stay on the CPU, as llama.cpp's -ot patterns and
    --cpu-moe choose them; replaces ``n_cpu_moe`` when given."""
    runtime: str = ""
    """The runtime whose command-line flags ``flags`` are: llama.cpp | ik_llama.cpp | ktransformers | empty (none)."""
    flags: str = ""
    """The runtime's own flags (``-ngl 99 --n-cpu-moe 30 --no-mmap -c 8192``), turned into this system's knobs before
    a run (``sim.flags``); flags of what is not modelled (threads, batch sizes) are accepted and listed."""
    kv_context: int = 0
    """Tokens of KV cache the runtime allocates up front (llama.cpp's -c); 0: what the run's context needs."""
    kv_bits: float = 16.0
    """Bits per KV cache element (llama.cpp's -ctk/-ctv: q8_0 is 8.5)."""
    offload_min_batch: int = 0
    """A pass of at least this many tokens computes the experts held in host memory (placement=static's CPU layers,
    and the misses ``cpu_misses`` would compute there) on the device instead: each distinct one the pass uses is
    copied over the link and used once, not kept (llama.cpp's op offload: ggml's scheduler moves a matrix product
    whose weights are in host memory to the GPU at a batch of 32 or more, copying only the experts the batch uses
    since PR #15346); with runtime=ik_llama.cpp the pass needs this many tokens per expert, N x experts / top-k
    (ik_llama.cpp PR #520); 0: never."""
    ubatch: int = 0
    """Most tokens of a prompt in one forward pass (llama.cpp's -ub/--ubatch-size, vLLM's chunked prefill): a longer
    prefill runs as several passes, each attending over the ones before it; 0: the trace's own passes (a prefill
    recorded in chunks stays in its chunks)."""

    def __hash__(self) -> int:  # the layer list: hash what the fields print as
        return hash(repr(self))


def offload_tokens(s: SystemConfig, num_experts: int, top_k: int) -> int:
    """The fewest tokens of a pass that ``offload_min_batch`` moves host-side experts to the device for (0: never)."""
    if s.offload_min_batch <= 0:
        return 0
    if s.runtime == "ik_llama.cpp":  # MoE products offloaded only at N tokens per expert on average (PR #520)
        return -(-s.offload_min_batch * num_experts // max(top_k, 1))
    return s.offload_min_batch


@dataclass(frozen=True)
class SimConfig:
    """``hobbit sim``: one trace x model x hardware x system run (conf/sim.yaml)."""

    # path knobs and their roles (hobbit/plumbing/guard.py)
    PATHS: ClassVar[dict[str, str]] = {"trace": "in", "profile_trace": "in", "out_dir": "outdir", "cache_dir": "cache"}
    LIMITS: ClassVar[dict[str, str]] = {"profile_share": "[0,1)", "context": ">=0", "window_tokens": ">=0"}

    trace: str | None = None
    """A schema-v1 routing trace (Parquet); null: the bundled model's trace (traces/tiny/trace.parquet); synthetic:
    routing drawn for the model's topology (traces.synthetic: Zipf-skewed, 8 requests of 64 + 64 tokens)."""
    model: ModelConfig = field(default_factory=ModelConfig)
    """The model's shapes (config group ``model=NAME``, conf/model/)."""
    hardware: HardwareConfig = field(default_factory=HardwareConfig)
    """The machine (config group ``hardware=NAME``, conf/hardware/)."""
    system: SystemConfig = field(default_factory=SystemConfig)
    """The offloading system (config group ``system=NAME``, conf/system/)."""
    context: int = 0
    """Tokens already in the KV cache when each request starts (a conversation's history, a long document): every
    pass attends over them too, and the KV cache is sized for them plus the trace's longest request."""
    engine: str = "fast"
    """fast (the compiled core) | plain (the Python reference) | simpy (the discrete-event reference): the same
    decisions and times."""
    seed: int = 0
    """Seed of the fallback predictions when the trace has none."""
    out_dir: str = "."
    """Where results go (the command's run directory)."""
    profile_trace: str | None = None
    """What systems learn offline (Fiddler's popular experts, MoE-Infinity's activation matrices) comes from this
    trace; null: from the first ``profile_share`` of the trace's requests."""
    profile_share: float = 0.25
    """Without a profile_trace: this share of the trace's first requests profiles, and every system is timed on
    the remaining requests only, so ratios always compare the same requests."""
    window_tokens: int = 0
    """0: the trace is read whole. N: it is read N tokens at a time (whole passes, ``sim.windowed``), so the run's
    memory is bounded by the window, not by the trace: for traces longer than memory (a serving log). The same
    results, except the draws of the fallback predictions of a trace that records none; no timeline."""
    cache_dir: str | None = None
    """Finished runs by resolved config; null: $HOBBIT_CACHE or ~/.cache/hobbit/sim."""
    use_cache: bool = True
    """Skip a configuration already simulated (an interrupted sweep resumes)."""
    timeline: bool = False
    """Also write timeline.json (Chrome Trace Event format: ui.perfetto.dev) and gantt.png/.svg."""
    timeline_tokens: str = "0:64"
    """The passes the timeline keeps, A:B (a decode token is a pass, a prefill one; ':' for all)."""
    sweep_chunk: str | None = None
    """Set by the sweeper (hobbit/plumbing/sweeper.py): a file of the sweep points this job runs (hydra.sweeper.chunk_size
    of them)."""
