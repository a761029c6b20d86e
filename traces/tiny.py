"""The bundled tiny MoE models: Mixtral and PhiMoE topologies with tiny widths and a byte vocabulary.

The checkpoints live in ``traces/tiny/`` (Mixtral) and ``traces/tiny_phimoe/`` (PhiMoE), normal
Hugging Face model directories (``config.json``, ``model.safetensors``, ``tokenizer.json``)
produced by ``python -m hobbit.traces.train_tiny [--arch phimoe]``. This module only knows their
shapes and where they are.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

# Mixtral-8x7B topology (32 MoE layers, 8 experts, top-2, renormalised softmax router)
# at widths that train on two CPU cores.
TINY_CONFIG: dict[str, Any] = {
    "vocab_size": 257,  # 256 bytes + <|endoftext|>
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 32,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_local_experts": 8,
    "num_experts_per_tok": 2,
    "max_position_embeddings": 1024,
    "tie_word_embeddings": True,
    "bos_token_id": None,
    "eos_token_id": 256,
    "pad_token_id": 256,
}

# Phi-3.5-MoE topology (32 MoE layers, 16 experts, top-2, sparsemixer router, LayerNorm; attention
# and LM-head biases, untied embeddings, rope theta and norm eps as PhimoeConfig's defaults give
# them) at the same tiny widths. Expert FFN 88 (ratio 1.375) is the widest that keeps
# model.safetensors (float16) within 20 MB (20,000,000 bytes) and is a multiple of 8, so the nearest
# to Phi-3.5-MoE's expert_ffn / hidden ratio (6400 / 4096 = 1.5625) under both limits. Each unit of
# width costs 196,608 bytes and the file's header (1,536 per-expert tensors) about 217 KB: the exact
# ratio, 100, gives 20,814,072 bytes and 96 = 64 * 1.5 gives 20,026,024. Multiple of 8:
# transformers' grouped_mm experts kernel needs 16-byte row strides, so other widths fail in
# float16 / bfloat16 (and widths that are not multiples of 4 in float32 too).
# Jitter: router_jitter_noise is sparsemixer's masking threshold (used deterministically in eval
# mode; 0 would mask every expert but the chosen one and make all gate weights 1), so it keeps
# Phi-3.5-MoE's 0.01; input_jitter_noise (random input scaling, training mode only) stays 0. In
# training mode sparsemixer samples experts, so inference must call ``.eval()``.
TINY_PHIMOE_CONFIG: dict[str, Any] = {
    "vocab_size": 257,
    "hidden_size": 64,
    "intermediate_size": 88,
    "num_hidden_layers": 32,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_local_experts": 16,
    "num_experts_per_tok": 2,
    "max_position_embeddings": 1024,
    "router_jitter_noise": 0.01,
    "input_jitter_noise": 0.0,
    "bos_token_id": None,
    "eos_token_id": 256,
    "pad_token_id": 256,
}
TINY_ARCHS = ("mixtral", "phimoe")
EOS_TOKEN = "<|endoftext|>"
EOS_ID = 256


def bundled_model_dir() -> Path:
    """Directory of the bundled checkpoint (inside the installed ``traces`` package)."""
    return Path(str(resources.files("hobbit.traces") / "tiny"))


def bundled_trace() -> Path:
    """The routing trace captured from the bundled model on its held-out prompts."""
    return bundled_model_dir() / "trace.parquet"


def bundled_phimoe_dir() -> Path:
    """Directory of the bundled PhiMoE-topology checkpoint."""
    return Path(str(resources.files("hobbit.traces") / "tiny_phimoe"))


def bundled_phimoe_trace() -> Path:
    """The routing trace captured from the bundled PhiMoE model on its held-out prompts."""
    return bundled_phimoe_dir() / "trace.parquet"


def bundled_prompts_path() -> Path:
    """Held-out prompts that ship with the bundled model, one JSON object a line."""
    return bundled_model_dir() / "prompts.jsonl"


def bundled_heldout_text() -> Path:
    """Held-out text (standard-library source the model never trained on), for quality checks."""
    return bundled_model_dir() / "heldout.txt"


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map (what ByteLevel expects)."""
    printable = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    )
    chars = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return dict(zip(printable, map(chr, chars)))


def build_byte_tokenizer() -> Any:
    """A Hugging Face fast tokenizer whose ids are the UTF-8 bytes, plus EOS = 256."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {ch: b for b, ch in _bytes_to_unicode().items()}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS_TOKEN, pad_token=EOS_TOKEN)


def build_tiny_config(arch: str = "mixtral", **overrides: Any) -> Any:
    """The tiny model's ``MixtralConfig`` (arch="phimoe": ``PhimoeConfig``); ``overrides`` for tests
    and training knobs."""
    if arch == "mixtral":
        from transformers import MixtralConfig

        return MixtralConfig(**{**TINY_CONFIG, **overrides})
    if arch == "phimoe":
        from transformers import PhimoeConfig

        return PhimoeConfig(**{**TINY_PHIMOE_CONFIG, **overrides})
    raise ValueError(f"arch={arch!r}: one of {', '.join(TINY_ARCHS)}")
