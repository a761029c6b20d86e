"""Results of a run: the documented ``results.json`` keys and the per-pass / per-layer tables.

results.json keys (times in ms):
- ``tokens``: {total, prefill, decode}; ``requests``
- ``decode_ms_per_token``: {mean, p50, p95} over decode passes (one token each)
- ``prefill_ms_per_request``: {mean, p50, p95}
- ``precision_rule_mix``: {high, low, skip}: the T1/T2 rule over every selection of the trace, cache aside
- ``served_mix``: shares of expert uses served as {high_hit, low_hit, high_load, low_load, skipped, cpu}
- ``hit_rate``: uses served from weights already resident when their layer's experts could start (no wait for a
  copy) / uses not skipped; a use whose prefetch was still in flight is not a hit (``prefetch.late``), though
  ``served_mix`` counts it with the hits (high_hit, low_hit: served from a copy the cache held, landed or not)
- ``quality_proxy``: {low_mass, skip_mass, degraded_mass}: shares of the gate mass (weights normalised per
  token) served in low precision or skipped, cache hits included (the quality issue measures the real cost)
- ``prefetch``: copies ahead of their use, counted apart: ``issued`` (prefetches, each fetched for a layer),
  ``used`` (served a use of the layer it was fetched for), ``late`` (uses that waited for a copy ahead still in
  flight, when their layer's experts could start), ``wasted`` (copied, but never used by the layer it was
  fetched for: issued - used - cancelled), ``cancelled`` (dropped before they started), ``accuracy`` = used /
  issued, and ``behind_cpu`` (copies behind a CPU-served miss, for the expert's next use; not in ``issued``)
- ``bytes_loaded`` (copies that ran; with ``system.write_back`` the copies back too), ``evictions``,
  ``link_busy_fraction`` (link busy time / run time)
- ``stall_ms_per_token``: compute-stream time waiting for weights, per decode token
- ``bound``: {decode_ms_per_token, prefill_ms_per_request} (means): the least time this system's rules could
  take on this trace and machine, every expert already where it runs (``sim.bound``); ``gap_to_bound``: decode
  latency over its bound (1.0: nothing left to gain by caching, prefetching or copying faster)
- ``memory``: where the bytes go (``sim.memory``): the weights' format, the device's memory, the resident weights,
  the KV cache at the run's context, the reserve, what is free for experts, one expert's bytes at high and low
  precision, the host's RAM and the experts it holds, ``ram_share`` (of those, the share in RAM; the rest is read
  from the SSD), and notes on what was derived or assumed
- ``placement`` (llama.cpp's static placement): ``cpu_moe_layers``, the MoE layers whose experts stayed on the CPU;
  ``flags`` (a system given ``system.flags``): the runtime, the flags given and those accepted but not modelled
- ``cache``: pool slots and bytes; ``layers_simulated``; ``model``, ``hardware``, ``system`` (names) and
  ``system_config`` (every knob of the system); ``engine``, ``wall_s``
- ``windows`` (a run over a trace read a window at a time, ``sim.windowed``): {tokens, count}, the window's tokens
  and the windows read
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from hobbit.sim.config import HardwareConfig, ModelConfig, SystemConfig
from hobbit.sim.decisions import HIGH_HIT, LOW_HIT, SERVED_NAMES, SKIPPED, Decisions
from hobbit.sim.flags import apply_flags
from hobbit.sim.memory import Footprint, footprint
from hobbit.sim.policies.precision import hobbit_classes, rule_mix
from hobbit.sim.timeline import Timeline
from hobbit.sim.workload import Workload
from hobbit.traces.io import Trace

if TYPE_CHECKING:  # a run's tables become DataFrames when read (``Results.passes``); writing them needs no DataFrame
    import pandas as pd

Columns = dict[str, np.ndarray]


@dataclass
class Results:
    """``summary`` is results.json; ``passes`` and ``layers`` are the Parquet tables, as DataFrames built on first
    use from ``pass_columns`` and ``layer_columns`` (what ``hobbit.plumbing.results_io`` writes, through pyarrow)."""

    summary: dict[str, Any]
    pass_columns: Columns
    layer_columns: Columns
    decisions: Decisions
    timeline: Timeline
    workload: Workload | None = None  # what the run replayed and on what costs (for its schedule, ``sim.events``)
    cost: Any = None
    _frames: dict[str, pd.DataFrame] = field(default_factory=dict, init=False, repr=False, compare=False)

    def _frame(self, name: str, columns: Columns) -> pd.DataFrame:
        if name not in self._frames:
            import pandas as pd

            self._frames[name] = pd.DataFrame(columns)
        return self._frames[name]

    @property
    def passes(self) -> pd.DataFrame:
        """One row per forward pass (passes.parquet)."""
        return self._frame("passes", self.pass_columns)

    @property
    def layers(self) -> pd.DataFrame:
        """One row per simulated layer (layers.parquet)."""
        return self._frame("layers", self.layer_columns)

    @property
    def decode_ms_per_token(self) -> float | None:
        """Mean decode latency per token (ms); None for a trace without decode."""
        return self.summary["decode_ms_per_token"]["mean"]

    @property
    def prefill_ms_per_request(self) -> float | None:
        """Mean prefill latency per request (ms); None for a decode-only trace."""
        return self.summary["prefill_ms_per_request"]["mean"]

    @property
    def hit_rate(self) -> float:
        """Expert uses served from weights resident when their layer's experts could start / uses not skipped."""
        return self.summary["hit_rate"]


