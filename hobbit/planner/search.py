"""``hobbit plan``: for one model on one machine, each runtime's best settings and its predicted speed, ranked.

``plan(model, hardware, ...)`` (and the command) searches each runtime's own setting over what fits the machine's
memory (``sim.memory``'s rules, the ones every run checks): llama.cpp's and ik_llama.cpp's GPU/CPU split of the
experts (``--n-cpu-moe``, ``-ot``), KTransformers' ``--kt-num-gpu-experts``, llama.cpp's expert cache (PR #27861)
``--moe-expert-cache``, and HOBBIT's T1/T2, cache split and cache weights (``hobbit tune``'s search) at a range of
cache sizes. Each setting is predicted (``hobbit.planner.predict.predict_config``) on the user's trace, or on synthetic routing
at hobbit/catalogue/data/routing.yaml's ``typical`` locality; the chosen setting of each runtime (its fastest decode) is predicted
again at the ``low`` and ``high`` localities, the range a user without a trace should expect. Runtimes rank by
predicted decode speed; each row says what bounds it (the link, the CPU's memory bandwidth, the SSD, the GPU) or
why it cannot run. Writes plan.md, plan.json and plan.png/.svg (tok/s against the GPU memory a setting takes, one
line per runtime, the chosen points marked).
"""

from __future__ import annotations

import dataclasses
import difflib
import tempfile
import time
from pathlib import Path
from typing import Any

from tqdm import tqdm

from hobbit.api import configure, trace_of
from hobbit.catalogue.machine import hardware_config
from hobbit.planner.config import MACHINE_KEYS, Plan, PlanConfig, Point, ctx_tokens
from hobbit.planner.predict import DECODE_TOKENS, locality_knobs, predict_config, synthetic_trace
from hobbit.planner.report import write_plan
from hobbit.planner.settings import RUNTIMES, Runtime, free_for_experts, kv_type, settings
from hobbit.plumbing.glue import compose, load_hardware
from hobbit.plumbing.phases import require
from hobbit.sim.checks import check_topology
from hobbit.sim.config import ConfigError, HardwareConfig, ModelConfig, SimConfig, SystemConfig
from hobbit.sim.formats import FORMATS, weights
from hobbit.sim.memory import GiB
from hobbit.sim.results import account
from hobbit.sim.tune import TuneConfig, best_trials, open_study, suggest, tune
from hobbit.sim.walk_copies import GENERAL

LOCALITIES = (
    "low",
    "high",
)  # hobbit/catalogue/data/routing.yaml's presets a chosen setting is predicted again at: its range


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


def _check_weights(cfg: PlanConfig, model: ModelConfig) -> None:
    """The file type asked for, before any runtime is tried: a failure there is that runtime's row, not the user's
    knob."""
    try:
        weights(model, cfg.weights)
    except ConfigError as exc:
        near = difflib.get_close_matches(cfg.weights.lower(), [f.lower() for f in FORMATS], n=1)
        hint = f"did you mean {near[0]}? " if near else ""
        raise ConfigError(f"weights={cfg.weights}: {exc} (fix: {hint}a GGUF type such as q4_k_m, or bpw<N>)") from None


def _routing(cfg: PlanConfig, model: ModelConfig, notes: list[str]) -> Path:
    """The trace the settings are predicted on: the user's, checked, or synthetic routing at typical locality."""
    if cfg.trace is not None:
        trace_path = Path(cfg.trace)
        trace = trace_of(trace_path, cfg.window_tokens)
        require(trace, "plan", "it ranks runtimes by decode speed", decode=True)
        check_topology(trace, model)
        notes.append(f"routing from {trace_path}")
        return trace_path
    notes.append(
        "routing synthetic, at hobbit/catalogue/data/routing.yaml's typical locality; ranges span its low and high "
        "presets"
    )
    return synthetic_trace(model, cfg.prompt, DECODE_TOKENS, locality_knobs("typical"), cfg.seed)


def _base(name: str, cfg: PlanConfig, hw: HardwareConfig, trace_path: Path, work: Path, notes: list[str]) -> SimConfig:
    """The run a runtime's settings vary: its preset at the plan's file type, context and seed (HOBBIT with mmap where
    its experts do not fit in RAM, and tuned on the plan's trace); raises ConfigError where it cannot run."""
    rt, model, ctx = RUNTIMES[name], cfg.model, ctx_tokens(cfg)
    sim = configure(model, hw, rt.preset, context=cfg.context, seed=cfg.seed)
    base = sim.system
    if rt.grammar and base.weights != "fp16":
        base = dataclasses.replace(base, weights=cfg.weights)
    if name == "hobbit":  # built on llama.cpp: what RAM cannot hold can stay in the mmapped file
        try:
            free_for_experts(model, hw, base, ctx)
        except ConfigError:
            base = dataclasses.replace(base, host_load="mmap")
            free_for_experts(model, hw, base, ctx)
            notes.append("HOBBIT: its experts do not fit in RAM; run with mmap (system.host_load=mmap)")
        if cfg.tune_trials > 0:  # it fits (checked above) before it is tuned
            base, note = _tuned(trace_path, base, cfg, model, hw, work)
            notes.append(note)
    # a user's trace file is read a window at a time when asked; the synthetic routing is short
    return dataclasses.replace(sim, system=base, window_tokens=cfg.window_tokens if cfg.trace else 0)


