"""Least frequently used since insertion; ties go to the least recently used.

Compiled, a region's copies form one list from its victim (TAIL) in order of use count (ALL_USES), then of TOUCHED:
the slots of one count side by side (a group), so a use moves a copy to the newest end of the next count's group, and
the victim is found without a scan."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from hobbit.sim.policies import lists
from hobbit.sim.policies.base import CacheView, Plain, Pool, argmin_then_oldest
from hobbit.sim.policies.compiled import ALL_USES, PINNED, Compiled, Space, kernel

GROUP, COUNT, LAST, FREE = 0, 1, 2, 3  # rows of ``groups``: a slot's group; a group's count, newest slot; free ids


class LFUState(NamedTuple):
    links: Any  # [NEWER / OLDER, pool, slot] int64: the list (``policies.lists``)
    ends: Any  # [pool, region, HEAD / TAIL] int64
    groups: Any  # [GROUP .. FREE, pool, slot or group id] int64
    free_n: Any  # [pool] int64: the free group ids (a stack in ``groups[FREE]``)


def lfu_state(space: Space) -> LFUState:
    rows = max(space.rows, 1)
    groups = np.zeros((4, 2, rows), np.int64)
    groups[FREE, :, :] = np.arange(rows)  # every group id free
    return LFUState(
        np.zeros((2, 2, rows), np.int64),
        np.full((2, space.capacity.shape[1], 2), -1, np.int64),
        groups,
        np.full(2, rows, np.int64),
    )


@kernel
def leave(st, pr, g, s):
    """``s`` leaves the list and its group; a group left empty gives its id back."""
    gr = st.groups
    grp = gr[GROUP, pr, s]
    if gr[LAST, pr, grp] == s:
        o = st.links[lists.OLDER, pr, s]
        if o >= 0 and gr[GROUP, pr, o] == grp:
            gr[LAST, pr, grp] = o
        else:
            gr[FREE, pr, st.free_n[pr]] = grp
            st.free_n[pr] += 1
    lists.unlink(st.links, st.ends, pr, g, s)


@kernel
def enter(st, pr, g, s, count, y, x):
    """``s``, now used ``count`` times, enters after ``y`` (-1: the list's start), the last slot of the groups of
    fewer uses, whose next slot is ``x``: into ``x``'s group when it has ``count`` uses, else into a new group."""
    gr = st.groups
    if x >= 0 and gr[COUNT, pr, gr[GROUP, pr, x]] == count:
        grp = gr[GROUP, pr, x]
        y = gr[LAST, pr, grp]
    else:
        st.free_n[pr] -= 1
        grp = gr[FREE, pr, st.free_n[pr]]
        gr[COUNT, pr, grp] = count
    lists.insert_after(st.links, st.ends, pr, g, y, s)
    gr[GROUP, pr, s], gr[LAST, pr, grp] = grp, s


@kernel
def lfu_insert(st, pool, pr, g, r0, r1, s):
    """A copy took ``s`` (used once if it serves a use now): past the groups of fewer uses."""
    gr = st.groups
    count = pool[pr, s, ALL_USES]
    y, x = -1, st.ends[pr, g, lists.TAIL]
    while x >= 0 and gr[COUNT, pr, gr[GROUP, pr, x]] < count:
        y = gr[LAST, pr, gr[GROUP, pr, x]]
        x = st.links[lists.NEWER, pr, y]
    enter(st, pr, g, s, count, y, x)


@kernel
def lfu_hit(st, pool, pr, g, s):
    """The copy in ``s`` (its use counted) moves from its group to the next count's."""
    gr = st.groups
    last = gr[LAST, pr, gr[GROUP, pr, s]]
    y = st.links[lists.OLDER, pr, s] if last == s else last  # where the next count's group starts, once s has left
    x = st.links[lists.NEWER, pr, last]
    leave(st, pr, g, s)
    enter(st, pr, g, s, pool[pr, s, ALL_USES], y, x)


@kernel
def lfu_evict(st, pool, pr, g, r0, r1):
    """The least used, then least recently touched, unpinned copy (the list's oldest end), which leaves it."""
    s = st.ends[pr, g, lists.TAIL]
    while s >= 0 and pool[pr, s, PINNED]:
        s = st.links[lists.NEWER, pr, s]
    if s >= 0:
        leave(st, pr, g, s)
    return s


class LFU(Plain):
    """Evict the copy with the fewest uses since it was loaded."""

    name = "lfu"
    compiled = Compiled(evict=lfu_evict, insert=lfu_insert, hit=lfu_hit, state=lfu_state)

    def to_evict(self, pool: Pool, view: CacheView, region: range) -> int:
        cand = pool.candidates(region)
        return argmin_then_oldest(pool.all_uses, pool, cand) if cand else -1
