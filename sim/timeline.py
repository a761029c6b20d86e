"""What a timing engine measures; both engines (simpy and plain) fill the same record.

Scheduling rule, shared by both: per layer the dense part runs on the compute stream,
then issuing the layer's copies (``CostModel.issue_s`` each: measured profiles only);
prefetches found useless at this layer leave the link queue if they have not
started, and the layer's loads join it (a demand load ahead of queued, not yet
started prefetches when ``demand_first``; an in-flight copy is never interrupted); the
layer's experts then compute one after another in the order their weights became
resident (already resident first, router order on ties); a use whose copy ahead of it (a prefetch, a copy
behind the CPU) has not landed at that point is late (``Timeline.late``); experts run on the CPU in
parallel, and the layer ends when both are done. Each pass ends with the LM head.
Contention (``CostModel.contention``): while a copy is in flight and the compute stream
works, the copy progresses at 1/f_link of its speed alone and the compute at 1/f of its
(f per kind: dense part, high- or low-precision expert); either alone runs at full speed,
so a stall gives the link all of it. CPU-side experts are outside this sharing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from hobbit.sim.decisions import LayerStep


@dataclass
class Timeline:
    """Times of one simulated run (seconds)."""

    pass_start: np.ndarray  # [P]
    pass_end: np.ndarray  # [P]
    step_stall: np.ndarray  # [S] compute stream waiting for weights, per (pass, layer)
    step_end: np.ndarray  # [S]
    link_busy_s: float = 0.0
    bytes_moved: int = 0  # copies that ran (cancelled prefetches excluded)
    cancelled: int = 0  # prefetches dropped from the queue before they started
    late: int = 0  # uses served from a copy ahead (not a demand load) that had not landed when their layer's
    # experts could start (after its dense part and the issue of its copies): the compute stream waited for it
    transfer_done: dict[int, float] = field(default_factory=dict)
    transfer_start: dict[int, float] = field(default_factory=dict)  # copies that ran: when each started
    # a streamed run's (``sim.fast.stream``) stall per pass, per layer, and per layer in decode passes; its step_stall
    # and step_end are then empty, and so are transfer_done and transfer_start
    stall_sums: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    @property
    def makespan(self) -> float:
        return float(self.pass_end[-1]) if len(self.pass_end) else 0.0

    def pass_stall(self, num_layers: int) -> np.ndarray:
        """[P] the stall of each pass (its steps' stalls summed)."""
        if self.stall_sums is not None:
            return self.stall_sums[0]
        if not num_layers:
            return np.zeros(len(self.pass_start))
        return self.step_stall.reshape(-1, num_layers).sum(axis=1)

    def layer_stall(self, num_layers: int, decode: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """([L] each layer's stall over the run, [L] over the passes where ``decode`` [P] is true), added pass after
        pass (``layer_sums``)."""
        if self.stall_sums is not None:
            return self.stall_sums[1], self.stall_sums[2]
        stall = self.step_stall.reshape(-1, num_layers)
        return layer_sums(stall), layer_sums(stall * decode[:, None])


def layer_sums(rows: np.ndarray, start: np.ndarray | None = None) -> np.ndarray:
    """The column sums of ``rows`` [passes, layers], added one pass after another and continuing ``start`` (a sum so
    far): the same floats however the passes are cut into consecutive parts (numpy's ``sum`` adds a lone column
    pairwise)."""
    if start is not None:
        rows = np.concatenate([start[None], rows])
    return np.cumsum(rows, axis=0)[-1] if len(rows) else np.zeros(rows.shape[1])


def demand_insert_at(queue: list, demand_first: bool) -> int:
    """Where a demand load joins a queue of (tid, seconds, is_demand) not yet started."""
    if not demand_first:
        return len(queue)
    for i, item in enumerate(queue):
        if not item[2]:
            return i
    return len(queue)


def requeue(
    queue: list[tuple[int, float, bool]],
    items: list[tuple[int, float, bool]],
    cancel: list[int],
    demand_first: bool,
    gone: dict[int, float] | None = None,
    uses: Sequence[int] = (),
) -> int:
    """Drop the cancelled copies that have not started from ``queue`` (of (tid, seconds, is_demand)), then add
    ``items`` (a demand load ahead of queued prefetches when ``demand_first``), in place; the number dropped, less
    those a use brings back. ``gone`` (``CostModel.clear_queue``): every prefetch not started leaves first, kept there
    (tid -> seconds); those of them ``uses`` names come back as demand loads, ahead of ``items``."""
    before = len(queue)
    if gone is not None:
        gone.update((q[0], q[1]) for q in queue if not q[2])
        queue[:] = [q for q in queue if q[2]]
    if cancel:
        drop = set(cancel)
        queue[:] = [q for q in queue if q[0] not in drop]
    dropped = before - len(queue)
    back = [(tid, gone.pop(tid), True) for tid in dict.fromkeys(uses) if tid in gone] if gone else []
    for item in back + items:
        at = demand_insert_at(queue, demand_first) if item[2] else len(queue)
        queue.insert(at, item)
    return dropped - len(back)


def late_copies(step: LayerStep, landed: Callable[[int], bool]) -> list[int]:
    """The copies ahead of the step's uses (not one of the step's demand loads) that have not ``landed`` when the
    layer's experts could start: each such use is late (``Timeline.late``)."""
    ahead = [g.tid for g in step.gpu if g.tid >= 0]
    if not ahead:
        return []
    demand = {ld.tid for ld in step.loads if ld.demand}
    return [tid for tid in ahead if tid not in demand and not landed(tid)]