def _predict(todo: list[tuple[str, Point]], bases: dict[str, SimConfig], cfg: PlanConfig, hw: HardwareConfig,
             trace_path: Path, progress: bool) -> list[Point]:  # fmt: skip
    """Each setting predicted on the plan's trace, with what it takes and what bounds it (the simulator's account)."""
    points = []
    for name, p in tqdm(todo, desc="plan", unit="setting", disable=None if progress else True):
        try:
            run = dataclasses.replace(bases[name], system=p.system)
            p.prediction = predict_config(run, prompt=cfg.prompt, trace=trace_path, walks=GENERAL)
            p.account = account(p.prediction.summary, p.system, cfg.model, hw)
        except ConfigError as exc:
            p.error = str(exc)
        points.append(p)
    return points


def _rank(names: list[str], points: list[Point], failed: dict[str, str], bases: dict[str, SimConfig],
          cfg: PlanConfig, hw: HardwareConfig) -> tuple[list[dict[str, Any]], dict[str, Point]]:  # fmt: skip
    """Each runtime's fastest setting (predicted again at the low and high localities without a user's trace), the
    rows ranked by decode speed, those that cannot run last with why."""
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
                run = dataclasses.replace(bases[name], system=best.system)
                setattr(best, loc, predict_config(run, prompt=cfg.prompt, locality=loc, walks=GENERAL))
        rows.append(_row(name, rt, best, hw))
    fits = sorted((r for r in rows if r["fits"]), key=lambda r: -r["decode_tok_s"])
    rows = fits + [r for r in rows if not r["fits"]]
    for i, r in enumerate(rows, 1):
        r["rank"] = i if r["fits"] else None
        if r["fits"] and i > 1:
            ratio = fits[0]["decode_tok_s"] / r["decode_tok_s"]
            than = f"{ratio:.2f}x slower than" if ratio >= 1.005 else "as fast as"
            r["why"] = f"{than} {fits[0]['label']}; " + r["why"]
    return rows, chosen


def plan(
    cfg: PlanConfig, out: Path | None = None, progress: bool = True, named: list[str] | tuple[str, ...] = ()
) -> Plan:
    """Every runtime's settings on ``cfg``'s model and machine, predicted; each runtime's best chosen and ranked by
    decode speed; plan.md, plan.json and plan.png written to ``out`` when given (HOBBIT's tuning study resumes
    there). ``named``: the hardware settings the caller gave (``machine``)."""
    t0 = time.perf_counter()
    model, hw = cfg.model, machine(cfg, named)
    names, notes = chosen_runtimes(cfg, model)
    if kv_type(cfg, model, hw) != "f16":
        kv_gib = model.kv_bytes_per_token * ctx_tokens(cfg) / GiB
        notes.append(f"the llama.cpp family's KV cache at q8_0 (-ctk/-ctv; at f16 it would take {kv_gib:.1f} GiB)")
    work = out if out is not None else Path(tempfile.mkdtemp(prefix="hobbit-plan-"))
    _check_weights(cfg, model)
    trace_path = _routing(cfg, model, notes)
    bases: dict[str, SimConfig] = {}
    failed: dict[str, str] = {}
    todo: list[tuple[str, Point]] = []
    for name in names:
        try:
            bases[name] = _base(name, cfg, hw, trace_path, work, notes)
            todo += [(name, p) for p in settings(RUNTIMES[name], bases[name].system, model, hw, cfg)]
        except ConfigError as exc:
            failed[name] = str(exc)
    points = _predict(todo, bases, cfg, hw, trace_path, progress)
    rows, chosen = _rank(names, points, failed, bases, cfg, hw)
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


def _row(name: str, rt: Runtime, p: Point, hw: HardwareConfig) -> dict[str, Any]:
    assert p.prediction is not None and p.account is not None
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
        "why": p.account.bound_by + _quality(p),
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


__all__ = ["RUNTIMES", "Plan", "PlanConfig", "Point", "plan", "plan_for"]
