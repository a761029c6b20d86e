"""``sim.bound.pass_bounds`` compiled with numba: the same bound, the same floats."""

from __future__ import annotations

import numpy as np
from numba import njit

from hobbit.sim.fast.walk import _rule_row, _split_makespan

HIGH, SKIP = 0, 2


@njit(cache=True)
def pass_bounds(
    ids,
    weights,
    hobbit_rule,
    rule_hi,
    rule_lo,
    pass_start,
    pass_end,
    dense_s,
    whole,
    other_s,
    expert_min,
    cpu_s,
    num_experts,
    uses_cpu,
):
    """[P] seconds (``sim.bound.pass_bounds``): ``expert_min[n]`` the cheapest device precision for n tokens; the
    classes by the precision rule (``walk._rule_row``: HOBBIT's or, without it, none skipped); ``dense_s[p, 1]`` the
    dense part of a layer run ``whole`` on the CPU."""
    K, P = ids.shape[2], pass_start.shape[0]
    out = np.zeros(P)
    _bounds_into(
        ids, weights, hobbit_rule, rule_hi, rule_lo, pass_start, pass_end, dense_s, whole, other_s, expert_min, cpu_s,
        uses_cpu, out, np.zeros(K), np.zeros(K, np.int64), np.zeros(K), np.zeros(num_experts, np.int64),
        np.ones(num_experts, np.bool_), np.zeros(num_experts, np.int64), np.zeros(num_experts), np.zeros(num_experts),
        np.zeros(num_experts), np.zeros(num_experts, np.int64), np.zeros(num_experts, np.int64),
    )  # fmt: skip
    return out


@njit(cache=True, _nrt=False)
def _bounds_into(
    ids, weights, hobbit_rule, rule_hi, rule_lo, pass_start, pass_end, dense_s, whole, other_s, expert_min, cpu_s,
    uses_cpu, out, row, rc, rm, count, skipped, order, device, cpu, ratio, by_ratio, tmp,
):  # fmt: skip
    """``pass_bounds``' loop over the arrays it made: compiled without reference counts, so the token's row of weights
    it hands the rule, and the arrays it hands the makespan, count none on every token and layer."""
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
