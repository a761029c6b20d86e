"""Memory fit: where a run's weights, expert caches and KV cache live, checked against the machine.

Device: the non-expert weights in the system's weights format, the KV cache (and linear-attention state) at the
run's context, the reserve; what is left holds experts (a cache's pools, or llama.cpp's GPU layers). Host: the
experts the device does not keep for good (a cache's backing copies, the CPU layers' experts; HOBBIT also keeps a
low-precision copy of every expert), in RAM as far as it holds them (less ``hardware.host_reserve_bytes``); the rest
stays on the SSD (``system.host_load``: mmap faults it in on use, stream reads it, load refuses to start).

The page cache's share: with ``mmap`` or ``stream``, a read of a host-side expert finds it in RAM with probability
``ram_share`` = (RAM for experts) / (host-side expert bytes), as if every expert were equally likely (a named rule,
``uniform``: real routing is skewed, so a least-recently-used page cache keeps the hot experts and does better; this
rule is the pessimistic end). Every placement knob is checked here; a setting that cannot fit raises ``ConfigError``
naming the knob, what fits and the fix.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from hobbit.sim.config import ConfigError, HardwareConfig, ModelConfig, SystemConfig
from hobbit.sim.formats import Weights, weights

GiB = 2**30


def gib(n: float) -> str:
    """A size for a message: GiB, or MiB under one GiB."""
    return f"{n / GiB:,.1f} GiB" if abs(n) >= GiB else f"{n / 2**20:,.1f} MiB"


@dataclass(frozen=True)
class MemoryFit:
    """Where the bytes of one run go. Sizes in bytes; ``ram_share`` in [0, 1]."""

    context: int  # tokens the KV cache is sized for
    device_bytes: int
    resident_bytes: int  # non-expert weights on the device
    dense_bytes: int  # of those, one MoE layer's (the mean over layers)
    other_bytes: int  # of those, what runs once per pass (embeddings, LM head, dense-first layers)
    kv_bytes: int  # KV cache at ``context`` plus linear-attention state
    reserve_bytes: int
    free_bytes: int  # device memory left for experts (negative: the resident part does not fit)
    expert_bytes: tuple[int, ...]  # one expert at high precision (the weights' format), per MoE layer
    low_bytes: int  # one expert at low precision
    weights_format: str  # the format the sizes are in (``file`` for a GGUF's own)
    host_bytes: int  # the host's RAM (0: not stated)
    host_expert_bytes: int  # experts the host holds for copies and CPU work
    ram_share: float  # the share of those RAM holds; the rest is read from the SSD
    ssd_gbps: float = 0.0  # the rate the rest is read at (page faults for mmap, the drive's for stream)
    host_layers: tuple[int, ...] = ()  # the MoE layers whose experts are read from the host
    ram_bytes: int = 0  # host RAM for experts (0: not stated)
    notes: tuple[str, ...] = ()  # what was derived or assumed, for the run's summary

    def summary(self) -> dict:
        """results.json's ``memory``: the sizes in bytes (one expert's as the mean over layers), the RAM's share."""
        return {
            "context": self.context,
            "weights_format": self.weights_format,
            "device_bytes": self.device_bytes,
            "resident_bytes": self.resident_bytes,
            "kv_bytes": self.kv_bytes,
            "reserve_bytes": self.reserve_bytes,
            "free_bytes": self.free_bytes,
            "expert_bytes": round(sum(self.expert_bytes) / max(len(self.expert_bytes), 1)),
            "low_expert_bytes": self.low_bytes,
            "host_bytes": self.host_bytes,
            "host_expert_bytes": self.host_expert_bytes,
            "ram_share": self.ram_share,
            "notes": list(self.notes),
        }

    @property
    def ssd_share(self) -> float:
        return 1.0 - self.ram_share

    def layer_experts(self, first: int, last: int, num_experts: int) -> int:
        """Bytes of every expert of MoE layers ``first`` .. ``last - 1`` at high precision."""
        return num_experts * sum(self.expert_bytes[first:last])

    def gpu_layers_fitting(self, num_experts: int) -> int:
        """The most trailing MoE layers whose experts fit together in the free device memory (llama.cpp's
        --n-cpu-moe keeps the first layers' experts on the CPU, so the GPU holds the last ones)."""
        return trailing_layers_fitting(self.expert_bytes, num_experts, self.free_bytes)


