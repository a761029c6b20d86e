"""Predict every published measurement of a CSV and compare: prefill and decode tokens/s, and same-machine ratios.

    python benchmarks/published.py [--csv FILE] [--rows 1,2,8] [--locality typical] [--seed 0]

Each row (benchmarks/published/development.csv by default; any file with its columns) is read from its free text by
``hobbit.planner.published`` (model, file format, runtime and flags, machine, prompt) and predicted by ``hobbit.planner.predict`` on
synthetic routing (no trace of these models ships with the project). Prints one line per row (measured, predicted,
error, what was assumed), the rows that could not be read or are not modelled and why, the error of every ratio of two
settings on one machine, and ends with

    published decode_mape=<f> prefill_mape=<f> ratio_mape=<f> rows=<n>

over the rows that were predicted (``ratio_mape``: decode ratios). ``settings-stated`` repeats them over the rows whose
source states the runtime's offload settings (with the median decode error and how many rows are within 25 %),
``memory-stated`` over the rows whose source states the machine's memory configuration (type, speed and channels),
with the ratios between two such rows.

    python benchmarks/published.py --fit [--csv FILE]

fits each runtime family's calibration constants (``FIT``: for llama.cpp, the shares of the GPU's peak bandwidth and
FLOPs its kernels reach, ``system.gpu_efficiency`` and ``gpu_flops_efficiency``, and its cost of a kernel launch,
``system.launch_overhead_s``; for KTransformers, its CPU kernels' share of the CPU's FLOPs, ``system.cpu_flops_efficiency``)
to the rows of that family
whose offload settings the source states, by a grid search minimising the mean absolute log error of decode and
prefill tokens/s together, and prints the best values with every row's residual. The presets carry the values it
printed, cited as fits (docs/results/published.md).
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
import time
from pathlib import Path
from typing import Any

from hobbit.planner.predict import predict_setting
from hobbit.planner.published import read_settings
from hobbit.sim.config import ConfigError

HERE = Path(__file__).resolve().parent
DEFAULT_CSV = HERE / "published" / "development.csv"


def _ape(pred: float | None, meas: float | None) -> float | None:
    if pred is None or meas is None or not meas or math.isnan(pred):
        return None
    return abs(pred - meas) / meas


def _mape(errors: list[float | None]) -> float:
    got = [e for e in errors if e is not None]
    return sum(got) / len(got) if got else float("nan")


def _median(errors: list[float | None]) -> float:
    got = sorted(e for e in errors if e is not None)
    if not got:
        return float("nan")
    mid = len(got) // 2
    return got[mid] if len(got) % 2 else (got[mid - 1] + got[mid]) / 2


def _memory_stated(setting) -> bool:
    """Whether the source states the RAM's type, speed and channels (nothing about RAM assumed)."""
    ram = setting.hardware.get("ram", "") + setting.hardware.get("ram_gbps", "")
    stated = "ram_gbps" in setting.hardware or ("ddr" in ram.lower() and "x" in ram.split(":")[-1])
    return stated and not any(("RAM" in a or "DDR" in a) and "not stated" in a for a in setting.assumed)


# runtime family -> its rows' systems and the grid of each constant fitted to them
FIT: dict[str, tuple[tuple[str, ...], dict[str, tuple[float, ...]]]] = {
    "llama.cpp": (
        ("llama-cpp", "llama-cpp-lru"),
        {
            "gpu_efficiency": (0.2, 0.3, 0.4, 0.5, 0.7, 0.9),
            "gpu_flops_efficiency": (0.05, 0.1, 0.2),
            "launch_overhead_s": (1e-6, 2e-6, 4e-6),
        },
    ),
    "ktransformers": (("ktransformers",), {"cpu_flops_efficiency": (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 1.0)}),
}


def _log_err(pred: float, meas: float | None) -> float | None:
    if meas is None or not meas or not pred or math.isnan(pred):
        return None
    return math.log(pred / meas)


def fit_rows(settings, systems: tuple[str, ...]) -> list:
    """The rows a family's constants are fitted to: its predicted rows whose offload settings the source states
    (a row whose flags were assumed says nothing about the runtime's kernels)."""
    return [
        s
        for s in settings
        if not s.unmodelled and s.system in systems and not any("flags not stated" in a for a in s.assumed)
    ]


