"""HOBBIT's precision rule (``policies.precision.hobbit_classes``) and the gate mass per selection, compiled:
one pass over the weights instead of numpy's temporaries, the same floats (numpy's pairwise sum for the
per-token total, its sequential cumulative sum)."""

from __future__ import annotations

import numpy as np
from numba import njit

from hobbit.sim.fast.walk import _pairwise
from hobbit.sim.policies.precision import EPS

HIGH, LOW, SKIP = 0, 1, 2


@njit(cache=True)
def _classes(w, t1, t2, eps):
    M, K = w.shape
    out = np.empty((M, K), np.int8)
    row = np.empty(K)
    hi, lo = t1 + eps, t2 + eps
    for m in range(M):
        for k in range(K):
            row[k] = w[m, k]
        total = max(_pairwise(row, 0, K), 1e-30)
        c = 0.0
        for k in range(K):
            x = row[k] / total
            c += x
            above = 0.0 if k == 0 else c - x
            out[m, k] = HIGH if above <= hi else (LOW if above <= lo else SKIP)
        out[m, 0] = HIGH
    return out


@njit(cache=True)
def _normalised(w):
    M, K = w.shape
    out = np.empty((M, K))
    row = np.empty(K)
    for m in range(M):
        for k in range(K):
            row[k] = w[m, k]
        total = max(_pairwise(row, 0, K), 1e-30)
        for k in range(K):
            out[m, k] = row[k] / total
    return out


def hobbit_classes(weights: np.ndarray, t1: float, t2: float) -> np.ndarray:
    """``policies.precision.hobbit_classes(weights, t1, t2)``: [..., K] int8."""
    w = np.ascontiguousarray(weights).reshape(-1, weights.shape[-1])
    return _classes(w, float(t1), float(t2), EPS).reshape(weights.shape)


def normalised(weights: np.ndarray) -> np.ndarray:
    """The weights normalised per token (what ``Decider`` serves as gate mass): [..., K] float64."""
    w = np.ascontiguousarray(weights).reshape(-1, weights.shape[-1])
    return _normalised(w).reshape(weights.shape)
