"""``simulate``: one run of a trace x model x hardware x system, no I/O.

Order of work: check the knobs and the topology, lay the trace out (once per loaded trace:
``prepare``), size the cache, place static experts, decide (policies), time, summarise; the
compiled core (``engine=fast``) or the Python references (``plain``, ``simpy``).
"""

from __future__ import annotations

import dataclasses
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from hobbit.sim import fast
from hobbit.sim.bound import pass_bounds
from hobbit.sim.config import (
    CacheBase,
    ConfigError,
    HardwareConfig,
    ModelConfig,
    SystemConfig,
    check_system,
    offload_tokens,
)
from hobbit.sim.cost import CostModel
from hobbit.sim.decide import Decider, Decisions, Placement
from hobbit.sim.engine import Engine
from hobbit.sim.flags import Flags, apply_flags
from hobbit.sim.memory import (
    MemoryFit,
    check_gpu_experts,
    check_layers,
    check_static,
    fit,
    gib,
    host_ram_share,
    pools,
)
from hobbit.sim.plain import replay
from hobbit.sim.policies.base import HIGH, LOW
from hobbit.sim.policies.registry import eviction_class, prefetcher_class
from hobbit.sim.results import Results, summarise
from hobbit.sim.timeline import Timeline
from hobbit.sim.walk_copies import walk_copies
from hobbit.sim.workload import Profiled, Workload, build_workload, chunk_prefill, split_requests
from hobbit.traces.interchange import weights_absent
from hobbit.traces.io import Trace
from hobbit.traces.knobs import check_knobs
from hobbit.traces.window import TraceFile

GiB = 2**30
ENGINES = ("fast", "plain", "simpy")


@dataclass(frozen=True)
class CacheSizing:
    """Pool sizes of a run, and the device memory they came from."""

    high_slots: int
    low_slots: int
    high_bytes: int
    low_bytes: int
    free_bytes: int  # device memory left for experts after resident weights, KV cache and reserve
    derived: str = ""  # what was derived from the knobs (one pool's size from the other's)


def check_profile(model: ModelConfig, hw: HardwareConfig) -> None:
    """A measured profile only holds for the shapes it was measured with."""
    prof = hw.profile
    if prof is None:
        return
    if (prof.hidden_size, prof.expert_ffn) != (model.hidden_size, model.expert_ffn):
        raise ConfigError(
            f"hardware={hw.name} was calibrated for model {prof.model} (hidden {prof.hidden_size}, "
            f"expert FFN {prof.expert_ffn}), not model={model.name} (hidden {model.hidden_size}, expert "
            f"FFN {model.expert_ffn}); calibrate again for this model"
        )
    if not prof.expert_tokens or len(prof.expert_high_s) != len(prof.expert_tokens):
        raise ConfigError(f"hardware={hw.name}: profile.expert_tokens and expert_high_s are empty or differ in length")
    for name in ("expert_low_s", "cpu_expert_s", "head_s"):
        table = getattr(prof, name)
        if table and len(table) != len(prof.expert_tokens):
            raise ConfigError(
                f"hardware={hw.name}: profile.{name} has {len(table)} values for "
                f"{len(prof.expert_tokens)} expert_tokens (fix: one per token count, or none)"
            )


def needs_weights(system: SystemConfig) -> bool:
    """Whether ``system``'s decisions read the gate weights (HOBBIT's T1/T2 precision rule)."""
    return system.precision.mode == "hobbit"


def check_weights(trace: Trace | TraceFile, system: SystemConfig) -> None:
    """A trace whose source carried no gate weights (``traces.interchange``) cannot drive the T1/T2 rule."""
    if weights_absent(trace.meta) and needs_weights(system):
        raise ConfigError(
            f"trace {trace.path} has no gate weights (its source format carries none; it holds "
            f"placeholders), so system={system.name}'s T1/T2 rule (system.precision.mode=hobbit) "
            f"cannot run on it (fix: a uniform-precision system, system.precision.mode=high or low, "
            f"e.g. system=on-demand, freetoken or tec)"
        )


