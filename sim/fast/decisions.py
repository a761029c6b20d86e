"""The compiled walk's decisions: ``decide`` runs it over a whole trace and lays its log out as
``sim.decide.Decisions``; ``decide_or_refer`` falls back on the reference walk where the compiled one does not
implement a system."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from hobbit.sim.config import SystemConfig
from hobbit.sim.decide import (
    Decider,
    Decisions,
    DecisionTables,
    Placement,
    cache_slots,
)
from hobbit.sim.fast import special
from hobbit.sim.fast.compiling import first_use, policy_walk
from hobbit.sim.fast.inputs import Run, Window, unsupported, walk_inputs
from hobbit.sim.fast.records import BEHIND, BYTES, DROPPED, EVICTIONS, ISSUED, OVERFLOW, USED
from hobbit.sim.fast.state import walk_state
from hobbit.sim.policies.registry import prefetcher_class
from hobbit.sim.workload import Workload


def decisions_of(
    st: np.ndarray,
    served: np.ndarray,
    mass: np.ndarray,
    slots: Any,
    system: SystemConfig,
    steps,
    tables: DecisionTables | None,
    per_layer: tuple[np.ndarray, np.ndarray] | None = None,
) -> Decisions:
    pf = system.prefetch
    prefetching = prefetcher_class(pf.kind).loads_ahead and system.cpu_misses != "always"
    return Decisions(
        steps=steps,
        served=served,
        prefetch_issued=int(st[ISSUED]),
        prefetch_used=int(st[USED]),
        copies_behind=int(st[BEHIND]),
        bytes_requested=int(st[BYTES]),
        mass=mass,
        evictions=int(st[EVICTIONS]),
        slots=cache_slots(slots),
        staging=int(pf.staging_slots) if prefetching else 0,
        prefetch_dropped=int(st[DROPPED]),
        tables=tables,
        per_layer=per_layer,
    )


def decide(
    wl: Workload,
    system: SystemConfig,
    slots: Any,
    expert_bytes: Any,
    placement: Placement | None = None,
    cpu_faster: Callable[[int, int], bool] | None = None,
    miss_costs: Callable[[int, int], tuple[float, float]] | None = None,
    profile: list[np.ndarray] | None = None,
    walks: str = "auto",
) -> Decisions:
    """``Decider(...).run()`` for a system ``unsupported`` does not refuse, compiled (each policy and prefetcher by
    the compiled part its own file gives; ``walks``: which copy of the policy's walk, ``compiling.policy_walk``)."""
    run = Run(system, slots, expert_bytes, placement, cpu_faster, miss_costs, profile, walks)
    state_args, inputs = walk_inputs(Window(wl), run)
    state = walk_state(**state_args)
    walk_of = policy_walk(system.cache.policy, special.Variant.of(inputs), walks)
    with first_use(walk_of):
        out = walk_of(state, inputs, 0, len(wl.pass_start))
    logs, served, mass, st = (
        [out.loads, out.gpu, out.cpu, out.cancel, out.evicted, out.kept],
        out.served,
        out.mass,
        out.st,
    )
    held = [len(buffer) for buffer in out.logs]  # each table's buffer's rows
    # the views now hold the buffers, alone. A buffer's rows past its table's end were never written (``walk._grow``),
    # nor their pages touched; a table is copied to its length (and its buffer let go) only where they are more than
    # an eighth of it, as a copy of every table costs its bytes again (a tenth of a plain run's time)
    del out, state
    for x in range(6):
        if held[x] > len(logs[x]) * 9 // 8:
            logs[x] = logs[x].copy()
    loads, gpu, cpu, cancel, evicted, kept = logs
    if st[OVERFLOW]:  # LIRS counted out more copies than its entries hold: the reference decides
        return Decider(
            wl, system, slots, expert_bytes, placement, cpu_faster=cpu_faster, miss_costs=miss_costs, profile=profile
        ).run()
    tables = DecisionTables(
        num_layers=wl.num_layers,
        n_steps=len(wl.pass_start) * wl.num_layers,
        expert_bytes=expert_bytes,
        loads=loads,
        gpu=gpu,
        cpu=cpu,
        cancel=cancel,
        evicted=evicted,
        kept=kept,
    )
    return decisions_of(st, served, mass, slots, system, tables.steps(), tables)


def decide_or_refer(
    wl: Workload,
    system: SystemConfig,
    slots: Any,
    expert_bytes: Any,
    placement: Placement | None = None,
    keep_log: bool = False,
    **kw,
) -> Decisions:
    """The compiled walk where it implements ``system``, else the reference's (same decisions either way);
    ``walks`` in ``kw``: which copy of the compiled walk (``decide``)."""
    walks = kw.pop("walks", "auto")
    if unsupported(system, keep_log) is None:
        return decide(
            wl,
            system,
            slots,
            expert_bytes,
            placement,
            kw.get("cpu_faster"),
            kw.get("miss_costs"),
            kw.get("profile"),
            walks,
        )
    return Decider(wl, system, slots, expert_bytes, placement, keep_log=keep_log, **kw).run()
