"""Routing locality of every real trace, and the synthetic knobs that reproduce it; writes hobbit/catalogue/data/routing.yaml.

    python benchmarks/routing_fit.py [--write] [--real ../shared/real-traces]

Reads each trace folder under ../shared/real-traces (relative to the project root; never copied into the project)
with its reader in ``hobbit.planner.real_traces``, measures it (``measure``: next-token reuse, popularity skew,
cross-layer predictability, gate-weight concentration) and fits the ``SyntheticConfig`` knobs that reproduce it
(``fit``: zipf, reuse, cross_layer jointly, by simulating the synthetic process at the trace's shape). Prints one
markdown table, a row per trace. The routing-counts JSON (OLMoE, Mixtral) gives popularity only.

``--write`` writes hobbit/catalogue/data/routing.yaml: three locality presets (low, typical, high) and every trace's measurements.
The presets are whole traces: among the traces that measure all three statistics (reuse, skew and cross-layer:
consecutive MoE layers, per-request token order), stand for their model (``RealTrace.representative``) and hold at
least ``PRESET_MIN_TOKENS`` tokens (a single prompt's few hundred decode steps show that prompt's locality, and
their skew is inflated by the small sample: Nemotron-3-Nano's 127 steps measure 0.90), sorted by
fitted reuse and by fitted zipf, low is the first, typical the median and high the last. That makes each preset's
reuse and zipf the min, median and max over those traces, and it keeps each preset's three knobs from one real
trace, so a synthetic trace drawn with them reproduces all of that trace's statistics together (min / median / max
taken knob by knob would pair one trace's reuse with another's popularity and cross-layer map). The script stops if
the two sortings disagree. The other traces (a model's second file or phase, Qwen1.5-MoE with non-consecutive
layers, the popularity-only counts) are reported as data and show where they fall against the presets.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from hobbit.planner.locality import Locality, fit, simulated_stats
from hobbit.planner.real_traces import RealTrace, read_real, unread_folders

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / ".." / "shared" / "real-traces"
OUT = ROOT / "hobbit" / "catalogue" / "data" / "routing.yaml"
PRESETS = ("low", "typical", "high")
PRESET_MIN_TOKENS = 1000  # a preset trace's tokens at the least (module docstring)


def _f(x: float | None, nd: int = 3) -> str:
    return "-" if x is None else f"{x:.{nd}f}"


def table(rows: list[tuple[RealTrace, Locality, dict[str, float]]], presets: dict[str, str]) -> str:
    role = {name: p for p, name in presets.items()}
    head = (
        "| trace | model | E | k | L | tokens | phase | reuse | k/E | excess | skew | cross (shuffled) "
        "| zipf pop. only | fitted zipf | fitted reuse | fitted cross_layer | weight conc. | preset |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for t, loc, k in rows:
        cross = "-" if loc.cross_layer is None else f"{loc.cross_layer:.3f} ({loc.cross_layer_baseline:.3f})"
        if t.counts is None:
            tokens, layers = f"{loc.tokens:,}", str(loc.layers)
        else:
            tokens, layers = f"{loc.tokens:,} per domain", f"{loc.layers // t.count_domains} x {t.count_domains} dom."
        lines.append(
            f"| {t.name} | {t.model} | {t.num_experts} | {t.top_k} | {layers} | {tokens} | {t.phase} "
            f"| {_f(loc.reuse)} | {loc.reuse_uniform:.3f} | {_f(loc.reuse_excess)} | {loc.skew:.3f} | {cross} "
            f"| {loc.zipf:.3f} | {_f(k.get('zipf'))} | {_f(k.get('reuse'))} "
            f"| {_f(k.get('cross_layer')) if loc.cross_layer is not None else '(0: n/a)' if 'reuse' in k else '-'} "
            f"| {_f(k.get('weight_concentration'), 2)} | {role.get(t.name, '')} |"
        )
    return "\n".join(lines)


def choose_presets(rows: list[tuple[RealTrace, Locality, dict[str, float]]]) -> dict[str, str]:
    """low / typical / high: trace names (module docstring)."""
    full = [
        (t, loc, k)
        for t, loc, k in rows
        if t.representative
        and loc.reuse is not None
        and loc.cross_layer is not None
        and loc.tokens >= PRESET_MIN_TOKENS
    ]
    if len(full) < 3:
        raise SystemExit(f"presets need 3 traces that measure reuse, skew and cross-layer; found {len(full)}")
    orders = {
        "fitted reuse": [t.name for t, _, k in sorted(full, key=lambda r: r[2]["reuse"])],
        "fitted zipf": [t.name for t, _, k in sorted(full, key=lambda r: r[2]["zipf"])],
        "measured reuse": [t.name for t, loc, _ in sorted(full, key=lambda r: r[1].reuse or 0.0)],
        "measured skew": [t.name for t, loc, _ in sorted(full, key=lambda r: r[1].skew)],
    }
    by_reuse = orders["fitted reuse"]
    if any(o != by_reuse for o in orders.values()):
        raise SystemExit(f"the traces sort differently by {orders}: choose the presets by hand")
    return {"low": by_reuse[0], "typical": by_reuse[(len(by_reuse) - 1) // 2], "high": by_reuse[-1]}


def _measured(loc: Locality) -> dict[str, float | None]:
    return {
        "reuse": loc.reuse,
        "reuse_uniform": loc.reuse_uniform,
        "reuse_excess": loc.reuse_excess,
        "reuse_baseline": loc.reuse_baseline,
        "skew": loc.skew,
        "skew_uniform": loc.skew_uniform,
        "zipf_popularity_only": loc.zipf,
        "top_expert_share": loc.top_expert_share,
        "cross_layer": loc.cross_layer,
        "cross_layer_baseline": loc.cross_layer_baseline,
        "cross_layer_excess": loc.cross_layer_excess,
        "weight_hhi": loc.weight_hhi,
    }


FITTED_STATS = {"zipf": "skew", "reuse": "reuse", "cross_layer": "cross_layer_excess"}


def residual(loc: Locality, knobs: dict[str, float]) -> dict[str, float]:
    """What the fitted knobs simulate, less what the trace measures, for each statistic the fit matched (empty for a
    popularity-only trace, whose zipf is exact): the fit's error, shown beside it."""
    if loc.reuse is None:
        return {}
    stats = [FITTED_STATS[k] for k in ("zipf", "reuse", "cross_layer") if k != "cross_layer" or loc.cross_layer]
    got = simulated_stats({k: knobs[k] for k in ("zipf", "reuse", "cross_layer")}, loc, 0, stats)
    return {s: got[s] - float(getattr(loc, s)) for s in stats}