def model_weights(model: ModelConfig, system: SystemConfig) -> tuple[Weights, str]:
    """The model's weights in the format ``system`` runs it in, and that format's name: a model read from a GGUF
    runs as the file holds it, whatever ``system.weights`` says."""
    fmt = "file" if model.layer_expert_bytes else system.weights
    w = weights(model, fmt)
    if system.precision.high and not model.layer_expert_bytes:  # experts in a format of their own (HOBBIT's pair)
        w = dataclasses.replace(w, expert_bytes=weights(model, system.precision.high).expert_bytes)
    return w, fmt


def fit(
    model: ModelConfig, hw: HardwareConfig, system: SystemConfig, context: int, layer_share: float = 1.0
) -> MemoryFit:
    """The run's memory, device and host, at ``context`` tokens of KV cache; raises ``ConfigError`` where the
    device cannot hold the resident part or the host cannot hold what ``system.host_load=load`` must load.
    ``layer_share``: the share of the model's MoE layers the trace recorded (the experts' part scales with it)."""
    context = int(context)  # (a trace's positions are int32: the products below are not)
    w, fmt = model_weights(model, system)
    low = model.expert_bytes(system.precision.low)
    context = max(context, system.kv_context)  # a runtime that allocates its KV cache up front (-c) holds all of it
    kv = round(model.kv_bytes_per_token * context * system.kv_bits / 16) + model.state_bytes
    free = hw.device_memory_bytes - w.resident_bytes - kv - hw.reserve_bytes
    notes: list[str] = []
    if fmt == "file" and system.weights != "file":
        notes.append(f"weights as model={model.name}'s file holds them ({model.file_type or 'its types'})")
    E = model.num_experts
    host_layers = tuple(range(model.num_layers))
    if system.placement == "static":  # llama.cpp: only the CPU layers' experts are read from the host
        host_layers = static_cpu_layers(w, model, system, free)
    host_experts = int(E * sum(w.expert_bytes[i] for i in host_layers) * layer_share)
    if system.precision.mode in ("hobbit", "low"):
        host_experts += int(E * low * model.num_layers * layer_share)  # HOBBIT keeps a low-precision copy of each
    ram_share = 1.0
    # a memory-mapped file faults its pages in (below the drive's rate); a runtime reading its own files (stream, or
    # load on a machine whose experts live on the SSD) reads at the drive's
    rate = (hw.ssd_fault_gbps or hw.ssd_gbps) if system.host_load == "mmap" else hw.ssd_gbps
    if hw.host_memory_bytes > 0 and host_experts > 0 and hw.expert_source == "host":
        ram = max(hw.host_memory_bytes - hw.host_reserve_bytes, 0)
        ram_share = min(1.0, ram / host_experts)
        if ram_share < 1.0:
            check_host(model, hw, system, host_experts, ram, fmt)
    elif hw.host_memory_bytes == 0 and hw.expert_source == "host":
        notes.append("host RAM not stated (hardware.host_memory_bytes=0): every host-side expert assumed in RAM")
    return MemoryFit(
        context=context,
        device_bytes=hw.device_memory_bytes,
        resident_bytes=w.resident_bytes,
        dense_bytes=round(sum(w.dense_bytes) / max(len(w.dense_bytes), 1)),
        other_bytes=w.other_bytes,
        kv_bytes=kv,
        reserve_bytes=hw.reserve_bytes,
        free_bytes=free,
        expert_bytes=w.expert_bytes,
        low_bytes=low,
        weights_format=fmt,
        host_bytes=hw.host_memory_bytes,
        host_expert_bytes=host_experts,
        ram_share=ram_share,
        ssd_gbps=rate,
        host_layers=host_layers,
        ram_bytes=max(hw.host_memory_bytes - hw.host_reserve_bytes, 0) if hw.host_memory_bytes else 0,
        notes=tuple(notes),
    )


def static_cpu_layers(w: Weights, model: ModelConfig, system: SystemConfig, free: int) -> tuple[int, ...]:
    """The MoE layers whose experts llama.cpp keeps on the CPU: ``cpu_moe_layers``, else the first ``n_cpu_moe``
    (-1: as few as the free device memory leaves)."""
    if system.cpu_moe_layers:
        return tuple(sorted(set(system.cpu_moe_layers)))
    n = system.n_cpu_moe
    if n < 0:
        n = model.num_layers - trailing_layers_fitting(w.expert_bytes, model.num_experts, free)
    return tuple(range(min(n, model.num_layers)))


