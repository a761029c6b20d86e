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
from hobbit.sim.checks import check_run
from hobbit.sim.config import HardwareConfig, ModelConfig, SystemConfig, offload_tokens
from hobbit.sim.cost import CostModel
from hobbit.sim.decide import Decider
from hobbit.sim.decisions import Decisions, Placement
from hobbit.sim.engine import Engine
from hobbit.sim.memory import (
    MemoryFit,
    check_gpu_experts,
    check_layers,
    check_static,
    fit,
    host_ram_share,
)
from hobbit.sim.plain import replay
from hobbit.sim.policies.base import HIGH, LOW
from hobbit.sim.policies.registry import eviction_class, prefetcher_class
from hobbit.sim.results import Results, summarise
from hobbit.sim.sizing import CacheSizing, cache_regions, layer_note, pinned_per_layer, size_cache
from hobbit.sim.timeline import Timeline
from hobbit.sim.walk_copies import walk_copies
from hobbit.sim.workload import Profiled, Workload, build_workload, chunk_prefill, split_requests
from hobbit.traces.io import Trace

GiB = 2**30
__all__ = [
    "PREPARED_KEPT",
    "Setup",
    "configure",
    "describe",
    "gpu_experts",
    "host_bandwidth",
    "host_ram_over",
    "lay_out",
    "needs",
    "place",
    "prepare",
    "simulate",
    "time_decisions",
    "timed_workload",
    "walk_and_time",
]


def host_bandwidth(hw: HardwareConfig, system: SystemConfig) -> HardwareConfig:
    """``hw`` as ``system``'s CPU experts see it: with one copy of the experts (``system.numa=single``) on a machine
    of several NUMA nodes, the host's memory bandwidth is one node's."""
    if system.numa == "single" and hw.numa_nodes > 1:
        return dataclasses.replace(hw, cpu_mem_gbps=hw.cpu_mem_gbps / hw.numa_nodes)
    return hw


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
    walks: str | None = None,
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
    ``context``: tokens already in the KV cache when each request starts (``SimConfig.context``). ``walks``: which
    compiled copy of the policy's walk runs (``sim.walk_copies``; the same decisions)."""
    t_wall = time.perf_counter()
    walks = walk_copies(walks) if engine == "fast" else "auto"
    flags = check_run(model, hw, system, trace, profile, engine=engine)
    system = flags.system
    rng = rng if rng is not None else np.random.default_rng(0)
    trace, wl, prof = timed_workload(trace, system, rng, profile, profile_share, context)
    setup = configure(wl, trace.meta.layers, model, hw, system, max(wl.pass_context), prof, host_ram_over(wl, system))
    dec, tl, bound, mix = walk_and_time(wl, system, setup, engine, keep_log, keep_decisions, progress, walks)
    res = summarise(
        trace, wl, dec, tl, model, hw, system, setup.sizing, engine, time.perf_counter() - t_wall, bound=bound, mix=mix
    )
    describe(res, setup, system, flags.unmodelled, wl.num_layers)
    res.workload, res.cost = wl, setup.cost
    return res


def timed_workload(
    trace: Trace,
    system: SystemConfig,
    rng: np.random.Generator,
    profile: Trace | None,
    profile_share: float,
    context: int,
) -> tuple[Trace, Workload, Workload | None]:
    """(the timed trace, its workload, the profiling requests' workload or None) as ``simulate`` replays them:
    ``lay_out``'s, each prompt in passes of at most ``system.ubatch`` tokens, every pass attending over ``context``
    tokens more."""
    trace, wl, prof = lay_out(trace, system, rng, profile, profile_share)
    if system.ubatch:  # a prompt runs in passes of at most -ub tokens
        n = system.ubatch
        wl = wl.derived(("ubatch", n), lambda: chunk_prefill(wl, n))
    if context:  # every pass also attends over the history already in the KV cache
        wl = dataclasses.replace(wl, pass_context=[c + context for c in wl.pass_context])
    return trace, wl, prof


def host_ram_over(wl: Workload, system: SystemConfig) -> Callable[[MemoryFit], MemoryFit]:
    """``configure``'s ``host_ram`` for a run over ``wl``: how many of the host-side reads RAM serves, over it."""

    def host_ram(memory: MemoryFit) -> MemoryFit:
        passes = list(zip(wl.pass_start, wl.pass_end))
        return wl.derived(
            ("host_ram", memory, system.host_cache), lambda: host_ram_share(memory, system, wl.ids, passes)
        )

    return host_ram


def walk_and_time(
    wl: Workload,
    system: SystemConfig,
    setup: Setup,
    engine: str,
    keep_log: bool = False,
    keep_decisions: bool = True,
    progress: Callable[[int, int], None] | None = None,
    walks: str = "auto",
) -> tuple[Decisions, Timeline, np.ndarray, dict[str, float] | None]:
    """(the decisions, their times, each pass's bound, the rule's mix or None) of ``system`` over ``wl`` by ``engine``:
    streamed a chunk of passes at a time where the compiled core can and nothing is to be kept (``fast.stream``),
    else walked whole, then timed (``simulate``'s docstring; ``walks``: ``sim.walk_copies``)."""
    s = setup
    if engine == "fast" and not keep_decisions and not keep_log and fast.unsupported(system) is None:
        run = fast.Run(system, s.slots, s.per_layer, s.placement, s.cpu_faster, s.miss_costs, s.profile_matrices, walks)
        streamed = fast.stream(wl, run, s.cost, system.demand_first, progress=progress)
        if streamed is not None:  # the walk computed the bound and counted the rule's classes as it read the trace
            mix = fast.rule_mix(wl, system.precision.t1, system.precision.t2, streamed.classes)
            return streamed.decisions, streamed.timeline, streamed.bound, mix
    if engine == "fast":
        dec = fast.decide_or_refer(
            wl,
            system,
            s.slots,
            s.per_layer,
            s.placement,
            keep_log=keep_log,
            cpu_faster=s.cpu_faster,
            miss_costs=s.miss_costs,
            profile=s.profile_matrices,
            walks=walks,
        )
    else:
        dec = Decider(
            wl,
            system,
            s.slots,
            s.per_layer,
            s.placement,
            keep_log=keep_log,
            cpu_faster=s.cpu_faster,
            miss_costs=s.miss_costs,
            profile=s.profile_matrices,
        ).run()
    tl = time_decisions(wl, dec, s.cost, system.demand_first, engine)
    if progress is not None:
        progress(len(wl.pass_start), len(wl.pass_start))
    bound = (fast.pass_bounds if engine == "fast" else pass_bounds)(wl, s.cost, system)
    mix = fast.rule_mix(wl, system.precision.t1, system.precision.t2, None) if engine == "fast" else None
    return dec, tl, bound, mix


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
