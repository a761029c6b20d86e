"""Policies by name: the only list of them. A new policy is one file plus one line here.

A line maps the name users select (``system.cache.policy=NAME`` or ``system.prefetch.kind=NAME``)
to ``module:Class``. The class declares its ``Knobs`` (a frozen dataclass with ``LIMITS`` and
optionally ``problems()``, its own config node ``system.cache.NAME`` / ``system.prefetch.NAME``, or
None) and what it ``needs`` from the walk
(``base.NEEDS``); configs are validated against these names, and nothing else names a policy.
Names are identifiers (they are config keys).
"""

from __future__ import annotations

import importlib
from functools import cache
from typing import Any

from hobbit.sim.policies.base import EvictionPolicy, PolicyInputs, Prefetcher

EVICTION: dict[str, str] = {
    "lru": "hobbit.sim.policies.eviction.lru:LRU",
    "lfu": "hobbit.sim.policies.eviction.lfu:LFU",
    "fifo": "hobbit.sim.policies.eviction.fifo:FIFO",
    "multidim": "hobbit.sim.policies.eviction.multidim:MultiDim",
    "belady": "hobbit.sim.policies.eviction.belady:Belady",
    "eam_priority": "hobbit.sim.policies.eviction.eam_priority:EAMPriority",
    "eam_release": "hobbit.sim.policies.eviction.eam_release:EAMRelease",
    "mru": "hobbit.sim.policies.eviction.mru:MRU",
    "arc": "hobbit.sim.policies.eviction.arc:ARC",
    "s3fifo": "hobbit.sim.policies.eviction.s3fifo:S3FIFO",
    "sieve": "hobbit.sim.policies.eviction.sieve:Sieve",
    "lirs": "hobbit.sim.policies.eviction.lirs:LIRS",
    "lfru": "hobbit.sim.policies.eviction.lfru:LFRU",
}

PREFETCH: dict[str, str] = {
    "hobbit": "hobbit.sim.policies.prefetch.hobbit:HobbitPrefetch",
    "next_layer": "hobbit.sim.policies.prefetch.next_layer:NextLayerPrefetch",
    "eam": "hobbit.sim.policies.prefetch.eam:EAMPrefetch",
    "oracle": "hobbit.sim.policies.prefetch.oracle:OraclePrefetch",
    "none": "hobbit.sim.policies.prefetch.none:NoPrefetch",
}


@cache
def _load(spec: str) -> type:
    """``module:Class`` -> the class (modules load on first use, once)."""
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


def eviction_class(name: str) -> type[EvictionPolicy]:
    if name not in EVICTION:
        raise KeyError(f"unknown cache policy '{name}'; known: {', '.join(sorted(EVICTION))}")
    return _load(EVICTION[name])


def prefetcher_class(name: str) -> type[Prefetcher]:
    if name not in PREFETCH:
        raise KeyError(f"unknown prefetcher '{name}'; known: {', '.join(sorted(PREFETCH))}")
    return _load(PREFETCH[name])


def knobs_types(registry: dict[str, str]) -> dict[str, type]:
    """name -> the ``Knobs`` dataclass of every registered policy that has knobs."""
    return {name: k for name, spec in registry.items() if (k := _load(spec).Knobs) is not None}


def make_eviction(name: str, knobs: Any = None, inputs: PolicyInputs | None = None) -> EvictionPolicy:
    return eviction_class(name)(knobs, inputs or PolicyInputs())


def make_prefetcher(name: str, knobs: Any = None, inputs: PolicyInputs | None = None) -> Prefetcher:
    return prefetcher_class(name)(knobs, inputs or PolicyInputs())
