"""Roofline costs: how long each piece of work takes on a given machine.

time = max(bytes moved / memory bandwidth, flops / peak) + kernel launches. Transfers
take t0 + bytes / B on the link (pinned host memory or the SSD). Contention: while a copy
and the compute stream run together each may slow the other (shared DRAM on unified
memory, the memory bus of a CPU); ``contention`` gives the factors, the engines charge
them over the overlap. A measured profile (``hobbit calibrate``) replaces these numbers
when present.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from hobbit.sim.config import HardwareConfig, ModelConfig
from hobbit.sim.memory import MemoryFit
from hobbit.sim.policies.base import HIGH

GB = 1e9
TFLOP = 1e12
DENSE_KERNELS = 8  # norms, qkv, attention, output, router, residuals
EXPERT_KERNELS = 3  # gate/up, activation, down


def interp(x: float, xs: list[int], ys: list[float]) -> float:
    """Piecewise linear through the measured points; beyond the last, the line through the last two
    (a larger batch keeps the cost growing, it does not stop at the largest one measured)."""
    if len(xs) >= 2 and x > xs[-1]:
        return float(ys[-1] + (ys[-1] - ys[-2]) * (x - xs[-1]) / (xs[-1] - xs[-2]))
    return float(np.interp(x, xs, ys))


class Contention(NamedTuple):
    """Time multipliers while copies and compute overlap: a copy's while the compute stream works,
    the dense part's, and a high- and a low-precision expert's while a copy runs."""

    link: float = 1.0
    dense: float = 1.0
    high: float = 1.0
    low: float = 1.0

    @property
    def active(self) -> bool:
        return any(f != 1.0 for f in self)

    def expert(self, cls: int) -> float:
        return self.high if cls == HIGH else self.low


MEMOS_KEPT = 8  # cost models whose answers are remembered across instances (CostModel.__post_init__)
_MEMOS: dict[tuple, dict] = {}


@dataclass(frozen=True)
class CostModel:
    """Seconds for the work of one forward pass, from a model and a hardware spec."""

    model: ModelConfig
    hw: HardwareConfig
    layer_scale: float = 1.0  # dense work per simulated layer (> 1 when only some layers were recorded)
    cpu_efficiency: float = 1.0  # the system's CPU expert kernel relative to the hardware's cpu_* figures
    cpu_flops_efficiency: float = 0.0  # its share of cpu_tflops on compute-bound work (0: cpu_efficiency)
    gpu_efficiency: float = 0.0  # the system's GPU kernels' share of peak memory bandwidth (0: the hardware's)
    gpu_flops_efficiency: float = 0.0  # their share of peak FLOPs (0: the hardware's)
    launch_s: float = -1.0  # the system's cost of one kernel launch on the GPU (-1: the hardware's kernel_overhead_s)
    kv_scale: float = 1.0  # the KV cache's bytes relative to 16 bit (system.kv_bits / 16: llama.cpp's -ctk/-ctv)
    memory: MemoryFit | None = None  # the run's sizes in its weights' format and its host tier (None: fp16 + int4, RAM)
    write_back: bool = False  # a copy also moves back the expert it replaces, on one stream (system.write_back)
    serial_copies: bool = False  # copies run on the compute stream (system.copy_stream=compute): the engines' rule
    clear_queue: bool = False  # each step drops the copies ahead still queued (system.prefetch.clear_queue): theirs too
    # the layers (the workload's) that run whole on the CPU (system.cpu_layer_scope=whole), and the pass size from which
    # their dense part is copied to the device and run there instead (system.offload_min_batch; 0: never)
    cpu_dense_layers: frozenset[int] = frozenset()
    dense_offload_tokens: int = 0
    _memo: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        """One memo for every cost model of the same model, hardware and scales (``MEMOS_KEPT``, the last used): a
        sweep's points build a cost model each and ask it the same few thousand sizes. Every value depends on those
        fields (and the class) alone."""
        try:
            key = (
                type(self),
                self.model,
                self.hw,
                self.layer_scale,
                self.cpu_efficiency,
                self.cpu_flops_efficiency,
                self.gpu_efficiency,
                self.gpu_flops_efficiency,
                self.launch_s,
                self.kv_scale,
                self.memory,
                self.write_back,
                self.cpu_dense_layers,
                self.dense_offload_tokens,
            )
            hash(key)  # (an empty dict's pop would not hash it)
        except TypeError:  # a field that cannot be hashed (a measured profile's lists): this model keeps its own memo
            return
        memo = _MEMOS.pop(key, None)
        memo = {} if memo is None else memo
        _MEMOS[key] = memo
        while len(_MEMOS) > MEMOS_KEPT:
            del _MEMOS[next(iter(_MEMOS))]
        object.__setattr__(self, "_memo", memo)

    def cached(self, name: str, *args: int) -> float:
        """``getattr(self, name)(*args)``, remembered: the engines ask for the same few sizes again and again."""
        key = (name, *args)
        if key not in self._memo:
            self._memo[key] = getattr(self, name)(*args)
        return self._memo[key]

    @property
    def _launch_s(self) -> float:
        """One kernel launch: the system's (a runtime that replays CUDA graphs or fuses a layer's experts launches
        for less) when it states one, else the hardware's ``kernel_overhead_s``."""
        return self.launch_s if self.launch_s >= 0 else self.hw.kernel_overhead_s

    @property
    def _mem_bps(self) -> float:
        return self.hw.device_mem_gbps * GB * (self.gpu_efficiency or self.hw.compute_efficiency)

    @property
    def contention(self) -> Contention:
        """The measured factors of a profile, else the hardware's (1.0 each: none)."""
        prof = self.hw.profile
        if prof is not None:
            link = prof.link_gbps / prof.busy_link_gbps if prof.busy_link_gbps > 0 else 1.0
            return Contention(link, prof.busy_dense_factor, prof.busy_expert_high_factor, prof.busy_expert_low_factor)
        c = self.hw.contention_compute
        return Contention(self.hw.contention_link, c, c, c)

    @property
    def _flops(self) -> float:
        return self.hw.device_tflops * TFLOP * (self.gpu_flops_efficiency or self.hw.compute_efficiency)

    @property
    def ssd_gbps(self) -> float:
        """The rate a run reads experts from the SSD: the memory fit's (page faults for a memory-mapped file,
        ``system.host_load=mmap``; the drive's rate otherwise), or the drive's without one."""
        return self.memory.ssd_gbps if self.memory is not None and self.memory.ssd_gbps > 0 else self.hw.ssd_gbps

    @property
    def link_gbps(self) -> float:
        if self.hw.profile is not None:
            return self.hw.profile.link_gbps
        return self.ssd_gbps if self.hw.expert_source == "ssd" else self.hw.link_gbps

    @property
    def link_t0_s(self) -> float:
        if self.hw.profile is not None:
            return self.hw.profile.link_t0_s
        return self.hw.ssd_t0_s if self.hw.expert_source == "ssd" else self.hw.link_t0_s

    def expert_bytes(self, cls: int) -> int:
        """One expert's bytes at ``cls``: at high precision the mean over layers in the weights' format (a file's
        layers may differ), at low precision the low format's."""
        mem = self.memory
        if mem is None:
            return self.model.expert_bytes("fp16" if cls == HIGH else "int4")
        return round(sum(mem.expert_bytes) / len(mem.expert_bytes)) if cls == HIGH else mem.low_bytes

    def ssd_read_s(self, nbytes: int) -> float:
        """The expected time to bring a host-side expert of ``nbytes`` into RAM first: the share of host-side experts
        RAM cannot hold is read from the SSD (``sim.memory``, the page cache's ``uniform`` rule)."""
        mem = self.memory
        if mem is None or mem.ram_share >= 1.0 or self.hw.expert_source != "host":
            return 0.0
        return mem.ssd_share * (self.hw.ssd_t0_s + nbytes / (mem.ssd_gbps * GB))

    def transfer_s(self, nbytes: int) -> float:
        """A copy of ``nbytes`` onto the device: t0 + bytes / B (plus what the SSD adds first); with ``write_back``,
        the evicted expert's copy back to the host follows it on the same stream, another t0 + bytes / B."""
        if self.link_gbps == float("inf"):
            return 0.0
        one = self.link_t0_s + nbytes / (self.link_gbps * GB)
        return one * (2 if self.write_back else 1) + self.ssd_read_s(nbytes)

    def link_bytes(self, nbytes: Any) -> Any:
        """The bytes a copy of ``nbytes`` (an int, or an array of them) moves over the link: twice as many with
        ``write_back``."""
        return 2 * nbytes if self.write_back else nbytes

    def issue_s(self) -> float:
        """The compute stream's time to issue one copy (measured profiles only; a GPU's async copy
        launch is within ``kernel_overhead_s`` of the roofline)."""
        return self.hw.profile.copy_issue_s if self.hw.profile is not None else 0.0

    def dense_s(self, tokens: int, context: int) -> float:
        """Attention, router, norms and shared experts of one MoE layer for ``tokens`` new tokens."""
        if self.hw.profile is not None:
            a, b, c = self.hw.profile.dense_s
            step = self.hw.profile.step_dense_s
            return max(
                self.layer_scale * (a + b * tokens + c * tokens * context + step) + self.hw.profile.layer_overhead_s,
                0.0,
            )
        nbytes, flops = self._dense_work(tokens, context)
        t = max(nbytes / self._mem_bps, flops / self._flops)
        return self.layer_scale * (t + DENSE_KERNELS * self._launch_s)

    def _dense_bytes(self) -> float:
        """One MoE layer's dense weights, in the run's format."""
        return self.model.dense_bytes_per_layer() if self.memory is None else self.memory.dense_bytes

    def _dense_work(self, tokens: int, context: int) -> tuple[float, float]:
        """(bytes read, FLOPs) of one MoE layer's dense part: its weights and its KV cache at ``context``."""
        m = self.model
        kv_per_layer = m.kv_bytes_per_token * self.kv_scale / max(m.num_layers, 1)
        flops = 2 * m.dense_params_per_layer * tokens + 4 * tokens * context * m.hidden_size
        return self._dense_bytes() + kv_per_layer * context, flops

    def layer_dense_s(self, layer: int, tokens: int, context: int) -> float:
        """``dense_s`` of ``layer``, which may run whole on the CPU (``cpu_dense_layers``): there at the CPU's rates
        (``cpu_dense_s``), or, in a pass of ``dense_offload_tokens`` or more, on the device after its weights' copy
        on the compute stream (ggml's scheduler copies a host-side weight before the product that needs it). The copy
        is from RAM over the host link: a layer's dense weights are read by every token, so they stay in RAM even
        where the experts come from an SSD."""
        if layer not in self.cpu_dense_layers:
            return self.cached("dense_s", tokens, context)
        if self.dense_offload_tokens and tokens >= self.dense_offload_tokens:
            copy = self.hw.link_t0_s + self._dense_bytes() / (self.hw.link_gbps * GB)
            return self.cached("dense_s", tokens, context) + self.layer_scale * copy
        return self.cached("cpu_dense_s", tokens, context)

    def cpu_dense_s(self, tokens: int, context: int) -> float:
        """``dense_s`` on the host CPU: the layer's dense weights and its KV cache read at the CPU's memory bandwidth,
        or its FLOPs at the CPU's rate (the system's CPU kernel efficiencies, as for its CPU experts)."""
        nbytes, flops = self._dense_work(tokens, context)
        t = max(
            nbytes / (self.hw.cpu_mem_gbps * GB * self.cpu_efficiency),
            flops / (self.hw.cpu_tflops * TFLOP * (self.cpu_flops_efficiency or self.cpu_efficiency)),
        )
        return self.layer_scale * t

    def pass_dense(self, tokens: int, context: int, num_layers: int) -> list[float]:
        """[L] each layer's ``layer_dense_s`` in a pass of ``tokens`` at ``context`` (remembered, as ``cached``)."""
        key = ("pass_dense", tokens, context, num_layers)
        if key not in self._memo:
            self._memo[key] = [self.layer_dense_s(layer, tokens, context) for layer in range(num_layers)]
        return self._memo[key]

    def other_s(self, tokens: int) -> float:
        """Embeddings, LM head and dense FFN layers: once per forward pass."""
        if self.hw.profile is not None:
            if self.hw.profile.head_s:
                return interp(tokens, self.hw.profile.expert_tokens, self.hw.profile.head_s)
            a, b = self.hw.profile.other_s
            return a + b * tokens
        m = self.model
        weights = 2 * m.other_params if self.memory is None else self.memory.other_bytes
        t = max(weights / self._mem_bps, 2 * m.other_params * tokens / self._flops)
        return t + 2 * self._launch_s

    def expert_s(self, cls: int, tokens: int) -> float:
        """One expert's SwiGLU for ``tokens`` tokens on the device, weights resident."""
        if self.hw.profile is not None:
            prof = self.hw.profile
            table = prof.expert_high_s if cls == HIGH else prof.expert_low_s
            step = prof.step_expert_high_s if cls == HIGH else prof.step_expert_low_s
            return interp(tokens, prof.expert_tokens, table) + step
        nbytes = self.expert_bytes(cls)
        bw = self._mem_bps * (1.0 if cls == HIGH else self.hw.low_precision_efficiency)
        flops = 2 * self.model.expert_params * tokens
        return max(nbytes / bw, flops / self._flops) + EXPERT_KERNELS * self._launch_s

    def cpu_expert_s(self, tokens: int) -> float:
        """One expert on the host CPU at high precision (Fiddler, llama.cpp, HOBBIT's CPU mode), plus
        moving the activations across the link and back. When experts live on an SSD (``expert_source:
        ssd``, the Jetson), the weights do not fit in memory and the CPU reads them from the SSD first
        (llama.cpp's mmap pages them in on every use, at ``hardware.ssd_fault_gbps``: ``ssd_gbps``)."""
        if self.hw.profile is not None:
            return interp(tokens, self.hw.profile.expert_tokens, self.hw.profile.cpu_expert_s)
        m = self.model
        nbytes = self.expert_bytes(HIGH)
        flops_eff = self.cpu_flops_efficiency or self.cpu_efficiency
        compute = max(
            nbytes / (self.hw.cpu_mem_gbps * GB * self.cpu_efficiency),
            2 * m.expert_params * tokens / (self.hw.cpu_tflops * TFLOP * flops_eff),
        )
        act = 2 * tokens * m.hidden_size
        move = 0.0 if self.hw.unified_memory else 2 * (self.hw.link_t0_s + act / (self.hw.link_gbps * GB))
        read = (
            self.hw.ssd_t0_s + nbytes / (self.ssd_gbps * GB)
            if self.hw.expert_source == "ssd"
            else self.ssd_read_s(nbytes)
        )
        return read + compute + move
