"""Precisions: the formats a copy of an expert takes (bits per weight, ``FORMAT_BPW``; the quantisation group,
``quant_group``) and the system's knobs for the precision each missing expert is loaded at (``PrecisionConfig``,
``system.precision``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

# Group-wise formats as this project's executor packs them (executor/quant.py): codes plus an fp16 scale and
# zero per group of ``quant_group_size`` inputs (ModelConfig.quant_meta_bytes_per_group).
BITS = {"fp16": 16, "bf16": 16, "int8": 8, "int4": 4, "int2": 2}
# Other systems' formats, in bits per weight with their scales (block layouts):
FORMAT_BPW = {
    "q8_0": 8.5,  # llama.cpp block_q8_0: fp16 scale + 32 int8 codes = 34 B / 32 weights (ggml-common.h)
    "q4_0": 4.5,  # llama.cpp block_q4_0: fp16 scale + 16 B of codes = 18 B / 32 weights (ggml-common.h)
    "q2_k": 2.625,  # llama.cpp block_q2_K: 84 B / 256 weights (ggml-common.h)
    "hqq2": 3.02,  # HQQ 2-bit, group 16, 8-bit quantised scales and zeros (mixtral-offloading's experts,
    # hqq/core/quantize.py at the commit it pins): 2 + 0.5 + 0.5 + ~0.02 bits
}
PRECISIONS = (*BITS, *FORMAT_BPW)


def quant_group(k: int, group: int = 128) -> int:
    """The quantisation group for a layer with ``k`` input features: ``group`` when it divides
    ``k``, else the largest of 64 or 32 that does (what int4 kernels take), else ``k`` itself."""
    for g in (group, 64, 32):
        if g <= group and k % g == 0:
            return g
    return k


@dataclass(frozen=True)
class PrecisionConfig:
    """How a missing expert is loaded. ``mode``: hobbit (T1/T2 rule) | high | low."""

    LIMITS: ClassVar[dict[str, str]] = {"t1": "[0,1]", "t2": "[0,1]"}

    mode: str = "hobbit"
    """hobbit (the T1/T2 rule) | high (every miss at high precision) | low (every miss at low precision)."""
    t1: float = 0.6
    """A selected expert whose score (the normalised weight ranked above it) is at most t1 loads at high
    precision; top-1 always does (paper §3.2; 0.6 its default for Mixtral)."""
    t2: float = 0.9
    """Scores in (t1, t2] load at low precision; above t2 the expert is skipped (paper §3.2)."""
    serve_any_cached: bool = False
    """A cached copy of either precision serves a hit, a low copy serving even an expert the rule loads at high
    precision (the top-1 included). False: a cached copy serves when it is at least the precision the rule asks (any
    copy serves an expert the rule would skip). The paper does not say; false keeps its "top-1 always high" and the
    quality it reports (docs/design.md, Policies)."""
    multi_token: str = "max"
    """A pass with many tokens (prefill): max (an expert loads at the highest precision any token needs) | high
    (at high precision)."""
    high: str = ""
    """The format of an expert loaded or computed at high precision, where it differs from the model file's
    (``system.weights``): HOBBIT on the Jetson ran Q8_0 experts (paper §3.2); empty: the weights' own."""
    low: str = "int4"
    """The format of a low-precision copy of an expert: int4 (this project's executor: 4 bits with an fp16 scale
    and zero per 128 inputs), int8, int2, a ggml type (q4_0, q2_k, ...) or hqq2 (mixtral-offloading's 2-bit)."""
