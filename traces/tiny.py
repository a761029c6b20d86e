"""The bundled tiny MoE model: a Mixtral topology with tiny widths and a byte vocabulary.

The checkpoint lives in ``traces/tiny/`` (a normal Hugging Face model directory:
``config.json``, ``model.safetensors``, ``tokenizer.json``) and is produced by
``python -m hobbit.traces.train_tiny``. This module only knows its shape and where it is.
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
EOS_TOKEN = "<|endoftext|>"
EOS_ID = 256


def bundled_model_dir() -> Path:
    """Directory of the bundled checkpoint (inside the installed ``traces`` package)."""
    return Path(str(resources.files("hobbit.traces") / "tiny"))


def bundled_trace() -> Path:
    """The routing trace captured from the bundled model on its held-out prompts."""
    return bundled_model_dir() / "trace.parquet"


def bundled_prompts_path() -> Path:
    """Held-out prompts that ship with the bundled model, one JSON object a line."""
    return bundled_model_dir() / "prompts.jsonl"


def bundled_heldout_text() -> Path:
    """Held-out text (standard-library source the model never trained on), for quality checks."""
    return bundled_model_dir() / "heldout.txt"


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map (what ByteLevel expects)."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
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


def build_tiny_config(**overrides: Any) -> Any:
    """The tiny model's ``MixtralConfig`` (``overrides`` for tests and training knobs)."""
    from transformers import MixtralConfig

    return MixtralConfig(**{**TINY_CONFIG, **overrides})
