"""``hobbit reproduce``: HOBBIT's evaluation (arXiv:2411.01433, Table 2) as one command.

The paper's grid: three set-ups (an RTX 4090 with fp16 + int4 experts against MoE-Offloading
and MoE-Infinity; the same card with CPU help, HOBBIT's CPU mode against llama.cpp and
Fiddler; a Jetson AGX Orin with int8 + int2 experts against llama.cpp and MoE-Infinity) x
two models (Mixtral-8x7B, Phi-MoE) x four workloads (16 or 128 prompt tokens, 32 or 128 new
tokens). Workloads are captured from the bundled tiny models (same topologies as the two
models), prompts cut from their held-out text to the exact length, generation forced to the
exact length (no stop at end of text), as the paper fixes both. Each system replays each
workload; what baselines learn offline comes from the first requests, held apart
(``sim.profile_share``), and every system is timed on the same remaining requests.

Averaged as the paper reports them (its text gives averages over the workloads; the kind of
mean is not stated): the arithmetic mean over workloads of the decode speed-up (baseline
ms/token / HOBBIT's) and of the prefill reduction (1 - HOBBIT's prefill latency / baseline's).
Also: the dynamic-loading-only ablation (HOBBIT's precision rule added to on-demand loading;
the paper reports 1.19-1.57x) and the precision mix HOBBIT served.

``trace=PATH model=NAME`` runs the grid on one trace instead (one workload; a decode-only
trace gives n/a for prefill). Captures and finished simulations are kept in the run
directory, so an interrupted run resumes.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from joblib import Parallel, delayed
from tqdm import tqdm

from hobbit.analysis.reproduce_plot import plot_reproduce
from hobbit.api import configure, simulate_config
from hobbit.plumbing.results_io import decode_text
from hobbit.plumbing.schedule_files import write_sim_timeline
from hobbit.sim.config import ConfigError, ModelConfig
from hobbit.sim.walk_copies import GENERAL
from hobbit.traces.capture import CaptureConfig, capture
from hobbit.traces.io import atomic_write_json, atomic_write_text, read_meta, read_trace
from hobbit.traces.tiny import bundled_heldout_text, bundled_model_dir, bundled_phimoe_dir

# Table 2 and §5-6 of the paper (docs/references.md): (set-up, baseline, model) -> (decode speed-up,
# prefill latency reduction or None where the paper gives none)
PAPER: dict[tuple[str, str, str], tuple[float, float | None]] = {
    ("4090", "moe-offloading", "mixtral-8x7b"): (3.21, 0.51),
    ("4090", "moe-offloading", "phi-3.5-moe"): (3.29, 0.54),
    ("4090", "moe-infinity", "mixtral-8x7b"): (2.30, None),
    ("4090", "moe-infinity", "phi-3.5-moe"): (3.92, None),
    ("4090+CPU", "llama-cpp-2024", "mixtral-8x7b"): (1.31, None),
    ("4090+CPU", "llama-cpp-2024", "phi-3.5-moe"): (1.42, None),
    ("4090+CPU", "fiddler", "mixtral-8x7b"): (0.99, None),
    ("4090+CPU", "fiddler", "phi-3.5-moe"): (1.46, None),
    ("Orin", "llama-cpp-2024", "mixtral-8x7b"): (13.0, 0.79),
    ("Orin", "llama-cpp-2024", "phi-3.5-moe"): (18.9, 0.80),
    ("Orin", "moe-infinity", "mixtral-8x7b"): (3.64, None),
    ("Orin", "moe-infinity", "phi-3.5-moe"): (9.93, None),
}
PAPER_ABLATION = (1.19, 1.57)  # dynamic loading only: decode speed-up over the same system without it
PAPER_MIX = {"mixtral-8x7b": {"high": 0.67, "low": 0.30, "skip": 0.03}}  # §3.2, T1 = 0.6, T2 = 0.9


@dataclass(frozen=True)
class Setup:
    name: str
    hardware: str
    hobbit: str  # the HOBBIT system of this set-up
    baselines: tuple[str, ...]
    gpu_only: bool


# The paper compares every system at the precision pair of the device (§3.2, §5), with 16-bit weights: fp16 experts
# with int4 copies on the 4090, int8 with int2 on the Orin (HOBBIT is built on llama.cpp: Q8_0 and Q2_K), whatever
# format each system's own preset runs (llama.cpp's is Q4_K_M).
PAIRS = {
    "rtx4090-pcie4": ("system.weights=fp16", "system.precision.low=int4"),
    "jetson-agx-orin": ("system.weights=fp16", "system.precision.high=q8_0", "system.precision.low=q2_k"),
}
# llama.cpp as it ran when the paper compared with it (late 2024: -ngl, whole layers on the CPU), not as it runs now
SETUPS = (
    Setup("4090", "rtx4090-pcie4", "hobbit", ("moe-offloading", "moe-infinity"), True),
    Setup("4090+CPU", "rtx4090-pcie4", "hobbit-cpu", ("llama-cpp-2024", "fiddler"), False),
    Setup("Orin", "jetson-agx-orin", "hobbit", ("llama-cpp-2024", "moe-infinity"), True),
)
ABLATION = ("4090", "rtx4090-pcie4", "on-demand", "hobbit-dynamic-loading")
# The paper does not say whether a cached low-precision copy serves an expert the rule would load at high precision
# (system.precision.serve_any_cached): every HOBBIT run is repeated under the reading that is not the default, and
# each row reports both, so a reader sees how much of a cell rests on it.
OTHER_READING = "+any-cached"  # a HOBBIT run's system name with this suffix: serve_any_cached flipped
BUNDLED = {"mixtral-8x7b": bundled_model_dir, "phi-3.5-moe": bundled_phimoe_dir}  # model -> its tiny checkpoint


@dataclass(frozen=True)
class ReproduceConfig:
    """Knobs of ``hobbit reproduce``."""

    LIMITS: ClassVar[dict[str, str]] = {
        "prompts": ">=2",
        "prompt_tokens": ">=1",
        "new_tokens": ">=2",
        "batch_size": ">=1",
        "jobs": ">=1",
        "tolerance": ">0",
    }
    PATHS: ClassVar[dict[str, str]] = {"out_dir": "outdir", "trace": "in"}

    out_dir: str = "outputs/reproduce"
    """Where the captured workloads, finished runs and the table go (the command's run directory); an interrupted
    run given the same out_dir resumes."""
    trace: str | None = None
    """One schema-v1 trace replayed instead of the captured workloads (needs ``model``); null: the workloads
    captured from the bundled models."""
    model: ModelConfig | None = None
    """With ``trace``: the model whose size the trace is replayed at (config group ``model=NAME``, conf/model/)."""
    models: list[str] = field(default_factory=lambda: ["mixtral-8x7b", "phi-3.5-moe"])
    """The models whose workloads are captured, each from its bundled tiny checkpoint of the same topology:
    mixtral-8x7b | phi-3.5-moe."""
    prompts: int = 16
    """Prompts per workload (the paper: 60 Alpaca prompts); the first quarter is held apart for what systems learn
    offline, and not timed."""
    prompt_tokens: list[int] = field(default_factory=lambda: [16, 128])
    """The workloads' prompt lengths, tokens."""
    new_tokens: list[int] = field(default_factory=lambda: [32, 128])
    """The workloads' output lengths, tokens generated per prompt (no stop at end of text)."""
    batch_size: int = 8
    """Prompts per forward pass of the capture (the simulator replays batch 1, as the paper runs)."""
    jobs: int = 2
    """Simulations run in parallel."""
    tolerance: float = 0.35
    """A decode speed-up within this relative distance of the paper's, abs(ours / paper - 1), counts as
    reproduced."""
    timeline: bool = False
    """Also write each run's timeline, runs/<run>.timeline.json (Chrome Trace Event format: ui.perfetto.dev)."""
    timeline_tokens: str = "0:64"
    """The passes each timeline keeps, A:B (':' for all)."""


@dataclass(frozen=True)
class Workload:
    model: str
    name: str
    path: Path


# ---------------------------------------------------------------------------------------------- workloads


def _prompts(n: int, length: int, out: Path) -> Path:
    """``n`` prompts of exactly ``length`` bytes (one token each: the bundled byte tokenizer), cut at
    line starts from the bundled held-out text, ASCII only."""
    text = bundled_heldout_text().read_text(encoding="utf-8", errors="ignore")
    text = "".join(c for c in text if c.isascii())
    starts = [i + 1 for i, c in enumerate(text) if c == "\n" and i + 1 + length <= len(text)]
    if len(starts) < n:
        raise ConfigError(f"reproduce: the held-out text has too few lines for {n} prompts of {length} tokens")
    pick = np.linspace(0, len(starts) - 1, n).astype(int)
    lines = [json.dumps({"prompt": text[starts[i] : starts[i] + length]}) for i in pick]
    return atomic_write_text(out / f"prompts-{length}.jsonl", "\n".join(lines) + "\n")


def capture_workloads(cfg: ReproduceConfig, out: Path) -> list[Workload]:
    """The paper's four workloads per model, captured once into ``out`` (kept: a rerun reuses them)."""
    out.mkdir(parents=True, exist_ok=True)
    todo = []
    for model in cfg.models:
        if model not in BUNDLED:
            raise ConfigError(
                f"reproduce: models={model}: no bundled checkpoint (choose from {', '.join(BUNDLED)}), "
                f"or give trace=PATH model=NAME"
            )
        for p in cfg.prompt_tokens:
            for n in cfg.new_tokens:
                todo.append((model, p, n))
    import torch  # lazy: only a capture needs it

    # the bundled models are tiny: one thread beats two, which contend with anything else on the machine
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _capture_all(cfg, out, todo)
    finally:
        torch.set_num_threads(threads)


def _capture_all(cfg: ReproduceConfig, out: Path, todo: list[tuple[str, int, int]]) -> list[Workload]:
    done = []
    bar = tqdm(todo, desc="capture workloads", unit="workload", disable=None)
    for model, p, n in bar:
        name = f"p{p}-n{n}"
        path = out / f"{model}-{name}.parquet"
        bar.set_postfix(model=model, workload=name)
        if not path.exists():
            capture(
                CaptureConfig(
                    model=str(BUNDLED[model]()),
                    prompts=str(_prompts(cfg.prompts, p, out)),
                    out=str(path),
                    max_new_tokens=n,
                    lookahead=3,
                    batch_size=cfg.batch_size,
                    max_prompts=cfg.prompts,
                    max_prompt_tokens=p,
                    stop_at_eos=False,
                    progress=False,
                )
            )
        done.append(Workload(model, name, path))
    return done


# ---------------------------------------------------------------------------------------------- runs


def _run(path: Path, model: str, hardware: str, system: str, out: Path, timeline: str | None = None) -> dict[str, Any]:
    """One simulation, its summary kept as JSON (a rerun reads it back); ``timeline``: the passes of its
    timeline, written beside it as ``<run>.timeline.json``."""
    tl_file = out.with_suffix(".timeline.json")
    if out.exists() and (timeline is None or tl_file.exists()):
        return json.loads(out.read_text())
    other = system.endswith(OTHER_READING)
    cfg = configure(
        model, hardware, system.removesuffix(OTHER_READING), engine="fast", overrides=PAIRS.get(hardware, ())
    )
    if other:  # the preset's reading flipped
        p = cfg.system.precision
        flipped = dataclasses.replace(p, serve_any_cached=not p.serve_any_cached)
        cfg = dataclasses.replace(cfg, system=dataclasses.replace(cfg.system, precision=flipped))
    # many systems: each policy's general copy of the walk, compiled once
    res = simulate_config(read_trace(path), cfg, keep_decisions=timeline is not None, walks=GENERAL)
    if timeline is not None:
        write_sim_timeline(res, cfg.system.demand_first, timeline, out.parent, gantt=False, name=tl_file.name)
    s = res.summary
    keep = {
        k: s[k]
        for k in (
            "decode_ms_per_token",
            "prefill_ms_per_request",
            "served_mix",
            "precision_rule_mix",
            "hit_rate",
            "tokens",
            "requests",
            "bytes_loaded",
            "stall_ms_per_token",
        )
    }
    keep["serve_any_cached"] = cfg.system.precision.serve_any_cached
    atomic_write_json(out, keep)
    return keep


def plan(cfg: ReproduceConfig, workloads: list[Workload]) -> list[tuple[Workload, str, str]]:
    """(workload, hardware, system) of every simulation the grid needs."""
    runs = []
    for w in workloads:
        for s in SETUPS:
            for system in (s.hobbit, s.hobbit + OTHER_READING, *s.baselines):
                runs.append((w, s.hardware, system))
        runs += [(w, ABLATION[1], ABLATION[2]), (w, ABLATION[1], ABLATION[3])]
    return list(dict.fromkeys(runs))  # the 4090 HOBBIT runs once for both its set-ups' needs


def simulate_grid(cfg: ReproduceConfig, workloads: list[Workload], out: Path) -> dict[tuple, dict[str, Any]]:
    out.mkdir(parents=True, exist_ok=True)
    runs = plan(cfg, workloads)
    tl = cfg.timeline_tokens if cfg.timeline else None
    jobs = (
        delayed(_run)(w.path, w.model, hw, system, out / f"{w.model}-{w.name}-{hw}-{system}.json", tl)
        for w, hw, system in runs
    )
    results = Parallel(n_jobs=cfg.jobs, return_as="generator")(jobs)
    got = {}
    for (w, hw, system), r in zip(runs, tqdm(results, total=len(runs), desc="simulate", unit="run", disable=None)):
        got[(w.model, w.name, hw, system)] = r
    return got


# ---------------------------------------------------------------------------------------------- the table


def _mean(xs: list[float | None]) -> float | None:
    known = [x for x in xs if x is not None]
    return float(np.mean(known)) if known else None


def _speedup(base: dict, ours: dict) -> float | None:
    b, o = base["decode_ms_per_token"]["mean"], ours["decode_ms_per_token"]["mean"]
    return b / o if b is not None and o else None


def _reduction(base: dict, ours: dict) -> float | None:
    b, o = base["prefill_ms_per_request"]["mean"], ours["prefill_ms_per_request"]["mean"]
    return 1.0 - o / b if b and o is not None else None


def _workload_row(runs: dict[tuple, dict], s: Setup, baseline: str, model: str, w: Workload) -> dict[str, Any]:
    """One workload of a row: HOBBIT's and the baseline's decode time, and their ratios."""
    ours, other, base = (
        runs[(model, w.name, s.hardware, s.hobbit)],
        runs[(model, w.name, s.hardware, s.hobbit + OTHER_READING)],
        runs[(model, w.name, s.hardware, baseline)],
    )
    return {
        "workload": w.name,
        "hobbit_ms_per_token": ours["decode_ms_per_token"]["mean"],
        "baseline_ms_per_token": base["decode_ms_per_token"]["mean"],
        "decode_speedup": _speedup(base, ours),
        "prefill_reduction": _reduction(base, ours),
        "other_reading_ms_per_token": other["decode_ms_per_token"]["mean"],
        "other_reading_decode_speedup": _speedup(base, other),
    }


def _row(cfg: ReproduceConfig, ws: list[Workload], runs: dict[tuple, dict], s: Setup, baseline: str, model: str):
    """One row of Table 2 (set-up x baseline x model): the mean over its workloads, beside the paper's."""
    per = [_workload_row(runs, s, baseline, model, w) for w in ws]
    paper = PAPER.get((s.name, baseline, model), (None, None))
    row = {
        "setup": s.name,
        "hardware": s.hardware,
        "gpu_only": s.gpu_only,
        "hobbit": s.hobbit,
        "baseline": baseline,
        "model": model,
        "decode_speedup": _mean([p["decode_speedup"] for p in per]),
        "other_reading": {
            "serve_any_cached": runs[(model, ws[0].name, s.hardware, s.hobbit + OTHER_READING)]["serve_any_cached"],
            "decode_speedup": _mean([p["other_reading_decode_speedup"] for p in per]),
        },
        "paper_decode_speedup": paper[0],
        "prefill_reduction": _mean([p["prefill_reduction"] for p in per]),
        "paper_prefill_reduction": paper[1],
        "workloads": per,
    }
    d, pd_ = row["decode_speedup"], row["paper_decode_speedup"]
    row["off"] = None if d is None or pd_ is None else d / pd_ - 1.0
    row["within_tolerance"] = None if row["off"] is None else abs(row["off"]) <= cfg.tolerance
    row["sign_right"] = None if d is None or pd_ is None else (d > 1.0) == (pd_ > 1.0) or abs(pd_ - 1) < 0.02
    return row


def _ablation(model: str, ws: list[Workload], runs: dict[tuple, dict]) -> dict[str, Any]:
    """Dynamic loading alone against the same system without it, beside the paper's range."""
    ups = [
        _speedup(runs[(model, w.name, ABLATION[1], ABLATION[2])], runs[(model, w.name, ABLATION[1], ABLATION[3])])
        for w in ws
    ]
    return {
        "model": model,
        "hardware": ABLATION[1],
        "baseline": ABLATION[2],
        "system": ABLATION[3],
        "decode_speedup": _mean(ups),
        "paper_range": list(PAPER_ABLATION),
    }


def _mix(model: str, ws: list[Workload], runs: dict[tuple, dict]) -> dict[str, Any]:
    """HOBBIT's precision mix (its rule's and what was served), beside the paper's."""
    served = [runs[(model, w.name, "rtx4090-pcie4", "hobbit")]["served_mix"] for w in ws]
    rule = [runs[(model, w.name, "rtx4090-pcie4", "hobbit")]["precision_rule_mix"] for w in ws]
    return {
        "model": model,
        "rule": {k: _mean([r[k] for r in rule]) for k in rule[0]},
        "served": {k: _mean([r[k] for r in served]) for k in served[0]},
        "paper_rule": PAPER_MIX.get(model),
    }


def tabulate(cfg: ReproduceConfig, workloads: list[Workload], runs: dict[tuple, dict]) -> dict[str, Any]:
    """reproduce.json: ``rows`` (set-up x baseline x model), the ablation and the precision mix."""
    models = list(dict.fromkeys(w.model for w in workloads))
    of = {m: [w for w in workloads if w.model == m] for m in models}
    rows = [_row(cfg, of[m], runs, s, b, m) for s in SETUPS for b in s.baselines for m in models]
    return {
        "rows": rows,
        "ablation": [_ablation(m, of[m], runs) for m in models],
        "precision_mix": [_mix(m, of[m], runs) for m in models],
        "tolerance": cfg.tolerance,
        "workloads": [{"model": w.model, "name": w.name, "trace": str(w.path)} for w in workloads],
        "averaging": "arithmetic mean over workloads of baseline/HOBBIT decode ms per token, and of "
        "1 - HOBBIT/baseline prefill ms per request",
    }


def _decode(row: dict[str, Any], key: str) -> str:
    """A row's decode latency of ``key`` (``hobbit_ms_per_token`` or ``baseline_ms_per_token``), the mean over its
    workloads, beside its throughput."""
    ms = _mean([w[key] for w in row.get("workloads", [])])
    return "n/a" if ms is None else decode_text(ms, 1)


def _other(row: dict[str, Any]) -> str:
    """A row's decode speed-up under the other reading of ``serve_any_cached``, with its distance from the paper's."""
    x, paper = row.get("other_reading", {}).get("decode_speedup"), row["paper_decode_speedup"]
    if x is None or paper is None:
        return _fmt(x)
    return f"{x:.2f}x ({100 * (x / paper - 1):+.0f} %)"


def _fmt(x: float | None, pct: bool = False) -> str:
    if x is None:
        return "n/a"
    return f"{100 * x:.0f} %" if pct else f"{x:.2f}x"


def _render_ablation_and_mix(table: dict[str, Any]) -> list[str]:
    """reproduce.md's ablation and precision-mix tables, and its closing lines."""
    lines: list[str] = []
    lines += [
        "## Dynamic loading only (ablation)",
        "",
        "| model | speed-up of HOBBIT's precision rule over on-demand loading (4090) | paper |",
        "|---|---|---|",
    ]
    for a in table["ablation"]:
        lo, hi = a["paper_range"]
        lines.append(f"| {a['model']} | {_fmt(a['decode_speedup'])} | {lo:.2f}-{hi:.2f}x |")
    lines += [
        "",
        "## Precision mix",
        "",
        "| model | rule high / low / skip | served from cache or loaded: high / low / skipped | paper (rule) |",
        "|---|---|---|---|",
    ]
    for m in table["precision_mix"]:
        r, s, p = m["rule"], m["served"], m["paper_rule"]
        paper = "n/a" if p is None else f"{p['high']:.0%} / {p['low']:.0%} / {p['skip']:.0%}"
        lines.append(
            f"| {m['model']} | {r['high']:.0%} / {r['low']:.0%} / {r['skip']:.0%} | "
            f"{s['high_hit'] + s['high_load']:.0%} / {s['low_hit'] + s['low_load']:.0%} / {s['skipped']:.0%} | "
            f"{paper} |"
        )
    lines += [
        "",
        "Workloads: " + ", ".join(f"{w['model']} {w['name']}" for w in table["workloads"]) + ".",
        "Averaging: " + table["averaging"] + ".",
        "",
        "![ours against the paper](reproduce.png)",
        "",
    ]
    return lines


def render(table: dict[str, Any]) -> str:
    tol = table["tolerance"]
    lines = [
        "# HOBBIT's evaluation reproduced",
        "",
        "Decode speed-up of HOBBIT over each baseline (baseline ms/token / HOBBIT's) and prefill latency "
        "reduction, averaged over the workloads, beside the paper's (arXiv:2411.01433, Table 2). "
        f"'off': ours / paper - 1; cells more than {100 * tol:.0f} % off are marked.",
        "",
    ]
    for gpu_only, title in ((True, "GPU-only systems"), (False, "CPU-assisted systems")):
        lines += [
            f"## {title}",
            "",
            "| set-up | HOBBIT | baseline | model | HOBBIT decode | baseline decode | decode speed-up | paper | off | "
            "other reading | prefill reduction | paper |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in table["rows"]:
            if r["gpu_only"] != gpu_only:
                continue
            off = "n/a" if r["off"] is None else f"{100 * r['off']:+.0f} %" + ("" if r["within_tolerance"] else " **")
            lines.append(
                f"| {r['setup']} | {r['hobbit']} | {r['baseline']} | {r['model']} | "
                f"{_decode(r, 'hobbit_ms_per_token')} | {_decode(r, 'baseline_ms_per_token')} | "
                f"{_fmt(r['decode_speedup'])} | {_fmt(r['paper_decode_speedup'])} | {off} | "
                f"{_other(r)} | {_fmt(r['prefill_reduction'], True)} | {_fmt(r['paper_prefill_reduction'], True)} |"
            )
        lines.append("")
    any_cached = next((r["other_reading"]["serve_any_cached"] for r in table["rows"] if "other_reading" in r), True)
    reading = (
        "a cached copy of either precision serves an expert"
        if any_cached
        else "an expert the rule loads at high precision is not served from a low copy"
    )
    lines += [
        f"'other reading': the decode speed-up with system.precision.serve_any_cached={str(any_cached).lower()} "
        f"({reading}), a choice the paper leaves open, and its distance from the paper's.",
        "",
    ]
    far = [r for r in table["rows"] if r["within_tolerance"] is False]
    wrong = [r for r in table["rows"] if r["sign_right"] is False]
    lines += [
        f"{len(table['rows']) - len(far)} of {len(table['rows'])} decode speed-ups within {100 * tol:.0f} % of "
        f"the paper's; the sign (HOBBIT faster or not) is right in {len(table['rows']) - len(wrong)} of "
        f"{len(table['rows'])}.",
        "",
    ]
    lines += _render_ablation_and_mix(table)
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- the command


def reproduce(cfg: ReproduceConfig, out: Path) -> dict[str, Any]:
    """Capture (or take) the workloads, simulate the grid, write reproduce.{md,json,png}; returns the table."""
    if cfg.trace is not None:
        if cfg.model is None:
            raise ConfigError(
                "reproduce: trace=PATH needs model=NAME (the model whose size the trace is replayed at: "
                "a name of conf/model)"
            )
        meta = read_meta(cfg.trace)  # a bad trace, or one the model does not fit, is refused before any work
        m, want = meta.model, cfg.model
        if (m.num_layers, m.num_experts, m.top_k) != (want.num_layers, want.num_experts, want.top_k):
            raise ConfigError(
                f"trace {cfg.trace} ({m.name}: {m.num_layers} MoE layers, {m.num_experts} experts, top-{m.top_k}) "
                f"does not fit model={want.name} ({want.num_layers} layers, {want.num_experts} experts, "
                f"top-{want.top_k}); pick a model with the trace's topology"
            )
        workloads = [Workload(cfg.model.name, Path(cfg.trace).stem, Path(cfg.trace))]
    else:
        workloads = capture_workloads(cfg, out / "workloads")
    runs = simulate_grid(cfg, workloads, out / "runs")
    table = tabulate(cfg, workloads, runs)
    atomic_write_json(out / "reproduce.json", table)
    atomic_write_text(out / "reproduce.md", render(table))
    plot_reproduce(table["rows"], out, cfg.tolerance)
    return table
