"""Weight formats MoE models are stored in, their real sizes, and llama.cpp's type for each tensor of a file type.

Three families of format:

- ggml's types (``GGML_TYPES``: weights and bytes per block), as ggml's block structs define them
  (ggml/src/ggml-common.h at llama.cpp 01243c58; the type traits in ggml/src/ggml.c at 00bdaa10 set each type's
  block to ``QK*`` weights and ``sizeof(block_*)`` bytes);
- llama.cpp's file types (Q4_K_M, ...): ``tensor_type`` gives the type that ``llama_tensor_get_type`` and its helpers
  in src/llama-quant.cpp at llama.cpp 007dbbf3 give a tensor (``tensor_get_category``, ``use_more_bits``,
  ``tensor_type_fallback``, ``llama_ftype_get_default_type``), without an importance matrix;
- this project's executor formats (fp16, bf16, int8/int4/int2 group-wise, hqq2: ``ModelConfig.expert_bytes``) and
  ``fp8``: e4m3 weights with one fp32 scale per 128 x 128 block, as DeepSeek-V3's published checkpoint stores them.

``weights(model, fmt)`` sizes one routed expert per MoE layer, each MoE layer's other weights, and the rest.

Sources (https://github.com/ggml-org/llama.cpp/blob/<commit>/<file>):
01243c587feceaa5d6a6c2305535ef2f549c48b8/ggml/src/ggml-common.h,
00bdaa105cb03380daf899b4fc9f026555745269/ggml/src/ggml.c,
007dbbf3fd17eefe9b47fee45f48f7ba5e62b714/src/llama-quant.cpp,
0024aa7417efd50a7c2a79e049dfbbbceb0beaaf/convert_hf_to_gguf.py (which tensors a GGUF holds in F32); fp8:
https://github.com/deepseek-ai/DeepSeek-V3/blob/0b39205aed0d4b1f9a2798e8551e4059c8f94b0c/README_WEIGHTS.md
(e4m3, 128 x 128 blocks, float32 ``weight_scale_inv``, edge blocks padded).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hobbit.sim.config import ConfigError, ModelConfig

# (weights per block, bytes per block) = (QK*, sizeof(block_*)) in ggml-common.h. Left out: q8_1 and q8_K (only
# dot-product intermediates, never stored; gguf 0.19 still gives q8_1 its old 40 B, ggml's struct is 36 B) and the
# integer types.
GGML_TYPES: dict[str, tuple[int, int]] = {
    "f32": (1, 4),
    "f16": (1, 2),
    "bf16": (1, 2),
    "q4_0": (32, 18),  # fp16 d + 16 B of nibbles
    "q4_1": (32, 20),  # fp16 d, m + 16 B
    "q5_0": (32, 22),  # fp16 d + 4 B of fifth bits + 16 B
    "q5_1": (32, 24),  # fp16 d, m + 4 B + 16 B
    "q8_0": (32, 34),  # fp16 d + 32 int8
    "q1_0": (128, 18),  # fp16 d + 16 B of signs
    "q2_0": (64, 18),  # fp16 d + 16 B of 2-bit codes
    "mxfp4": (32, 17),  # E8M0 exponent + 16 B of E2M1 nibbles
    "nvfp4": (64, 36),  # 4 UE4M3 scales (one per 16) + 32 B of E2M1 nibbles
    "q2_k": (256, 84),  # 16 B of 4-bit scales and mins + 64 B of codes + fp16 d, dmin
    "q3_k": (256, 110),  # 32 B of high bits + 64 B of codes + 12 B of scales + fp16 d
    "q4_k": (256, 144),  # fp16 d, dmin + 12 B of 6-bit scales and mins + 128 B of codes
    "q5_k": (256, 176),  # as q4_k + 32 B of fifth bits
    "q6_k": (256, 210),  # 128 B low nibbles + 64 B high bits + 16 int8 scales + fp16 d
    "iq2_xxs": (256, 66),  # fp16 d + 32 uint16
    "iq2_xs": (256, 74),  # fp16 d + 32 uint16 + 8 B of scales
    "iq2_s": (256, 82),  # fp16 d + 64 B codes + 8 B high bits + 8 B scales
    "iq3_xxs": (256, 98),  # fp16 d + 96 B
    "iq3_s": (256, 110),  # fp16 d + 64 + 8 + 32 + 4 B
    "iq1_s": (256, 50),  # fp16 d + 32 B + 8 uint16
    "iq1_m": (256, 56),  # 32 + 16 + 8 B (the scale lives in the scales' high bits)
    "iq4_nl": (32, 18),  # fp16 d + 16 B
    "iq4_xs": (256, 136),  # fp16 d + uint16 scales_h + 4 B scales_l + 128 B
    "tq1_0": (256, 54),  # 48 B of base-3 codes + 4 B + fp16 d
    "tq2_0": (256, 66),  # 64 B of 2-bit codes + fp16 d
}
FP8_BLOCK = 128
"""fp8: weights per side of the square block that shares one fp32 scale (DeepSeek-V3's ``weight_block_size``)."""
EXECUTOR = ("fp16", "bf16", "int8", "int4", "int2", "hqq2")
"""This project's executor formats: experts as ``ModelConfig.expert_bytes`` packs them, the rest at 16 bit."""

# llama_ftype_get_default_type: the type a file type quantises to where no rule says otherwise.
BASE_TYPE: dict[str, str] = {
    "f32": "f32", "f16": "f16", "bf16": "bf16", "q4_0": "q4_0", "q4_1": "q4_1", "q5_0": "q5_0", "q5_1": "q5_1",
    "q8_0": "q8_0", "q1_0": "q1_0", "q2_0": "q2_0", "mxfp4_moe": "mxfp4", "nvfp4": "nvfp4", "q2_k_s": "q2_k",
    "q2_k": "q2_k", "iq3_xs": "iq3_s", "q3_k_s": "q3_k", "q3_k_m": "q3_k", "q3_k_l": "q3_k", "q4_k_s": "q4_k",
    "q4_k_m": "q4_k", "q5_k_s": "q5_k", "q5_k_m": "q5_k", "q6_k": "q6_k", "tq1_0": "tq1_0", "tq2_0": "tq2_0",
    "iq2_xxs": "iq2_xxs", "iq2_xs": "iq2_xs", "iq2_s": "iq2_xs", "iq2_m": "iq2_s", "iq3_xxs": "iq3_xxs",
    "iq1_s": "iq1_s", "iq1_m": "iq1_m", "iq4_nl": "iq4_nl", "iq4_xs": "iq4_xs", "iq3_s": "iq3_s", "iq3_m": "iq3_s",
}  # fmt: skip

FORMATS: list[str] = [
    *EXECUTOR, "fp8", "file", "bpw<N>", *(t for t in GGML_TYPES if t not in EXECUTOR), *(f.upper() for f in BASE_TYPE)
]  # fmt: skip
"""Every name ``weights`` takes: lower case a ggml type (every matrix at it), upper case a llama.cpp file type
(lower case too where the name is not also a ggml type: q4_k_m), ``bpw<N>`` (every weight at N bits: a file of its
own mix known by its average, bpw3.903)."""
_BPW = re.compile(r"bpw(\d+(?:\.\d+)?)")

# tensor_type_fallback: the type a tensor whose row length is not a multiple of the block gets instead.
_FALLBACK = {
    **dict.fromkeys(("iq1_s", "iq1_m", "iq2_xxs", "iq2_xs", "iq2_s", "iq3_xxs", "iq3_s", "iq4_xs"), "iq4_nl"),
    **dict.fromkeys(("q2_0", "q2_k", "q3_k", "tq1_0", "tq2_0"), "q4_0"),
    "q4_k": "q5_0", "q5_k": "q5_1", "q6_k": "q8_0",
}  # fmt: skip
# Tensors llama.cpp never quantises and its converter writes as F32: tensor_allows_quantization (1-D tensors,
# *_norm, ffn_gate_inp, ssm_conv1d, positional and token-type embeddings) and convert_hf_to_gguf.py's prepare_tensors
# (1-D, *_norm, biases, and its "tensor types always in float32": FFN_GATE_INP(_SHEXP), SSM_CONV1D(_Q/K/V), ...).
# ssm_a/ssm_d/ssm_dt are taken as the vectors (A, D, dt bias) of Mamba-2 and KDA layers.
_KEPT = frozenset({"ffn_gate_inp", "ffn_gate_inp_shexp", "exp_probs_b", "rope_freqs", "attn_sinks", "ssm_a", "ssm_d",
                   "ssm_dt", "pos_embd", "token_types"})  # fmt: skip
_GLOBAL = frozenset({"token_embd", "per_layer_token_embd", "output", "output_norm", "rope_freqs", "pos_embd"})
_IQ_LOW = ("iq2_xxs", "iq2_xs", "iq1_s", "iq2_s", "iq2_m", "iq1_m")  # the file types of the first rule branch


def kept_f32(name: str) -> bool:
    """Whether llama.cpp leaves tensor ``name`` (a GGUF base name) unquantised, in F32 as its converter writes it."""
    return name in _KEPT or "norm" in name or name.startswith(("ssm_conv1d", "shortconv"))


def bits_per_weight(fmt: str, model: ModelConfig | None = None) -> float:
    """Bits per weight of a ggml type, of ``fp8``, or of an executor format (its scales and zeros for ``model``'s
    group size, ``ModelConfig()``'s by default: int4 at groups of 128 is 4.25)."""
    if fmt in GGML_TYPES:
        block, size = GGML_TYPES[fmt]
        return 8 * size / block
    if fmt == "fp8":
        return 8 + 32 / FP8_BLOCK**2
    if fmt in EXECUTOR:
        m = model or ModelConfig()
        return 8 * m.expert_bytes(fmt) / m.expert_params
    if _BPW.fullmatch(fmt):
        return float(fmt[3:])
    raise ConfigError(f"format '{fmt}' is not one of {', '.join([*GGML_TYPES, 'fp8', *EXECUTOR])}")


def tensor_bytes(fmt: str, rows: int, cols: int) -> int:
    """Bytes of a ``rows`` x ``cols`` matrix (``cols``: the row length, along which blocks run) at a ggml type or
    ``fp8`` (whose scale blocks are rounded up at the edges, as the checkpoint's ``weight_scale_inv`` shape is)."""
    if fmt == "fp8":
        return rows * cols + 4 * -(-rows // FP8_BLOCK) * -(-cols // FP8_BLOCK)
    if fmt not in GGML_TYPES:
        raise ConfigError(f"type '{fmt}' is not one of {', '.join([*GGML_TYPES, 'fp8'])}")
    block, size = GGML_TYPES[fmt]
    if cols % block:
        raise ValueError(f"{fmt}: a row of {cols} weights is not a whole number of its {block}-weight blocks")
    return rows * (cols // block) * size


def _count_bytes(fmt: str, count: int, cols: int) -> int:
    """Bytes of ``count`` weights in rows of ``cols`` (rounded up where the count is not whole rows or blocks)."""
    if fmt == "fp8":
        rows = -(-count // cols)
        return count + 4 * -(-rows // FP8_BLOCK) * -(-cols // FP8_BLOCK)
    block, size = GGML_TYPES[fmt]
    return -(-count * size // block)


def _fallback(fmt: str, cols: int, what: str) -> str:
    """tensor_type_fallback: a compatible type where ``cols`` is not a multiple of ``fmt``'s block."""
    if cols % GGML_TYPES[fmt][0] == 0:
        return fmt
    if fmt not in _FALLBACK:  # llama.cpp stops with "no tensor type fallback is defined"
        raise ValueError(f"{what}: {cols} columns are not a multiple of {fmt}'s block and {fmt} has no fallback")
    fmt = _FALLBACK[fmt]
    return fmt if cols % GGML_TYPES[fmt][0] == 0 else "f16"  # "must use F16 due to unusual shape"


def _category(full: str) -> str:
    """tensor_get_category on a full tensor name; attn_qkv and attn_kv_b are attn_v-like (category_is_attn_v)."""
    if full == "output.weight":
        return "output"
    if full in ("token_embd.weight", "per_layer_token_embd.weight"):
        return "token_embd"
    keys = ("attn_qkv.weight", "attn_kv_b.weight", "attn_v.weight", "attn_k.weight", "attn_q.weight",
            "attn_output.weight", "ffn_up", "ffn_gate", "ffn_down")  # fmt: skip
    cats = ("attn_v", "attn_v", "attn_v", "attn_k", "attn_q", "attn_output", "ffn_up", "ffn_gate", "ffn_down")
    return next((c for k, c in zip(keys, cats) if k in full), "other")


def _more_bits(i: int, n: int) -> bool:
    """use_more_bits: the first and last eighth of the layers and every third one between. (The C++ remainder of a
    negative number differs from Python's, but the first test has already answered for i < n/8.)"""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def _rule(ft: str, cat: str, layer: int, n_layers: int, n_experts: int, cols: int, *, is_3d: bool, n_gqa: int,
          index: int, n_wv: int) -> str:  # fmt: skip
    """llama_tensor_get_type_impl for a quantised file type, before the fallback. Left out: LLM_ARCH_FALCON's and
    LLM_TYPE_70B's branches (dense models) and those needing an importance matrix (Q4_0/Q5_0 ffn_down); IQ3_XXS and
    IQ4_NL/IQ4_XS take their no-imatrix branches."""
    t, moe8 = BASE_TYPE[ft], n_experts == 8  # "== 8" as llama.cpp writes it: Mixtral's rules, not every MoE's
    if cat == "output":  # also token_embd when the embeddings are tied
        if ft == "mxfp4_moe" or cols % GGML_TYPES[t][0]:
            return "q8_0"
        if ft in (*_IQ_LOW, "iq3_xxs"):
            return "q5_k"
        return t if t == "q8_0" else "q6_k"
    if ft == "mxfp4_moe":  # 3-D tensors (the experts, MLA's per-head k_b/v_b) MXFP4, the rest Q8_0
        return "mxfp4" if is_3d else "q8_0"
    if cat == "token_embd":  # TOKEN_EMBD branch (untied)
        by = {"iq2_xxs": "q2_k", "iq2_xs": "q2_k", "iq1_s": "q2_k", "iq1_m": "q2_k", "iq2_s": "iq3_s",
              "iq2_m": "iq3_s", "iq3_xxs": "iq3_s", "tq1_0": "q4_k", "tq2_0": "q4_k", "q2_0": "q4_k"}  # fmt: skip
        return by.get(ft, t)
    n8, iq3 = n_layers // 8, "iq3_s" if ft in ("iq2_s", "iq2_m") else "q2_k"
    if ft in _IQ_LOW:  # the IQ2_XXS/IQ2_XS/IQ1_S/IQ2_S/IQ2_M/IQ1_M branch
        if cat == "attn_v":
            return "q4_k" if n_gqa >= 4 or n_experts >= 4 else iq3
        if cat == "attn_k" and moe8:
            return "q4_k"
        if cat == "ffn_down":  # the running count of ffn_down tensors here, not the layer
            return iq3 if index < n8 else t
        if cat == "attn_output":
            if moe8:
                return "q5_k"
            return {"iq1_s": "iq2_xxs", "iq1_m": "iq2_xxs", "iq2_s": "iq3_s", "iq2_m": "iq3_s"}.get(ft, t)
        return t
    i_layer = layer if n_experts > 1 else index  # layer_info: MoE models read the layer from the tensor's name
    if cat.startswith("ffn") and n_experts > 1 and not 0 <= layer < n_layers:
        raise ValueError(f"bad layer {layer} for {cat}: must be in [0, {n_layers})")
    if cat == "attn_v":  # also attn_qkv and attn_kv_b; the ATTENTION_QKV branch after it is never reached
        if moe8:
            return "q8_0"  # "for the 8-expert model, bumping this to Q8_0 trades just ~128MB"
        gqa4 = n_gqa >= 4
        rules = {
            "q2_k": "q4_k" if gqa4 else "q3_k", "q2_k_s": "q4_k" if gqa4 else t,
            "iq3_xxs": "q4_k" if gqa4 else "iq3_s", "iq3_xs": "q4_k" if gqa4 else t, "iq3_s": "q4_k" if gqa4 else t,
            "iq3_m": "q4_k", "q3_k_m": "q5_k" if index < 2 else "q4_k", "q3_k_l": "q5_k",
            "iq4_nl": "q5_k" if gqa4 else t, "iq4_xs": "q5_k" if gqa4 else t,
            "q4_k_m": "q6_k" if _more_bits(index, n_wv) else t, "q5_k_m": "q6_k" if _more_bits(index, n_wv) else t,
            "q4_k_s": "q5_k" if index < 4 else t,
        }  # fmt: skip
        return rules.get(ft, t)
    if cat in ("attn_k", "attn_q"):  # ATTENTION_K, ATTENTION_Q branches
        if cat == "attn_k" and moe8:
            return "q8_0"
        return {"iq3_xs": "iq3_xxs", "iq3_xxs": "iq2_s"}.get(ft, t)
    if cat == "ffn_down":  # FFN_DOWN branch: also the dense blocks' ffn_down and ffn_down_shexp
        more = _more_bits(i_layer, n_layers)
        rules = {
            "q2_k": "q3_k", "q2_k_s": "q4_k" if i_layer < n8 else t, "iq3_xxs": "q4_k" if i_layer < n8 else "q3_k",
            "q3_k_m": "q5_k" if i_layer < n_layers // 16 else "q4_k",
            "iq3_m": "q4_k" if i_layer < n8 or (moe8 and more) else t, "q3_k_l": "q5_k",
            "q4_k_m": "q6_k" if more else t, "iq4_nl": "q5_k" if i_layer < n8 else t,
            "iq4_xs": "q5_k" if i_layer < n8 else t, "q5_k_m": "q6_k" if more else t,
            "q4_k_s": "q5_k" if i_layer < n8 else t,
        }  # fmt: skip
        return rules.get(ft, t)
    if cat == "attn_output":  # ATTENTION_OUTPUT branch
        if moe8:
            listed = ("q2_k", "iq3_xs", "iq3_xxs", "q3_k_s", "q3_k_m", "iq4_nl", "q4_k_s", "q4_k_m", "iq3_s", "iq3_m",
                      "iq4_xs")  # fmt: skip
            return "q5_k" if ft in listed else t
        return {"q2_k": "q3_k", "iq3_xxs": "iq3_s", "q3_k_m": "q4_k", "q3_k_l": "q5_k", "iq3_m": "q4_k"}.get(ft, t)
    if cat in ("ffn_gate", "ffn_up") and ft == "iq3_xs" and n8 <= i_layer < 7 * n_layers // 8:
        return "iq3_xxs"  # FFN_GATE, FFN_UP branches
    return t


def tensor_type(ftype: str, name: str, layer: int, n_layers: int, n_experts: int, cols: int, *, n_gqa: int = 1,
                tied: bool = False, index: int | None = None, n_attn_v: int | None = None) -> str:  # fmt: skip
    """The ggml type llama.cpp's quantiser gives tensor ``name`` (GGUF base name: ffn_down_exps) of block ``layer``
    (-1 outside the blocks) of ``n_layers`` (the GGUF block count, dense blocks included) in file type ``ftype``
    (q4_k_m), for a model of ``n_experts`` routed experts (0: dense) whose tensor has rows of ``cols`` weights.

    ``n_gqa``: query heads per KV head; ``tied``: the model has no output tensor (token_embd then takes its rules);
    ``index``: llama.cpp's running count of the attn_v-like (attn_v, attn_qkv, attn_kv_b) or ffn_down tensors before
    this one, and ``n_attn_v`` the number of attn_v-like tensors; by default one of each per block (``layer``,
    ``n_layers``). Raises ValueError where llama.cpp stops: no fallback type for the shape, a bad layer.
    """
    ft = ftype.lower()
    if ft not in BASE_TYPE:
        raise ConfigError(f"file type '{ftype}' is not one of {', '.join(BASE_TYPE)}")
    if kept_f32(name):
        return "f32"
    base = BASE_TYPE[ft]
    if GGML_TYPES[base][0] == 1:  # f32/f16/bf16 files: no rules (llama_tensor_get_type asks ggml_is_quantized)
        return base
    full = f"{name}.weight" if layer < 0 else f"blk.{layer}.{name}.weight"
    cat = "output" if tied and name == "token_embd" else _category(full)
    idx = layer if index is None else index
    is_3d = name.endswith("_exps") or name in ("attn_k_b", "attn_v_b")
    got = _rule(ft, cat, layer, n_layers, n_experts, cols, is_3d=is_3d, n_gqa=n_gqa, index=idx,
                n_wv=n_layers if n_attn_v is None else n_attn_v)  # fmt: skip
    return _fallback(got, cols, f"{full} in {ft}")


@dataclass(frozen=True)
class Weights:
    """A model's weights in one format, bytes."""

    expert_bytes: tuple[int, ...]
    """One routed expert in each MoE layer."""
    dense_bytes: tuple[int, ...]
    """Each MoE layer's other weights: attention, router, norms, shared experts."""
    other_bytes: int
    """Everything else: embeddings, LM head, dense-first layers, final norm."""
    num_experts: int
    """Routed experts per MoE layer."""
    fmt: str = ""
    """The format's name."""

    @property
    def resident_bytes(self) -> int:
        """What is not a routed expert."""
        return sum(self.dense_bytes) + self.other_bytes

    @property
    def experts_bytes(self) -> int:
        """Every routed expert of every layer."""
        return sum(self.expert_bytes) * self.num_experts


def weights(model: ModelConfig, fmt: str, *, n_gqa: int = 1) -> Weights:
    """``model``'s weights in format ``fmt`` (one of ``FORMATS``).

    - an executor format: experts as ``model.expert_bytes(fmt)``, the rest at 16 bit, as this project's executor
      holds them;
    - ``file``: the sizes a GGUF gave (``layer_expert_bytes``; ``file_resident_bytes`` split between the MoE layers
      and the rest in proportion to ``dense_params_per_layer`` and ``other_params``);
    - a ggml type (lower case): every matrix at it (with llama.cpp's fallback for incompatible rows, as
      ``llama-quantize --pure``), tensors llama.cpp keeps (``kept_f32``) at f32;
    - a llama.cpp file type: each tensor at ``tensor_type``'s type (``n_gqa`` passed on);
    - ``fp8``: matrices as DeepSeek-V3's checkpoint, embeddings, LM head, norms and the router at bf16.

    Routed experts come from the shapes: gate and up have rows of ``hidden_size`` weights, down of ``expert_ffn``.
    With ``model.tensors`` each tensor takes its own type, its rows assumed ``hidden_size`` long (a down
    projection's: its count over ``hidden_size``, where whole); without, each MoE layer's ``dense_params_per_layer``
    and the ``other_params`` take the type a plain matrix gets (the file type's ``BASE_TYPE``, Q8_0 in MXFP4_MOE).
    """
    lay, n_exp, h, f = model.num_layers, model.num_experts, model.hidden_size, model.expert_ffn
    if fmt in EXECUTOR:
        e = model.expert_bytes(fmt)
        return Weights((e,) * lay, (2 * model.dense_params_per_layer,) * lay, 2 * model.other_params, n_exp, fmt)
    if _BPW.fullmatch(fmt):  # a mix known by its average: every weight at it (its per-tensor types unknown)
        bits = float(fmt[3:])
        if not 1.0 <= bits <= 32.0:
            raise ConfigError(f"weights format '{fmt}': {bits:g} bits per weight is not in 1..32")
        size = lambda params: round(params * bits / 8)
        dense = (size(model.dense_params_per_layer),) * lay
        return Weights((size(3 * f * h),) * lay, dense, size(model.other_params), n_exp, fmt)
    if fmt == "file":
        if len(model.layer_expert_bytes) != lay or model.file_resident_bytes < 0:
            msg = f"model {model.name} has no layer_expert_bytes for its {lay} layers and file_resident_bytes"
            raise ConfigError(f"weights format 'file': {msg} (no GGUF read)")
        params = model.dense_params_per_layer * lay + model.other_params
        per = model.file_resident_bytes * model.dense_params_per_layer // params if params else 0
        rest = model.file_resident_bytes - per * lay
        return Weights(tuple(model.layer_expert_bytes), (per,) * lay, rest, n_exp, fmt)
    pure = fmt in GGML_TYPES
    ft = "" if pure or fmt == "fp8" else fmt.lower()
    if not pure and fmt != "fp8" and ft not in BASE_TYPE:
        raise ConfigError(f"weights format '{fmt}' is not one of {', '.join(FORMATS)}")
    d, n_blocks = model.dense_layers, model.dense_layers + lay
    tied = bool(model.tensors) and "output" not in model.tensors

    def typed(name: str, block: int, cols: int, index: int | None = None, n_wv: int | None = None) -> str:
        if fmt == "fp8":
            return "bf16" if kept_f32(name) or name in ("token_embd", "output") else "fp8"
        if pure:
            return "f32" if kept_f32(name) else _fallback(fmt, cols, f"{name} in {fmt}")
        return tensor_type(ft, name, block, n_blocks, n_exp, cols, n_gqa=n_gqa, tied=tied, index=index,
                           n_attn_v=n_wv)  # fmt: skip

    experts = {"ffn_gate_exps": f * h, "ffn_up_exps": f * h, "ffn_down_exps": h * f}
    entries = _entries(model, experts)
    expert, dense, other = [0] * lay, [0] * lay, 0
    # llama.cpp's counters: the attn_v-like and ffn_down tensors before each one, in its order (without the tensor
    # list, one of each per block: tensor_type's default)
    wv = [_category(f"{n}.weight") == "attn_v" and not kept_f32(n) for _, n, _ in entries]
    down = [_category(n) == "ffn_down" and not kept_f32(n) for _, n, _ in entries]
    n_wv, i_wv, i_down = sum(wv), 0, 0
    for (b, name, count), is_wv, is_down in zip(entries, wv, down):
        # row lengths, assumed: the hidden width, except a down projection's (the FFN width where the count is a
        # multiple of the hidden width); attention outputs and low-rank projections may differ
        cols = count // h if "_down" in name and count % h == 0 else h
        index = i_wv if is_wv else i_down if is_down else None
        i_wv, i_down = i_wv + is_wv, i_down + is_down
        nbytes = _count_bytes(typed(name, b, cols, index, n_wv) if model.tensors else typed(name, b, cols), count, cols)
        if name in experts:
            expert[b - d] += nbytes
        elif b >= d:
            dense[b - d] += nbytes
        else:
            other += nbytes
    if not model.tensors:
        plain = typed("other", d, h)  # a block's matrix that no rule names, rows of hidden_size
        dense, other = (
            [_count_bytes(plain, model.dense_params_per_layer, h)] * lay,
            _count_bytes(plain, model.other_params, h),
        )
    return Weights(tuple(expert), tuple(dense), other, n_exp, fmt)


def _entries(model: ModelConfig, experts: dict[str, int]) -> list[tuple[int, str, int]]:
    """(block, name, parameters) of each of ``model``'s tensors (``model.tensors``, the routed ``experts`` in each MoE
    block) in llama.cpp's order: block (-1: the model's global tensors), then name."""
    d, n_blocks = model.dense_layers, model.dense_layers + model.num_layers
    entries: list[tuple[int, str, int]] = []
    per_block: dict[str, list[int]] = {}
    for name, counts in model.tensors.items():
        if name.endswith("_exps"):
            raise ConfigError(f"model {model.name}: tensors holds {name}; routed experts come from the shapes")
        if len(counts) == n_blocks and name not in _GLOBAL:
            per_block[name] = counts
        elif len(counts) == 1:
            entries.append((-1, name, counts[0]))
        else:
            raise ConfigError(f"model {model.name}: tensors[{name}] has {len(counts)} entries, not 1 or {n_blocks}")
    for b in range(n_blocks):
        here = {n: c[b] for n, c in per_block.items() if c[b] > 0} | (experts if b >= d else {})
        entries += [(b, n, here[n]) for n in sorted(here)]
    return entries
