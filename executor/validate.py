"""Simulation against measurement: the same trace, configuration and decisions, simulated
with this machine's calibrated profile and replayed for real; the per-token error is
the simulator's fidelity on this machine.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from hobbit.executor.calibrate import ROUNDS, SAMPLES, calibrate, pick
from hobbit.executor.config import ValidateConfig
from hobbit.executor.replay import Replayer
from hobbit.executor.setup import pinned, prepare
from hobbit.executor.weights import HostStore, first_layers
from hobbit.sim.config import ConfigError, HardwareConfig, ModelConfig, ProfileConfig, SystemConfig
from hobbit.sim.events import Schedule, build, parse_window, simulated
from hobbit.sim.policies.base import HIGH, LOW
from hobbit.sim.results import Results, summarise
from hobbit.sim.run import simulate
from hobbit.sim.sizing import CacheSizing
from hobbit.sim.workload import build_workload
from hobbit.traces.io import Trace


def device_memory_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).total_memory)
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def profile_hardware(profile: ProfileConfig, device: torch.device) -> HardwareConfig:
    """A hardware config whose costs are the measured profile."""
    return HardwareConfig(
        name=f"calibrated-{profile.device}",
        device_memory_bytes=device_memory_bytes(device),
        reserve_bytes=0,
        profile=profile,
        source=f"hobbit calibrate on {profile.device} for {profile.model}",
    )


def plan(
    trace: Trace, model: ModelConfig, hw: HardwareConfig, system: SystemConfig, engine: str = "fast"
) -> tuple[Results, Any]:
    """Simulate every request of ``trace`` (all timed) and build the workload a replay runs; (results, workload)."""
    res = simulate(trace, model, hw, system, np.random.default_rng(0), engine=engine, profile_share=0.0)
    p = system.prefetch
    return res, build_workload(trace, p.fallback, p.fallback_accuracy, p.max_depth, np.random.default_rng(0))


def run_pair(
    trace: Trace,
    model: ModelConfig,
    hw: HardwareConfig,
    system: SystemConfig,
    store: HostStore,
    engine: str = "fast",
    copy_cpu: int | None = None,
    replayers: list | None = None,
) -> tuple[Any, Any, Any]:
    """Simulate, then replay the very decisions the simulation made; (sim results, workload, measured timeline).
    ``replayers``: a list that receives the replayer, recording its schedule. The simulation sizes experts in the
    formats the store holds them in (``store_formats``)."""
    res, wl = plan(trace, model, hw, store_formats(system, store), engine)
    rep = Replayer(wl, res.decisions, store, copy_cpu, record=replayers is not None, **replay_rules(system))
    if replayers is not None:
        replayers.append(rep)
    return res, wl, rep.run()


def replay_rules(system: SystemConfig) -> dict[str, bool]:
    """The system's timing rules the replay runs as the simulator times them (``Replayer``'s knobs)."""
    return {
        "clear_queue": system.prefetch.clear_queue,
        "serial_copies": system.copy_stream == "compute",
        "write_back": system.write_back,
    }


def check_replayable(system: SystemConfig) -> None:
    """Refuse a system whose timing rules the replay does not run, before any work: its measured times would not be
    the simulated rules' (the replay runs every layer's dense part on the device)."""
    if system.cpu_layer_scope == "whole":
        raise ConfigError(
            f"system.cpu_layer_scope=whole: system={system.name} runs whole layers on the CPU, which the replay "
            f"executor does not (every dense part runs on the device), so a validation would compare unlike things "
            f"(fix: system.cpu_layer_scope=experts, or another system)"
        )


def store_formats(system: SystemConfig, store: HostStore) -> SystemConfig:
    """``system`` with the formats of ``store``'s experts: its high precision as the weights (16-bit kernels hold
    bf16), its low one as the low-precision copies."""
    high, low = store.kernels[HIGH].precision, store.kernels[LOW].precision
    weights = "bf16" if high in ("fp16", "bf16") else high
    return dataclasses.replace(system, weights=weights, precision=dataclasses.replace(system.precision, low=low))


PARTS = ("dense", "issue", "expert", "stall", "cpu_expert", "head")  # the work the cost model charges


def resident(hw: HardwareConfig) -> tuple[SystemConfig, HardwareConfig]:
    """The system and machine of the loop-overhead replays: every expert resident (static placement, no copies)."""
    system = SystemConfig(name="resident", placement="static", n_cpu_moe=0)
    system = dataclasses.replace(
        system,
        precision=dataclasses.replace(system.precision, mode="high"),
        prefetch=dataclasses.replace(system.prefetch, kind="none"),
    )
    return system, dataclasses.replace(hw, device_memory_bytes=10**15)  # placement: everything fits


def overhead_sample(store: HostStore, hw: HardwareConfig, trace: Trace) -> float:
    """Seconds per layer the replay loop spends outside the parts the cost model charges (its bookkeeping,
    the time between the parts), from one recorded replay with every expert resident (static placement, no
    copies): per decode pass its latency less its recorded parts, per layer, the median over the passes.
    Measured directly, not as what is left of a model, so an error of the parts' model stays visible as
    the validation's error."""
    system, big = resident(hw)
    reps: list = []
    _, wl, tl = run_pair(trace, store.model, big, system, store, "plain", replayers=reps)
    L = wl.num_layers
    parts = np.zeros(len(wl.pass_start))
    for i, kind, start, end, _ in reps[0].work:
        if kind in PARTS:
            parts[i // L] += end - start
    decode = np.asarray(wl.pass_phase) == 1
    return float(np.median(((tl.pass_end - tl.pass_start) - parts)[decode])) / L


COPY_PROBE_FRACTION = 0.35  # the pools of the replay that measures the cost of a copy to the compute stream


def copy_sample(store: HostStore, hw: HardwareConfig, trace: Trace, copy_cpu: int | None = None) -> float | None:
    """One recorded replay of HOBBIT on ``trace`` with pools of ``COPY_PROBE_FRACTION`` of the experts: seconds
    of the compute stream per copy (issuing it and the cache's bookkeeping for it after its layer, less a
    layer's bookkeeping without copies, the loop's own, which ``overhead_sample`` counts); None without
    copies."""
    system = cache_system(SystemConfig(), store, store.model, COPY_PROBE_FRACTION)
    reps: list = []
    res, _, _ = run_pair(trace, store.model, hw, system, store, "plain", copy_cpu, reps)
    steps = res.decisions.steps
    copies = sum(len(s.loads) for s in steps)
    issue = sum(end - start for _, kind, start, end, _ in reps[0].work if kind == "issue")
    settle = {i: end - start for i, kind, start, end, _ in reps[0].work if kind == "settle"}
    quiet = [settle[i] for i, s in enumerate(steps) if not (s.loads or s.evicted or s.kept or s.cancel)]
    empty = float(np.median(quiet)) if quiet else 0.0
    return (issue + sum(settle.values()) - empty * len(steps)) / copies if copies else None


def slots(rounds: int, samples: int) -> list[int]:
    """How many interleaved samples follow each of ``rounds`` calibration rounds: ``samples`` in all,
    spread evenly, the last after the last round."""
    return [(r + 1) * samples // rounds - r * samples // rounds for r in range(rounds)]


def calibration_rounds(replays: int, rounds: int = ROUNDS) -> int:
    """``rounds``, and at least enough for ``pick``'s grouped minimum: three groups of as many rounds as there
    are replays (``ROUNDS`` at the default five), so a profile's minimum takes as many samples as a token's."""
    return max(rounds, 3 * replays)


def full_profile(
    store: HostStore,
    device: torch.device,
    pair: tuple[str, str],
    trace: Trace,
    progress=print,
    copy_cpu: int | None = None,
    statistic: str = "min",
    samples: int = SAMPLES,
    replay: Callable[[HardwareConfig], None] | None = None,
    rounds: int = ROUNDS,
) -> HardwareConfig:
    """Calibrate the parts, the loop overhead and the cost of a copy (on ``trace``'s first request) in
    alternating rounds: ``samples`` times, spread evenly over the calibration's rounds, a replay with
    every expert resident, a copy probe's replay and, when given, ``replay(rough)`` (validate's replays
    of the measured decisions) run between two rounds, so that all of them meet the machine in the
    states the calibration meets (a shared machine's speed can move between states seconds apart). A minimum is
    taken over ``samples`` samples (``pick``), as many as a replayed token's. The replays' decisions
    come from ``rough``, a one-round profile: without CPU misses they do not depend on the profile
    (``validate`` checks)."""
    trace = first_layers(trace, store.model.num_layers)
    first = _requests(trace, 0, 1)
    rough = profile_hardware(
        calibrate(store, device.type, lambda _: None, copy_cpu, statistic, rounds=1, group=0), device
    )
    system, big = resident(rough)
    run_pair(first, store.model, big, system, store, engine="fast")  # warm-up: first-call costs out of the way
    over: list[float] = []
    per_copy: list[float] = []
    after = slots(rounds, samples)

    def between(r: int) -> None:
        for _ in range(after[r]):
            over.append(overhead_sample(store, rough, first))
            c = copy_sample(store, rough, first, copy_cpu)
            if c is not None:
                per_copy.append(c)
            if replay is not None:
                replay(rough)

    prof = calibrate(store, device.type, progress, copy_cpu, statistic, rounds=rounds, group=samples, between=between)
    o = max(float(pick(np.array(over), statistic)), 0.0)
    progress(f"  replay loop overhead per layer: {o * 1e6:.1f} us")
    c = max(float(pick(np.array(per_copy), statistic)), 0.0) if per_copy else prof.copy_issue_s
    progress(
        f"  a copy in a replay costs the compute stream {c * 1e6:.1f} us (issuing it and the cache's "
        f"bookkeeping; {prof.copy_issue_s * 1e6:.1f} us to submit it alone)"
    )
    return profile_hardware(dataclasses.replace(prof, layer_overhead_s=o, copy_issue_s=c), device)


def cache_system(system: SystemConfig, store: HostStore, model: ModelConfig, fraction: float) -> SystemConfig:
    """``system`` with explicit pools holding ``fraction`` of all experts' high-precision bytes."""
    total = model.num_layers * model.num_experts * store.nbytes(HIGH)
    budget = fraction * total
    split = (
        1.0
        if system.precision.mode == "high"
        else (0.0 if system.precision.mode == "low" else system.cache.high_fraction)
    )
    high = int(budget * split) // store.nbytes(HIGH) * store.nbytes(HIGH)
    low = int(budget - high) // store.nbytes(LOW) * store.nbytes(LOW)
    return dataclasses.replace(system, cache=dataclasses.replace(system.cache, high_bytes=high, low_bytes=low))


def _prefill_ms(wl, tl) -> np.ndarray:
    """Per request, the latency of its prefill passes (ms)."""
    lat = (tl.pass_end - tl.pass_start) * 1e3
    out: dict[int, float] = {}
    for p, (req, phase) in enumerate(zip(wl.pass_request, wl.pass_phase)):
        if phase == 0:
            out[req] = out.get(req, 0.0) + float(lat[p])
    return np.array(list(out.values()))


def noise(wl, runs: list[Any]) -> float:
    """The replays' own spread: the per-decode-token MAPE between every two replays of the same decisions
    (each against the other), averaged over the pairs."""
    decode = np.asarray(wl.pass_phase) == 1
    lat = [(r.pass_end - r.pass_start)[decode] for r in runs]
    pairs = [np.mean(np.abs(a - b) / b) for i, a in enumerate(lat) for j, b in enumerate(lat) if i != j]
    return float(np.mean(pairs)) if pairs else 0.0


def errors(wl, sim_tl, real_tl) -> dict[str, Any]:
    """Per decode token: simulated vs measured latency (ms), absolute and signed; per request: prefill."""
    decode = np.asarray(wl.pass_phase) == 1
    sim = ((sim_tl.pass_end - sim_tl.pass_start) * 1e3)[decode]
    real = ((real_tl.pass_end - real_tl.pass_start) * 1e3)[decode]
    abs_err = np.abs(sim - real)
    sim_pf, real_pf = _prefill_ms(wl, sim_tl), _prefill_ms(wl, real_tl)
    return {
        "mape": float(np.mean(abs_err / real)),
        "bias": float(np.mean((sim - real) / real)),
        "p50_abs_ms": float(np.percentile(abs_err, 50)),
        "p95_abs_ms": float(np.percentile(abs_err, 95)),
        "tokens": int(decode.sum()),
        "mean_simulated_ms": float(sim.mean()),
        "mean_measured_ms": float(real.mean()),
        "prefill_mape": float(np.mean(np.abs(sim_pf - real_pf) / real_pf)) if len(real_pf) else None,
        "prefill_bias": float(np.mean((sim_pf - real_pf) / real_pf)) if len(real_pf) else None,
        "prefills": len(real_pf),
        "sim_ms": sim.tolist(),
        "measured_ms": real.tolist(),
        "prefill_sim_ms": sim_pf.tolist(),
        "prefill_measured_ms": real_pf.tolist(),
    }


def _requests(trace: Trace, first: int, n: int) -> Trace:
    ids = np.unique(trace.arrays.request_id)[first : first + n]
    return Trace(trace.meta, trace.arrays.take(np.flatnonzero(np.isin(trace.arrays.request_id, ids))), trace.path)


@dataclass
class Validation:
    """A simulation and the replays of its decisions; ``summary`` is the run's results.json."""

    sim: Results
    replay: Results
    errors: dict[str, Any]  # per decode token: simulated and measured ms, and their error
    summary: dict[str, Any]
    hardware: HardwareConfig  # the profile used (calibrated now or given)
    model: ModelConfig  # the reduced model replayed
    schedules: list[tuple[str, Schedule]] | None = None  # with cfg.timeline: simulated, then the median replay's


def same_decisions(a: Any, b: Any) -> bool:
    """Whether two decision logs replay identically (every step's copies, computations and evictions, the pools)."""
    return a.slots == b.slots and a.staging == b.staging and a.steps == b.steps


def validate(cfg: ValidateConfig, trace: Trace, hw: HardwareConfig | None = None, progress=print) -> Validation:
    """Calibrate (unless ``hw`` is a measured profile), simulate the trace's requests after a
    warm-up one, and replay the very decisions ``cfg.replays`` times; no I/O. Threads pinned
    as ``cfg.pin_threads`` says. When calibrating, the replays run between the calibration's
    rounds (``full_profile``), on the decisions of a one-round profile; the calibrated profile's
    decisions must be the same (they are unless misses are computed on the CPU, a choice made on
    the costs), or they are replayed again after the calibration."""
    if cfg.timeline:
        parse_window(cfg.timeline_tokens, 1)  # a bad range fails now, not after the calibration
    check_replayable(cfg.system)
    trace = first_layers(trace, cfg.layers)
    warm, measured = _requests(trace, 0, 1), _requests(trace, 1, cfg.requests)
    device, model, pair, store = prepare(cfg, cfg.cache_fraction)
    system = cache_system(cfg.system, store, model, cfg.cache_fraction)
    runs: list = []  # measured timelines of the same decisions; per token reduced as the calibration's rounds are
    reps: list | None = [] if cfg.timeline else None
    planned: list = []  # (results, workload) of the decisions the runs replay
    spent = [0.0]  # seconds of replays

    def replay(hw: HardwareConfig) -> None:
        if not planned:
            run_pair(warm, model, hw, system, store, cfg.engine, copy_cpu)  # warm-up request
            planned.append(plan(measured, model, hw, system, cfg.engine))
        res, wl = planned[0]
        t0 = time.perf_counter()
        rep = Replayer(wl, res.decisions, store, copy_cpu, record=cfg.timeline, **replay_rules(system))
        runs.append(rep.run())
        spent[0] += time.perf_counter() - t0
        if reps is not None:
            reps.append(rep)

    what = f"{measured.num_tokens} tokens ({cfg.requests} requests) {cfg.replays} times after a warm-up request"
    with pinned(cfg) as copy_cpu:
        if copy_cpu is not None:
            progress(f"compute pinned to core(s) {sorted(os.sched_getaffinity(0))}, the copy thread to core {copy_cpu}")
        if hw is None:
            progress(f"calibrating {model.name} on {device}, replaying {what} between its rounds")
            hw = full_profile(
                store,
                device,
                pair,
                warm,
                progress,
                copy_cpu,
                cfg.statistic,
                samples=cfg.replays,
                replay=replay,
                rounds=calibration_rounds(cfg.replays, cfg.rounds),
            )
        res, wl = plan(measured, model, hw, system, cfg.engine)
        if planned and not same_decisions(res.decisions, planned[0][0].decisions):
            progress(
                "the calibrated profile changes the decisions (misses computed on the CPU are a choice made on "
                "the costs): replaying them again"
            )
            runs.clear()
            planned.clear()
            if reps is not None:
                reps.clear()
        if not runs:
            progress(f"replaying {what}")
            run_pair(warm, model, hw, system, store, cfg.engine, copy_cpu)
            planned.append((res, wl))
            for _ in range(cfg.replays):
                replay(hw)
    spread = noise(wl, runs)
    schedules = _schedules(cfg, wl, res, runs, reps, system) if reps is not None else None
    real = _combine_runs(runs, cfg.statistic)
    replayed = summarise(
        measured, wl, res.decisions, real, model, hw, system, CacheSizing(**res.summary["cache"]), "replay", spent[0]
    )
    e = errors(wl, res.timeline, real)
    summary = _summary(cfg, e, spread, device, hw, model, system, replayed.summary["bytes_loaded"], real.link_busy_s)
    return Validation(res, replayed, e, summary, hw, model, schedules)


def _schedules(cfg: ValidateConfig, wl: Any, res: Results, runs: list, reps: list, system: SystemConfig) -> list:
    """The simulated schedule and the measured one of the replay whose decode time is the median, as it ran (before
    the runs are combined), over ``cfg.timeline_tokens``."""
    window = parse_window(cfg.timeline_tokens, len(wl.pass_start))
    order = np.argsort([float(np.sum(r.pass_end - r.pass_start)) for r in runs])
    k = int(order[len(order) // 2])
    assert res.workload is not None  # the simulation keeps the workload it timed
    return [
        ("simulated", simulated(res.workload, res.decisions, res.cost, system.demand_first, window)),
        (
            f"measured (replay {k + 1} of {len(runs)}, the median)",
            build(wl, res.decisions, runs[k], reps[k].work, window, reps[k].copy_times),
        ),
    ]


def _summary(
    cfg: ValidateConfig,
    e: dict,
    spread: float,
    device: torch.device,
    hw: HardwareConfig,
    model: ModelConfig,
    system: SystemConfig,
    bytes_loaded: float,
    link_busy_s: float,
) -> dict[str, Any]:
    """validation.json's summary: the errors, the replays' own noise, the device, the profile and the copies'
    measured bandwidth (``bytes_loaded`` over the link's busy seconds)."""
    v = {
        k: e[k]
        for k in (
            "mape",
            "bias",
            "p50_abs_ms",
            "p95_abs_ms",
            "tokens",
            "mean_simulated_ms",
            "mean_measured_ms",
            "prefill_mape",
            "prefill_bias",
            "prefills",
        )
    }
    v["noise_mape"] = spread
    v["replays"], v["statistic"] = cfg.replays, cfg.statistic
    v["device"] = f"{device.type}" + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else "")
    assert hw.profile is not None  # calibrated above, or a measured profile given
    return {
        "validation": v,
        "model": model.name,
        "system": system.name,
        "hardware": hw.name,
        "profile": dataclasses.asdict(hw.profile),
        "precision_pair": cfg.precision_pair,
        "copies_measured_gbps": bytes_loaded / max(link_busy_s, 1e-12) / 1e9,
    }


def _combine_runs(runs: list[Any], statistic: str) -> Any:
    """Per pass, the runs' measured latencies reduced by ``statistic`` (a disturbance of one run drops
    out); the rest of the record from the first run."""
    lat = pick(np.stack([r.pass_end - r.pass_start for r in runs]), statistic, axis=0)
    first = runs[0]
    first.pass_end = first.pass_start + lat
    return first
