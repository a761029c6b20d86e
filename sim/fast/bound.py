"""``sim.bound.pass_bounds`` compiled with numba: the same bound, the same floats."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
from numba import njit

from hobbit.sim.fast.steps import rule_row as _rule_row
from hobbit.sim.fast.steps import split_makespan as _split_makespan

HIGH, SKIP = 0, 2


class Selections(NamedTuple):
    """The trace's selections (``walk.Routing``'s): experts and gate weights [N, L, K], each pass's tokens."""

    ids: Any
    weights: Any
    pass_start: Any
    pass_end: Any


class Rule(NamedTuple):
    """The precision rule (``inputs.rule_args``): HOBBIT's or not, T1 and T2 + EPS."""

    hobbit_rule: bool
    rule_hi: float
    rule_lo: float


class Tables(NamedTuple):
    """The bound's costs (``inputs.bound_inputs``): the dense part's seconds per pass [P, 2] (a layer run ``whole``
    on the CPU in column 1), the rest of each pass, an expert's least device seconds per token count and its CPU
    seconds, and whether the bound may put experts on the CPU."""

    dense_s: Any
    whole: Any
    other_s: Any
    expert_min: Any
    cpu_s: Any
    uses_cpu: bool


class Scratch(NamedTuple):
    """``_bounds_into``'s working arrays: the rule's row buffers [K], then per expert."""

    row: Any
    rc: Any
    rm: Any
    count: Any
    skipped: Any
    order: Any
    device: Any
    cpu: Any
    ratio: Any
    by_ratio: Any
    tmp: Any


@njit(cache=True)
def pass_bounds(sel, rule, tables, num_experts):
    """[P] seconds (``sim.bound.pass_bounds``) of the passes of ``sel`` (``Selections``): ``tables.expert_min[n]``
    the cheapest device precision for n tokens; the classes by the precision rule (``Rule``; ``steps.rule_row``:
    HOBBIT's or, without it, none skipped); ``tables.dense_s[p, 1]`` the dense part of a layer run ``whole`` on the
    CPU."""
    K, P, E = sel.ids.shape[2], sel.pass_start.shape[0], num_experts
    out = np.zeros(P)
    sc = Scratch(
        np.zeros(K), np.zeros(K, np.int64), np.zeros(K), np.zeros(E, np.int64), np.ones(E, np.bool_),
        np.zeros(E, np.int64), np.zeros(E), np.zeros(E), np.zeros(E), np.zeros(E, np.int64), np.zeros(E, np.int64),
    )  # fmt: skip
    _bounds_into(sel, rule, tables, out, sc)
    return out


@njit(cache=True, _nrt=False)
def _bounds_into(sel, rule, tables, out, sc):
    """``pass_bounds``' loop over the arrays it made: compiled without reference counts, so the token's row of weights
    it hands the rule, and the arrays it hands the makespan, count none on every token and layer."""
    ids, weights, pass_start, pass_end = sel.ids, sel.weights, sel.pass_start, sel.pass_end
    hobbit_rule, rule_hi, rule_lo = rule.hobbit_rule, rule.rule_hi, rule.rule_lo
    dense_s, whole, other_s, expert_min, cpu_s = (
        tables.dense_s,
        tables.whole,
        tables.other_s,
        tables.expert_min,
        tables.cpu_s,
    )
    uses_cpu = tables.uses_cpu
    row, rc, rm, count, skipped, order = sc.row, sc.rc, sc.rm, sc.count, sc.skipped, sc.order
    device, cpu, ratio, by_ratio, tmp = sc.device, sc.cpu, sc.ratio, sc.by_ratio, sc.tmp
    L, K = ids.shape[1], ids.shape[2]
    for p in range(pass_start.shape[0]):
        a, b = pass_start[p], pass_end[p]
        total = other_s[p]
        for layer in range(L):
            m = 0
            for t in range(a, b):
                _rule_row(weights[t, layer], False, hobbit_rule, HIGH, rule_hi, rule_lo, row, rc, rm)
                for k in range(K):
                    e = ids[t, layer, k]
                    if count[e] == 0:
                        order[m] = e
                        m += 1
                    count[e] += 1
                    skipped[e] = skipped[e] and rc[k] == SKIP
            nd = 0
            for j in range(m):
                e = order[j]
                if not skipped[e]:
                    device[nd] = expert_min[count[e]]
                    cpu[nd] = cpu_s[count[e]]
                    nd += 1
                count[e] = 0
                skipped[e] = True
            total += dense_s[p, 1 if whole[layer] else 0] + _split_makespan(
                device, cpu, nd, uses_cpu, ratio, by_ratio, tmp
            )
        out[p] = total
