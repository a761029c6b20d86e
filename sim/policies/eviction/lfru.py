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

from hobbit.sim.policies.base import CacheView, Hooked, Pool


@dataclass
class _LFRU:
    clock: int = 0
    entries: OrderedDict = field(default_factory=OrderedDict)  # slot -> [uses, clock of last use], by entry


class LFRU(Hooked):
    """Evict the lowest uses per access since the last use."""

    name = "lfru"

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
