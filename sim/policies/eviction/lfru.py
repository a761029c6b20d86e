"""LFRU as the MoE expert-cache discussions define it (vLLM's open expert-cache PR #37190,
``expert_weight_provider.py``; e1n00r/tinyserve ``cache_policy.py`` ``LFRUPolicy`` at 197d368): each copy
keeps its uses since it entered and the access clock of its last use; the copy with the lowest
uses / (clock - last use + 1) leaves, ties to the copy that entered first. The clock counts accesses
(hits and insertions) of the region. No parameters. Not the two-partition LFRU of Bilal and Kang
(IEEE Access 2017). libCacheSim has no LFRU: tests/test_libcachesim.py checks this against a
transcription of tinyserve's class.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from hobbit.sim.policies.base import CacheView, Hooked, Pool
from hobbit.sim.policies.compiled import LAYER, PINNED, Compiled, Space, kernel

USES, LAST, SEQ = 0, 1, 2  # rows of ``entries``: uses, the clock of its last use, its place in the entry order
CLOCK, NEXT = 0, 1  # fields of ``clock``: the region's access clock, the next entry's place


class LFRUState(NamedTuple):
    entries: Any  # [USES / LAST / SEQ, pool, slot] int64
    clock: Any  # [pool, region, CLOCK / NEXT] int64


def lfru_state(space: Space) -> LFRUState:
    rows = max(space.rows, 1)
    return LFRUState(np.zeros((3, 2, rows), np.int64), np.zeros((2, space.capacity.shape[1], 2), np.int64))


@kernel
def lfru_insert(st, pool, pr, g, r0, r1, slot):
    """One use at the region's next access, entered last."""
    st.clock[pr, g, CLOCK] += 1
    st.entries[USES, pr, slot], st.entries[LAST, pr, slot] = 1, st.clock[pr, g, CLOCK]
    st.entries[SEQ, pr, slot] = st.clock[pr, g, NEXT]
    st.clock[pr, g, NEXT] += 1


@kernel
def lfru_hit(st, pool, pr, g, slot):
    st.clock[pr, g, CLOCK] += 1
    st.entries[USES, pr, slot] += 1
    st.entries[LAST, pr, slot] = st.clock[pr, g, CLOCK]


@kernel
def lfru_evict(st, pool, pr, g, r0, r1):
    """``LFRU.to_evict``: the lowest uses / (accesses since the last use + 1), ties to the earliest entry."""
    ent = st.entries
    best, bs, bq = -1, 0.0, 0
    now = st.clock[pr, g, CLOCK]
    for s in range(r0, r1):
        if pool[pr, s, LAYER] < 0 or pool[pr, s, PINNED]:
            continue
        score = ent[USES, pr, s] / (now - ent[LAST, pr, s] + 1)
        if best < 0 or score < bs or (score == bs and ent[SEQ, pr, s] < bq):
            best, bs, bq = s, score, ent[SEQ, pr, s]
    return best


@dataclass
class _LFRU:
    clock: int = 0
    entries: OrderedDict = field(default_factory=OrderedDict)  # slot -> [uses, clock of last use], by entry


class LFRU(Hooked):
    """Evict the lowest uses per access since the last use."""

    name = "lfru"
    compiled = Compiled(evict=lfru_evict, insert=lfru_insert, hit=lfru_hit, state=lfru_state)

    def new_state(self, capacity: int) -> _LFRU:
        return _LFRU()

    def on_insert(self, pool: Pool, region: range, slot: int) -> None:
        st = self.state(pool, region)
        st.clock += 1
        st.entries[slot] = [1, st.clock]

    def on_hit(self, pool: Pool, region: range, slot: int) -> None:
        st = self.state(pool, region)
        st.clock += 1
        e = st.entries[slot]
        e[0] += 1
        e[1] = st.clock

    def slots(self, pool: Pool, region: range) -> set[int]:
        return set(self.state(pool, region).entries)

    def to_evict(self, pool: Pool, view: CacheView, region: range) -> int:
        st, pinned = self.state(pool, region), pool.pinned
        best, best_score, now = -1, float("inf"), st.clock
        for slot, (uses, last) in st.entries.items():
            score = uses / (now - last + 1)
            if score < best_score and not pinned[slot]:
                best, best_score = slot, score
        if best >= 0:
            del st.entries[best]
        return best
