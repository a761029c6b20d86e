"""The compiled timing of a run's decisions (``time_decisions``: ``sim.plain.replay``'s times) and the compiled
bound of each pass (``pass_bounds``)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from hobbit.sim.config import SystemConfig
from hobbit.sim.cost import CostModel
from hobbit.sim.decide import (
    Decisions,
    tables_from_steps,
)
from hobbit.sim.fast import bound, timing
from hobbit.sim.fast.compiling import first_use
from hobbit.sim.fast.inputs import bound_inputs, fill_cpu, narrow, pass_tokens, rule_args, timing_inputs, whole_layers
from hobbit.sim.fast.rule import frozen
from hobbit.sim.timeline import Timeline
from hobbit.sim.workload import Workload


def replay_passes(
    wl: Workload,
    cost: CostModel,
    shared: bool | None,
    p0: int,
    p1: int,
    tables: tuple,
    per_tid: tuple,
    inputs: tuple,
    demand_first: bool,
    link: tuple,
    base: int,
    out: tuple,
    first_pass: int = 0,
) -> None:
    """The timing of passes ``p0:p1`` (``timing.replay`` or, with contention, ``replay_shared``); ``wl``'s passes,
    the per-pass ``inputs`` and ``out`` start at pass ``first_pass`` (a window's, ``stream``)."""
    f = cost.contention
    dense, other, expert, cpu_s = inputs[:4]
    args = (
        p0,
        p1,
        wl.num_layers,
        *tables,
        *per_tid,
        dense,
        whole_layers(cost, wl.num_layers),
        other,
        expert,
        cpu_s,
        float(cost.issue_s()),
        bool(demand_first),
        bool(cost.serial_copies),
        bool(cost.clear_queue),
        link,
        base,
        first_pass,
        *out,
    )
    if shared if shared is not None else f.active:
        with first_use(timing.replay_shared):
            timing.replay_shared(*args, float(f.link), float(f.dense), float(f.high), float(f.low))
    else:
        with first_use(timing.replay):
            timing.replay(*args)


def time_decisions(
    wl: Workload, dec: Decisions, cost: CostModel, demand_first: bool = True, shared: bool | None = None
) -> Timeline:
    """``sim.plain.replay`` compiled: the same times (``shared``: as there)."""
    tab = dec.tables if dec.tables is not None else tables_from_steps(dec.steps, wl.num_layers)
    max_t, _ = pass_tokens(wl)
    top = max(max_t, int(tab.gpu[:, 3].max(initial=0)), int(tab.cpu[:, 1].max(initial=0)))
    inputs = timing_inputs(wl, cost, tab.expert_bytes, top)
    if len(tab.cpu):
        fill_cpu(cost, inputs[3])
    layer, prec = tab.loads[:, 2], tab.loads[:, 4]
    P = len(wl.pass_start)
    out = (np.zeros(P), np.zeros(P), np.zeros(tab.n_steps), np.zeros(tab.n_steps))
    with first_use(timing.link_state):
        link = timing.link_state(tab.loads)
    replay_passes(
        wl,
        cost,
        shared,
        0,
        P,
        (tab.loads, tab.gpu, tab.cpu, tab.cancel),
        (inputs[4][layer, prec], inputs[5][layer, prec]),
        inputs,
        demand_first,
        link,
        0,
        out,
    )
    started, done, fs, ls = link[3], link[4], link[5], link[6]
    tl = Timeline(
        *out,
        link_busy_s=float(fs[timing.BUSY]),
        bytes_moved=int(ls[timing.MOVED]),
        cancelled=int(ls[timing.CANCELLED]),
        late=int(ls[timing.LATE]),
    )
    tl.transfer_start, tl.transfer_done = Times(started), Times(done)
    return tl


class Times(Mapping):
    """transfer id -> seconds, for the copies that ran (``Timeline.transfer_start`` / ``transfer_done``), in the
    order they did; from the compiled timing's array (NaN: never ran), laid out as a dict on first use."""

    def __init__(self, at: np.ndarray) -> None:
        self.at, self._d = at, None

    def _dict(self) -> dict[int, float]:
        if self._d is None:
            ran = np.flatnonzero(~np.isnan(self.at))
            ran = ran[np.argsort(self.at[ran], kind="stable")]
            self._d = dict(zip(ran.tolist(), self.at[ran].tolist()))
        return self._d

    def __getitem__(self, tid: int) -> float:
        return self._dict()[tid]

    def __iter__(self):
        return iter(self._dict())

    def __len__(self) -> int:
        return len(self._dict())


def pass_bounds(wl: Workload, cost: CostModel, system: SystemConfig) -> np.ndarray:
    """``sim.bound.pass_bounds`` compiled: the same bound."""
    p = system.precision
    dense, whole, other, expert_min, cpu_s, uses_cpu = bound_inputs(wl, cost, system)
    with first_use(bound.pass_bounds):
        return bound.pass_bounds(
            narrow(wl.ids, "expert_ids"),
            frozen(wl.weights),
            *rule_args(p.mode, p.t1, p.t2),
            wl.pass_arrays().start,
            wl.pass_arrays().end,
            dense,
            whole,
            other,
            expert_min,
            cpu_s,
            wl.num_experts,
            uses_cpu,
        )
