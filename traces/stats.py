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


TOKEN_CHUNK = 1 << 15  # tokens ``summarize`` reads at a time: its temporaries are a chunk's, not the trace's


def overlap(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """|x ∩ y| for id sets along the last axis ([..., K] each, no repeats within a set)."""
    return (x[..., :, None] == y[..., None, :]).any(axis=-1).sum(axis=-1)


def _counts(ids: np.ndarray, num_experts: int) -> np.ndarray:
    """How many of the tokens' choices name each (layer, expert): ids [T, L, K] -> [L, E]."""
    _, L, _ = ids.shape
    flat = (np.arange(L)[None, :, None] * num_experts + ids.astype(np.int64)).ravel()
    return np.bincount(flat, minlength=L * num_experts).reshape(L, num_experts)


class _Tally:
    """``summarize``'s sums, a chunk of tokens at a time: each statistic is a sum or a count over tokens (or over
    pairs of consecutive tokens, and the pair across two chunks is counted with the later one)."""

    def __init__(self, L: int, E: int, k: int, depth: int) -> None:
        self.k, self.E = k, E
        self.tokens = 0
        self.counts = np.zeros((L, E), np.int64)
        self.weight_sum = self.top1_share = 0.0
        self.pairs, self.reuse, self.reuse_layer = 0, 0.0, np.zeros(L)
        self.reuse_phase, self.pairs_phase = {PREFILL: 0.0, DECODE: 0.0}, {PREFILL: 0, DECODE: 0}
        depths = [d for d in range(1, depth + 1) if d < L]
        self.look = {
            d: {"hits": 0, "common": 0, "pred": np.zeros((L - d, E), np.int64), "true": np.zeros((L - d, E), np.int64)}
            for d in depths
        }

    def add(self, tv: dict[str, np.ndarray], t0: int, t1: int) -> None:
        """Tokens [t0, t1) of the token view ``tv``."""
        ids = tv["ids"][t0:t1]
        self.tokens += t1 - t0
        self.counts += _counts(ids, self.E)
        w = tv["weights"][t0:t1].astype(np.float64)
        total = w.sum(axis=-1)
        self.weight_sum += float(total.sum())
        self.top1_share += float((w[..., 0] / total.clip(min=1e-30)).sum())
        s = max(t0 - 1, 0)  # the pairs of consecutive tokens of one request that end in this chunk
        req = tv["request_id"][s:t1]
        same = req[1:] == req[:-1]
        if same.any():
            per = overlap(tv["ids"][s + 1 : t1], tv["ids"][s : t1 - 1])[same] / self.k  # [P, L]
            frac = per.mean(axis=1)
            phase = tv["phase"][s + 1 : t1][same]
            self.pairs += len(frac)
            self.reuse += float(frac.sum())
            self.reuse_layer += per.sum(axis=0)
            for ph in (PREFILL, DECODE):
                m = phase == ph
                self.reuse_phase[ph] += float(frac[m].sum())
                self.pairs_phase[ph] += int(m.sum())
        for d, acc in self.look.items():
            L = ids.shape[1]
            p = tv["pred_ids"][t0:t1, : L - d, d - 1]  # [T', L-d, K]: layer l's prediction of layer l + d
            t = ids[:, d:]
            acc["hits"] += int((p[..., 0] == t[..., 0]).sum())
            acc["common"] += int(overlap(p, t).sum())
            acc["pred"] += _counts(p[..., :1], self.E)
            acc["true"] += _counts(t[..., :1], self.E)

    def next_token_reuse(self) -> dict[str, Any]:
        """Mean fraction of a token's experts (per layer) also used by the request's previous token.

        ``baseline`` is what two independent tokens with the layer's expert load would share,
        sum_e P(e)^2 / k: reuse above it is temporal locality, not just popularity.
        """
        if not self.pairs:
            return {
                "all": None,
                "prefill": None,
                "decode": None,
                "per_layer": [],
                "baseline": None,
                "baseline_per_layer": [],
            }
        base = ((self.counts / max(self.tokens, 1)) ** 2).sum(axis=1) / self.k  # [L]
        res: dict = {
            "all": self.reuse / self.pairs,
            "per_layer": (self.reuse_layer / self.pairs).round(4).tolist(),
            "baseline": float(base.mean()),
            "baseline_per_layer": base.round(4).tolist(),
        }
        for ph in (PREFILL, DECODE):
            n = self.pairs_phase[ph]
            res[PHASE_NAMES[ph]] = self.reuse_phase[ph] / n if n else None
        return res

    def lookahead_accuracy(self) -> list[dict]:
        """For d = 1..D: top-1 hit rate and set recall of layer l's prediction of layer l+d.

        ``baseline_top1`` is the hit rate of a guess drawn independently from the predicted
        top-1 distribution: sum_e P_pred(e) P_true(e), averaged over layer pairs.
        """
        out = []
        T = max(self.tokens, 1)
        for d, acc in self.look.items():
            pairs = self.tokens * acc["pred"].shape[0]
            chance = ((acc["pred"] / T) * (acc["true"] / T)).sum(axis=1)  # [L-d]
            out.append(
                {
                    "d": d,
                    "top1": acc["hits"] / pairs,
                    "baseline_top1": float(chance.mean()),
                    "recall": acc["common"] / pairs / self.k,
                    "pairs": pairs,
                }
            )
        return out


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
    """Everything ``trace-info`` reports, JSON-ready: sums over the tokens, ``TOKEN_CHUNK`` of them at a time."""
    meta, a = trace.meta, trace.arrays
    tv = token_view(trace)
    k, L = meta.model.top_k, len(meta.layers)
    tally = _Tally(L, meta.model.num_experts, k, meta.lookahead_depth if "pred_ids" in tv else 0)
    T = len(tv["phase"])
    for t0 in range(0, T, TOKEN_CHUNK):
        tally.add(tv, t0, min(T, t0 + TOKEN_CHUNK))
    tokens = {PHASE_NAMES[p]: int((tv["phase"] == p).sum()) for p in (PREFILL, DECODE)}
    n = max(T * L, 1)
    return {
        "file": trace.path,
        "model": meta.to_json_dict()["model"],
        "recorded_layers": list(meta.layers),
        "lookahead_depth": meta.lookahead_depth,
        "source": meta.source,
        "created": meta.created,
        "rows": len(a),
        "requests": int(np.unique(tv["request_id"]).size),
        "tokens": {"total": T, **tokens},
        "gate": {"mean_weight_sum": tally.weight_sum / n, "mean_top1_share": tally.top1_share / n},
        "next_token_reuse": tally.next_token_reuse(),
        "lookahead": tally.lookahead_accuracy(),
        "expert_load": {"counts": tally.counts.tolist(), **load_summary(tally.counts)},
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
    lines.append(
        f"reuse      next-token expert reuse {_fmt(r['all'])} (prefill {_fmt(r['prefill'])}, "
        f"decode {_fmt(r['decode'])}); {_fmt(r['baseline'])} expected from the load alone, "
        f"{m['top_k'] / m['num_experts']:.3f} if uniform"
    )
    if s["lookahead"]:
        for row in s["lookahead"]:
            lines.append(
                f"lookahead  d={row['d']}: top-1 {row['top1']:.3f} ({row['baseline_top1']:.3f} by chance "
                f"given the load), set recall {row['recall']:.3f} ({row['pairs']} pairs)"
            )
    else:
        lines.append("lookahead  none recorded")
    el = s["expert_load"]
    layers = s["recorded_layers"]
    ent = el["entropy"]
    lines.append(
        f"load       normalised entropy {min(ent):.3f}..{max(ent):.3f} over layers; "
        f"{el['experts_never_used']} (layer, expert) pairs never used"
    )
    if max_layer_rows <= 0:
        return "\n".join(lines)
    lines.append("           per layer: top-expert share, normalised entropy, coefficient of variation")
    for i, layer in enumerate(layers[:max_layer_rows]):
        lines.append(
            f"  layer {layer:>3}  top {el['top_share'][i]:.3f}  entropy {el['entropy'][i]:.3f}  cv {el['cv'][i]:.3f}"
        )
    if len(layers) > max_layer_rows:
        lines.append(f"  ... {len(layers) - max_layer_rows} more layers (use --json)")
    return "\n".join(lines)
