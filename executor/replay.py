"""Real replay: the simulator's decisions executed with real copies and real matmuls, timed.

Per forward pass and layer, on the compute stream: the dense part (q, k, v, o projections
and attention over the KV cache, the router, shared experts) at the model's shapes; then
the layer's copies go to the copy engine (``executor.link``) into device buffers, and the
layer's experts compute as their weights arrive, already resident ones first: the same
rules as ``sim.timeline``. The cache is the decisions' cache (``sim.decide``): the
executor keeps a device buffer for every copy the decisions keep, frees the ones they
evict (``executor.cache``: pools preallocated, never more resident than a pool's slots).
Each pass is timed with perf_counter after synchronising, and on CUDA by events recorded
on the compute stream at its start and end (the event time is the one reported).
Legend: T tokens in the pass, C context, H hidden.
"""

from __future__ import annotations

import time
from collections import Counter

import numpy as np
import torch
from torch.nn import functional as nnf

from hobbit.executor.cache import DeviceCache
from hobbit.executor.link import Copy, CopyEngine
from hobbit.executor.weights import HostStore, kv_width
from hobbit.sim.decisions import Decisions, LayerStep, LogEntry
from hobbit.sim.timeline import Timeline, late_copies
from hobbit.sim.workload import Workload

HEAD_DIM = 64


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Dense:
    """One MoE layer's dense work and the LM head, at the model's shapes, with a KV cache."""

    def __init__(self, store: HostStore, max_context: int) -> None:
        w, m, dev = store.dense, store.model, store.device
        self.w = w
        self.h, self.kv = m.hidden_size, kv_width(m)
        self.heads, self.kv_heads = max(self.h // HEAD_DIM, 1), max(self.kv // HEAD_DIM, 1)
        self.cache = [
            torch.zeros(2, self.kv_heads, max_context + 1, self.kv // self.kv_heads, dtype=torch.bfloat16, device=dev)
            for _ in range(m.num_layers)
        ]

    def layer(self, x: torch.Tensor, layer: int, context: int) -> torch.Tensor:
        """x [T, H] -> x [T, H]; the new tokens end at position ``context``."""
        t, w = x.shape[0], self.w
        q = (x @ w["q"].t()).reshape(t, self.heads, -1).transpose(0, 1)  # [heads, T, d]
        kv = self.cache[layer]
        kv[0, :, context - t : context] = (x @ w["k"].t()).reshape(t, self.kv_heads, -1).transpose(0, 1)
        kv[1, :, context - t : context] = (x @ w["v"].t()).reshape(t, self.kv_heads, -1).transpose(0, 1)
        rep = self.heads // self.kv_heads
        k = kv[0, :, :context].repeat_interleave(rep, 0)
        v = kv[1, :, :context].repeat_interleave(rep, 0)
        a = nnf.scaled_dot_product_attention(q[:, :, : k.shape[-1]], k, v, is_causal=t > 1)
        x = x + a.transpose(0, 1).reshape(t, -1)[:, : self.h] @ w["o"].t()
        _ = x @ w["router"].t()
        if "shared_gu" in w:
            g, u = (x @ w["shared_gu"].t()).chunk(2, dim=-1)
            x = x + (nnf.silu(g) * u) @ w["shared_down"].t()
        return x

    def head(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.w["lm_head"].t()


def host_buffer(nbytes: int, device: torch.device) -> torch.Tensor:
    """A host buffer of ``nbytes`` a copy back from ``device`` lands in (pinned for a CUDA device, as MoE-Offloading's
    swap buffers are)."""
    return torch.empty(nbytes, dtype=torch.uint8, pin_memory=device.type == "cuda")


class Replayer:
    """Executes the decisions of one workload; ``run`` returns measured times."""

    def __init__(
        self,
        wl: Workload,
        dec: Decisions,
        store: HostStore,
        copy_cpu: int | None = None,
        copies: bool = True,
        record: bool = False,
        clear_queue: bool = False,
        serial_copies: bool = False,
        write_back: bool = False,
    ) -> None:
        """``record``: keep the schedule as it ran (``work``: (step, kind, start, end, index) as ``sim.plain.replay``
        records it, plus ``settle``, the cache's bookkeeping after a layer; ``copy_times``: tid -> (start, end)),
        seconds from the run's start. On CUDA each expert is then synchronised to time it. ``clear_queue``: each step
        drops the prefetches that have not started, and a use of one queues it again on demand (``CopyEngine.clear``);
        ``serial_copies``: a layer's experts start once every copy it issued has landed (the copies on the compute
        stream); ``write_back``: each copy first writes its buffer back to the host (``CopyEngine``)."""
        self.wl, self.dec, self.store, self.copy_cpu, self.copies = wl, dec, store, copy_cpu, copies
        self.clear_queue = clear_queue  # system.prefetch.clear_queue: each step drops the prefetches not started
        self.serial_copies = serial_copies  # system.copy_stream=compute: a layer's experts wait for all its copies
        # system.write_back: each copy first moves its buffer's old contents to a host buffer of the same size
        self.back: dict[int, torch.Tensor] = (
            {cls: host_buffer(k.nbytes, store.device) for cls, k in store.kernels.items()} if write_back else {}
        )
        self.work: list[tuple] | None = [] if record else None
        self.copy_times: dict[int, tuple[float, float]] = {}
        self.origin = 0.0
        self.device = store.device
        self.dense = Dense(store, max(wl.pass_context))
        # the decisions' pools, and the staging slots in the high pool's memory, allocated up front
        self.cache = DeviceCache(store, dec.slots, staging=dec.staging)
        self.log: list[LogEntry] = []  # as executed
        self.by_tid: dict[int, tuple[tuple[int, int, int], torch.Tensor]] = {}
        self.inflight: list[tuple[int, int, torch.Tensor]] = []  # dropped copies not done: (tid, class, buffer)
        self.views = {cls: {} for cls in store.kernels}  # id(buffer) -> typed views
        g = torch.Generator().manual_seed(0)
        self.x = (
            (torch.randn(int(max(np.diff([0, *wl.pass_end]))), store.model.hidden_size, generator=g) * 0.1)
            .to(torch.bfloat16)
            .to(self.device)
        )

    def _views(self, cls: int, buf: torch.Tensor) -> dict[str, torch.Tensor]:
        v = self.views[cls].get(id(buf))
        if v is None:
            v = self.views[cls][id(buf)] = self.store.kernels[cls].views(buf)
        return v

    def _issue(self, link: CopyEngine, step: LayerStep) -> None:
        if self.clear_queue:
            link.clear(g.tid for g in step.gpu)
        link.cancel(step.cancel)
        copies = []
        for (tid, _, demand), (layer, e, cls) in zip(step.loads, step.load_keys):
            self.log.append(LogEntry(step.pass_index, layer, e, "load" if demand else "prefetch", cls))
            buf = self.cache.take(cls)
            self.by_tid[tid] = ((layer, e, cls), buf)
            copies.append(Copy(tid, self.store.experts[(layer, e, cls)], buf, demand, self.back.get(cls)))
        if copies:
            link.submit(copies)

    def _note(self, i: int, kind: str, t0: float, j: int = -1) -> float:
        """Record a piece of work from ``t0`` to now (when recording); returns now."""
        now = time.perf_counter()
        if self.work is not None:
            self.work.append((i, kind, t0 - self.origin, now - self.origin, j))
        return now

    def _compute(self, link: CopyEngine, step: LayerStep, tokens: int, i: int = 0) -> float:
        """The layer's experts in arrival order; returns the time spent waiting for copies."""
        todo = list(range(len(step.gpu)))
        stall = 0.0
        timed = self.work is not None
        if self.serial_copies and step.loads:  # copies on the compute stream: all of the layer's land first
            t0 = time.perf_counter()
            for ld in step.loads:
                link.wait(ld.tid)
            stall += self._note(i, "stall", t0) - t0
        while todo:
            ready = [j for j in todo if link.done(step.gpu[j].tid)]
            if not ready:
                t0 = time.perf_counter()
                link.wait(link.first(step.gpu[j].tid for j in todo))
                stall += self._note(i, "stall", t0) - t0
                continue
            for j in ready:
                tid, cls, n = step.gpu[j]
                layer, e = step.gpu_keys[j]
                self.log.append(LogEntry(step.pass_index, layer, e, "compute", cls))
                buf = self.by_tid[tid][1] if tid in self.by_tid else self.cache.get((layer, e, cls))
                t0 = time.perf_counter() if timed else 0.0
                self.store.kernels[cls].forward(self.x[: max(n, 1)], self._views(cls, buf))
                if timed:
                    sync(self.device)
                    self._note(i, "expert", t0, j)
            todo = [j for j in todo if j not in ready]
        host = self.store.kernels[0]
        for j, (n, (layer, e)) in enumerate(zip(step.cpu, step.cpu_keys)):  # on the host CPU (Fiddler, llama.cpp)
            t0 = time.perf_counter() if timed else 0.0
            host.forward(self.x[: max(n, 1)].cpu(), host.views(self.store.experts[(layer, e, 0)]))
            if timed:
                self._note(i, "cpu_expert", t0, j)
        return stall

    def _settle(self, link: CopyEngine, step: LayerStep) -> None:
        """After the layer: free what the decisions evicted, keep what they kept (prefetches pinned in
        their pool included, their copies possibly still in flight), free the rest this layer
        loaded or dropped (prefetches waiting in staging slots stay there). A dropped copy still in
        flight is not waited for (the compute stream goes on, as the simulator has it): its buffer
        returns once the copy is done."""
        still = []
        for t, cls, buf in self.inflight:
            if link.done(t):
                self.cache.give(cls, buf)
            else:
                still.append((t, cls, buf))
        self.inflight = still
        # a copy is resident after the step when it was before, plus the times the cache took it in, less
        # the times it pushed it out, is positive: a copy loaded and evicted later in the step (a prefetch
        # taking its slot) is not kept, its buffer goes back below; a resident copy evicted and loaded
        # again in the step (a victim its own layer then needs) is the new buffer
        loaded_here = set(step.kept)
        out = Counter(step.evicted)
        kept = {key for key in loaded_here if (key in self.cache.resident) + step.kept.count(key) - out[key] > 0}
        for key in out:
            if self.cache.evict(key) or key in loaded_here:
                self.log.append(LogEntry(step.pass_index, key.layer, key.expert, "evict", key.precision))
        used = {g.tid for g in step.gpu} | set(step.cancel)
        for tid in [*used, *(ld.tid for ld in step.loads if ld.tid not in used)]:
            if tid not in self.by_tid:
                continue
            key, buf = self.by_tid[tid]
            if key not in step.kept and tid not in used:
                continue  # a prefetch waiting in a staging slot
            del self.by_tid[tid]
            if key in kept:
                self.cache.admit(key, buf)
            elif link.done(tid):
                self.cache.give(key[2], buf)
            else:
                self.inflight.append((tid, key[2], buf))  # a dropped copy still in flight into this buffer

    def _preload(self) -> None:
        """Experts a static placement keeps on the device for good (hits with transfer -1)."""
        for step in self.dec.steps:
            for (tid, cls, _), (layer, e) in zip(step.gpu, step.gpu_keys):
                if tid < 0 and (layer, e, cls) not in self.cache.resident:
                    buf = self.cache.take(cls)
                    buf.copy_(self.store.experts[(layer, e, cls)])
                    self.cache.admit((layer, e, cls), buf, pinned=True)

    def run(self) -> Timeline:
        wl, L = self.wl, self.wl.num_layers
        n_pass, n_steps = len(wl.pass_start), len(self.dec.steps)
        tl = Timeline(np.zeros(n_pass), np.zeros(n_pass), np.zeros(n_steps), np.zeros(n_steps))
        self._preload()
        link = CopyEngine(self.device, self.copy_cpu, dry=not self.copies)
        cuda = self.device.type == "cuda"
        events = (
            [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n_pass)]
            if cuda
            else []
        )
        origin = self.origin = time.perf_counter()
        timed = self.work is not None
        try:
            with torch.no_grad():
                for p in range(n_pass):
                    tokens = wl.pass_end[p] - wl.pass_start[p]
                    sync(self.device)
                    tl.pass_start[p] = time.perf_counter() - origin
                    if cuda:
                        events[p][0].record()
                    x = self.x[:tokens]
                    for layer in range(L):
                        i = p * L + layer
                        step = self.dec.steps[i]
                        t0 = time.perf_counter() if timed else 0.0
                        x = self.dense.layer(x, layer, wl.pass_context[p])
                        sync(self.device)
                        if timed:
                            t0 = self._note(i, "dense", t0)
                        self._issue(link, step)
                        tl.late += len(late_copies(step, link.done))
                        if timed and step.loads:
                            self._note(i, "issue", t0)
                        tl.step_stall[i] = self._compute(link, step, tokens, i)
                        sync(self.device)
                        t0 = time.perf_counter() if timed else 0.0
                        self._settle(link, step)
                        tl.step_end[i] = (self._note(i, "settle", t0) if timed else time.perf_counter()) - origin
                    t0 = time.perf_counter() if timed else 0.0
                    self.dense.head(x)
                    if timed:
                        sync(self.device)
                        self._note(p * L + L - 1, "head", t0)
                    if cuda:
                        events[p][1].record()
                    sync(self.device)
                    tl.pass_end[p] = time.perf_counter() - origin
        finally:
            link.close()
        if cuda:  # per pass, the device's own clock: CUDA events on the compute stream
            sync(self.device)
            for p, (start, end) in enumerate(events):
                tl.pass_end[p] = tl.pass_start[p] + start.elapsed_time(end) / 1e3
        tl.link_busy_s, tl.bytes_moved, tl.cancelled = link.busy_s, link.moved, link.cancelled
        if timed:
            self.copy_times = {
                tid: (c.start_s - origin, c.end_s - origin) for tid, c in link.copies.items() if c.done.is_set()
            }
        return tl
