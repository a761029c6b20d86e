"""Pure policies shared by the simulator and the executor: no simpy, torch or I/O.

Each policy is one file behind a small Protocol, chosen by name from a registry:
``PRECISION`` (how a miss is loaded), ``EVICTION`` (which cached expert leaves) and
``PREFETCH`` (what is loaded ahead). Decisions are frozen values.
"""

from sim.policies.base import HIGH, LOW, SKIP, CacheView, EvictionPolicy, Pool, Prefetcher, PrefetchRequest
from sim.policies.registry import EVICTION, PREFETCH, make_eviction, make_prefetcher

__all__ = ["HIGH", "LOW", "SKIP", "CacheView", "EvictionPolicy", "Pool", "Prefetcher", "PrefetchRequest", "EVICTION",
           "PREFETCH", "make_eviction", "make_prefetcher"]
