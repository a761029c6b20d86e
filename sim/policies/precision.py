"""HOBBIT's precision rule (paper §3.2) and the uniform alternatives.

Sort a token's k selected experts by weight, normalise the k weights to sum 1, and score
expert i by the weight mass ranked above it: s_0 = 0, s_i = w_0 + ... + w_{i-1}.
s <= T1: high precision; T1 < s <= T2: low; s > T2: skipped. Top-1 is always high.
Boundaries are inclusive within ``EPS`` (gate weights are float32).
"""

from __future__ import annotations

import numpy as np

from hobbit.sim.policies.base import HIGH, LOW, SKIP

EPS = 1e-6


def hobbit_classes(weights: np.ndarray, t1: float, t2: float) -> np.ndarray:
    """Precision class per selection: weights [..., K] highest first -> [..., K] int8 (HIGH/LOW/SKIP)."""
    w = np.asarray(weights, dtype=np.float64)
    w = w / np.clip(w.sum(axis=-1, keepdims=True), 1e-30, None)
    above = np.cumsum(w, axis=-1) - w  # s_i: mass ranked above i
    above[..., 0] = 0.0
    cls = np.where(above <= t1 + EPS, HIGH, np.where(above <= t2 + EPS, LOW, SKIP)).astype(np.int8)
    cls[..., 0] = HIGH
    return cls


def classes_for(weights: np.ndarray, mode: str, t1: float, t2: float) -> np.ndarray:
    """The class of every selection under a system's precision ``mode`` (hobbit | high | low)."""
    if mode == "hobbit":
        return hobbit_classes(weights, t1, t2)
    shape = np.shape(weights)
    return np.full(shape, HIGH if mode == "high" else LOW, dtype=np.int8)


def rule_mix(classes: np.ndarray) -> dict[str, float]:
    """Share of selections classed high / low / skip (the paper's 67 / 30 / 3 statistic)."""
    c = np.asarray(classes).ravel()
    n = max(c.size, 1)
    return {
        "high": float((c == HIGH).sum() / n),
        "low": float((c == LOW).sum() / n),
        "skip": float((c == SKIP).sum() / n),
    }