def trailing_layers_fitting(expert_bytes: Sequence[int], num_experts: int, free: int) -> int:
    """How many of the last MoE layers' experts fit together in ``free`` bytes (one expert of each layer is
    ``expert_bytes[layer]``)."""
    total, n = 0, 0
    for size in reversed(expert_bytes):
        total += num_experts * size
        if total > free:
            break
        n += 1
    return n


def lru_ram_share(keys: Iterable[np.ndarray], capacity: int) -> float:
    """The share of host-side expert reads a least-recently-used page cache of ``capacity`` experts serves, over
    ``keys`` (each pass's distinct experts, in the order the passes read them): what the kernel's page cache does
    with the experts' pages, expert by expert (``system.host_cache=lru``)."""
    if capacity <= 0:
        return 0.0
    cache: OrderedDict[int, None] = OrderedDict()
    hits = total = 0
    for step in keys:
        for key in step.tolist():
            total += 1
            if key in cache:
                hits += 1
                cache.move_to_end(key)
            else:
                cache[key] = None
                if len(cache) > capacity:
                    cache.popitem(last=False)
    return hits / total if total else 1.0


def check_host(model: ModelConfig, hw: HardwareConfig, system: SystemConfig, need: int, ram: int, fmt: str) -> None:
    """``host_load=load`` reads every host-side expert into RAM at start: refuse what cannot fit."""
    if system.host_load != "load":
        return
    raise ConfigError(
        f"system.host_load=load: model={model.name}'s experts at {fmt} take {gib(need)} of host RAM, and "
        f"hardware={hw.name} has {gib(ram)} for them ({gib(hw.host_memory_bytes)} less a "
        f"{gib(hw.host_reserve_bytes)} reserve) (fix: system.host_load=mmap, where what does not fit stays on the "
        f"SSD and pages in on use; a smaller format, system.weights=...; or more RAM, hardware.host_memory_bytes)"
    )


def check_device(fit_: MemoryFit, model: ModelConfig, hw: HardwareConfig) -> None:
    """The resident part (non-expert weights, KV cache, reserve) must fit on the device."""
    if fit_.free_bytes >= 0:
        return
    raise ConfigError(
        f"model={model.name} needs {gib(fit_.resident_bytes)} of non-expert weights at {fit_.weights_format}, "
        f"{gib(fit_.kv_bytes)} of KV cache at {fit_.context:,} tokens of context and a {gib(hw.reserve_bytes)} "
        f"reserve; hardware={hw.name} has {gib(hw.device_memory_bytes)} (fix: a smaller weights format, "
        f"system.weights=q4_k_m; a shorter context=; or a device with more memory)"
    )


def check_layers(fit_: MemoryFit, model: ModelConfig, hw: HardwareConfig, cpu_layers: list[int], layers: int) -> None:
    """llama.cpp's -ot patterns and --cpu-moe: the experts of ``cpu_layers`` on the CPU, every other MoE layer's on
    the GPU; raises where those do not fit in the free memory."""
    check_device(fit_, model, hw)
    cpu = set(cpu_layers)
    gpu = [i for i in range(layers) if i not in cpu]
    full = layers == len(fit_.expert_bytes)
    sizes = fit_.expert_bytes if full else [round(sum(fit_.expert_bytes) / len(fit_.expert_bytes))] * layers
    share = 1.0 if full else layers / len(fit_.expert_bytes)
    need = model.num_experts * sum(sizes[i] for i in gpu)
    if need > fit_.free_bytes * share:
        raise ConfigError(
            f"system.cpu_moe_layers (-ot / --cpu-moe) leaves {len(gpu)} layers' experts ({gib(need)}) on the GPU; "
            f"hardware={hw.name} has {gib(fit_.free_bytes)} free for experts at {fit_.context:,} tokens of context "
            f"(fix: keep more layers' experts on the CPU)"
        )


