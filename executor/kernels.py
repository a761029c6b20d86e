"""One expert's SwiGLU at a given precision, on the device, from one contiguous byte buffer.

Layouts (all weights [out, in]; activations bf16, as torch's int4 kernels require):
- ``fp16``/``bf16``: gate_up [2F, H] and down [H, F] in bf16 (the 16-bit class; on the CPU
  bf16 is the fast 16-bit type);
- ``int4``: packed for ``_weight_int4pack_mm_for_cpu`` (CPU) or ``_weight_int4pack_mm``
  (CUDA sm80+), with scales and zeros [G, N, 2] in bf16; the CUDA packing is checked
  against the reference at start-up and falls back to it if the kernel disagrees;
- ``int8``/``int2``: codes, scales and zeros, dequantised on the fly (the reference path).
``reference`` is the plain dequantised computation every path is tested against.
Legend: H hidden, F expert FFN, N out features, K in features, G groups.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
from torch.nn import functional as nnf

from hobbit.executor.quant import BITS, QuantizedWeight, dequantize, group_size, quantize, unpack


@dataclass
class _Part:
    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype

    @property
    def nbytes(self) -> int:
        return int(torch.tensor([], dtype=self.dtype).element_size() * torch.Size(self.shape).numel())


class ExpertKernel:
    """Packs an expert for one precision and device, and runs it from a device buffer."""

    def __init__(self, precision: str, hidden: int, ffn: int, device: torch.device, group: int = 128) -> None:
        self.precision, self.hidden, self.ffn, self.device = precision, hidden, ffn, device
        self.group = group
        self.mode = "dense" if precision in ("fp16", "bf16") else ("int4" if precision == "int4" else "codes")
        if self.mode == "int4" and device.type == "cuda":
            self.cuda_order = self._pick_cuda_nibble_order()
            if self.cuda_order == "reference":
                self.mode = "codes"
        self.parts = self._layout()
        self.offsets = []
        off = 0
        for p in self.parts:
            self.offsets.append(off)
            off += p.nbytes
        self.nbytes = off

    # ------------------------------------------------------------------ layout

    def _mats(self) -> list[tuple[str, int, int]]:
        return [("gu", 2 * self.ffn, self.hidden), ("down", self.hidden, self.ffn)]

    def _layout(self) -> list[_Part]:
        parts = []
        for name, n, k in self._mats():
            g = group_size(k, self.group)
            if self.mode == "dense":
                parts.append(_Part(name, (n, k), torch.bfloat16))
            elif self.mode == "int4":
                packed = self._int4_pack(torch.zeros(n, k, dtype=torch.uint8))
                parts += [
                    _Part(name, tuple(packed.shape), packed.dtype),
                    _Part(name + "_sz", (k // g, n, 2), torch.bfloat16),
                ]
            else:
                bits = BITS[self.precision]
                parts += [
                    _Part(name, (n, k * bits // 8), torch.uint8),
                    _Part(name + "_scale", (n, k // g), torch.bfloat16),
                    _Part(name + "_zero", (n, k // g), torch.bfloat16),
                ]
        return parts

    def _int4_pack(self, codes: torch.Tensor) -> torch.Tensor:
        """Codes [N, K] (0..15) in the device kernel's packing (computed on the device)."""
        if self.device.type == "cuda":
            lo, hi = codes[:, 0::2].to(torch.uint8), codes[:, 1::2].to(torch.uint8)
            packed = (hi << 4 | lo) if self.cuda_order == "low_first" else (lo << 4 | hi)
            return torch.ops.aten._convert_weight_to_int4pack(packed.to(self.device), 8).cpu()
        return torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes.to(torch.int32), 1)

    # ------------------------------------------------------------------ packing (host)

    def _quantised(self, w: torch.Tensor) -> QuantizedWeight:
        return quantize(w, BITS[self.precision], self.group)

    def pack(self, gu: torch.Tensor, down: torch.Tensor) -> torch.Tensor:
        """One expert (float [2F, H], [H, F]) -> a contiguous uint8 host buffer of ``nbytes``."""
        tensors = []
        for w in (gu, down):
            if self.mode == "dense":
                tensors.append(w.to(torch.bfloat16))
                continue
            q = self._quantised(w)
            if self.mode == "int4":
                codes = unpack(q.packed, 4, q.shape[1])
                tensors += [self._int4_pack(codes), torch.stack([q.scale.t(), q.zero.t()], -1).to(torch.bfloat16)]
            else:
                tensors += [q.packed, q.scale.to(torch.bfloat16), q.zero.to(torch.bfloat16)]
        return torch.cat([t.contiguous().reshape(-1).view(torch.uint8) for t in tensors])

    # ------------------------------------------------------------------ compute (device)

    def views(self, buf: torch.Tensor) -> dict[str, torch.Tensor]:
        """Typed views of a device buffer (no copy)."""
        out = {}
        for p, off in zip(self.parts, self.offsets):
            out[p.name] = buf[off : off + p.nbytes].view(p.dtype).reshape(p.shape)
        return out

    def _matmul(self, x: torch.Tensor, v: dict[str, torch.Tensor], name: str, k: int) -> torch.Tensor:
        g = group_size(k, self.group)
        if self.mode == "dense":
            return x @ v[name].t()
        if self.mode == "int4":
            if self.device.type == "cuda":
                return torch.ops.aten._weight_int4pack_mm(x, v[name], g, v[name + "_sz"])
            return torch.ops.aten._weight_int4pack_mm_for_cpu(x, v[name], g, v[name + "_sz"])
        n = v[name].shape[0]
        q = QuantizedWeight(
            v[name], v[name + "_scale"].float(), v[name + "_zero"].float(), BITS[self.precision], g, (n, k)
        )
        return x @ dequantize(q, torch.bfloat16).t()

    def forward(self, x: torch.Tensor, v: dict[str, torch.Tensor]) -> torch.Tensor:
        """SwiGLU of ``x`` [T, H] (bf16) through the expert in buffer views ``v``."""
        gate, up = self._matmul(x, v, "gu", self.hidden).chunk(2, dim=-1)
        return self._matmul(nnf.silu(gate) * up, v, "down", self.ffn)

    def _pick_cuda_nibble_order(self) -> str:
        """Which byte order the CUDA int4 packer expects, checked on a small random expert."""
        g = torch.Generator().manual_seed(0)
        n, k = 64, max(self.group, 128)
        w = torch.randn(n, k, generator=g)
        q = quantize(w, 4, self.group)
        codes = unpack(q.packed, 4, k)
        x = torch.randn(4, k, generator=g).to(torch.bfloat16).to(self.device)
        want = x.float() @ dequantize(q).to(self.device).t()
        sz = torch.stack([q.scale.t(), q.zero.t()], -1).to(torch.bfloat16).to(self.device)
        for order in ("low_first", "high_first"):
            try:
                self.cuda_order = order
                got = torch.ops.aten._weight_int4pack_mm(
                    x, self._int4_pack(codes).to(self.device), group_size(k, self.group), sz
                )
                if torch.allclose(got.float(), want, atol=0.05 * want.abs().max().item()):
                    return order
            except RuntimeError:
                break
        warnings.warn(
            "CUDA int4 kernel disagrees with the reference (or is missing): int4 experts run through "
            "the dequantised reference path",
            stacklevel=2,
        )
        return "reference"


def reference(x: torch.Tensor, gu: torch.Tensor, down: torch.Tensor, precision: str, group: int = 128) -> torch.Tensor:
    """The oracle: weights quantised and dequantised in float32, activations as given (float32)."""
    if precision not in ("fp16", "bf16"):
        gu = dequantize(quantize(gu, BITS[precision], group))
        down = dequantize(quantize(down, BITS[precision], group))
    else:
        gu, down = gu.to(torch.bfloat16).float(), down.to(torch.bfloat16).float()
    gate, up = (x.float() @ gu.t()).chunk(2, dim=-1)
    return (nnf.silu(gate) * up) @ down.t()
