"""Group-wise weight-only quantisation: int8, int4 and int2 with per-group scales and zeros.

One portable format, the one torch's CPU int4 kernel reads: codes q in [0, 2^b), the
weight w = (q - mid) * scale + zero with mid = 2^(b-1), one fp scale and one fp zero per
group of ``group`` consecutive input features; codes packed little-endian into uint8
([N, K * b / 8]). ``dequantize`` is the plain reference every faster path is checked
against. Legend: N output features, K input features, G groups (K / group).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hobbit.sim.precisions import quant_group

BITS = {"int8": 8, "int4": 4, "int2": 2}


@dataclass
class QuantizedWeight:
    """A [N, K] weight at ``bits`` bits: packed codes, scales and zeros [N, G]."""

    packed: torch.Tensor  # [N, K * bits / 8] uint8
    scale: torch.Tensor  # [N, G]
    zero: torch.Tensor  # [N, G]
    bits: int
    group: int
    shape: tuple[int, int]

    @property
    def nbytes(self) -> int:
        return self.packed.numel() + 2 * (self.scale.numel() + self.zero.numel())  # scales travel as 16 bit


def group_size(k: int, group: int) -> int:
    """The group used for ``k`` input features (the simulator's byte counts use the same rule)."""
    return quant_group(k, group)


def quantize(w: torch.Tensor, bits: int, group: int = 128) -> QuantizedWeight:
    """Asymmetric min-max quantisation of w [N, K] per group of input features."""
    n, k = w.shape
    g = group_size(k, group)
    x = w.detach().float().reshape(n, k // g, g)  # [N, G, g]
    lo, hi = x.amin(dim=-1), x.amax(dim=-1)
    levels = 2**bits - 1
    scale = (hi - lo).clamp(min=1e-12) / levels  # [N, G]
    q = torch.round((x - lo[..., None]) / scale[..., None]).clamp(0, levels).to(torch.uint8)
    mid = 2 ** (bits - 1)
    zero = lo + mid * scale  # w = (q - mid) * scale + zero
    return QuantizedWeight(pack(q.reshape(n, k), bits), scale, zero, bits, g, (n, k))


def pack(q: torch.Tensor, bits: int) -> torch.Tensor:
    """uint8 codes [N, K] -> [N, K * bits / 8], the first code in the low bits."""
    per = 8 // bits
    n, k = q.shape
    q = q.to(torch.int32).reshape(n, k // per, per)
    shifts = torch.arange(per, dtype=torch.int32) * bits
    return (q << shifts).sum(dim=-1).to(torch.uint8)


def unpack(packed: torch.Tensor, bits: int, k: int) -> torch.Tensor:
    """Inverse of ``pack``: uint8 [N, K * bits / 8] -> codes [N, K]."""
    per = 8 // bits
    shifts = torch.arange(per, dtype=torch.int32) * bits
    codes = (packed.to(torch.int32)[..., None] >> shifts) & (2**bits - 1)
    return codes.reshape(packed.shape[0], -1)[:, :k].to(torch.uint8)


def dequantize(qw: QuantizedWeight, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The reference: w = (q - mid) * scale + zero, [N, K] in ``dtype``."""
    n, k = qw.shape
    q = unpack(qw.packed, qw.bits, k).float().reshape(n, k // qw.group, qw.group)
    mid = 2 ** (qw.bits - 1)
    w = (q - mid) * qw.scale[..., None] + qw.zero[..., None]
    return w.reshape(n, k).to(dtype)


def fake_quantize(w: torch.Tensor, precision: str, group: int = 128) -> torch.Tensor:
    """``w`` as a weight-only kernel at ``precision`` sees it (fp16/bf16 pass through rounded)."""
    if precision in ("fp16", "bf16"):
        return w.to(torch.float16 if precision == "fp16" else torch.bfloat16).to(w.dtype)
    return dequantize(quantize(w, BITS[precision], group), w.dtype)
