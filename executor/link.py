"""The copy engine: one thread feeds host-to-device copies one at a time, FIFO and
non-preemptive, a demand copy ahead of queued (not started) prefetches, queued copies
cancellable: the link the simulator models (``sim.timeline``). A copy with ``back`` first writes its
buffer's old contents back to the host (``system.write_back``: MoE-Offloading's swap). On CUDA each copy runs on a
dedicated stream and the thread waits for it; on the CPU it is a memcpy on the thread
(torch releases the GIL), so it overlaps the compute of the main thread.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

import torch


@dataclass
class Copy:
    tid: int
    src: torch.Tensor
    dst: torch.Tensor
    demand: bool
    back: torch.Tensor | None = None  # write-back: the buffer's old contents go here first, on the same stream
    done: threading.Event = field(default_factory=threading.Event)
    start_s: float = 0.0
    end_s: float = 0.0


class CopyEngine:
    """Host -> device copies on their own thread; ``wait(tid)`` blocks until one is done. ``cpu``:
    the core the copy thread is pinned to (None: wherever the OS puts it). ``dry``: copies are
    done as soon as they are served, no bytes move (the same schedule without the copies' load on
    the machine, to measure what they cost the compute)."""

    def __init__(self, device: torch.device, cpu: int | None = None, dry: bool = False) -> None:
        self.device, self.cpu, self.dry = device, cpu, dry
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        self.queue: deque[Copy] = deque()
        self.copies: dict[int, Copy] = {}
        self.cv = threading.Condition()
        self.busy_s = 0.0
        self.moved = 0
        self.cancelled = 0
        self.gone: dict[int, Copy] = {}  # prefetches ``clear`` dropped, until a use brings one back
        self._stop = False
        self.thread = threading.Thread(target=self._serve, name="hobbit-copy", daemon=True)
        self.thread.start()

    def submit(self, copies: list[Copy]) -> None:
        with self.cv:
            for c in copies:
                self.copies[c.tid] = c
                if c.demand:  # ahead of queued prefetches, behind queued demand copies
                    at = next((i for i, q in enumerate(self.queue) if not q.demand), len(self.queue))
                    self.queue.insert(at, c)
                else:
                    self.queue.append(c)
            self.cv.notify()

    def cancel(self, tids: list[int]) -> None:
        """Drop copies that have not started (their events never fire)."""
        drop = set(tids)
        with self.cv:
            kept = deque(c for c in self.queue if c.tid not in drop)
            self.cancelled += len(self.queue) - len(kept)
            for c in self.queue:
                if c.tid in drop:
                    self.copies.pop(c.tid, None)
            self.queue = kept

    def clear(self, uses: Iterable[int]) -> None:
        """``system.prefetch.clear_queue`` (``sim.timeline.requeue``): every prefetch not started leaves the queue, kept
        aside; those ``uses`` names join again as demand copies, ahead of the prefetches queued after them."""
        with self.cv:
            for c in self.queue:
                if not c.demand:
                    self.gone[c.tid] = c
            dropped = sum(1 for c in self.queue if not c.demand)
            self.queue = deque(c for c in self.queue if c.demand)
            back = [self.gone.pop(tid) for tid in dict.fromkeys(uses) if tid in self.gone]
            self.cancelled += dropped - len(back)
            for c in back:
                c.demand = True
                self.queue.append(c)  # the queue holds demand copies only now
            if back:
                self.cv.notify()

    def first(self, tids: Iterable[int]) -> int:
        """Of ``tids``, the copy this engine finishes first: one in flight or done, else the one queued
        earliest (the first given, on a tie). The queue is read under the lock its thread pops it with."""
        with self.cv:
            rank = {c.tid: i + 1 for i, c in enumerate(self.queue)}
        return min(tids, key=lambda tid: rank.get(tid, 0))

    def done(self, tid: int) -> bool:
        c = self.copies.get(tid)
        return c is None or c.done.is_set()

    def wait(self, tid: int) -> None:
        c = self.copies.get(tid)
        if c is not None:
            c.done.wait()

    def _serve(self) -> None:
        if self.cpu is not None:
            os.sched_setaffinity(0, {self.cpu})  # this thread only (Linux: pid 0 is the calling thread)
        while True:
            with self.cv:
                while not self.queue and not self._stop:
                    self.cv.wait()
                if self._stop:
                    return
                c = self.queue.popleft()
            c.start_s = time.perf_counter()
            if self.dry:
                pass
            elif self.stream is not None:
                with torch.cuda.stream(self.stream):
                    if c.back is not None:
                        c.back.copy_(c.dst, non_blocking=True)
                    c.dst.copy_(c.src, non_blocking=True)
                self.stream.synchronize()
            else:
                if c.back is not None:
                    c.back.copy_(c.dst)
                c.dst.copy_(c.src)
            c.end_s = time.perf_counter()
            self.busy_s += c.end_s - c.start_s
            self.moved += c.src.numel() * c.src.element_size() * (1 if c.back is None else 2)
            c.done.set()

    def close(self) -> None:
        with self.cv:
            self._stop = True
            self.cv.notify()
        self.thread.join(timeout=5)
