"""Statistics of a trace (what ``hobbit trace-info`` prints); pure functions, no I/O.

Legend: T tokens, L recorded layers, K top-k, D lookahead depth, E experts.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hobbit.traces.io import Trace
from hobbit.traces.schema import DECODE, PHASE_NAMES, PREFILL


def token_view(trace: Trace) -> dict[str, np.ndarray]:
    """Per-token arrays: ids [T, L, K], weights [T, L, K], request/phase/step/position [T]."""
    a, L = trace.arrays, len(trace.meta.layers)
    k = trace.meta.model.top_k
    out = {
        "ids": a.expert_ids.reshape(-1, L, k),
        "weights": a.gate_weights.reshape(-1, L, k),
        "request_id": a.request_id[::L],
        "phase": a.phase[::L],
        "step": a.step[::L],
        "position": a.position[::L],
    }
    if a.pred_ids is not None:
        d = trace.meta.lookahead_depth
        out["pred_ids"] = a.pred_ids.reshape(-1, L, d, k)
    return out


def overlap(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """|x ∩ y| for id sets along the last axis ([..., K] each, no repeats within a set)."""
    return (x[..., :, None] == y[..., None, :]).any(axis=-1).sum(axis=-1)


def _shares(ids: np.ndarray, num_experts: int) -> np.ndarray:
    """P(expert e is among a token's choices) per layer: ids [T, L, K] -> [L, E]."""
    t, L, _ = ids.shape
    flat = (np.arange(L)[None, :, None] * num_experts + ids.astype(np.int64)).ravel()
    return np.bincount(flat, minlength=L * num_experts).reshape(L, num_experts) / max(t, 1)


def next_token_reuse(tv: dict[str, np.ndarray], k: int, num_experts: int) -> dict[str, Any]:
    """Mean fraction of a token's experts (per layer) also used by the request's previous token.

    ``baseline`` is what two independent tokens with the layer's expert load would share,
    sum_e P(e)^2 / k: reuse above it is temporal locality, not just popularity.
    """
    ids, req = tv["ids"], tv["request_id"]
    same = req[1:] == req[:-1]  # [T-1] consecutive tokens of one request
    if not same.any():
        return {"all": None, "prefill": None, "decode": None, "per_layer": [], "baseline": None,
                "baseline_per_layer": []}
    per = overlap(ids[1:], ids[:-1])[same] / k  # [T', L]
    frac = per.mean(axis=1)
    phase = tv["phase"][1:][same]
    base = (_shares(ids, num_experts) ** 2).sum(axis=1) / k  # [L]
    res: dict = {"all": float(frac.mean()), "per_layer": per.mean(axis=0).round(4).tolist(),
                 "baseline": float(base.mean()), "baseline_per_layer": base.round(4).tolist()}
    for ph in (PREFILL, DECODE):
        m = phase == ph
        res[PHASE_NAMES[ph]] = float(frac[m].mean()) if m.any() else None
    return res


def lookahead_accuracy(tv: dict[str, np.ndarray], layers: tuple[int, ...], depth: int, k: int,
                       num_experts: int) -> list[dict]:
    """For d = 1..D: top-1 hit rate and set recall of layer l's prediction of layer l+d.

    ``baseline_top1`` is the hit rate of a guess drawn independently from the predicted
    top-1 distribution: sum_e P_pred(e) P_true(e), averaged over layer pairs.
    """
    if "pred_ids" not in tv:
        return []
    ids, pred = tv["ids"], tv["pred_ids"]  # [T, L, K], [T, L, D, K]
    out = []
    for d in range(1, depth + 1):
        if d >= len(layers):
            break
        p = pred[:, : len(layers) - d, d - 1]  # [T, L-d, K]
        t = ids[:, d:]
        chance = (_shares(p[..., :1], num_experts) * _shares(t[..., :1], num_experts)).sum(axis=1)  # [L-d]
        out.append({
            "d": d,
            "top1": float((p[..., 0] == t[..., 0]).mean()),
            "baseline_top1": float(chance.mean()),
            "recall": float(overlap(p, t).mean() / k),
            "pairs": int(p.shape[0] * p.shape[1]),
        })
    return out


def expert_load(tv: dict[str, np.ndarray], num_experts: int) -> np.ndarray:
    """Selections per (layer, expert): [L, E]."""
    ids = tv["ids"]
    return np.rint(_shares(ids, num_experts) * ids.shape[0]).astype(np.int64)


def load_summary(counts: np.ndarray) -> dict[str, Any]:
    """Skew of the per-layer load: top expert share, normalised entropy, coefficient of variation."""
    tot = counts.sum(axis=1, keepdims=True).clip(min=1)
    p = counts / tot
    with np.errstate(divide="ignore", invalid="ignore"):
        ent = -(np.where(p > 0, p * np.log(p), 0.0)).sum(axis=1) / np.log(counts.shape[1])
    cv = counts.std(axis=1) / counts.mean(axis=1).clip(min=1e-12)
    return {
        "top_share": p.max(axis=1).round(4).tolist(),
        "entropy": ent.round(4).tolist(),
        "cv": cv.round(4).tolist(),
        "experts_never_used": int((counts == 0).sum()),
    }


def summarize(trace: Trace) -> dict[str, Any]:
    """Everything ``trace-info`` reports, JSON-ready."""
    meta, a = trace.meta, trace.arrays
    tv = token_view(trace)
    k = meta.model.top_k
    counts = expert_load(tv, meta.model.num_experts)
    tokens = {PHASE_NAMES[p]: int((tv["phase"] == p).sum()) for p in (PREFILL, DECODE)}
    w = tv["weights"].astype(np.float64)
    w_norm = w / w.sum(axis=-1, keepdims=True).clip(min=1e-30)
    return {
        "file": trace.path,
        "model": meta.to_json_dict()["model"],
        "recorded_layers": list(meta.layers),
        "lookahead_depth": meta.lookahead_depth,
        "source": meta.source,
        "created": meta.created,
        "rows": len(a),
        "requests": int(np.unique(a.request_id).size),
        "tokens": {"total": int(tv["phase"].size), **tokens},
        "gate": {
            "mean_weight_sum": float(w.sum(axis=-1).mean()),
            "mean_top1_share": float(w_norm[..., 0].mean()),
        },
        "next_token_reuse": next_token_reuse(tv, k, meta.model.num_experts),
        "lookahead": lookahead_accuracy(tv, meta.layers, meta.lookahead_depth, k, meta.model.num_experts),
        "expert_load": {"counts": counts.tolist(), **load_summary(counts)},
    }


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def render(s: dict[str, Any], max_layer_rows: int = 40) -> str:
    """Human-readable report of ``summarize``'s output."""
    m = s["model"]
    lines = [
        f"trace      {s['file']}",
        f"model      {m['name']} ({m['architecture']}): {m['num_layers']} MoE layers, {m['num_experts']} experts, "
        f"top-{m['top_k']}, weights {m['weight_rule']}",
        f"source     {s['source'].get('kind', '?')}, created {s['created'] or '?'}",
    ]
    if len(s["recorded_layers"]) != m["num_layers"]:
        lines.append(f"layers     recorded {len(s['recorded_layers'])} of {m['num_layers']}: {s['recorded_layers']}")
    t = s["tokens"]
    lines += [
        f"requests   {s['requests']}",
        f"tokens     {t['total']} ({t['prefill']} prefill, {t['decode']} decode), {s['rows']} rows",
        f"gate       mean weight sum {s['gate']['mean_weight_sum']:.3f}, "
        f"mean top-1 share {s['gate']['mean_top1_share']:.3f}",
    ]
    r = s["next_token_reuse"]
    lines.append(f"reuse      next-token expert reuse {_fmt(r['all'])} (prefill {_fmt(r['prefill'])}, "
                 f"decode {_fmt(r['decode'])}); {_fmt(r['baseline'])} expected from the load alone, "
                 f"{m['top_k'] / m['num_experts']:.3f} if uniform")
    if s["lookahead"]:
        for row in s["lookahead"]:
            lines.append(f"lookahead  d={row['d']}: top-1 {row['top1']:.3f} ({row['baseline_top1']:.3f} by chance "
                         f"given the load), set recall {row['recall']:.3f} ({row['pairs']} pairs)")
    else:
        lines.append("lookahead  none recorded")
    el = s["expert_load"]
    layers = s["recorded_layers"]
    ent = el["entropy"]
    lines.append(f"load       normalised entropy {min(ent):.3f}..{max(ent):.3f} over layers; "
                 f"{el['experts_never_used']} (layer, expert) pairs never used")
    if max_layer_rows <= 0:
        return "\n".join(lines)
    lines.append("           per layer: top-expert share, normalised entropy, coefficient of variation")
    for i, layer in enumerate(layers[:max_layer_rows]):
        lines.append(f"  layer {layer:>3}  top {el['top_share'][i]:.3f}  entropy {el['entropy'][i]:.3f}  "
                     f"cv {el['cv'][i]:.3f}")
    if len(layers) > max_layer_rows:
        lines.append(f"  ... {len(layers) - max_layer_rows} more layers (use --json)")
    return "\n".join(lines)