def check_static(fit_: MemoryFit, model: ModelConfig, hw: HardwareConfig, n_cpu_moe: int, layers: int) -> int:
    """llama.cpp's --n-cpu-moe N: the experts of the MoE layers from N on live on the GPU. Returns N (resolved from
    -1, as few CPU layers as fit); raises where the GPU layers' experts do not fit in the free memory."""
    check_device(fit_, model, hw)
    if layers == len(fit_.expert_bytes):
        fitting = fit_.gpu_layers_fitting(model.num_experts)
    else:  # a trace of some of the layers: they get their share of the memory, at the mean expert size
        mean = sum(fit_.expert_bytes) / len(fit_.expert_bytes)
        fitting = min(int(fit_.free_bytes * layers / len(fit_.expert_bytes)) // int(model.num_experts * mean), layers)
    if n_cpu_moe < 0:
        return layers - fitting
    n = min(n_cpu_moe, layers)
    if layers - n > fitting:
        need = fit_.layer_experts(n, layers, model.num_experts) if layers == len(fit_.expert_bytes) else 0
        need_text = f" ({gib(need)})" if need else ""
        raise ConfigError(
            f"system.n_cpu_moe={n_cpu_moe} puts {layers - n} layers' experts{need_text} on the GPU; "
            f"hardware={hw.name} has {gib(fit_.free_bytes)} free for experts at {fit_.context:,} tokens of context, "
            f"so at most {fitting} layers' experts fit (fix: system.n_cpu_moe={layers - fitting} or more, or -1 for "
            f"as few as fit)"
        )
    return n


def pools(fit_: MemoryFit, model: ModelConfig, hw: HardwareConfig, system: SystemConfig) -> tuple[int, int, str]:
    """The cache's pool bytes (high, low) and a note on what was derived: explicit sizes (``system.cache.high_bytes``,
    ``low_bytes``) are checked against the free memory, and one pool set alone leaves the other the rest (never
    silently nothing); neither set: the free memory split by ``high_fraction``."""
    c, mode = system.cache, system.precision.mode
    share = 1.0 if mode == "high" else 0.0 if mode == "low" else c.high_fraction
    if c.high_bytes < 0 and c.low_bytes < 0:
        check_device(fit_, model, hw)
        high = int(fit_.free_bytes * share)
        return high, fit_.free_bytes - high, ""
    free = max(fit_.free_bytes, 0)
    high, low = c.high_bytes, c.low_bytes
    note = ""
    if low < 0:
        low = max(free - high, 0) if share < 1.0 else 0
        note = f"system.cache.low_bytes derived: {gib(low)}, the free memory less high_bytes"
    elif high < 0:
        high = max(free - low, 0) if share > 0.0 else 0
        note = f"system.cache.high_bytes derived: {gib(high)}, the free memory less low_bytes"
    if high + low > free:
        raise ConfigError(
            f"system.cache.high_bytes={c.high_bytes} and low_bytes={c.low_bytes} ask for {gib(high + low)} of "
            f"expert cache; hardware={hw.name} has {gib(free)} free after {gib(fit_.resident_bytes)} of weights, "
            f"{gib(fit_.kv_bytes)} of KV cache at {fit_.context:,} tokens and the {gib(hw.reserve_bytes)} reserve "
            f"(fix: pools of at most {free} bytes together, or -1 for the free memory)"
        )
    return high, low, note


def host_ram_share(mem: MemoryFit, system: SystemConfig, ids: np.ndarray, passes: list[tuple[int, int]]) -> MemoryFit:
    """``mem`` with the share of host-side expert reads RAM serves, by ``system.host_cache``: uniform (RAM's share of
    the host-side experts' bytes, every expert equally likely) or lru (a least-recently-used page cache of as many
    experts replayed over the trace's reads: ``lru_ram_share``); a note says which and how much. ``ids``: the trace's
    [tokens, layers, k] expert ids; ``passes``: each pass's (first token, end)."""
    if mem.ram_share >= 1.0:
        return mem
    layers = [i for i in mem.host_layers if i < ids.shape[1]]
    E = int(ids.max()) + 1 if ids.size else 1
    return replayed_share(mem, system, lambda: pass_keys(ids, passes, layers, E), layers, E)


def pass_keys(ids: np.ndarray, passes: Iterable[tuple[int, int]], layers: list[int], E: int) -> Iterator[np.ndarray]:
    """Each pass's distinct host-side experts (``layers`` of ``ids`` [tokens, layers, k]) as keys layer * ``E`` +
    expert, in the order the passes read them (``lru_ram_share``'s)."""
    offsets = (np.asarray(layers, np.int64) * E)[None, :, None]
    for a, b in passes:
        yield np.unique(ids[a:b, layers, :].astype(np.int64) + offsets)


def replayed_share(
    mem: MemoryFit, system: SystemConfig, keys: Callable[[], Iterable[np.ndarray]], layers: list[int], E: int
) -> MemoryFit:
    """``host_ram_share`` from the trace's reads: ``keys()`` gives each pass's (``pass_keys``; read only for
    ``system.host_cache=lru``), ``layers`` are the host-side layers the trace recorded and ``E`` one past its largest
    expert id."""
    share = mem.ram_share
    if system.host_cache == "lru" and layers:
        capacity = int(mem.ram_share * len(layers) * E)
        share = lru_ram_share(keys(), capacity)
    note = (
        f"host RAM holds {mem.ram_share:.0%} of the host-side experts, the rest stays on the SSD; "
        f"RAM serves {share:.1%} of their reads (system.host_cache={system.host_cache})"
    )
    return dataclasses.replace(mem, ram_share=share, notes=(*mem.notes, note))


def check_gpu_experts(fit_: MemoryFit, model: ModelConfig, hw: HardwareConfig, per_layer: int, layers: int) -> None:
    """KTransformers' --kt-num-gpu-experts N: N experts of every MoE layer on the GPU must fit in the free memory."""
    check_device(fit_, model, hw)
    mean = sum(fit_.expert_bytes) / len(fit_.expert_bytes)  # a trace of some layers: they get their share
    need = per_layer * mean * layers
    if per_layer > model.num_experts or need > fit_.free_bytes * layers / len(fit_.expert_bytes):
        fitting = min(int(fit_.free_bytes / (mean * len(fit_.expert_bytes))), model.num_experts)
        raise ConfigError(
            f"system.gpu_experts={per_layer} (--kt-num-gpu-experts) puts {gib(need)} of experts on the GPU; "
            f"hardware={hw.name} has {gib(fit_.free_bytes)} free for experts at {fit_.context:,} tokens of context, "
            f"so at most {fitting} experts per layer fit (of {model.num_experts}) (fix: system.gpu_experts={fitting} or "
            f"fewer)"
        )


def check_placement(fit_: MemoryFit, model: ModelConfig, hw: HardwareConfig, system: SystemConfig, layers: int) -> None:
    """Every placement knob of ``system`` against the memory (``layers``: the MoE layers the trace recorded): what
    a run's placement checks as it places, for a command to check before any work."""
    if system.placement == "static" and system.cpu_moe_layers:
        check_layers(fit_, model, hw, system.cpu_moe_layers, layers)
    elif system.placement == "static":
        check_static(fit_, model, hw, system.n_cpu_moe, layers)
    elif system.gpu_experts:
        check_gpu_experts(fit_, model, hw, system.gpu_experts, layers)


@dataclass(frozen=True)
class Footprint:
    """A finished run's memory as its user sees it. Sizes in bytes."""

    gpu_bytes: int  # device memory taken: resident weights, the KV cache and the experts kept on the device
    host_bytes: int  # host RAM its host-side experts take (what does not fit stays on the SSD)
    ssd_share: float  # the share of host-side expert reads served from the SSD


def footprint(summary: dict, system: SystemConfig, hw: HardwareConfig, num_layers: int, num_experts: int) -> Footprint:
    """The memory of the run whose results.json is ``summary``, under ``system`` with its flags applied: the experts
    it keeps on the device are a static placement's GPU layers, a pinned set's experts (``gpu_experts`` with every
    miss computed on the CPU), a per-layer cache's slots, or the cache's pools."""
    m = summary["memory"]
    expert = m["expert_bytes"]
    L, E = num_layers, num_experts
    if system.placement == "static":
        kept = (L - len(summary.get("placement", {}).get("cpu_moe_layers", []))) * E * expert
    elif system.cpu_misses == "always" and not system.cpu_insert:  # nothing cached: the pinned experts
        kept = system.gpu_experts * L * expert
    elif system.cache.layer_slots and system.cache.per_layer:
        kept = min(system.cache.layer_slots, E) * L * expert
    else:
        kept = summary["cache"]["high_bytes"] + summary["cache"]["low_bytes"]
    gpu = int(m["resident_bytes"] + m["kv_bytes"] + kept)
    host = m["host_expert_bytes"]
    if hw.expert_source == "ssd":  # the machine reads experts off the GPU from its SSD (HOBBIT's Jetson setting)
        return Footprint(gpu, 0, 1.0 if host else 0.0)
    ram = max(m["host_bytes"] - hw.host_reserve_bytes, 0) if m["host_bytes"] else host
    return Footprint(gpu, int(min(host, ram)), 1.0 - float(m["ram_share"]))
