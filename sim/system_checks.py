"""The system's knobs checked together (``check_system``): the values a knob's own range cannot say (one of a set of
names, one knob against another), refused before any simulation work with the knob named. A run checks them in its
sequence (``sim.checks.check_run``)."""

from __future__ import annotations

from hobbit.sim.config import ConfigError, SystemConfig, policy_knobs
from hobbit.sim.policies.registry import EVICTION, PREFETCH


def check_system(s: SystemConfig) -> None:
    """Reject bad knobs before the run, naming them."""
    p, c = s.precision, s.cache
    if p.mode not in ("hobbit", "high", "low"):
        raise ConfigError(f"system.precision.mode={p.mode} must be hobbit, high or low")
    if not 0.0 <= p.t1 <= p.t2 <= 1.0:
        raise ConfigError(f"system.precision.t1={p.t1}, t2={p.t2}: need 0 <= t1 <= t2 <= 1")
    if p.multi_token not in ("max", "high"):
        raise ConfigError(f"system.precision.multi_token={p.multi_token} must be max or high")
    for group, chosen, registry in (("prefetch.kind", s.prefetch.kind, PREFETCH), ("cache.policy", c.policy, EVICTION)):
        if chosen not in registry:
            raise ConfigError(f"system.{group}={chosen} is not one of {', '.join(sorted(registry))}")
    for where, node, chosen in (("prefetch", s.prefetch, s.prefetch.kind), ("cache", c, c.policy)):
        knobs = policy_knobs(node, chosen)
        for problem in getattr(knobs, "problems", list)():  # what a policy's knob ranges cannot say
            raise ConfigError(f"system.{where}.{chosen}.{problem}")
    if s.prefetch.precision not in ("rule", "high", "low"):
        raise ConfigError(f"system.prefetch.precision={s.prefetch.precision} must be rule, high or low")
    if s.prefetch.fallback not in ("oracle", "history", "none"):
        raise ConfigError(f"system.prefetch.fallback={s.prefetch.fallback} must be oracle, history or none")
    if not 1 <= s.prefetch.max_depth <= 8:
        raise ConfigError(f"system.prefetch.max_depth={s.prefetch.max_depth} must be in 1..8")
    if not 0.0 <= s.prefetch.fallback_accuracy <= 1.0:
        raise ConfigError(f"system.prefetch.fallback_accuracy={s.prefetch.fallback_accuracy} must be in [0, 1]")
    if s.cpu_misses not in ("never", "always", "faster", "split"):
        raise ConfigError(f"system.cpu_misses={s.cpu_misses} must be never, always, faster or split")
    if s.placement not in ("cache", "static", "popular"):
        raise ConfigError(f"system.placement={s.placement} must be cache, static or popular")
    if not 0.0 <= c.high_fraction <= 1.0:
        raise ConfigError(f"system.cache.high_fraction={c.high_fraction} must be in [0, 1]")
    if s.cpu_layer_scope not in ("experts", "whole"):
        raise ConfigError(f"system.cpu_layer_scope={s.cpu_layer_scope} must be experts or whole")
    if s.cpu_layer_scope == "whole" and s.placement != "static":
        raise ConfigError(
            f"system.cpu_layer_scope=whole: only placement=static keeps layers on the CPU "
            f"(system={s.name} has placement={s.placement})"
        )
    if s.cpu_moe_layers and s.placement != "static":
        raise ConfigError(
            f"system.cpu_moe_layers={s.cpu_moe_layers}: only placement=static keeps layers' experts on the CPU "
            f"(system={s.name} has placement={s.placement})"
        )
    if s.gpu_experts_strategy not in ("uniform", "frequency", "front-loading"):
        raise ConfigError(
            f"system.gpu_experts_strategy={s.gpu_experts_strategy} must be uniform, frequency or front-loading"
        )
    if s.gpu_experts and s.placement != "cache":
        raise ConfigError(
            f"system.gpu_experts={s.gpu_experts} keeps experts by count; system={s.name} has placement={s.placement}"
        )
    if s.host_cache not in ("lru", "uniform"):
        raise ConfigError(f"system.host_cache={s.host_cache} must be lru or uniform")
    if s.numa not in ("single", "replicate"):
        raise ConfigError(f"system.numa={s.numa} must be single or replicate")
    if s.copy_stream not in ("separate", "compute"):
        raise ConfigError(f"system.copy_stream={s.copy_stream} must be separate or compute")
    if s.host_load not in ("load", "mmap", "stream"):
        raise ConfigError(f"system.host_load={s.host_load} must be load, mmap or stream")
    if c.layer_partition not in ("slots", "bytes"):
        raise ConfigError(f"system.cache.layer_partition={c.layer_partition} must be slots or bytes")
    if c.wide_step not in ("keep", "bypass"):
        raise ConfigError(f"system.cache.wide_step={c.wide_step} must be keep or bypass")
