"""HOBBIT's precision rule (``policies.precision.hobbit_classes``) and the gate mass per selection, compiled.

The walk and the bound apply the rule token by token as they read the weights
(``steps.rule_row``: numpy's pairwise sum for the per-token total, its sequential cumulative
sum, so the same floats), so no class or mass array of the trace's size is ever made. Here:
the mix of classes counted in one pass (``hobbit_counts``, the summary's rule mix) and the
rule laid out as arrays (``classes_and_mass``), which the differential tests check against
the reference.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from hobbit.sim.fast.steps import rule_row as _rule_row
from hobbit.sim.policies.precision import EPS

HIGH, LOW, SKIP = 0, 1, 2


@njit(cache=True)
def _counts(w, hi, lo):
    M, K = w.shape
    n = np.zeros(3, np.int64)
    row, rc, rm = np.zeros(K), np.zeros(K, np.int64), np.zeros(K)
    for m in range(M):
        _rule_row(w[m], False, True, HIGH, hi, lo, row, rc, rm)
        for k in range(K):
            n[rc[k]] += 1
    return n


@njit(cache=True)
def _rows(w, nan_zero, hobbit, uniform, hi, lo):
    M, K = w.shape
    cls, mass = np.empty((M, K), np.int8), np.empty((M, K))
    row, rc, rm = np.zeros(K), np.zeros(K, np.int64), np.zeros(K)
    for m in range(M):
        _rule_row(w[m], nan_zero, hobbit, uniform, hi, lo, row, rc, rm)
        for k in range(K):
            cls[m, k], mass[m, k] = rc[k], rm[k]
    return cls, mass


def frozen(a: np.ndarray) -> np.ndarray:
    """A read-only view of ``a`` (no copy). numba types a read-only array apart from a writable one and compiles
    each kind again (minutes for the walk): joblib hands a sweep's worker the trace's large arrays as read-only
    memory maps, a trace read or built in the process is writable; the compiled functions get every trace array
    read-only, one version for both."""
    v = a.view()
    v.flags.writeable = False
    return v


def hobbit_counts(weights: np.ndarray, hi: float, lo: float) -> np.ndarray:
    """[3] selections HOBBIT's rule classes HIGH, LOW, SKIP: ``weights`` [M, K], ``hi`` / ``lo`` = T1 / T2 + EPS."""
    return _counts(frozen(np.ascontiguousarray(weights)), hi, lo)


def classes_and_mass(
    weights: np.ndarray, mode: str, t1: float, t2: float, nan_zero: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """(the class of every selection, its normalised gate mass) as the walk computes them: [..., K] int8 and
    float64. ``mode``: hobbit, high or low (``policies.precision.classes_for``)."""
    w = frozen(np.ascontiguousarray(weights).reshape(-1, weights.shape[-1]))
    cls, mass = _rows(w, nan_zero, mode == "hobbit", LOW if mode == "low" else HIGH, float(t1) + EPS, float(t2) + EPS)
    return cls.reshape(weights.shape), mass.reshape(weights.shape)
