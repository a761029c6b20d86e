"""The cache's size: each pool's bytes and slots from the device memory a run leaves free (``size_cache``), and a
per-layer cache's split of them among the trace's layers (``cache.per_layer``: ``cache_regions``, ``layer_slots``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from hobbit.sim.config import CacheBase, ConfigError, HardwareConfig, ModelConfig, SystemConfig
from hobbit.sim.memory import MemoryFit, fit, gib, pools
from hobbit.sim.policies.base import HIGH, LOW


@dataclass(frozen=True)
class CacheSizing:
    """Pool sizes of a run, and the device memory they came from."""

    high_slots: int
    low_slots: int
    high_bytes: int
    low_bytes: int
    free_bytes: int  # device memory left for experts after resident weights, KV cache and reserve
    derived: str = ""  # what was derived from the knobs (one pool's size from the other's)


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


def pinned_per_layer(system: SystemConfig, sizing: CacheSizing, num_layers: int) -> int:
    """Slots per layer ``cache.layer_pinned`` takes from the high pool for the hot set."""
    return int(system.cache.layer_pinned * (sizing.high_slots // max(num_layers, 1)))
