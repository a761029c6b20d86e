"""Weight formats: ggml's block sizes, llama.cpp's per-tensor types for a file type, a model's weights in a format."""

from __future__ import annotations

from dataclasses import replace

import gguf
import pytest

from hobbit.sim.config import ConfigError, ModelConfig
from hobbit.sim.formats import (
    BASE_TYPE,
    FORMATS,
    GGML_TYPES,
    bits_per_weight,
    tensor_bytes,
    tensor_type,
    weights,
)
from hobbit.sim.precisions import FORMAT_BPW

# gguf's types that are no weight format: integers, f64, and the dot-product intermediates q8_1 and q8_K
NOT_WEIGHTS = {"I8", "I16", "I32", "I64", "F64", "Q8_1", "Q8_K"}


def test_every_type_matches_ggml_structs_as_gguf_mirrors_them():
    known = {t.name.lower(): gguf.GGML_QUANT_SIZES[t] for t in gguf.GGMLQuantizationType if t.name not in NOT_WEIGHTS}
    assert {t: GGML_TYPES[t] for t in known} == known
    # q2_0 is newer than gguf 0.19: block_q2_0 is an fp16 scale and 64 2-bit codes
    assert set(GGML_TYPES) - set(known) == {"q2_0"}
    assert GGML_TYPES["q2_0"] == (64, 2 + 64 // 4)


@pytest.mark.parametrize(
    "fmt,bits",
    [
        ("q4_k", 144 * 8 / 256),  # fp16 d, dmin + 12 B scales + 128 B codes = 144 B / 256 = 4.5
        ("q6_k", 210 * 8 / 256),  # 128 + 64 + 16 + 2 = 210 B / 256 = 6.5625
        ("q5_k", 5.5),  # 144 + 32 = 176 B / 256
        ("q3_k", 3.4375),  # 32 + 64 + 12 + 2 = 110 B / 256
        ("q2_k", 2.625),  # 16 + 64 + 4 = 84 B / 256
        ("q8_0", 8.5),  # 2 + 32 = 34 B / 32
        ("q4_0", 4.5),  # 2 + 16 = 18 B / 32
        ("iq4_xs", 4.25),  # 2 + 2 + 4 + 128 = 136 B / 256
        ("iq2_xxs", 2.0625),  # 2 + 64 = 66 B / 256
        ("mxfp4", 4.25),  # 1 + 16 = 17 B / 32
        ("tq1_0", 1.6875),  # 48 + 4 + 2 = 54 B / 256
        ("bf16", 16.0),
        ("fp8", 8 + 32 / 16384),  # one fp32 scale per 128 x 128 e4m3 weights
        ("int4", 4.25),  # the executor's: 4 bits + fp16 scale and zero per 128
        ("fp16", 16.0),
    ],
)
def test_bits_per_weight(fmt, bits):
    assert bits_per_weight(fmt) == bits


def test_the_types_sim_config_already_knows_agree():
    for t in ("q8_0", "q4_0", "q2_k"):
        assert bits_per_weight(t) == FORMAT_BPW[t]


def test_tensor_bytes():
    assert tensor_bytes("q4_k", 256, 512) == 256 * 2 * 144
    assert tensor_bytes("q8_0", 10, 64) == 10 * 2 * 34
    assert tensor_bytes("f32", 3, 5) == 60
    # DeepSeek-V3's expert gate, 2048 x 7168 in fp8: 16 x 56 scale blocks of 4 B
    assert tensor_bytes("fp8", 2048, 7168) == 2048 * 7168 + 16 * 56 * 4
    assert tensor_bytes("fp8", 129, 130) == 129 * 130 + 2 * 2 * 4  # edge blocks rounded up
    with pytest.raises(ValueError, match="q4_k"):
        tensor_bytes("q4_k", 4, 1408)
    with pytest.raises(ConfigError, match="q7_k"):
        tensor_bytes("q7_k", 4, 256)


def down_q6(n_blocks: int, first: int = 0) -> list[int]:
    return [
        b for b in range(first, n_blocks) if tensor_type("q4_k_m", "ffn_down_exps", b, n_blocks, 128, 1024) == "q6_k"
    ]


def test_q4_k_m_gives_some_layers_ffn_down_q6_k():
    # use_more_bits(i, n): i < n/8, i >= 7n/8, or (i - n/8) % 3 == 2, in integer division
    # 26 blocks: n/8 = 3, 7n/8 = 22
    assert down_q6(26) == [0, 1, 2, 5, 8, 11, 14, 17, 20, 22, 23, 24, 25]
    # 48 blocks: n/8 = 6, 7n/8 = 42
    assert down_q6(48) == [0, 1, 2, 3, 4, 5, 8, 11, 14, 17, 20, 23, 26, 29, 32, 35, 38, 41, 42, 43, 44, 45, 46, 47]
    # Kimi-Linear-48B: 27 blocks, the first dense. llama.cpp counts every block (n_layer_all, the layer parsed
    # from blk.N), so n/8 = 3 and 7n/8 = 23: 12 of the 26 MoE blocks, not 13 (with the dense block's ffn_down, 13
    # ffn_down tensors are Q6_K)
    assert down_q6(27, first=1) == [1, 2, 5, 8, 11, 14, 17, 20, 23, 24, 25, 26]
    assert tensor_type("q4_k_m", "ffn_down", 0, 27, 256, 9216) == "q6_k"
    assert tensor_type("q4_k_m", "ffn_down_shexp", 22, 27, 256, 1024) == "q4_k"


def test_q4_k_m_other_tensors():
    def q(name: str, layer: int = 3, cols: int = 2048, n_experts: int = 128, **kw) -> str:
        return tensor_type("Q4_K_M", name, layer, 48, n_experts, cols, **kw)

    assert q("output", -1) == "q6_k"
    assert q("output", -1, cols=2880) == "q8_0"  # rows not a multiple of 256
    assert q("token_embd", -1) == "q4_k"
    assert q("token_embd", -1, tied=True) == "q6_k"  # tied: the output's rule
    assert [q(n) for n in ("attn_norm", "output_norm", "ffn_gate_inp", "exp_probs_b")] == ["f32"] * 4
    assert q("ffn_gate_exps") == q("ffn_up_exps") == q("attn_q") == q("attn_output") == q("attn_k") == "q4_k"
    assert q("attn_v", 0) == q("attn_kv_b", 5) == "q6_k"  # use_more_bits on the attn_v count
    assert q("attn_v", 6) == q("attn_qkv", 6) == "q4_k"
    # 8 experts (llama.cpp's "n_expert == 8", Mixtral): attn_v and attn_k Q8_0, attn_output Q5_K
    assert [q(n, n_experts=8) for n in ("attn_v", "attn_k", "attn_output")] == ["q8_0", "q8_0", "q5_k"]
    assert q("attn_v", 6, n_experts=16) == "q4_k"
    # incompatible rows fall back: Q4_K -> Q5_0, Q6_K -> Q8_0 (Qwen1.5-MoE's 1408-wide experts)
    assert q("ffn_down_exps", 7, cols=1408) == "q5_0"
    assert q("ffn_down_exps", 0, cols=1408) == "q8_0"
    assert q("ffn_up_exps", cols=48) == "f16"  # not even Q5_0's 32
    with pytest.raises(ValueError, match="bad layer"):
        q("ffn_down_exps", 48)


def test_other_file_types():
    def t(ft: str, name: str, layer: int = 10, cols: int = 2048, **kw) -> str:
        return tensor_type(ft, name, layer, 32, 64, cols, **kw)

    assert t("mxfp4_moe", "ffn_down_exps") == "mxfp4"
    assert [t("mxfp4_moe", n) for n in ("attn_q", "token_embd", "output", "ffn_down_shexp")] == ["q8_0"] * 4
    assert t("mxfp4_moe", "attn_norm") == "f32"
    assert t("q2_k", "ffn_down_exps") == "q3_k"
    assert t("q2_k", "attn_v") == "q3_k"
    assert t("q2_k", "attn_v", n_gqa=8) == "q4_k"
    assert t("q2_k", "attn_output") == "q3_k"
    assert t("iq2_xxs", "token_embd", -1) == "q2_k"
    assert t("iq2_xxs", "output", -1) == "q5_k"
    assert t("iq2_xxs", "attn_v") == "q4_k"  # n_expert >= 4
    assert t("iq2_xxs", "ffn_down_exps", 3) == "q2_k"  # running count 3 < 32 / 8
    assert t("iq2_xxs", "ffn_down_exps", 3, index=4) == "iq2_xxs"
    assert t("q3_k_m", "ffn_down_exps", 1) == "q5_k"  # 1 < 32 / 16
    assert t("q3_k_m", "ffn_down_exps", 2) == "q4_k"
    assert t("q8_0", "output", -1) == "q8_0"
    assert t("q4_0", "output", -1) == "q6_k"
    assert t("f16", "ffn_down_exps") == "f16"
    assert t("f16", "attn_norm") == "f32"
    with pytest.raises(ValueError, match="q8_0"):
        t("q8_0", "attn_q", cols=100)  # llama.cpp defines no fallback for Q8_0
    with pytest.raises(ConfigError, match="q4_k_x"):
        t("q4_k_x", "attn_q")


def test_every_llama_file_type_gguf_knows_has_a_base_type():
    names = {f.name.removeprefix("MOSTLY_").removeprefix("ALL_").lower() for f in gguf.LlamaFileType}
    assert names - {"guessed"} <= set(BASE_TYPE)
    assert BASE_TYPE["q4_k_m"] == "q4_k" and BASE_TYPE["iq2_m"] == "iq2_s" and BASE_TYPE["mxfp4_moe"] == "mxfp4"


def tiny(**kw) -> ModelConfig:
    shape = dict(num_layers=8, num_experts=8, hidden_size=256, expert_ffn=512)
    return ModelConfig(**{**shape, "dense_params_per_layer": 300_000, "other_params": 1_000_000, **kw})


def test_f16_is_two_bytes_a_weight():
    m = tiny()
    w = weights(m, "f16")
    assert w.expert_bytes == (2 * 3 * 256 * 512,) * 8
    assert w.dense_bytes == (600_000,) * 8
    assert w.other_bytes == 2_000_000
    assert w.resident_bytes == m.resident_bytes() == 8 * 600_000 + 2_000_000
    assert w.experts_bytes == 8 * 8 * 2 * 3 * 256 * 512
    fp = weights(m, "fp16")  # the executor's
    assert (fp.expert_bytes, fp.dense_bytes, fp.other_bytes) == (w.expert_bytes, w.dense_bytes, w.other_bytes)


def test_q4_k_m_experts_differ_per_layer_as_the_rule_says():
    gate_up = 2 * 512 * 144  # two 512 x 256 matrices, one Q4_K block per row
    q4, q6 = gate_up + 256 * 2 * 144, gate_up + 256 * 2 * 210  # down: 256 rows of 512
    w = weights(tiny(), "q4_k_m")
    # use_more_bits(i, 8): n/8 = 1, 7n/8 = 7 -> blocks 0, 3, 6, 7
    assert w.expert_bytes == (q6, q4, q4, q6, q4, q4, q6, q6)
    assert w.dense_bytes == (300_000 * 144 // 256,) * 8  # without tensors: Q4_K, the base type
    assert weights(tiny(), "q4_k").expert_bytes == (q4,) * 8  # a ggml type: every matrix at it
    # Kimi-Linear-48B's layout: one dense block, then 26 MoE blocks of which 12 take Q6_K downs
    kimi = weights(
        ModelConfig(num_layers=26, num_experts=256, hidden_size=2304, expert_ffn=1024, dense_layers=1), "Q4_K_M"
    )
    big = [i for i, b in enumerate(kimi.expert_bytes) if b == max(kimi.expert_bytes)]
    assert big == [0, 1, 4, 7, 10, 13, 16, 19, 22, 23, 24, 25]


def test_tensors_take_their_own_types_and_llama_cpps_counters():
    h, f = 256, 512
    m = tiny(
        num_layers=16,
        expert_ffn=f,
        tensors={
            "token_embd": [1000 * h],
            "output": [1000 * h],
            "output_norm": [h],
            "attn_norm": [h] * 16,
            "ffn_down_shexp": [h * f] * 16,
        },
    )
    w = weights(m, "IQ2_XXS")
    iq2, q2 = 66, 84  # bytes per 256 weights
    gate_up = 2 * 512 * iq2
    # ffn_down's running count: block 0 holds ffn_down_exps (0) and ffn_down_shexp (1), block 1 the next two;
    # only counts below 16 / 8 = 2 take Q2_K, so block 1 stays IQ2_XXS (its layer, 1, would be below 2)
    assert w.expert_bytes[:2] == (gate_up + 256 * 2 * q2, gate_up + 256 * 2 * iq2)
    assert w.dense_bytes[:2] == (4 * h + 256 * 2 * q2, 4 * h + 256 * 2 * iq2)  # attn_norm f32 + the shared expert
    # token_embd Q2_K, output Q5_K, the final norm f32
    assert w.other_bytes == 1000 * q2 + 1000 * 176 + 4 * h


def test_fp8_as_deepseek_v3_stores_it():
    m = ModelConfig(num_layers=58, num_experts=256, hidden_size=7168, expert_ffn=2048)
    assert weights(m, "fp8").expert_bytes[0] == 3 * (2048 * 7168 + 16 * 56 * 4) == 44_050_944


def test_file_sizes_split_as_the_parameters():
    m = tiny(num_layers=2, dense_params_per_layer=100, other_params=300, layer_expert_bytes=[10, 20])
    with pytest.raises(ConfigError, match="file"):
        weights(m, "file")
    w = weights(replace(m, file_resident_bytes=1000), "file")
    assert (w.expert_bytes, w.dense_bytes, w.other_bytes) == ((10, 20), (200, 200), 600)


def test_every_listed_format_is_accepted_and_others_are_named():
    assert {"fp16", "int4", "hqq2", "fp8", "file", "q4_k", "mxfp4", "Q4_K_M", "MXFP4_MOE", "Q4_0"} <= set(FORMATS)
    for fmt in FORMATS:
        if fmt not in ("file", "bpw<N>"):
            assert weights(tiny(), fmt).experts_bytes > 0, fmt
    for bad in ("q4_k_x", "Q4_K", "FP16"):
        with pytest.raises(ConfigError, match=bad):
            weights(tiny(), bad)


def test_a_mix_known_by_its_bits_per_weight():
    """bpw<N>: every weight at N bits (a file of its own mix whose average the source states, 3.903 bpw)."""
    m = tiny()
    w = weights(m, "bpw3.903")
    assert w.expert_bytes == (round(3 * 256 * 512 * 3.903 / 8),) * 8
    assert w.resident_bytes == 8 * round(300_000 * 3.903 / 8) + round(1_000_000 * 3.903 / 8)
    assert bits_per_weight("bpw3.903") == 3.903
    for bad in ("bpw0.5", "bpw40"):
        with pytest.raises(ConfigError, match="bits per weight is not in 1..32"):
            weights(m, bad)