def _stats(ms: np.ndarray) -> dict[str, float | None]:
    if ms.size == 0:
        return {"mean": None, "p50": None, "p95": None}
    return {"mean": float(ms.mean()), "p50": float(np.percentile(ms, 50)), "p95": float(np.percentile(ms, 95))}


def _mean(ms: np.ndarray) -> float | None:
    return float(ms.mean()) if len(ms) and not np.isnan(ms).any() else None


def _proxy(mass: np.ndarray) -> dict[str, float]:
    """Share of the gate mass (weights normalised per token) served in low precision or skipped."""
    total = float(mass.sum()) or 1.0
    low, skip = float(mass[1]) / total, float(mass[2]) / total
    return {"low_mass": low, "skip_mass": skip, "degraded_mass": low + skip}


def _per_request(request: np.ndarray, rows: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``values`` of the ``rows`` summed per request, in request order: a prefill in several chunks is one prompt."""
    _, which = np.unique(request[rows], return_inverse=True)
    return np.bincount(which, weights=values[rows]) if len(which) else values[rows]


def pass_table(wl: Workload, tl: Timeline, bound: np.ndarray | None = None) -> Columns:
    stall = tl.pass_stall(wl.num_layers)
    pa = wl.pass_arrays()
    return {
        "request_id": pa.request.copy(),  # the workload's own arrays stay unwritten
        "phase": pa.phase.copy(),
        "tokens": pa.end - pa.start,
        "context": pa.context.copy(),
        "start_ms": np.asarray(tl.pass_start, np.float64) * 1e3,
        "latency_ms": np.asarray(tl.pass_end - tl.pass_start, np.float64) * 1e3,
        "stall_ms": np.asarray(stall, np.float64) * 1e3,
        "bound_ms": np.asarray(bound if bound is not None else np.full(len(wl.pass_start), np.nan), np.float64) * 1e3,
    }


def layer_table(num_layers: int, phase: np.ndarray, dec: Decisions, tl: Timeline, layers: tuple[int, ...]) -> Columns:
    """passes.parquet's per-layer counterpart; ``phase``: each pass's (``pass_table``'s column)."""
    decode = np.asarray(phase) == 1
    total, in_decode = tl.layer_stall(num_layers, decode)
    loads, prefetches = dec.loads_per_layer(num_layers)
    n_dec = max(int(decode.sum()), 1)
    return {
        "layer": np.asarray(list(layers), np.int64),
        "stall_ms_total": total * 1e3,
        "decode_stall_ms_per_token": in_decode * 1e3 / n_dec,
        "demand_loads": loads,
        "prefetches_issued": prefetches,
    }


def hit_rate(dec: Decisions, tl: Timeline) -> float:
    """Uses served from weights resident when their layer's experts could start / uses not skipped (results.json)."""
    served = dec.served.astype(float)
    not_skipped = served.sum() - served[SKIPPED]
    return float((served[HIGH_HIT] + served[LOW_HIT] - tl.late) / not_skipped) if not_skipped else 0.0


def prefetch_counts(dec: Decisions, tl: Timeline) -> dict[str, Any]:
    """results.json's ``prefetch``: the copies ahead of their use, counted apart (the module's docstring)."""
    issued = dec.prefetch_issued - dec.copies_behind
    return {
        "issued": issued,
        "used": dec.prefetch_used,
        "late": tl.late,
        "wasted": issued - dec.prefetch_used - tl.cancelled,
        "cancelled": tl.cancelled,
        "accuracy": dec.prefetch_used / issued if issued else None,
        "behind_cpu": dec.copies_behind,
    }


def summarise(
    trace: Trace,
    wl: Workload,
    dec: Decisions,
    tl: Timeline,
    model: ModelConfig,
    hw: HardwareConfig,
    system: SystemConfig,
    sizing: Any,
    engine: str,
    wall_s: float,
    bound: np.ndarray | None = None,
    mix: dict[str, float] | None = None,
    passes: Columns | None = None,
) -> Results:
    """``mix``: the rule mix of HOBBIT's classes at the system's T1 and T2, when already counted. ``passes``: the
    per-pass table when the run laid it out itself (``pass_table``'s columns; a run over a trace read a window at a
    time, whose ``wl`` is one window: ``sim.windowed``)."""
    passes = passes if passes is not None else pass_table(wl, tl, bound)
    tokens, latency, phase = passes["tokens"], passes["latency_ms"], passes["phase"]
    dec_rows, pre_rows = phase == 1, phase == 0
    dec_tokens = tokens[dec_rows]
    served = dec.served.astype(float)
    uses = served.sum()
    makespan = tl.makespan
    summary = {
        "tokens": {"total": int(tokens.sum()), "prefill": int(tokens[pre_rows].sum()), "decode": int(dec_tokens.sum())},
        "requests": len(np.unique(passes["request_id"])),
        "decode_ms_per_token": _stats(latency[dec_rows] / np.clip(dec_tokens, 1, None)),
        "prefill_ms_per_request": _stats(_per_request(passes["request_id"], pre_rows, latency)),
        "precision_rule_mix": mix
        if mix is not None
        else rule_mix(hobbit_classes(wl.weights, system.precision.t1, system.precision.t2)),
        "served_mix": {n: float(v / uses) if uses else 0.0 for n, v in zip(SERVED_NAMES, served)},
        "hit_rate": hit_rate(dec, tl),
        "bound": {
            "decode_ms_per_token": _mean(passes["bound_ms"][dec_rows] / np.clip(dec_tokens, 1, None)),
            "prefill_ms_per_request": _mean(_per_request(passes["request_id"], pre_rows, passes["bound_ms"])),
        },
        "quality_proxy": _proxy(dec.mass),
        "prefetch": prefetch_counts(dec, tl),
        "bytes_loaded": int(tl.bytes_moved),
        "evictions": int(dec.evictions),
        "link_busy_fraction": float(tl.link_busy_s / makespan) if makespan else 0.0,
        "stall_ms_per_token": float(np.nansum(passes["stall_ms"][dec_rows]) / max(dec_tokens.sum(), 1)),
        "cache": dataclasses.asdict(sizing),
        "layers_simulated": {"recorded": len(trace.meta.layers), "model": model.num_layers},
        "model": model.name,
        "hardware": hw.name,
        "system": system.name,
        "system_config": dataclasses.asdict(system),
        "engine": engine,
        "wall_s": round(wall_s, 3),
        "simulated_s": makespan,
    }
    dm, bm = summary["decode_ms_per_token"]["mean"], summary["bound"]["decode_ms_per_token"]
    summary["gap_to_bound"] = dm / bm if dm is not None and bm else None
    return Results(summary, passes, layer_table(wl.num_layers, phase, dec, tl, trace.meta.layers), dec, tl)


@dataclass(frozen=True)
class Account:
    """What a finished run takes and what bounds it, as a user would be told (``account``)."""

    footprint: Footprint
    bound_by: str


def account(summary: dict, system: SystemConfig, model: ModelConfig, hw: HardwareConfig) -> Account:
    """The memory the run whose results.json is ``summary`` takes, and what its decode time goes to in plain words (the
    SSD, the link, the CPU's memory or the GPU). ``system``: as configured (its flags are applied here)."""
    applied = apply_flags(system, model.num_layers, model.dense_layers, model.num_experts).system
    fp = footprint(summary, applied, hw, model.num_layers, model.num_experts)
    return Account(fp, bound_by(summary, applied, hw, model.num_layers, model.num_experts, fp.ssd_share))


def bound_by(summary: dict, system: SystemConfig, hw: HardwareConfig, layers: int, experts: int, ssd: float) -> str:
    """What the decode time of the run whose results.json is ``summary`` goes to (``system``: its flags applied;
    ``ssd``: the share of host-side expert reads from the SSD, ``Footprint.ssd_share``)."""
    s, L, E = summary, layers, experts
    ms = s["decode_ms_per_token"]["mean"]
    slots = s["cache"]["high_slots"] + s["cache"]["low_slots"]
    cpu_layers = len(s.get("placement", {}).get("cpu_moe_layers", [])) if system.placement == "static" else 0
    if system.placement == "static":
        off_gpu = cpu_layers > 0
    elif system.gpu_experts and system.cpu_misses == "always":
        off_gpu = system.gpu_experts < E
    else:
        off_gpu = slots < L * E
    if not off_gpu:
        return "GPU-bound: every expert on the GPU"
    if hw.expert_source == "ssd":
        return f"SSD-bound: experts off the GPU are read from the SSD ({hw.ssd_gbps:g} GB/s)"
    if ssd > 0.01:
        return (
            f"SSD-bound: {ssd:.0%} of the host-side experts' reads page in from the SSD "
            f"({hw.ssd_fault_gbps or hw.ssd_gbps:g} GB/s)"
        )
    if cpu_layers:
        return f"CPU-memory-bound: the experts of {cpu_layers} of {L} layers run on the CPU ({hw.cpu_mem_gbps:g} GB/s)"
    if 0 < system.gpu_experts < E and system.cpu_misses == "always":
        return (
            f"CPU-memory-bound: {E - min(system.gpu_experts, E)} of {E} experts per layer run on the CPU "
            f"({hw.cpu_mem_gbps:g} GB/s)"
        )
    if system.cpu_misses != "never":
        held = f"{slots // L} of {E} experts per layer" if slots >= L else f"{slots} of {L * E} experts"
        return f"CPU-memory-bound: the GPU's cache holds {held}; misses run on the CPU ({hw.cpu_mem_gbps:g} GB/s)"
    stall = s["stall_ms_per_token"] / ms if ms else 0.0
    if stall > 0.25 or s["link_busy_fraction"] > 0.5:
        return (
            f"link-bound: expert copies over the link ({hw.link_gbps:g} GB/s) keep it busy "
            f"{s['link_busy_fraction']:.0%} of the time; {stall:.0%} of each token waits for them"
        )
    return f"GPU-bound: {s['hit_rate']:.0%} of expert uses served from GPU memory without waiting for a copy"
