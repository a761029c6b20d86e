"""Seeded synthetic routing traces, for tests and what-if studies.

Each expert choice of a token at a layer comes, in this order of trial, from:
temporal reuse (an expert the previous token of the request used at this layer, with
probability ``reuse``), cross-layer correlation (the expert that a fixed random map sends
this token's choice at the previous layer to, with probability ``cross_layer``), or the
layer's popularity distribution (Zipf with exponent ``zipf`` over a per-layer permutation
of the experts; 0 is uniform). Predictions for layer l+d copy the true choice with
probability ``lookahead_accuracy * lookahead_decay**(d-1)``; otherwise the top-1 and,
with probability 1/2 each, the other experts are replaced by unselected ones.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from hobbit.traces.arrays import TraceArrays, concat
from hobbit.traces.schema import DECODE, PREFILL, ModelSpec, TraceMeta, now_iso


@dataclass(frozen=True)
class SyntheticConfig:
    """Shape and statistics of a synthetic trace (defaults: Mixtral topology)."""

    name: str = "synthetic-mixtral"
    num_layers: int = 32
    num_experts: int = 8
    top_k: int = 2
    requests: int = 4
    prompt_tokens: int = 16
    decode_tokens: int = 32
    zipf: float = 0.8
    reuse: float = 0.3
    cross_layer: float = 0.3
    lookahead_depth: int = 3
    lookahead_accuracy: float = 0.9
    lookahead_decay: float = 0.95
    weight_concentration: float = 1.0  # Dirichlet alpha of the top-k weights
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("reuse", "cross_layer", "lookahead_accuracy", "lookahead_decay"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"synthetic.{name} must be in [0, 1], got {v}")
        if self.top_k > self.num_experts:
            raise ValueError(f"synthetic.top_k ({self.top_k}) exceeds num_experts ({self.num_experts})")
        if self.requests < 1 or self.prompt_tokens < 1 or self.decode_tokens < 0:
            raise ValueError("synthetic: requests and prompt_tokens must be >= 1, decode_tokens >= 0")


def _popularity(cfg: SyntheticConfig, rng: np.random.Generator) -> np.ndarray:
    ranks = np.arange(1, cfg.num_experts + 1, dtype=np.float64)
    p = ranks**-cfg.zipf
    p /= p.sum()
    out = np.empty((cfg.num_layers, cfg.num_experts))
    for layer in range(cfg.num_layers):
        out[layer, rng.permutation(cfg.num_experts)] = p
    return out  # [L, E]


def _choose(
    prev_tok: np.ndarray | None,
    prev_layer: np.ndarray | None,
    xmap: np.ndarray,
    pop: np.ndarray,
    cfg: SyntheticConfig,
    rng: np.random.Generator,
) -> np.ndarray:
    """k distinct experts for one (token, layer)."""
    chosen: list[int] = []
    for slot in range(cfg.top_k):
        pick = -1
        u = rng.random()
        if prev_tok is not None and u < cfg.reuse:
            cands = [e for e in prev_tok if e not in chosen]
            if cands:
                pick = int(cands[rng.integers(len(cands))])
        elif prev_layer is not None and u < cfg.reuse + cfg.cross_layer:
            e = int(xmap[prev_layer[slot]])
            pick = e if e not in chosen else -1
        if pick < 0:  # rng.choice(E, p=...) as numpy computes it (the same draw), without its checks of p
            p = pop.copy()
            p[chosen] = 0.0
            cdf = (p / p.sum()).cumsum()
            cdf /= cdf[-1]
            pick = int(cdf.searchsorted(rng.random(), side="right"))
        chosen.append(pick)
    return np.array(chosen, dtype=np.int16)


def _weights(cfg: SyntheticConfig, rng: np.random.Generator, n: int) -> np.ndarray:
    w = rng.dirichlet(np.full(cfg.top_k, cfg.weight_concentration), size=n)
    return -np.sort(-w, axis=1).astype(np.float32)  # [n, K] highest first


def _predictions(ids: np.ndarray, wts: np.ndarray, cfg: SyntheticConfig, rng: np.random.Generator):
    """ids, wts: [T, L, K] -> pred ids/weights [T, L, D, K] (-1 / NaN past the last layer)."""
    t, L, k = ids.shape
    d_max = cfg.lookahead_depth
    pids = np.full((t, L, d_max, k), -1, np.int16)
    pw = np.full((t, L, d_max, k), np.nan, np.float32)
    for d in range(1, min(d_max, L - 1) + 1):
        acc = cfg.lookahead_accuracy * cfg.lookahead_decay ** (d - 1)
        true_ids, true_w = ids[:, d:], wts[:, d:]  # [T, L-d, K]
        guess = true_ids.copy()
        wrong = rng.random(guess.shape[:2]) >= acc
        for ti, li in zip(*np.nonzero(wrong)):
            row = guess[ti, li]
            others = np.setdiff1d(np.arange(cfg.num_experts), row)
            if len(others) == 0:
                continue
            replace = rng.random(k) < 0.5
            replace[0] = True
            picks = rng.choice(others, size=min(int(replace.sum()), len(others)), replace=False)
            row[np.flatnonzero(replace)[: len(picks)]] = picks
        pids[:, : L - d, d - 1] = guess
        pw[:, : L - d, d - 1] = true_w
    return pids, pw


def generate(cfg: SyntheticConfig) -> tuple[TraceArrays, TraceMeta]:
    """A trace drawn from ``cfg`` (same config, same trace)."""
    rng = np.random.default_rng(cfg.seed)
    pop = _popularity(cfg, rng)
    xmaps = np.stack([rng.permutation(cfg.num_experts) for _ in range(cfg.num_layers)])  # [L, E]
    L, k = cfg.num_layers, cfg.top_k
    n_tok = cfg.prompt_tokens + cfg.decode_tokens
    parts = []
    for req in range(cfg.requests):
        ids = np.empty((n_tok, L, k), np.int16)
        for t in range(n_tok):
            for layer in range(L):
                ids[t, layer] = _choose(
                    ids[t - 1, layer] if t else None,
                    ids[t, layer - 1] if layer else None,
                    xmaps[layer],
                    pop[layer],
                    cfg,
                    rng,
                )
        wts = _weights(cfg, rng, n_tok * L).reshape(n_tok, L, k)
        pos = np.arange(n_tok)
        phase = np.where(pos < cfg.prompt_tokens, PREFILL, DECODE)
        step = np.maximum(pos - cfg.prompt_tokens + 1, 0)
        a = TraceArrays(
            request_id=np.full(n_tok * L, req, np.int32),
            phase=np.repeat(phase, L).astype(np.int8),
            step=np.repeat(step, L).astype(np.int32),
            position=np.repeat(pos, L).astype(np.int32),
            layer=np.tile(np.arange(L), n_tok).astype(np.int16),
            expert_ids=ids.reshape(-1, k),
            gate_weights=wts.reshape(-1, k),
        )
        if cfg.lookahead_depth > 0:
            pids, pw = _predictions(ids, wts, cfg, rng)
            a.pred_ids = pids.reshape(-1, cfg.lookahead_depth, k)
            a.pred_weights = pw.reshape(-1, cfg.lookahead_depth, k)
        parts.append(a)
    model = ModelSpec(
        name=cfg.name,
        architecture="synthetic",
        num_layers=L,
        num_experts=cfg.num_experts,
        top_k=k,
        weight_rule="softmax_renorm",
    )
    meta = TraceMeta(
        model=model, lookahead_depth=cfg.lookahead_depth, source={"kind": "synthetic", **asdict(cfg)}, created=now_iso()
    )
    return concat(parts), meta
