"""Pure policies shared by the simulator and the executor: no simpy, torch or I/O.

Each policy is one file behind a small Protocol, chosen by name from the registry:
``EVICTION`` (which cached expert leaves) and ``PREFETCH`` (what is loaded ahead); the
precision rule (how a miss is loaded) is ``precision``. Decisions are frozen values.
"""

from hobbit.sim.policies.base import (
    HIGH,
    LOW,
    SKIP,
    CacheView,
    EvictionPolicy,
    PolicyInputs,
    Pool,
    Prefetcher,
    PrefetchRequest,
)
from hobbit.sim.policies.registry import EVICTION, PREFETCH, make_eviction, make_prefetcher

__all__ = [
    "EVICTION",
    "HIGH",
    "LOW",
    "PREFETCH",
    "SKIP",
    "CacheView",
    "EvictionPolicy",
    "PolicyInputs",
    "Pool",
    "PrefetchRequest",
    "Prefetcher",
    "make_eviction",
    "make_prefetcher",
]
