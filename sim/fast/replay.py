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
    cost: CostModel,
    shared: bool | None,
    span: timing.Span,
    tables: timing.Tables,
    per_tid: tuple[np.ndarray, np.ndarray],
    inputs: tuple,
    demand_first: bool,
    link: timing.Link,
    clock: timing.Clock,
) -> None:
    """The timing of the passes of ``span`` (``timing.replay`` or, with contention, ``replay_shared``): ``per_tid``
    the seconds and bytes of each transfer, ``inputs`` the per-pass and per-token-count seconds (``timing_inputs``),
    whose passes, as ``clock``'s, start at pass ``span.first_pass`` (a window's, ``stream``)."""
    f = cost.contention
    dense, other, expert, cpu_s = inputs[:4]
    costs = timing.Costs(
        *per_tid, dense, whole_layers(cost, span.num_layers), other, expert, cpu_s, float(cost.issue_s())
    )
    rules = timing.Rules(bool(demand_first), bool(cost.serial_copies), bool(cost.clear_queue))
    if shared if shared is not None else f.active:
        shares = timing.Shares(float(f.link), float(f.dense), float(f.high), float(f.low))
        with first_use(timing.replay_shared):
            timing.replay_shared(span, tables, costs, rules, link, clock, shares)
    else:
        with first_use(timing.replay):
            timing.replay(span, tables, costs, rules, link, clock)


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
        cost,
        shared,
        timing.Span(0, P, wl.num_layers, 0, 0),
        timing.Tables(tab.loads, tab.gpu, tab.cpu, tab.cancel),
        (inputs[4][layer, prec], inputs[5][layer, prec]),
        inputs,
        demand_first,
        link,
        timing.Clock(*out),
    )
    started, done, fs, ls = link.started, link.done, link.fs, link.ls
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
    pa = wl.pass_arrays()
    sel = bound.Selections(narrow(wl.ids, "expert_ids"), frozen(wl.weights), pa.start, pa.end)
    with first_use(bound.pass_bounds):
        return bound.pass_bounds(
            sel, bound.Rule(*rule_args(p.mode, p.t1, p.t2)), bound_inputs(wl, cost, system), wl.num_experts
        )
