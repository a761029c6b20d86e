"""A stable argsort that allocates nothing: ``stable_order(v, n, order, tmp)`` gives ``order[:n]`` =
``np.argsort(v[:n], kind="stable")`` (``v`` without NaN; ``tmp`` as long as ``order``, scratch).

The compiled core orders a step's experts by arrival (the timing) and by the CPU's advantage (the walk's bound, FreeToken's
split) with it, where it used numpy's mergesort: numba's mergesort allocates on every call and compiles a few seconds
of helpers on a fresh machine, and this compiles in a fraction of that. A stable order is unique, so the two agree
element for element (``tests/test_fast.py``). Runs of ``RUN`` by insertion (a step's few experts end there), then
merged pairwise, ties taken from the left run first.
"""

from __future__ import annotations

from numba import njit

RUN = 32  # the insertion-sorted runs' length: a step's experts are usually fewer


@njit(cache=True, _nrt=False)
def stable_order(v, n, order, tmp):
    """``order[:n] = np.argsort(v[:n], kind="stable")``, using ``tmp[:n]`` as scratch; nothing allocated."""
    for lo in range(0, n, RUN):
        hi = min(lo + RUN, n)
        for j in range(lo, hi):
            vx = v[j]
            k = j - 1
            while k >= lo and v[order[k]] > vx:
                order[k + 1] = order[k]
                k -= 1
            order[k + 1] = j
    in_tmp = False  # where the sorted runs are now: order, or tmp
    width = RUN
    while width < n:
        src, dst = (tmp, order) if in_tmp else (order, tmp)
        for lo in range(0, n, 2 * width):
            mid, hi = min(lo + width, n), min(lo + 2 * width, n)
            a, b, o = lo, mid, lo
            while a < mid and b < hi:
                if v[src[b]] < v[src[a]]:  # strictly: an equal value keeps the left run's (earlier) first
                    dst[o] = src[b]
                    b += 1
                else:
                    dst[o] = src[a]
                    a += 1
                o += 1
            while a < mid:
                dst[o] = src[a]
                a += 1
                o += 1
            while b < hi:
                dst[o] = src[b]
                b += 1
                o += 1
        in_tmp = not in_tmp
        width *= 2
    if in_tmp:
        for j in range(n):
            order[j] = tmp[j]


@njit(cache=True, _nrt=False, inline="always")
def order_few(v, n, order, tmp):
    """``stable_order``, with one or two values (a decode step's experts) ordered where it is called: the call costs
    more than their order."""
    if n == 1:
        order[0] = 0
    elif n == 2:
        later = v[1] < v[0]  # strictly: equal values keep their order
        order[0], order[1] = (1, 0) if later else (0, 1)
    elif n > 2:
        stable_order(v, n, order, tmp)