def fit(settings) -> None:
    """Grid-search each family's constants over its rows (mean absolute log error of decode and prefill tokens/s
    together); print the best and every row's residual."""
    for family, (systems, grid) in FIT.items():
        rows = fit_rows(settings, systems)
        if not rows:
            continue
        best: tuple[float, dict, list] | None = None
        names = list(grid)
        for values in itertools.product(*(grid[n] for n in names)):
            knobs: dict[str, Any] = dict(zip(names, values))
            errs, table = [], []
            for s in rows:
                try:
                    p = predict_setting(s, **knobs)
                except ConfigError:
                    continue
                pe, te = _log_err(p.prefill_tok_s, s.pp_tok_s), _log_err(p.decode_tok_s, s.tg_tok_s)
                errs += [abs(e) for e in (pe, te) if e is not None]
                table.append((s, p, pe, te))
            loss = sum(errs) / max(len(errs), 1)
            if best is None or loss < best[0]:
                best = (loss, knobs, table)
        assert best is not None
        loss, knobs, table = best
        said = " ".join(f"{k}={v:g}" for k, v in knobs.items())
        print(f"\n## {family}: {said} (mean |log error| {loss:.3f}, rows {', '.join(s.row for s in rows)})")
        print("| row | pp meas | pp fit | pp residual | tg meas | tg fit | tg residual |")
        print("|---|---|---|---|---|---|---|")
        for s, p, pe, te in table:
            res = lambda e: "" if e is None else f"{math.exp(e) - 1:+.0%}"
            print(
                f"| {s.row} | {s.pp_tok_s or ''} | {p.prefill_tok_s:.3g} | {res(pe)} | {s.tg_tok_s or ''} | "
                f"{p.decode_tok_s:.3g} | {res(te)} |"
            )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--csv", type=Path, default=DEFAULT_CSV, help="a file with the development set's columns")
    ap.add_argument("--rows", default="", help="only these row ids, comma-separated")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--fit", action="store_true", help="fit each runtime family's calibration constants")
    args = ap.parse_args(argv)
    settings, failed = read_settings(args.csv)
    if args.fit:
        fit(settings)
        return 0
    if args.rows:
        keep = set(args.rows.split(","))
        settings = [s for s in settings if s.row in keep]
        failed = [f for f in failed if f[0] in keep]
    print(f"# {args.csv}: {len(settings)} rows read, {len(failed)} not read")
    print("| row | machine | model | runtime | flags | pp meas | pp pred | pp err | tg meas | tg pred | tg err |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    done: list[tuple] = []
    skipped: list[tuple[str, str]] = list(failed)
    t0 = time.perf_counter()
    for s in settings:
        if s.unmodelled:
            skipped.append((s.row, s.unmodelled))
            continue
        try:
            p = predict_setting(s, seed=args.seed)
        except ConfigError as exc:
            skipped.append((s.row, f"the simulator refused it: {exc}"))
            continue
        pe, te = _ape(p.prefill_tok_s, s.pp_tok_s), _ape(p.decode_tok_s, s.tg_tok_s)
        done.append((s, p, pe, te))
        fmt = lambda v: "" if v is None else f"{v:.3g}"
        pct = lambda v: "" if v is None else f"{v:.0%}"
        print(
            f"| {s.row} | {s.machine} | {s.model} {s.weights} | {s.runtime or s.system} | `{s.flags}` | "
            f"{fmt(s.pp_tok_s)} | {fmt(p.prefill_tok_s)} | {pct(pe)} | {fmt(s.tg_tok_s)} | {fmt(p.decode_tok_s)} | "
            f"{pct(te)} |"
        )
        sys.stdout.flush()
    print(f"\n{len(done)} rows predicted in {time.perf_counter() - t0:.0f} s")
    if skipped:
        print("\nNot predicted:")
        for row, why in skipped:
            print(f"- row {row}: {why}")
    assumed = [(s.row, a) for s, *_ in done for a in s.assumed]
    if assumed:
        print("\nAssumed (the source does not say):")
        for row, a in assumed:
            print(f"- row {row}: {a}")
    ratios: list[float | None] = []
    stated_ratios: list[float | None] = []
    print("\nSame-machine decode ratios (measured / predicted):")
    by_machine: dict[str, list[tuple]] = {}
    for d in done:
        by_machine.setdefault(d[0].machine, []).append(d)
    for machine, rows in by_machine.items():
        for (a, pa, *_), (b, pb, *_) in itertools.combinations(rows, 2):
            if not (a.tg_tok_s and b.tg_tok_s):
                continue
            meas, pred = a.tg_tok_s / b.tg_tok_s, pa.decode_tok_s / pb.decode_tok_s
            err = _ape(pred, meas)
            ratios.append(err)
            if _memory_stated(a) and _memory_stated(b):
                stated_ratios.append(err)
            print(f"- {machine} row {a.row} / row {b.row}: measured {meas:.2f}, predicted {pred:.2f} ({err:.0%})")
    flags = [d for d in done if not any("flags not stated" in a for a in d[0].assumed)]
    within = sum(1 for d in flags if d[3] is not None and d[3] <= 0.25)
    print(
        f"\nsettings-stated rows={len(flags)} decode_mape={_mape([d[3] for d in flags]):.3f} "
        f"decode_median={_median([d[3] for d in flags]):.3f} prefill_mape={_mape([d[2] for d in flags]):.3f} "
        f"decode_within_25pct={within}"
    )
    stated = [d for d in done if _memory_stated(d[0])]
    print(
        f"\nmemory-stated rows={len(stated)} decode_mape={_mape([d[3] for d in stated]):.3f} "
        f"prefill_mape={_mape([d[2] for d in stated]):.3f} ratio_mape={_mape(stated_ratios):.3f} "
        f"ratios={len(stated_ratios)}"
    )
    print(
        f"published decode_mape={_mape([d[3] for d in done]):.3f} prefill_mape={_mape([d[2] for d in done]):.3f} "
        f"ratio_mape={_mape(ratios):.3f} rows={len(done)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