def check_topology(trace: Trace | TraceFile, model: ModelConfig) -> None:
    m = trace.meta.model
    got = (m.num_layers, m.num_experts, m.top_k)
    want = (model.num_layers, model.num_experts, model.top_k)
    if got != want:
        raise ConfigError(
            f"trace {trace.path} ({m.name}: {got[0]} MoE layers, {got[1]} experts, top-{got[2]}) does "
            f"not fit model={model.name} ({want[0]} layers, {want[1]} experts, top-{want[2]}); pick a "
            f"model with the trace's topology"
        )


def size_cache(
    model: ModelConfig,
    hw: HardwareConfig,
    system: SystemConfig,
    max_context: int,
    layer_share: float = 1.0,
    memory: MemoryFit | None = None,
    layers: Sequence[int] | None = None,
) -> CacheSizing:
    """The cache's pools: explicit sizes, or the free device memory split by ``high_fraction`` (``sim.memory.pools``).

    ``layer_share``: the fraction of the model's MoE layers the trace recorded; the free
    memory a partial trace's layers may use shrinks in proportion (their share of the cache).
    ``memory``: the run's memory fit, if already made (else it is made here at ``max_context``).
    ``layers``: the model's MoE layers the trace recorded (None: as many as ``layer_share`` says, at the mean size);
    with ``cache.per_layer`` and ``layer_partition=bytes`` a pool's slots are its layers' regions' (``cache_regions``).
    """
    c = system.cache
    mem = memory if memory is not None else fit(model, hw, system, max_context, layer_share)
    high, low, note, eb = _pool_bytes(model, hw, system, mem, layer_share)
    slots = [high // eb[HIGH], low // eb[LOW]]
    cap = layer_cap(model, c)
    if c.per_layer and c.layer_partition == "bytes":  # the regions' slots, each layer's in experts of its own size
        lb = recorded_bytes(mem, layers, _recorded_count(model, layer_share))
        regions = [layer_slots(size, lb[:, pr], c.layer_partition, cap) for pr, size in ((HIGH, high), (LOW, low))]
        slots = [int(r.sum()) for r in regions]
        if cap:
            high = min(high, int((regions[HIGH] * lb[:, HIGH]).sum()))
            low = min(low, int((regions[LOW] * lb[:, LOW]).sum()))
    elif cap:
        layers_n = _recorded_count(model, layer_share)
        slots = [min(n, cap * layers_n) for n in slots]
        high, low = min(high, slots[HIGH] * eb[HIGH]), min(low, slots[LOW] * eb[LOW])
    return CacheSizing(slots[HIGH], slots[LOW], high, low, mem.free_bytes, note)


def host_bandwidth(hw: HardwareConfig, system: SystemConfig) -> HardwareConfig:
    """``hw`` as ``system``'s CPU experts see it: with one copy of the experts (``system.numa=single``) on a machine
    of several NUMA nodes, the host's memory bandwidth is one node's."""
    if system.numa == "single" and hw.numa_nodes > 1:
        return dataclasses.replace(hw, cpu_mem_gbps=hw.cpu_mem_gbps / hw.numa_nodes)
    return hw


def _recorded_count(model: ModelConfig, layer_share: float) -> int:
    """How many of the model's MoE layers a trace that recorded ``layer_share`` of them holds."""
    return max(round(model.num_layers * layer_share), 1)


def _pool_bytes(
    model: ModelConfig, hw: HardwareConfig, system: SystemConfig, mem: MemoryFit, layer_share: float
) -> tuple[int, int, str, tuple[int, int]]:
    """(high pool bytes, low pool bytes, the note of what was derived, one expert's bytes (high: the mean over the
    model's layers, low)) before any cap per layer; a pool set under one expert is refused."""
    c = system.cache
    eb = (round(sum(mem.expert_bytes) / len(mem.expert_bytes)), mem.low_bytes)
    high, low, note = pools(mem, model, hw, system)
    if c.high_bytes < 0 and c.low_bytes < 0:  # a partial trace's layers take their share of the free memory
        mode = system.precision.mode
        share = 1.0 if mode == "high" else 0.0 if mode == "low" else c.high_fraction
        budget = int(mem.free_bytes * layer_share)
        high = int(budget * share)
        low = budget - high
    for name, size, one in (("high_bytes", high, eb[HIGH]), ("low_bytes", low, eb[LOW])):
        if 0 < size < one and getattr(c, name) >= 0:
            raise ConfigError(
                f"system.cache.{name}={size} is smaller than one expert ({one} bytes); use 0 for no pool or at least "
                f"{one}"
            )
    return high, low, note, eb


def recorded_bytes(mem: MemoryFit, layers: Sequence[int] | None, count: int) -> np.ndarray:
    """One expert's bytes (high, low) in each layer of a trace, [L, 2] int64: the model's MoE ``layers`` it recorded;
    None: ``count`` layers, each the mean over the model's layers (all of them, exactly, when it recorded them all)."""
    if layers is None:
        if count == len(mem.expert_bytes):
            layers = range(count)
        else:
            mean = round(sum(mem.expert_bytes) / len(mem.expert_bytes))
            return np.array([[mean, mem.low_bytes]] * count, np.int64).reshape(-1, 2)
    return np.array([[mem.expert_bytes[i], mem.low_bytes] for i in layers], np.int64).reshape(-1, 2)


def layer_slots(pool_bytes: int, layer_bytes: Sequence[int] | np.ndarray, partition: str, cap: int = 0) -> np.ndarray:
    """A per-layer pool's slots in each layer, [L] int64, in experts of each layer's own size (``layer_bytes``), by
    ``cache.layer_partition``: ``slots``, every layer as many as the pool's bytes over one expert of every layer
    (pool_bytes // sum(layer_bytes)); ``bytes``, every layer the same bytes, floor(pool_bytes / L / layer_bytes[l])
    of its own experts. ``cap`` > 0: at most that many in a layer (``layer_cap``)."""
    eb = np.maximum(np.asarray(layer_bytes, np.int64), 1)
    L = len(eb)
    if L == 0 or pool_bytes <= 0:
        return np.zeros(L, np.int64)
    if partition == "slots":
        n = np.full(L, pool_bytes // int(eb.sum()), np.int64)
    elif partition == "bytes":
        n = pool_bytes // (L * eb)  # floor((pool_bytes / L) / eb), in integers
    else:
        raise ConfigError(f"system.cache.layer_partition={partition} must be slots or bytes")
    return np.minimum(n, cap) if cap > 0 else n


def cache_regions(
    model: ModelConfig,
    hw: HardwareConfig,
    system: SystemConfig,
    memory: MemoryFit,
    layer_share: float,
    layer_bytes: np.ndarray,
) -> np.ndarray:
    """A per-layer cache's split (``cache.per_layer``): each pool's slots in each of the trace's layers, [2, L] int64,
    by ``cache.layer_partition`` (``layer_slots``) and ``layer_cap``, before TEC's pinned hot set and staging slots
    take theirs (``simulate``). ``layer_bytes``: one expert's bytes (high, low) in each layer, [L, 2]."""
    high, low, _, _ = _pool_bytes(model, hw, system, memory, layer_share)
    c = system.cache
    cap = layer_cap(model, c)
    lb = np.asarray(layer_bytes, np.int64).reshape(-1, 2)
    return np.stack([layer_slots(size, lb[:, pr], c.layer_partition, cap) for pr, size in ((HIGH, high), (LOW, low))])


def layer_note(c: CacheBase, sizing: CacheSizing, regions: np.ndarray, layer_bytes: np.ndarray) -> str:
    """What a per-layer split leaves, for results.json ``memory.notes``: each pool's slots per layer (the same in
    every layer, or the least and the most) and the bytes they use of the pools'."""
    L = regions.shape[1]
    lb = np.asarray(layer_bytes, np.int64).reshape(-1, 2)
    parts = []
    for pr, name, size in ((HIGH, "high", sizing.high_bytes), (LOW, "low", sizing.low_bytes)):
        if size <= 0:
            continue
        r = regions[pr]
        lo, hi = (int(r.min()), int(r.max())) if L else (0, 0)
        if lo == hi:
            parts.append(f"{lo} {name} slot{'' if lo == 1 else 's'} in each of {L} layers")
        else:
            parts.append(f"{lo}-{hi} {name} slots per layer ({int(r.sum())} in {L} layers)")
    used = int((regions[HIGH] * lb[:, HIGH]).sum() + (regions[LOW] * lb[:, LOW]).sum())
    total = sizing.high_bytes + sizing.low_bytes
    what = " and ".join(parts) if parts else "no pool"
    return f"cache per layer (layer_partition={c.layer_partition}): {what}, {gib(used)} of {gib(total)} used"


def layer_cap(model: ModelConfig, c: CacheBase) -> int:
    """A pool's most slots per layer by ``layer_slots`` / ``layer_share`` (0: no cap), at most the layer's experts."""
    caps = []
    if c.layer_slots:
        caps.append(c.layer_slots)
    if c.layer_share:
        caps.append(max(int(c.layer_share * model.num_experts), 4 * model.top_k))
    return min(min(caps), model.num_experts) if caps else 0


def place(
    wl: Workload,
    model: ModelConfig,
    hw: HardwareConfig,
    system: SystemConfig,
    sizing: CacheSizing,
    profile: Profiled | None = None,
    memory: MemoryFit | None = None,
    sizing_context: int = 1,
) -> Placement:
    """Static expert placement: llama.cpp's CPU layers, Fiddler's pinned popular experts (the most used
    in the profiling requests, ``profile``; none without them). ``memory``: the run's memory fit, which the static
    layers' experts are checked against (``sim.memory.check_static``)."""
    L, E = wl.num_layers, wl.num_experts
    if system.placement == "static":  # llama.cpp: the first N layers' experts stay on the CPU
        mem = memory if memory is not None else fit(model, hw, system, sizing_context, L / max(model.num_layers, 1))
        if system.cpu_moe_layers:  # -ot patterns, --cpu-moe: any set of layers
            check_layers(mem, model, hw, system.cpu_moe_layers, L)
            cpu = frozenset(i for i in system.cpu_moe_layers if i < L)
        else:
            cpu = frozenset(range(check_static(mem, model, hw, system.n_cpu_moe, L)))
        gpu = frozenset((layer, e) for layer in range(L) if layer not in cpu for e in range(E))
        return Placement(resident=gpu, cpu_layers=cpu, static=True)
    if system.gpu_experts > 0:  # KTransformers: N experts of every layer on the GPU for good
        mem = memory if memory is not None else fit(model, hw, system, sizing_context, L / max(model.num_layers, 1))
        check_gpu_experts(mem, model, hw, system.gpu_experts, L)
        return Placement(resident=gpu_experts(system, L, E, profile), static=True)
    if system.cache.layer_pinned > 0 and profile is not None:  # TEC: a hot set per layer, the rest a cache
        k = pinned_per_layer(system, sizing, L)
        counts = profile.expert_counts()
        hot = [(layer, int(e)) for layer in range(L) for e in np.argsort(-counts[layer], kind="stable")[:k]]
        return Placement(resident=frozenset(hot))
    if system.placement == "popular":  # Fiddler: the most used experts fill the device, for good
        if profile is None:  # nothing to rank by: every expert is a miss
            return Placement(static=True)
        counts = profile.expert_counts()
        order = np.argsort(-counts.ravel(), kind="stable")[: sizing.high_slots + sizing.low_slots]
        return Placement(resident=frozenset((int(i) // E, int(i) % E) for i in order), static=True)
    return Placement()


def gpu_experts(system: SystemConfig, L: int, E: int, profile: Profiled | None) -> frozenset[tuple[int, int]]:
    """The (layer, expert) pairs ``system.gpu_experts`` keeps on the GPU, by ``gpu_experts_strategy``, as
    KTransformers' kt-kernel chooses them (docs/references.md, Systems compared): N x L in all."""
    n = system.gpu_experts
    if system.gpu_experts_strategy == "uniform":  # the first N ids of every layer
        return frozenset((layer, e) for layer in range(L) for e in range(min(n, E)))
    if system.gpu_experts_strategy == "front-loading":  # whole layers, from the first on
        return frozenset(divmod(i, E) for i in range(min(n * L, L * E)))
    if profile is None:  # frequency with nothing to count: as uniform
        return frozenset((layer, e) for layer in range(L) for e in range(min(n, E)))
    order = np.argsort(-profile.expert_counts().ravel(), kind="stable")[: n * L]  # the most used pairs overall
    return frozenset((int(i) // E, int(i) % E) for i in order)


def pinned_per_layer(system: SystemConfig, sizing: CacheSizing, num_layers: int) -> int:
    """Slots per layer ``cache.layer_pinned`` takes from the high pool for the hot set."""
    return int(system.cache.layer_pinned * (sizing.high_slots // max(num_layers, 1)))


_PREPARED: OrderedDict[tuple, tuple] = OrderedDict()  # the last few prepared traces, most recent last
PREPARED_KEPT = 4


def prepare(
    trace: Trace,
    profile: Trace | None,
    profile_share: float,
    fallback: str,
    accuracy: float,
    depth: int,
    rng: np.random.Generator,
) -> tuple[Trace, Workload, Workload | None]:
    """(the timed trace, its workload, the profiling requests' workload or None): the profile split off
    (``split_requests``, unless a ``profile`` trace is given) and both laid out for replay. Remembered for the
    last ``PREPARED_KEPT`` (trace object, knobs, generator state) asked for, so that a sweep or a study that
    simulates many configurations of one loaded trace lays it out once (its arrays are never changed)."""
    key = (
        id(trace),
        id(trace.arrays),
        id(profile),
        profile_share,
        fallback,
        accuracy,
        depth,
        str(rng.bit_generator.state),
    )
    hit = _PREPARED.get(key)
    if hit is not None:
        _PREPARED.move_to_end(key)
        return hit[2:]
    timed = trace
    if profile is None:
        profile, timed = split_requests(trace, profile_share)
    wl = build_workload(timed, fallback, accuracy, depth, rng)
    prof = build_workload(profile, "none") if profile is not None else None
    _PREPARED[key] = (trace, profile, timed, wl, prof)  # the objects the key's ids name stay alive with it
    while len(_PREPARED) > PREPARED_KEPT:
        _PREPARED.popitem(last=False)
    return timed, wl, prof


def lay_out(
    trace: Trace,
    system: SystemConfig,
    rng: np.random.Generator,
    profile: Trace | None = None,
    profile_share: float = 0.25,
) -> tuple[Trace, Workload, Workload | None]:
    """``prepare`` with ``system``'s knobs: the layout ``simulate`` replays (and remembers) for these arguments."""
    p = system.prefetch
    return prepare(trace, profile, profile_share, p.fallback, p.fallback_accuracy, p.max_depth, rng)


@dataclass(frozen=True)
class Setup:
    """What a run derives from its knobs and its trace before the walk (``configure``)."""

    memory: MemoryFit
    sizing: CacheSizing
    placement: Placement
    cost: CostModel
    per_layer: np.ndarray  # [L, 2] bytes a copy of each layer's expert moves, by precision
    slots: tuple[int, int] | np.ndarray  # the pools' slots, or [2, L] per layer
    cpu_faster: Callable[[int, int], bool]
    miss_costs: Callable[[int, int], tuple[float, float]]
    profile_matrices: (
        list[np.ndarray] | None
    )  # the profiling requests' activation matrices, for a policy that reads them
    layout: str  # a per-layer split's note


def configure(
    wl: Workload,
    recorded: Sequence[int],
    model: ModelConfig,
    hw: HardwareConfig,
    system: SystemConfig,
    max_context: int,
    prof: Profiled | None,
    host_ram: Callable[[MemoryFit], MemoryFit],
) -> Setup:
    """The memory fit, cache sizes, placement and cost model of a run of ``system`` over ``wl`` (its topology: a
    window of the trace serves as well as the whole), whose longest context is ``max_context`` tokens and whose
    trace recorded the model's layers ``recorded``; ``prof``: the profiling requests; ``host_ram``: the fit with
    the share of host-side reads RAM serves, for a fit that leaves some experts on the SSD."""
    p = system.prefetch
    share = wl.num_layers / wl.layers_total
    memory = fit(model, hw, system, max_context, share)
    if memory.ram_share < 1.0:  # some host-side experts stay on the SSD: how many reads RAM serves
        memory = host_ram(memory)
    sizing = size_cache(model, hw, system, max_context, share, memory, recorded)
    placement = place(wl, model, hw, system, sizing, prof, memory)
    cost = CostModel(
        model,
        host_bandwidth(hw, system),
        layer_scale=wl.layers_total / wl.num_layers,
        cpu_efficiency=system.cpu_kernel_efficiency,
        cpu_flops_efficiency=system.cpu_flops_efficiency,
        kv_scale=system.kv_bits / 16.0,
        gpu_efficiency=system.gpu_efficiency,
        gpu_flops_efficiency=system.gpu_flops_efficiency,
        launch_s=system.launch_overhead_s,
        memory=memory,
        write_back=system.write_back,
        serial_copies=system.copy_stream == "compute",
        clear_queue=system.prefetch.clear_queue,
        cpu_dense_layers=placement.cpu_layers if system.cpu_layer_scope == "whole" else frozenset(),
        dense_offload_tokens=offload_tokens(system, model.num_experts, model.top_k),
    )
    per_layer = np.array([[memory.expert_bytes[i], memory.low_bytes] for i in recorded], np.int64)  # what copies move
    slots: tuple[int, int] | np.ndarray = (sizing.high_slots, sizing.low_slots) if not placement.static else (0, 0)
    # the hot set's slots per layer leave the cache; staging slots come from the high pool's memory
    pinned = (
        pinned_per_layer(system, sizing, wl.num_layers) if system.cache.layer_pinned > 0 and placement.resident else 0
    )
    staging = p.staging_slots if prefetcher_class(p.kind).loads_ahead and system.cpu_misses != "always" else 0
    layout = ""  # a per-layer split's note
    if system.cache.per_layer:  # each pool's slots in each layer, [2, L]
        regions = cache_regions(model, hw, system, memory, share, per_layer)
        if not placement.static:
            layout = layer_note(system.cache, sizing, regions, per_layer)
        held = regions if not placement.static else np.zeros_like(regions)
        # the staging slots take first what the split leaves of the high pool's slots, then one slot of every layer
        # per L of them (the slots per layer of (pool - pinned - staging) // L when every layer has the same)
        spare = max(int(slots[HIGH]) - int(held[HIGH].sum()), 0)
        cut = pinned + -(-max(staging - spare, 0) // max(wl.num_layers, 1))
        held[HIGH] = np.maximum(held[HIGH] - cut, 0)
        slots = held
    else:
        slots = (slots[HIGH] - pinned * wl.num_layers, slots[LOW])
        if staging:
            slots = (max(slots[HIGH] - staging, 0), slots[LOW])
    eb = (cost.expert_bytes(HIGH), cost.expert_bytes(LOW))  # the mean over layers: for the rules that compare costs

    def cpu_faster(prec: int, tokens: int) -> bool:
        """HOBBIT's CPU mode, Fiddler: computing a miss on the CPU beats loading it and computing it here."""
        return cost.cached("cpu_expert_s", tokens) < cost.cached("transfer_s", eb[prec]) + cost.cached(
            "expert_s", prec, tokens
        )

    def miss_costs(prec: int, tokens: int) -> tuple[float, float]:
        """FreeToken's split: a miss's copy time and its CPU computation time."""
        return cost.cached("transfer_s", eb[prec]), cost.cached("cpu_expert_s", tokens)

    profile_matrices = prof.request_matrices() if prof is not None and "profile" in needs(system) else None
    return Setup(memory, sizing, placement, cost, per_layer, slots, cpu_faster, miss_costs, profile_matrices, layout)


def checked(model: ModelConfig, hw: HardwareConfig, system: SystemConfig) -> Flags:
    """Every knob of the run checked, and ``system`` with its runtime's flags applied (``Flags.system``)."""
    for prefix, cfg in (("model.", model), ("hardware.", hw), ("system.", system)):
        check_knobs(cfg, prefix)
    flags = apply_flags(system, model.num_layers, model.dense_layers, model.num_experts)
    check_system(flags.system)
    return flags


def simulate(
    trace: Trace,
    model: ModelConfig,
    hw: HardwareConfig,
    system: SystemConfig,
    rng: np.random.Generator | None = None,
    engine: str = "fast",
    keep_log: bool = False,
    profile: Trace | None = None,
    profile_share: float = 0.25,
    keep_decisions: bool = True,
    progress: Callable[[int, int], None] | None = None,
    context: int = 0,
) -> Results:
    """Simulate ``system`` replaying ``trace`` for ``model`` on ``hw``.

    What a system learns offline comes from ``profile``, a profiling trace; without one, from the
    first ``profile_share`` of ``trace``'s requests, which are then not timed (``split_requests``).
    ``engine``: fast (the compiled core, ``sim.fast``), plain (the Python reference walk and timing, ``sim.plain``)
    or simpy (the reference walk, timed by the discrete-event engine, ``sim.engine``); all three give the same
    decisions and the same times (within 1e-9 relative). ``keep_decisions=False`` lets the fast engine stream: it
    walks and times a chunk of passes at a time and drops each chunk's log (``sim.fast.stream``), so the run's memory
    is the trace's, its per-pass results, the cache's state and one chunk; the results are the same, but the
    decisions' records (``Results.decisions.steps``), the steps' times (``Results.timeline.step_stall``, ``step_end``)
    and the copies' (``transfer_start``, ``transfer_done``) are not kept.
    ``progress(passes timed, passes)``: called as a streamed run goes (after each chunk), else once at the end.
    ``context``: tokens already in the KV cache when each request starts (``SimConfig.context``)."""
    t_wall = time.perf_counter()
    flags = checked(model, hw, system)
    system = flags.system
    check_topology(trace, model)
    check_weights(trace, system)
    check_profile(model, hw)
    if engine not in ENGINES:
        raise ConfigError(f"engine={engine} must be one of {', '.join(ENGINES)}")
    rng = rng if rng is not None else np.random.default_rng(0)
    if profile is not None:
        check_topology(profile, model)
    trace, wl, prof = lay_out(trace, system, rng, profile, profile_share)
    if system.ubatch:  # a prompt runs in passes of at most -ub tokens
        n = system.ubatch
        wl = wl.derived(("ubatch", n), lambda: chunk_prefill(wl, n))
    if context:  # every pass also attends over the history already in the KV cache
        wl = dataclasses.replace(wl, pass_context=[c + context for c in wl.pass_context])

    def host_ram(memory: MemoryFit) -> MemoryFit:  # how many of the host-side reads RAM serves, over this trace
        passes = list(zip(wl.pass_start, wl.pass_end))
        return wl.derived(
            ("host_ram", memory, system.host_cache), lambda: host_ram_share(memory, system, wl.ids, passes)
        )

    setup = configure(wl, trace.meta.layers, model, hw, system, max(wl.pass_context), prof, host_ram)
    sizing, placement, cost, per_layer, slots = setup.sizing, setup.placement, setup.cost, setup.per_layer, setup.slots
    cpu_faster, miss_costs, profile_matrices = setup.cpu_faster, setup.miss_costs, setup.profile_matrices
    streamed = None
    walks = walk_copies() if engine == "fast" else "auto"  # the process's choice of walk copies (``fast.policy_walk``)
    if engine == "fast" and not keep_decisions and not keep_log and fast.unsupported(system) is None:
        run = fast.Run(system, slots, per_layer, placement, cpu_faster, miss_costs, profile_matrices, walks)
        streamed = fast.stream(wl, run, cost, system.demand_first, progress=progress)
    if streamed is not None:
        dec, tl = streamed.decisions, streamed.timeline
    elif engine == "fast":
        dec = fast.decide_or_refer(
            wl,
            system,
            slots,
            per_layer,
            placement,
            keep_log=keep_log,
            cpu_faster=cpu_faster,
            miss_costs=miss_costs,
            profile=profile_matrices,
            walks=walks,
        )
    else:
        dec = Decider(
            wl,
            system,
            slots,
            per_layer,
            placement,
            keep_log=keep_log,
            cpu_faster=cpu_faster,
            miss_costs=miss_costs,
            profile=profile_matrices,
        ).run()
    if streamed is None:
        tl = time_decisions(wl, dec, cost, system.demand_first, engine)
        if progress is not None:
            progress(len(wl.pass_start), len(wl.pass_start))
    if streamed is not None:  # the walk computed the bound and counted the rule's classes as it read the trace
        bound = streamed.bound
    else:
        bound = (fast.pass_bounds if engine == "fast" else pass_bounds)(wl, cost, system)
    mix = (
        fast.rule_mix(wl, system.precision.t1, system.precision.t2, streamed.classes if streamed is not None else None)
        if engine == "fast"
        else None
    )
    res = summarise(
        trace, wl, dec, tl, model, hw, system, sizing, engine, time.perf_counter() - t_wall, bound=bound, mix=mix
    )
    describe(res, setup, system, flags.unmodelled, wl.num_layers)
    res.workload, res.cost = wl, cost
    return res


def describe(res: Results, setup: Setup, system: SystemConfig, unmodelled: Sequence[str], num_layers: int) -> None:
    """Add to ``res.summary`` where the bytes went (``memory``), the static placement and the runtime's flags."""
    res.summary["memory"] = setup.memory.summary()
    placement = setup.placement
    if placement.static and system.placement == "static":  # which layers' experts stayed on the CPU
        res.summary["placement"] = {"cpu_moe_layers": sorted(placement.cpu_layers), "layers": num_layers}
    if system.flags:
        res.summary["flags"] = {"runtime": system.runtime, "given": system.flags, "unmodelled": list(unmodelled)}
    if setup.sizing.derived:
        res.summary["memory"]["notes"].append(setup.sizing.derived)
    if setup.layout:
        res.summary["memory"]["notes"].append(setup.layout)


def needs(system: SystemConfig) -> frozenset[str]:
    """What ``system``'s policies need from the walk (``policies.base.NEEDS``)."""
    return prefetcher_class(system.prefetch.kind).needs | eviction_class(system.cache.policy).needs


def time_decisions(wl: Workload, dec: Decisions, cost: CostModel, demand_first: bool, engine: str) -> Timeline:
    if engine == "fast":
        return fast.time_decisions(wl, dec, cost, demand_first)
    if engine == "plain":
        return replay(wl, dec, cost, demand_first)
    return Engine(wl, dec, cost, demand_first).run()
