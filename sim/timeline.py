"""What a timing engine measures; both engines (simpy and plain) fill the same record.

Scheduling rule, shared by both: per layer the dense part runs on the compute stream,
then issuing the layer's copies (``CostModel.issue_s`` each: measured profiles only);
prefetches found useless at this layer leave the link queue if they have not
started, and the layer's loads join it (a demand load ahead of queued, not yet
started prefetches when ``demand_first``; an in-flight copy is never interrupted); the
layer's experts then compute one after another in the order their weights became
resident (already resident first, router order on ties); experts run on the CPU in
parallel, and the layer ends when both are done. Each pass ends with the LM head.
Contention (``CostModel.contention``): while a copy is in flight and the compute stream
works, the copy progresses at 1/f_link of its speed alone and the compute at 1/f of its
(f per kind: dense part, high- or low-precision expert); either alone runs at full speed,
so a stall gives the link all of it. CPU-side experts are outside this sharing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


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
    transfer_done: dict[int, float] = field(default_factory=dict)
    transfer_start: dict[int, float] = field(default_factory=dict)  # copies that ran: when each started

    @property
    def makespan(self) -> float:
        return float(self.pass_end[-1]) if len(self.pass_end) else 0.0


def demand_insert_at(queue: list, demand_first: bool) -> int:
    """Where a demand load joins a queue of (tid, seconds, is_demand) not yet started."""
    if not demand_first:
        return len(queue)
    for i, item in enumerate(queue):
        if not item[2]:
            return i
    return len(queue)