def _y(x: object) -> str:
    if x is None:
        return "null"
    if isinstance(x, bool):
        return "true" if x else "false"
    if isinstance(x, float):
        return f"{x:.4f}"
    if isinstance(x, int):
        return str(x)
    s = str(x)
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render_yaml(
    rows: list[tuple[RealTrace, Locality, dict[str, float]]],
    presets: dict[str, str],
    residuals: dict[str, dict[str, float]],
) -> str:
    by_name = {t.name: (t, loc, k) for t, loc, k in rows}
    out = [
        "# Synthetic routing locality presets (SyntheticConfig knobs), fitted to the real traces in",
        "# ../shared/real-traces. Written by `python benchmarks/routing_fit.py --write`: rerun it, do not edit.",
        "# Statistics and fit: hobbit/planner/locality.py (measure, fit); each trace's SOURCE.md cited as",
        "# repository@commit. reuse: mean over layers of the fraction of a token's k experts that the previous",
        "# token of the request used at the same layer; skew: share of a layer's selections taken by its top 10 %",
        "# of experts (0.1 if uniform), mean over layers; cross_layer: fraction of a token's experts at layer l",
        "# named by the best expert map from layer l-1 (learnt on the other half of the requests); the fit matches",
        "# its excess over the same estimator with layer l-1 shuffled across tokens.",
        "# Presets are whole traces: of the traces measuring all three statistics on at least 1,000 tokens, sorted",
        "# by reuse and by zipf (the sortings agree), low = first, typical = median, high = last (benchmarks/routing_fit.py says why).",
        "# Each preset's reuse and zipf are thus the min / median / max over those traces; cross_layer is the",
        "# same trace's (not ordered). The knobs were fitted at each trace's own E, k, layers and tokens.",
        "presets:",
    ]
    for p in PRESETS:
        t, loc, k = by_name[presets[p]]
        where = f"{t.name} ({t.model}, E={t.num_experts}, k={t.top_k}, {loc.tokens} tokens, {t.phase})"
        out += [
            f"  {p}:",
            f"    trace: {t.name}  # {where}; {t.citation}",
            f"    zipf: {k['zipf']:.3f}  # skew {loc.skew:.4f} measured on {t.name} (uniform 0.1); {t.citation}",
            f"    reuse: {k['reuse']:.3f}  # next-token reuse {loc.reuse:.4f} measured on {t.name} "
            f"(uniform k/E {loc.reuse_uniform:.4f}); {t.citation}",
            f"    cross_layer: {k['cross_layer']:.3f}  # cross-layer hit {loc.cross_layer:.4f} measured on {t.name} "
            f"(shuffled {loc.cross_layer_baseline:.4f}, excess {loc.cross_layer_excess:.4f}); {t.citation}",
        ]
    out.append("# Every trace's measurements (locality.Locality) and fitted knobs (locality.fit); cross_layer null")
    out.append("# where the layers are not consecutive (the fit then holds the knob at 0), reuse null for counts only.")
    out.append("traces:")
    for t, loc, k in rows:
        out += [
            f"  {t.name}:",
            f"    model: {_y(t.model)}",
            f"    folder: {_y(t.folder)}",
            f"    source: {_y(t.citation)}  # as {t.folder}/SOURCE.md gives it",
            f"    note: {_y(t.note)}",
            f"    phase: {t.phase}",
            f"    num_experts: {t.num_experts}",
            f"    top_k: {t.top_k}",
            f"    layers: {loc.layers}",
            f"    tokens: {loc.tokens}",
            f"    requests: {loc.requests}",
            f"    representative: {_y(t.representative)}  # stands for its model: preset material",
            "    measured:",
            *[f"      {name}: {_y(v)}" for name, v in _measured(loc).items()],
            "    fitted:",
            *[f"      {name}: {_y(v)}" for name, v in k.items()],
            *(["    fit_residual:  # simulated at the fitted knobs, less measured"] if residuals[t.name] else []),
            *[f"      {name}: {_y(v)}" for name, v in residuals[t.name].items()],
        ]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--write", action="store_true", help=f"write {OUT.relative_to(ROOT)}")
    ap.add_argument("--real", type=Path, default=REAL, help="the real traces' folder")
    args = ap.parse_args(argv)
    if not args.real.is_dir():
        print(f"{args.real} is absent: nothing to measure", file=sys.stderr)
        return 1
    t0 = time.perf_counter()
    rows = []
    for t in read_real(args.real):
        loc = t.measure()
        rows.append((t, loc, fit(loc, t.num_experts, t.top_k)))
    presets = choose_presets(rows)
    residuals = {t.name: residual(loc, k) for t, loc, k in rows}
    print(table(rows, presets))
    print("\nthe fit's largest error (simulated at the fitted knobs, less measured):")
    for name, r in residuals.items():
        if r:
            worst = max(r, key=lambda s: abs(r[s]))
            print(f"  {name}: {worst} {r[worst]:+.4f}")
    for name in unread_folders(args.real):
        print(f"\n{name}: no reader in hobbit.planner.real_traces (not measured)")
    if args.write:
        OUT.write_text(render_yaml(rows, presets, residuals))
        print(f"wrote {OUT.relative_to(ROOT)}")
    print(f"({time.perf_counter() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
