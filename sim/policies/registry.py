"""Policies by name: a new policy is one file plus one line here."""

from __future__ import annotations

from typing import Any, Callable

from sim.policies.base import EvictionPolicy, Prefetcher
from sim.policies.eviction.belady import Belady
from sim.policies.eviction.eam_priority import EAMPriority
from sim.policies.eviction.fifo import FIFO
from sim.policies.eviction.lfu import LFU
from sim.policies.eviction.lru import LRU
from sim.policies.eviction.multidim import MultiDim
from sim.policies.prefetch.eam import EAMPrefetch
from sim.policies.prefetch.hobbit import HobbitPrefetch
from sim.policies.prefetch.next_layer import NextLayerPrefetch
from sim.policies.prefetch.none import NoPrefetch
from sim.policies.prefetch.oracle import OraclePrefetch

# name -> factory(cache config, extras) ; extras: "future_uses" (Belady), "advisor" (EAM)
EVICTION: dict[str, Callable[..., EvictionPolicy]] = {
    "lru": lambda c, x: LRU(),
    "lfu": lambda c, x: LFU(),
    "fifo": lambda c, x: FIFO(),
    "multidim": lambda c, x: MultiDim(c.w_lru, c.w_lfu, c.w_lhu, c.w_fld),
    "belady": lambda c, x: Belady(x["future_uses"]),
    "eam_priority": lambda c, x: EAMPriority(x.get("advisor")),
}

# name -> factory(prefetch config)
PREFETCH: dict[str, Callable[..., Prefetcher]] = {
    "hobbit": lambda p: HobbitPrefetch(p.max_depth),
    "next_layer": lambda p: NextLayerPrefetch(),
    "eam": lambda p: EAMPrefetch(p.max_depth, p.eam_history, p.eam_experts_per_layer),
    "oracle": lambda p: OraclePrefetch(p.max_depth),
    "none": lambda p: NoPrefetch(),
}


def make_eviction(name: str, cache_cfg: Any, extras: dict[str, Any] | None = None) -> EvictionPolicy:
    if name not in EVICTION:
        raise KeyError(f"unknown cache policy '{name}'; known: {sorted(EVICTION)}")
    return EVICTION[name](cache_cfg, extras or {})


def make_prefetcher(name: str, prefetch_cfg: Any) -> Prefetcher:
    if name not in PREFETCH:
        raise KeyError(f"unknown prefetcher '{name}'; known: {sorted(PREFETCH)}")
    return PREFETCH[name](prefetch_cfg)
