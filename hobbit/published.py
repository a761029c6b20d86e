"""Published measurements of MoE inference, read from their free-text descriptions into settings the simulator runs.

A published measurement (a row of benchmarks/published/development.csv, or any CSV with its columns) says in words
what ran: the model, its file's format, the runtime and its offload flags, the machine, the prompt, and the prefill
and decode rates it reached. ``parse_row`` turns one row into a :class:`Setting`: a conf/model preset, a weights
format ``hobbit.sim.formats`` takes, a conf/system preset with the runtime's own flags (``hobbit.sim.flags``), and
the machine as ``hobbit.sim.machine.describe`` takes it. It reads by pattern, never by row: flags in any of their
spellings (``--n-cpu-moe=24``, ``-ncmoe 24``, ``LLAMA_ARG_N_CPU_MOE=24``), sizes and speeds as people write them
(``1 TB``, ``DDR5-6000 2ch``, ``8x DDR5-4800 per socket``), prompts (``pp512``, ``2.7k-token prompt``, ``969 (1K)``).

What the source leaves out and is assumed is said in ``Setting.assumed``, each in words with where the value comes
from; what the simulator cannot model (a CPU-only run, another runtime, a fork's own expert cache, a changed expert
count, several GPUs) is said in ``Setting.unmodelled``, and such a row is still read. A row that cannot be read at all
(an unknown model, a format no pattern knows, a rate that is not a number) raises ``ValueError`` naming the column and
its text; ``read_settings`` reports it with the row's id and goes on.

RAM sizes stated in GB or TB are read as binary (``96 GB`` -> 96GiB, ``1 TB`` -> 1024GiB): DIMMs' GB are GiB, as
GPUs' are (conf/parts.yaml). A RAM capacity the source does not state is left out where the type and speed are not
stated either (the simulator then takes every host-side expert to be in RAM, as the run's speed implies, and says so);
where they are, the smallest power of two that holds the file and the host's reserve is assumed, and said.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import math
import re
import shlex
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from hobbit.sim.config import ConfigError, HardwareConfig, ModelConfig, SystemConfig
from hobbit.sim.flags import KV_TYPES, apply_flags
from hobbit.sim.formats import BASE_TYPE, GGML_TYPES, bits_per_weight, weights
from hobbit.sim.machine import describe, lookup_cpu, parts

COLUMNS = (
    "row", "machine", "model", "quant", "file_size", "runtime", "runtime_version", "offload_flags", "gpu", "vram_gb",
    "n_gpus", "pcie", "cpu", "threads", "ram_size", "ram_type_speed_channels", "mem_bw_stated",
    "ctx_or_prompt_tokens", "gen_tokens", "batch", "pp_tok_s", "tg_tok_s", "source", "date", "reliability", "notes",
)  # fmt: skip
"""The columns of a published-measurements CSV (benchmarks/published/README.md)."""


@dataclass(frozen=True)
class Setting:
    """One published measurement as the simulator can run it."""

    row: str
    """The row's id."""
    machine: str
    """The machine id (rows sharing it are one machine under different settings)."""
    source: str
    """Where the measurement was published."""
    model: str
    """A conf/model preset name (deepseek-v3, qwen3-30b-a3b, ...)."""
    weights: str
    """A value ``hobbit.sim.formats`` takes as system.weights: q4_k_m, iq4_xs, mxfp4_moe, fp16, ..."""
    system: str
    """A conf/system preset name (llama-cpp, llama-cpp-lru, ktransformers, ...); empty where the runtime is not
    modelled."""
    runtime: str
    """system.runtime: llama.cpp | ik_llama.cpp | ktransformers | empty."""
    flags: str
    """The runtime's own flags, as ``hobbit.sim.flags.apply_flags`` takes them."""
    hardware: dict[str, str]
    """The machine as ``hobbit.sim.machine.describe`` takes it (keys of ``hobbit.sim.machine.KEYS``)."""
    threads: int
    """CPU threads the runtime used (0: not stated)."""
    prompt_tokens: int
    """The prompt length the prefill figure was measured on (0: not stated)."""
    context: int
    """Tokens already in the KV cache when measured (0: none, or not stated)."""
    pp_tok_s: float | None
    """Prefill tokens/s (the mean of a list of runs); None: not given."""
    tg_tok_s: float | None
    """Decode tokens/s (the mean of a list of runs); None: not given."""
    assumed: tuple[str, ...]
    """Each thing the source omits that was assumed, in words, with where the value comes from."""
    unmodelled: str
    """Why this row cannot be predicted ("" when it can)."""
    gen_tokens: int = 0
    """Tokens generated for the decode figure (0: not stated)."""


def read_settings(path: str | Path) -> tuple[list[Setting], list[tuple[str, str]]]:
    """(the rows read, [(row id, why it could not be read)]) of a published-measurements CSV."""
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        missing = [c for c in ("row", "model", "runtime") if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path}: no column {', '.join(missing)} (columns: {', '.join(COLUMNS)})")
        rows = list(reader)
    settings: list[Setting] = []
    failed: list[tuple[str, str]] = []
    by_id = {(c.get("row") or "").strip(): c for c in rows}
    for i, cells in enumerate(rows, 1):
        row_id = (cells.get("row") or "").strip() or f"(line {i + 1})"
        try:
            settings.append(parse_row({k: v for k, v in cells.items() if k is not None}, rows=by_id))
        except (ValueError, ConfigError) as exc:
            failed.append((row_id, str(exc)))
    return settings, failed


def parse_row(cells: Mapping[str, str], *, rows: Mapping[str, Mapping[str, str]] | None = None) -> Setting:
    """The :class:`Setting` of one row (``cells``: column -> text); raises ``ValueError`` naming the column and its
    text when the row cannot be read. ``rows``: the file's rows by id, for offload flags that refer to another row
    ("same -ot as row 8")."""
    r = _Row({k: (v or "").strip() for k, v in cells.items()})
    row_id = r.get("row")
    if not row_id:
        raise ValueError("row: empty (every row needs an id)")
    _refer(r, rows or {})
    model = _model(r)
    info = model_presets()[model]
    system, runtime, gguf = _runtime(r)
    fmt = _weights(r, gguf, system)
    flags, system = _flags(r, info, system, runtime)
    hardware = _hardware(r, info, fmt)
    threads = _threads(r, flags)
    prompt, context, gen = _tokens_measured(r)
    pp, tg = _rate(r, "pp_tok_s"), _rate(r, "tg_tok_s")
    if pp is not None and not prompt:
        r.assume("prompt length not stated: prompt_tokens 0 (a prefill figure needs one to be simulated)")
    if system and flags:
        try:  # the flags must be ones the simulator takes for this model, else the row is not predicted
            static = "static" if system == "llama-cpp" else "cache"  # the preset's placement, which -ngl acts on
            base = SystemConfig(name=system, runtime=runtime, flags=flags, placement=static)
            apply_flags(base, info["num_layers"], info.get("dense_layers", 0), info["num_experts"])
        except ConfigError as exc:
            r.cannot(f"flags not modelled: {exc}")
    return Setting(
        row=row_id,
        machine=r.get("machine"),
        source=r.get("source"),
        model=model,
        weights=fmt,
        system=system,
        runtime=runtime,
        flags=flags,
        hardware=hardware,
        threads=threads,
        prompt_tokens=prompt,
        context=context,
        pp_tok_s=pp,
        tg_tok_s=tg,
        assumed=tuple(dict.fromkeys(r.assumed)),
        unmodelled="; ".join(dict.fromkeys(r.unmodelled)),
        gen_tokens=gen,
    )


def _refer(r: _Row, rows: Mapping[str, Mapping[str, str]]) -> None:
    """Offload flags that refer to another row ("same -ot as row 8, plus -rtr") take that row's flags (its -ot
    values only where they say -ot)."""
    text = r.get("offload_flags")
    m = re.search(
        r"same\s+(-ot|flags|offload(?: flags)?|command(?: line)?|settings)\s+as\s+row\s+(\w+)", text, re.IGNORECASE
    )
    if not m:
        return
    other = rows.get(m.group(2))
    if other is None:
        r.assume(f"offload_flags refer to row {m.group(2)}, which was not read with this row: its flags are missing")
        return
    theirs = (other.get("offload_flags") or "").strip()
    if m.group(1).lower() == "-ot":
        theirs = " ".join(f"-ot {_quote(v)}" for f, v in _walk(theirs, "llama.cpp")[0] if f == "-ot")
    r.assume(f"offload_flags '{m.group(0)}': row {m.group(2)}'s {m.group(1)} taken ({theirs})")
    r.cells["offload_flags"] = text.replace(m.group(0), theirs)


class _Row:
    """A row's cells, and what reading it assumed or found unmodelled."""

    def __init__(self, cells: dict[str, str]) -> None:
        self.cells = cells
        self.assumed: list[str] = []
        self.unmodelled: list[str] = []

    def get(self, column: str) -> str:
        return self.cells.get(column, "")

    def assume(self, text: str) -> None:
        self.assumed.append(text)

    def cannot(self, text: str) -> None:
        self.unmodelled.append(text)


def _bad(column: str, text: str, why: str) -> ValueError:
    return ValueError(f"{column}: '{text}' {why}")


# ---- model -------------------------------------------------------------------------------------------------------

# other names of a preset's architecture: (preset, why) (the same config.json shapes)
_ALIASES = {
    "deepseek-r1": ("deepseek-v3", "DeepSeek-R1 has DeepSeek-V3's architecture (the same config.json shapes)"),
    "deepseek-v3.1": ("deepseek-v3", "DeepSeek-V3.1 has DeepSeek-V3's architecture (the same config.json shapes)"),
}


@functools.cache
def model_presets() -> dict[str, dict[str, Any]]:
    """conf/model's presets by name (package data of ``hobbit.conf``), each as its YAML."""
    folder = resources.files("hobbit.conf") / "model"
    out = {}
    for entry in folder.iterdir():
        if entry.name.endswith(".yaml"):
            out[entry.name.removesuffix(".yaml")] = yaml.safe_load(entry.read_text())
    return dict(sorted(out.items()))


@functools.cache
def system_presets() -> tuple[str, ...]:
    """conf/system's preset names."""
    folder = resources.files("hobbit.conf") / "system"
    return tuple(sorted(e.name.removesuffix(".yaml") for e in folder.iterdir() if e.name.endswith(".yaml")))


def _norm_model(text: str) -> str:
    text = re.sub(r"\([^)]*\)", " ", text).strip().lower()
    text = text.split("/")[-1]  # an org/name repository id
    return re.sub(r"[\s_]+", "-", text.strip()).strip("-")


def _model(r: _Row) -> str:
    text = r.get("model")
    presets = model_presets()
    name = _norm_model(text)
    if name in presets:
        return name
    for alias, (preset, why) in _ALIASES.items():
        if name == alias or name.startswith(alias + "-"):
            r.assume(why)
            return preset
    # a preset's name followed by a variant's suffix: -instruct, -2507, -gguf, ...
    longer = [p for p in presets if name.startswith(p + "-")]
    if longer:
        return max(longer, key=len)
    raise _bad("model", text, f"is not a model preset (conf/model: {', '.join(presets)})")


# ---- runtime and system -------------------------------------------------------------------------------------------

_PYTORCH = ("moe-infinity", "moe-offloading", "fiddler", "hobbit")  # runtimes whose experts are checkpoint tensors


def _runtime(r: _Row) -> tuple[str, str, bool]:
    """(system preset, system.runtime, whether its files are GGUF); an unmodelled runtime: ("", "", False)."""
    text = r.get("runtime")
    low = text.lower()
    if re.match(r"k-?transformers|kt-kernel", low):
        return "ktransformers", "ktransformers", True
    if re.match(r"ik[_-]llama", low):
        return "llama-cpp", "ik_llama.cpp", True
    if re.match(r"llama[.\-_ ]?cpp", low):
        return "llama-cpp", "llama.cpp", True
    for name, what in (("ollama", "Ollama"), ("lm ?studio", "LM Studio"), ("koboldcpp", "KoboldCpp")):
        if re.match(name, low):
            r.assume(f"{what} runs llama.cpp (llama-server): its settings are read as llama.cpp's")
            return "llama-cpp", "llama.cpp", True
    if re.match(r"moe[- ]?infinity", low):
        return "moe-infinity", "", False
    if re.match(r"(mixtral|moe)[- ]?offloading", low):
        return "moe-offloading", "", False
    first = re.sub(r"[^a-z0-9.-]", "", low.split(" ")[0]) if low else ""
    if first in system_presets():
        return first, "", first in _PYTORCH
    modelled = "KTransformers, llama.cpp and its forks, ik_llama.cpp, Ollama, MoE-Infinity, Mixtral-Offloading"
    r.cannot(f"runtime {text or '(not stated)'} is not modelled (modelled: {modelled})")
    return "", "", False


# ---- weights format ----------------------------------------------------------------------------------------------

# ik_llama.cpp's own types, bits per weight from their block structs (QK_K = 256 weights a block): iq2_k 2+2+8+64 B,
# iq3_k 2+2+2+8+64+32, iq4_k 2+2+4+8+128, iq5_k 2+2+4+8+128+32, iq6_k 2+2+16+128+64, iq2_ks 2+4+64, iq3_ks 2+4+64+32,
# iq4_ks 8+128, iq4_kss 128, iq5_ks 8+128+32, iq2_kl 2+4+64+16 (the _KS types' one float a row left out): the structs
# of ik_llama.cpp's ggml/src/ggml-common.h as public repositories copy them (ikawrakow/ik_llama.cpp, MIT)
IK_TYPES: dict[str, float] = {
    "iq2_k": 76 * 8 / 256, "iq3_k": 110 * 8 / 256, "iq4_k": 144 * 8 / 256, "iq5_k": 176 * 8 / 256,
    "iq6_k": 212 * 8 / 256, "iq2_ks": 70 * 8 / 256, "iq3_ks": 102 * 8 / 256, "iq4_ks": 136 * 8 / 256,
    "iq4_kss": 128 * 8 / 256, "iq5_ks": 168 * 8 / 256, "iq2_kl": 86 * 8 / 256,
}  # fmt: skip
# the ggml types a mix is mapped to by its bits per weight, in order of preference where two are as near
_NEAREST = (
    "q2_k", "q3_k", "q4_k", "q5_k", "q6_k", "q8_0", "iq1_s", "iq1_m", "iq2_xxs", "iq2_xs", "iq2_s", "iq3_xxs", "iq3_s",
    "iq4_xs", "q4_0", "q4_1", "q5_0", "q5_1", "f16",
)  # fmt: skip
_TYPE_TOKEN = re.compile(
    r"(?<![A-Z0-9])(I?Q\d(?:_[A-Z0-9]+)*|MXFP4(?:_MOE)?|NVFP4|BF16|FP16|F16|FP8|F32|FP32|TQ[12]_0)(?![A-Z0-9])"
)
_NOT_STATED = re.compile(r"^\s*$|not stated|unknown|^n/?a\b|^-+$|^\?$", re.IGNORECASE)


def nearest_type(bpw: float) -> str:
    """The ggml type whose bits per weight are nearest ``bpw`` (K-quants first where two are as near)."""
    return min(_NEAREST, key=lambda t: (abs(bits_per_weight(t) - bpw), _NEAREST.index(t)))


def _file_type(ft: str) -> str:
    """A llama.cpp file type as system.weights spells it: lower case, upper where the name is also a ggml type."""
    return ft.upper() if ft in GGML_TYPES else ft


def _weights(r: _Row, gguf: bool, system: str) -> str:
    text = r.get("quant")
    up = text.upper()
    stated_bpw = re.search(r"(\d+(?:\.\d+)?)\s*BPW", up)
    expert = re.search(r"EXPERTS?\s*[:=]?\s*(" + _TYPE_TOKEN.pattern + r")", up)
    tokens = [m.group(1) for m in _TYPE_TOKEN.finditer(up)]
    if expert:
        t = expert.group(1).lower()
        if t in GGML_TYPES:
            if len(set(tokens)) > 1:
                r.assume(f"quant '{text}': the experts' type {t}; the other tensors' stated types are not modelled")
            return t
        tokens.insert(0, expert.group(1))
    for tok in tokens:
        fmt = _one_type(r, tok, text, gguf, stated_bpw)
        if fmt:
            return fmt
    if stated_bpw:
        bpw = float(stated_bpw.group(1))
        r.assume(f"quant '{text}' at its stated {bpw:g} bits per weight: every tensor at it (bpw{bpw:g})")
        return f"bpw{bpw:g}"
    if "HQQ" in up:
        r.assume(
            f"quant '{text}': Mixtral-Offloading's default HQQ, 2-bit experts (hqq2: group 16, 3.02 bits with "
            f"scales); the rest at 16 bit (the repository's 4-bit HQQ attention is not modelled)"
        )
        return "hqq2"
    bits = re.search(r"(\d)[- ]?BITS?\b|\b(AWQ|GPTQ|NF4)\b", up)
    if bits:
        n = int(bits.group(1)) if bits.group(1) else 4
        if system in _PYTORCH and n in (2, 4, 8):
            fmt = f"int{n}"
        else:
            fmt = {2: "q2_k", 3: "q3_k", 4: "q4_0", 5: "q5_0", 6: "q6_k", 8: "q8_0"}.get(n, "")
        if fmt:
            r.assume(f"quant '{text}': {n}-bit, read as {fmt} (the source names no llama.cpp type)")
            return fmt
    if _NOT_STATED.search(text) or not re.search(r"[A-Za-z0-9]", text.split("(")[0]):
        if gguf:
            r.assume("format not stated: Q4_K_M, the default of GGUF downloads")
            return "q4_k_m"
        r.assume("format not stated: fp16, the checkpoint's 16-bit weights as PyTorch runtimes load them")
        return "fp16"
    raise _bad(
        "quant", text, "names no format (a llama.cpp or ggml type such as Q4_K_M, IQ4_XS, MXFP4; FP16; or N BPW)"
    )


def _one_type(r: _Row, tok: str, text: str, gguf: bool, stated_bpw: re.Match[str] | None) -> str:
    """The format a type name in the quant cell gives ("" when the name is not one)."""
    low = tok.lower()
    if low in ("fp16", "f16", "bf16", "fp32", "f32"):
        base = {"fp16": "f16", "fp32": "f32"}.get(low, low)
        if gguf:
            return _file_type(base)
        return "bf16" if base == "bf16" else "fp16"
    if low == "fp8":
        return "fp8"
    if low in ("mxfp4", "mxfp4_moe"):
        r.assume(
            f"quant '{text}': llama.cpp's MXFP4_MOE file type (experts MXFP4, other matrices Q8_0; a converted "
            f"checkpoint may keep them at 16 bit)"
        )
        return "mxfp4_moe"
    if low in BASE_TYPE:
        return _file_type(low)
    k_variant = re.fullmatch(r"q(\d)_k_([a-z]+)", low)
    if k_variant:
        n = int(k_variant.group(1))
        base = f"q{n}_k"
        ft = f"{base}_m" if f"{base}_m" in BASE_TYPE else base if base in BASE_TYPE else "q8_0"
        who = "unsloth's dynamic " if "UD-" in text.upper() else ""
        why = {
            "l": "its Q8_0 token embeddings and output are not modelled",
            "xl": "its per-tensor upgrades (higher-bit attention and some layers) are not modelled",
        }.get(k_variant.group(2), "its own per-tensor types are not modelled")
        r.assume(
            f"quant '{text}': {who}{tok} is not a llama.cpp file type: {ft.upper()}, the one it is built on ({why})"
        )
        return _file_type(ft)
    if low in IK_TYPES and stated_bpw:  # a mix of ik_llama.cpp's types whose average the source states
        bpw = float(stated_bpw.group(1))
        r.assume(
            f"quant '{text}': ik_llama.cpp's {tok} mix at its stated {bpw:g} bits per weight: every tensor at it "
            f"(bpw{bpw:g}; the mix's per-tensor types are not modelled)"
        )
        return f"bpw{bpw:g}"
    if low in IK_TYPES:
        bpw = IK_TYPES[low]
        how = "its block's"
        t = nearest_type(bpw)
        r.assume(
            f"quant '{text}': ik_llama.cpp's {tok} at {bpw:g} bits per weight ({how}): {t}, the ggml type "
            f"nearest ({bits_per_weight(t):g} bpw)"
        )
        return t
    if low in GGML_TYPES:
        return low
    return ""


# ---- flags ---------------------------------------------------------------------------------------------------------

_LLAMA_VALUE = {
    "-ngl": "-ngl", "--n-gpu-layers": "-ngl", "--gpu-layers": "-ngl", "--n-cpu-moe": "--n-cpu-moe",
    "-ncmoe": "--n-cpu-moe", "-ot": "-ot", "--override-tensor": "-ot", "-c": "-c", "--ctx-size": "-c",
    "-ctk": "-ctk", "--cache-type-k": "-ctk", "-ctv": "-ctv", "--cache-type-v": "-ctv", "-ub": "-ub",
    "--ubatch-size": "-ub", "-b": "-b", "--batch-size": "-b", "--moe-expert-cache": "--moe-expert-cache",
    "--moe-expert-cache-inserts": "--moe-expert-cache-inserts", "-t": "-t", "--threads": "-t", "-tb": "-tb",
    "--threads-batch": "-tb", "--numa": "--numa",
}  # fmt: skip
_LLAMA_SWITCH = {
    "--cpu-moe": "--cpu-moe", "-cmoe": "--cpu-moe", "--no-mmap": "--no-mmap", "--mmap": "--mmap", "-fa": "-fa",
    "--flash-attn": "-fa", "-fmoe": "-fmoe", "--fused-moe": "-fmoe", "-rtr": "-rtr", "--run-time-repack": "-rtr",
    "--mlock": "--mlock",
}  # fmt: skip
# flags of what a measurement does not depend on (the model path, the server, sampling): dropped without a word
_LLAMA_QUIET = {
    "-m",
    "--model",
    "--host",
    "--port",
    "-p",
    "--prompt",
    "-n",
    "--n-predict",
    "--temp",
    "--seed",
    "-s",
    "-np",
    "--parallel",
    "-a",
    "--alias",
    "--jinja",
    "--no-warmup",
    "-cnv",
    "-hf",
    "--hf-repo",
}
_KT_VALUE = {
    "--kt-num-gpu-experts", "--kt-gpu-experts-ratio", "--kt-expert-placement-strategy", "--chunked-prefill-size",
    "--chunk_size", "--kt-method", "--kt-max-deferred-experts-per-token", "--cpu_infer", "--cpu-infer",
    "--kt-cpuinfer", "--kt-threadpool-count", "--cache_lens",
}  # fmt: skip
_INT_FLAGS = {"-ngl", "--n-cpu-moe", "-c", "-ub", "-b", "--moe-expert-cache", "--moe-expert-cache-inserts", "-t", "-tb"}
_ENV = {
    "N_CPU_MOE": "--n-cpu-moe", "CPU_MOE": "--cpu-moe", "OVERRIDE_TENSOR": "-ot", "N_GPU_LAYERS": "-ngl",
    "CTX_SIZE": "-c", "UBATCH": "-ub", "BATCH": "-b", "CACHE_TYPE_K": "-ctk", "CACHE_TYPE_V": "-ctv",
    "NO_MMAP": "--no-mmap", "FLASH_ATTN": "-fa", "THREADS": "-t", "THREADS_BATCH": "-tb",
}  # fmt: skip
_KV = "|".join(re.escape(k) for k in KV_TYPES)


def _split(text: str) -> list[str]:
    """Words of a command line as a shell splits them, backslashes kept (-ot patterns are regexes)."""
    lex = shlex.shlex(text, posix=True)
    lex.whitespace_split = True
    lex.escape = ""
    lex.commenters = ""
    try:
        return list(lex)
    except ValueError:  # an unbalanced quote in prose
        return text.split()


def _clean(value: str, keep_parens: bool = False) -> str:
    value = value.rstrip(",;.")
    if keep_parens:
        while value.endswith(")") and value.count(")") > value.count("("):
            value = value[:-1]
        return value
    return value.strip("(),;")


def _walk(text: str, runtime: str) -> tuple[list[tuple[str, str]], list[str]]:
    """The flags a text names, in order, as (canonical flag, value or ""); and the unknown flags it names."""
    words = _split(text)
    found: list[tuple[str, str]] = []
    unknown: list[str] = []
    i = 0
    while i < len(words):
        word = words[i].lstrip("(")
        name, eq, inline = word.partition("=") if word.startswith("--") else (word, "", "")
        name = name if eq else _clean(name)
        nxt = inline if eq else (words[i + 1] if i + 1 < len(words) else "")
        step = 1 if eq else 2
        if runtime == "ktransformers":
            if name in _KT_VALUE and nxt:
                found.append((name, _clean(nxt)))
                i += step
                continue
        elif name in _LLAMA_VALUE and nxt:
            flag = _LLAMA_VALUE[name]
            found.append((flag, _clean(nxt, keep_parens=flag == "-ot")))
            i += step
            continue
        elif name in _LLAMA_SWITCH:
            flag = _LLAMA_SWITCH[name]
            if flag == "-fa" and _clean(nxt) in ("on", "off", "auto"):
                found.append((flag, _clean(nxt)))
                i += 2
                continue
            found.append((flag, ""))
            i += 1
            continue
        if re.fullmatch(r"--?[a-zA-Z][\w-]*", name) and name not in _LLAMA_QUIET:
            value = _clean(nxt)
            takes = bool(re.fullmatch(r"-?\d+(\.\d+)?|[\w.]+", value)) and not value.startswith("-") and not eq
            unknown.append(f"{name} {value}" if takes and value.isdigit() else name)
        i += 1
    return found, unknown


def _env(r: _Row, text: str) -> list[tuple[str, str]]:
    """llama.cpp's LLAMA_ARG_* environment variables as flags; a fork's own expert features are not modelled."""
    out: list[tuple[str, str]] = []
    for name, value in re.findall(r"\bLLAMA_ARG_([A-Z0-9_]+)=(\S+)", text):
        value = _clean(value, keep_parens=True)
        flag = _ENV.get(name)
        if flag is None:
            if "HOT" in name:
                r.cannot(f"the fork's own hot-expert VRAM cache (LLAMA_ARG_{name}) is not modelled")
            elif re.search(r"MOE|EXPERT", name):
                r.cannot(f"LLAMA_ARG_{name}: the fork's own expert setting is not modelled")
            else:
                r.assume(f"LLAMA_ARG_{name}={value}: not a setting the simulator models, dropped")
            continue
        if flag in _LLAMA_SWITCH.values():
            if value.lower() in ("1", "true", "on", "yes", "enabled"):
                out.append((flag, ""))
        else:
            out.append((flag, value))
    return out


def _quote(value: str) -> str:
    """A flag's value as a shell word that splits back to it (regexes kept as given: ``\\.`` survives double
    quotes)."""
    if re.fullmatch(r"[\w.=,:/+-]+", value):
        return value
    if not re.search(r'["$`]|\\\\|\\$', value):
        return f'"{value}"'
    return shlex.quote(value)


def _expert_layers(pattern: str, info: dict[str, Any]) -> set[int] | None:
    """The MoE layers whose routed-expert tensors an -ot pattern matches (llama.cpp's names, dense-first blocks
    counted); None: not a regex."""
    try:
        rx = re.compile(pattern)
    except re.error:
        return None
    dense = info.get("dense_layers", 0)
    return {
        i
        for i in range(info["num_layers"])
        for part in ("gate", "up", "down")
        if rx.search(f"blk.{i + dense}.ffn_{part}_exps.weight")
    }


def _ot(r: _Row, values: list[str], info: dict[str, Any]) -> list[str]:
    """The -ot values to keep: rules keeping experts on the CPU as given; rules that match no expert tensor dropped
    (said so); rules placing experts on a GPU buffer combined first-match-wins into one CPU rule."""
    groups: list[list[tuple[str, str, set[int]]]] = []
    for value in values:
        group = []
        for rule in (x for x in value.split(",") if x):
            pattern, _, buffer = rule.rpartition("=")
            layers = _expert_layers(pattern, info) if pattern else None
            if not layers:
                r.assume(
                    f"-ot {rule}: matches no routed-expert tensor of the model, dropped (the tensors it names "
                    f"are not experts; they stay where the rest of the model is)"
                )
                continue
            group.append((rule, buffer, layers))
        if group:
            groups.append(group)
    rules = [x for g in groups for x in g]
    if all(buffer.upper() == "CPU" for _, buffer, _ in rules):
        return [",".join(rule for rule, _, _ in g) for g in groups]
    dense = info.get("dense_layers", 0)
    cpu: list[int] = []
    for i in range(info["num_layers"]):
        for part in ("gate", "up", "down"):
            name = f"blk.{i + dense}.ffn_{part}_exps.weight"
            first = next((b for rule, b, _ in rules if re.search(rule.rpartition("=")[0], name)), "")
            if first.upper() == "CPU":
                cpu.append(i + dense)
                break
    r.assume(
        "-ot rules placing experts on a GPU buffer: combined first-match-wins (llama.cpp's order) into one rule "
        "over the layers whose experts stay on the CPU"
    )
    return [rf"blk\.({'|'.join(str(b) for b in cpu)})\.ffn_.*_exps=CPU"] if cpu else []


def _ctx_tokens(text: str) -> int:
    """``131K`` -> 131072, ``8k`` -> 8192, ``120k`` -> 120000: powers of two and their round kilos are binary."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([kK])?", text.strip())
    if not m:
        return 0
    n = float(m.group(1))
    if not m.group(2):
        return int(n)
    if n == int(n) and int(n) & (int(n) - 1) == 0:
        return int(n) * 1024
    two = 2 ** round(math.log2(n * 1000))
    return two if abs(two - n * 1000) <= 0.01 * n * 1000 else int(n * 1000)


def _flags(r: _Row, info: dict[str, Any], system: str, runtime: str) -> tuple[str, str]:
    """The runtime's flags (canonical spellings, -ot patterns as given) and the system (llama-cpp-lru with an expert
    cache)."""
    text = r.get("offload_flags")
    low = text.lower()
    if re.search(
        r"\bcpu[- ]only\b|no layers on (?:the )?gpu|\bno gpu offload|num_gpu\s*[=:]?\s*0\b|"
        r"(?:-ngl|--n-gpu-layers)[ =]0\b",
        low,
    ):
        r.cannot("CPU-only run: attention on the CPU is not modelled")
    m = re.search(r"only (\d+) of (\d+) (?:routed )?experts", low)
    if m:
        r.cannot(f"changes the model: only {m.group(1)} of {m.group(2)} routed experts activated")
    if re.search(r"hot[- ]expert", low) and not re.search(r"LLAMA_ARG_\w*HOT", text):
        r.cannot("the fork's own hot-expert VRAM cache is not modelled")
    if not system:
        return "", system
    if runtime == "ktransformers":
        return _kt_flags(r, text, low), system
    if not runtime:
        if text and not _NOT_STATED.search(text):
            r.assume(f"offload_flags '{text}': {system}'s own placement and prefetch (the preset), as described")
        return "", system
    found, unknown = _walk(text, runtime)
    found = _env(r, text) + found
    m = re.search(r"num_gpu\s*[=:]?\s*(\d+)", low)
    if m and int(m.group(1)) > 0:
        found.append(("-ngl", m.group(1)))
    # the batch and context columns: -b/-ub, -c, the KV cache's types
    batch = r.get("batch")
    extra, _ = _walk(batch, runtime)
    for pat, flags in (
        (r"\bbatch\s*=\s*ubatch\s*=\s*(\d+)", ("-b", "-ub")),
        (r"\bubatch\s*[= ]\s*(\d+)", ("-ub",)),
        (r"(?<![\w-])ub\s*[= ]?\s*(\d+)", ("-ub",)),
        (r"(?<![\w-])batch\s*=\s*(\d+)", ("-b",)),
    ):
        for n in re.findall(pat, batch, re.IGNORECASE):
            extra += [(f, n) for f in flags]
    ctx = r.get("ctx_or_prompt_tokens")
    extra += [f for f in _walk(ctx, runtime)[0] if f[0] in ("-c", "-ctk", "-ctv")]
    for n in re.findall(
        r"(\d+(?:\.\d+)?\s*[kK]?)\s*ctx\b|\bKV\s+(\d+(?:\.\d+)?\s*[kK]?)\b|\bctx[\s=:]+(\d+[kK]?)", ctx
    ):
        extra.append(("-c", str(_ctx_tokens(next(x for x in n if x)))))
    kv = re.search(rf"\b({_KV})\s*/\s*({_KV})\b", ctx + " " + text)
    if kv:
        extra += [("-ctk", kv.group(1)), ("-ctv", kv.group(2))]
    kv = re.search(rf"\b({_KV})\s+kv\b", (ctx + " " + text).lower())
    if kv:
        extra += [("-ctk", kv.group(1)), ("-ctv", kv.group(1))]
    have = {f for f, _ in found}
    for flag, value in extra:  # the offload column wins
        if flag not in have:
            have.add(flag)
            found.append((flag, value))
    return _llama_flags(r, found, unknown, info, low, text), _lru(system, found)


def _lru(system: str, found: list[tuple[str, str]]) -> str:
    return "llama-cpp-lru" if system == "llama-cpp" and any(f == "--moe-expert-cache" for f, _ in found) else system


def _llama_flags(
    r: _Row, found: list[tuple[str, str]], unknown: list[str], info: dict[str, Any], low: str, text: str
) -> str:
    out: list[str] = []
    seen: set[str] = set()
    ot: list[str] = []
    ot_at = -1
    for flag, value in found:
        if flag == "-ot":
            ot_at = len(out) if ot_at < 0 else ot_at
            ot.append(value)
            continue
        if flag in seen:
            continue
        if flag in ("-c", "-b", "-ub") and re.fullmatch(r"\d+(?:\.\d+)?[kK]", value):
            value = str(_ctx_tokens(value))  # 8k -> 8192
        if flag in _INT_FLAGS and not re.fullmatch(r"\d+", value):
            r.assume(f"{flag} {value}: not a whole number, dropped")
            continue
        if flag == "-c" and value == "0":
            r.assume(
                "-c 0 (llama.cpp: the model's training context): not known to the model preset, dropped (the "
                "KV cache is sized by the run)"
            )
            continue
        seen.add(flag)
        out.append(f"{flag} {_quote(value)}" if value else flag)
    kept = [f"-ot {_quote(v)}" for v in _ot(r, ot, info)] if ot else []
    out[ot_at:ot_at] = kept
    offload = bool(kept) or "--n-cpu-moe" in seen or "--cpu-moe" in seen
    if not offload and not r.unmodelled:
        if re.search(
            r"\ball(?: \d+)? layers on (?:the )?gpu|\bno offload\b|fully (?:on|in) (?:the )?(?:gpu|vram)", low
        ):
            out.append("--n-cpu-moe 0")
        elif re.search(r"all (?:routed )?experts (?:on|in) (?:the )?(?:cpu|ram)|experts in ram", low):
            out.append("--cpu-moe")
            r.assume(f"offload_flags '{text}': all experts on the CPU, read as --cpu-moe")
        elif "-ngl" not in seen:
            r.assume(
                "offload flags not stated: the llama-cpp preset's placement, the experts of as few layers as fit "
                "on the CPU (n_cpu_moe=-1); a run that offloaded whole layers (-ngl, Ollama's default before "
                "2026-05) kept their attention on the CPU too (system=llama-cpp-2024), which is not assumed"
            )
    if unknown:
        r.assume(f"flags not modelled, dropped: {', '.join(dict.fromkeys(unknown))}")
    return " ".join(out)


def _kt_flags(r: _Row, text: str, low: str) -> str:
    found, _ = _walk(text, "ktransformers")
    out = []
    for flag, value in found:
        if flag in ("--cpu_infer", "--cpu-infer", "--kt-cpuinfer") and not value.isdigit():
            continue
        out.append(f"{flag} {_quote(value)}")
    return " ".join(dict.fromkeys(out))


# ---- hardware -------------------------------------------------------------------------------------------------------


def _alnum(text: str) -> str:
    return re.sub(r"^(nvidia)?(geforce)?", "", re.sub(r"[^a-z0-9]", "", text.lower()))


def gpu_key(text: str) -> str:
    """The conf/parts.yaml ``gpus`` entry a GPU's name means ("" when none): by key or name, case, spaces and brand
    ignored, or the one entry whose key or name starts with it (``RTX 3060`` -> rtx3060-12gb, ``RTX PRO 6000
    Blackwell Max-Q`` -> rtx-pro-6000-maxq)."""
    text = re.sub(r"\([^)]*\)|^\s*\d+\s*x\s*", " ", text)
    gpus = {k: v for k, v in parts()["gpus"].items() if isinstance(v, dict)}
    for want in dict.fromkeys((_alnum(text), _alnum(re.sub(r"\b\d+\s*GB\b", " ", text, flags=re.IGNORECASE)))):
        if not want:
            continue
        for key, g in gpus.items():
            if want in (_alnum(key), _alnum(g["name"])):
                return key
        starts = [k for k, g in gpus.items() if _alnum(k).startswith(want) or _alnum(g["name"]).startswith(want)]
        if len(starts) == 1:
            return starts[0]
    return ""


def _gib(text: str) -> float:
    """GiB of a RAM or VRAM size as written (``1 TB`` -> 1024, ``96 GB`` -> 96, ``16GiB`` -> 16); 0: none."""
    m = re.search(r"(\d+(?:\.\d+)?)\s*(TB|TiB|T|GB|GiB|G)\b", text, re.IGNORECASE)
    if not m:
        return 0.0
    n = float(m.group(1))
    return n * 1024 if m.group(2).upper().startswith("T") else n


def _size(gib: float) -> str:
    return f"{gib:g}GiB"


def _hardware(r: _Row, info: dict[str, Any], fmt: str) -> dict[str, str]:
    hw: dict[str, str] = {}
    gpu_text = r.get("gpu")
    vram = r.get("vram_gb")
    key = gpu_key(gpu_text)
    if key:
        hw["gpu"] = key
        sheet = parts()["gpus"][key]["vram_bytes"] / 2**30
        if _num(vram) and abs(_num(vram) - sheet) > 0.5:
            hw["vram"] = _size(_num(vram))
    elif _num(vram):
        hw["vram"] = _size(_num(vram))
        r.assume(
            f"GPU '{gpu_text or '(not stated)'}' is not in conf/parts.yaml: its memory from vram_gb "
            f"({vram} GB), its bandwidth and TFLOPS HardwareConfig's defaults (an RTX 4090's)"
        )
    else:
        r.cannot(f"GPU not stated ('{gpu_text}'), nor its memory: the placement and the prefill depend on it")
    count = re.match(r"\s*(\d+)\s*x\s*\D", gpu_text)
    n_gpus = _num(r.get("n_gpus")) or (int(count.group(1)) if count else 1)
    if n_gpus > 1:
        r.cannot(f"{n_gpus:g} GPUs: the simulator models one")
    pcie = r.get("pcie")
    link = re.search(r"(?:pcie|gen)\s*([1-6])(?:\.0)?\s*x\s*(\d+)", pcie, re.IGNORECASE) or re.fullmatch(
        r"\s*([1-6])\s*x\s*(\d+)\s*", pcie
    )
    if link:
        hw["pcie"] = f"{link.group(1)}x{link.group(2)}"
    elif re.search(r"(\d+(?:\.\d+)?)\s*GB/s", pcie):
        rate = re.search(r"(\d+(?:\.\d+)?)\s*GB/s", pcie)
        assert rate is not None
        hw["link_gbps"] = rate.group(1)
        r.assume(f"pcie '{pcie}': read as a measured host-to-device rate, {rate.group(1)} GB/s")
    _cpu_and_ram(r, hw, info, fmt)
    return hw


def _cpu_and_ram(r: _Row, hw: dict[str, str], info: dict[str, Any], fmt: str) -> None:
    """cpu= (and sockets=) of the CPU named, or its stated cores; ram= and ram_gbps= (see ``_ram``)."""
    cpu_text = r.get("cpu")
    flags_low = r.get("offload_flags").lower()
    entry: dict[str, Any] = {}
    m = re.search(r"(\d+)\s*sockets?|\b(dual)[- ]socket", cpu_text, re.IGNORECASE)
    sockets = (2 if m.group(2) else int(m.group(1))) if m else 1
    used = sockets
    if sockets > 1:
        if re.search(r"single[- ]socket|numactl\s+(?:-N|--cpunodebind)[ =]?\d", flags_low):
            used = 1
            r.assume(
                f"one socket of {sockets} in use (numactl binds the run and its memory to one node): that "
                f"socket's cores and memory channels, and its share of the RAM"
            )
        elif not re.search(r"dual[- ]socket|use_numa\s*=\s*1|both sockets", flags_low):
            r.assume(
                f"socket use not stated: all {sockets} sockets' cores and memory channels counted "
                f"(a runtime with one copy of the experts reads them at one socket's bandwidth: system.numa)"
            )
    if cpu_text and not _NOT_STATED.search(cpu_text):
        try:
            key, entry = lookup_cpu(cpu_text)
            hw["cpu"] = key
            if used > entry["sockets"]:
                r.assume(f"{used} sockets stated; the {entry['name']} takes {entry['sockets']}: one counted")
                used = sockets = 1
            elif used > 1:
                hw["sockets"] = str(used)
        except ConfigError:
            per = re.search(r"(\d+)\s*cores?\s*/\s*socket", cpu_text, re.IGNORECASE)
            total = re.search(r"\((\d+)\s*C\)|(\d+)[- ]cores?", cpu_text, re.IGNORECASE)
            if per:
                hw["cpu_cores"] = str(int(per.group(1)) * used)
            elif total:
                hw["cpu_cores"] = next(g for g in total.groups() if g)
            r.assume(
                f"CPU '{cpu_text}' is not in conf/parts.yaml: its cores {'as stated' if per or total else 'unknown'}, "
                f"its memory platform unknown"
            )
    _ram(r, hw, info, fmt, entry, sockets, used)
    bw = re.search(r"(\d+(?:\.\d+)?)\s*GB/s", r.get("mem_bw_stated"))
    if bw:
        hw["ram_gbps"] = bw.group(1)


_CHANNEL_WORDS = {"dual": 2, "quad": 4, "hexa": 6, "six": 6, "octa": 8, "eight": 8, "twelve": 12}


def _ram(
    r: _Row, hw: dict[str, str], info: dict[str, Any], fmt: str, cpu: dict[str, Any], sockets: int, used: int
) -> None:
    """ram= from the RAM's size and its type, speed and channels as stated (per socket: x the sockets in use; DIMMs:
    the channels they fill), what is not stated from the CPU's platform (said so) or left to the machine."""
    spec = r.get("ram_type_speed_channels")
    low = spec.lower()
    gib = _gib(r.get("ram_size")) * used / sockets
    kind_speed = re.search(r"\b(lpddr\d+x?|ddr\d)[\s-]*(\d{4,5})\b", low)
    kind_only = re.search(r"\b(lpddr\d+x?|ddr\d)\b", low)
    speed_only = re.search(r"(\d{4,5})\s*mt/?s", low)
    kind = kind_speed.group(1) if kind_speed else kind_only.group(1) if kind_only else ""
    mts = int(kind_speed.group(2)) if kind_speed else int(speed_only.group(1)) if speed_only else 0
    per_socket = "per socket" in low
    scope = 1 if per_socket else sockets  # the sockets the stated channels or DIMMs are spread over
    ch = re.search(r"(\d+)\s*[- ]?(?:ch\b|channels?\b)", low)
    ch_word = re.search(r"\b(dual|quad|hexa|six|octa|eight|twelve)[- ]channel", low)
    dimms = re.search(r"(\d+)\s*x\s*(?:\d+\s*gb\s*)?(?:lp)?ddr|(\d+)\s*(?:x\s*)?dimms?\b", low)
    channels = int(ch.group(1)) if ch else _CHANNEL_WORDS[ch_word.group(1)] if ch_word else 0
    if not channels and dimms:
        n = int(next(g for g in dimms.groups() if g))
        channels = min(n, cpu["channels"] * scope) if cpu else n
        on = f" on the {cpu['name']}'s {cpu['channels']} channels{' a socket' if sockets > 1 else ''}" if cpu else ""
        r.assume(
            f"memory channels from the DIMMs: {n} DIMMs{' per socket' if per_socket else ''}{on} -> "
            f"{channels} channels{'' if cpu else ' (one DIMM a channel, assumed)'}"
        )
    channels = channels * used // scope
    if cpu and (kind or mts or channels) and not (kind and mts):
        kind = kind or cpu["dram"]
        if not mts:
            mts = cpu["mts"]
            r.assume(
                f"RAM speed not stated: {kind.upper()}-{mts}, the {cpu['name']}'s rated speed (its data sheet, "
                f"conf/parts.yaml)"
            )
    if not gib and kind and mts:
        gib = _assumed_capacity(r, info, fmt)
    if not (kind and mts):
        if cpu:
            unstated = (
                "its capacity left unstated (every host-side expert taken to be in RAM, as the run's speed implies)"
            )
            what = f"its capacity {_size(gib)}" if gib else unstated
            r.assume(
                f"RAM speed not stated: {what}; its speed and channels the {cpu['name']}'s rated "
                f"{cpu['dram'].upper()}-{cpu['mts']} x{cpu['channels'] * used} (its data sheet, conf/parts.yaml)"
            )
        elif not r.get("mem_bw_stated"):
            left = (
                f"host RAM {_size(gib)}"
                if gib
                else "host RAM left unstated (every host-side expert taken to be in RAM)"
            )
            r.assume(
                f"RAM type and CPU not stated: {left}, and the host's memory bandwidth HardwareConfig's default, "
                f"{HardwareConfig().cpu_mem_gbps:g} GB/s (assumed; a CPU-side expert's speed rests on it)"
            )
        if gib:
            hw["ram"] = _size(gib)
        return
    hw["ram"] = f"{_size(gib)}:{kind}-{mts}" + (f"x{channels}" if channels else "")
    if not channels:
        plat = (
            f"the {cpu['name']}'s {cpu['channels']}{f' x {used} sockets' if used > 1 else ''}" if cpu else "2 (assumed)"
        )
        r.assume(f"memory channels not stated: {plat}")


def _assumed_capacity(r: _Row, info: dict[str, Any], fmt: str) -> float:
    """The smallest power-of-two GiB that holds the model's file and the host's reserve (assumed, said so)."""
    size = _gib(r.get("file_size"))
    if not size:
        names = {f.name for f in dataclasses.fields(ModelConfig)}
        try:
            w = weights(ModelConfig(**{k: v for k, v in info.items() if k in names}), fmt)
            size = (w.experts_bytes + w.resident_bytes) / 2**30
        except (ConfigError, ValueError, TypeError):
            size = 0.0
    need = size + HardwareConfig().host_reserve_bytes / 2**30
    gib = float(2 ** math.ceil(math.log2(max(need, 1.0))))
    r.assume(
        f"RAM capacity not stated: {gib:g} GiB, the smallest power of two holding the {size:.1f} GiB file and "
        f"the host's reserve (the run's speed implies it fit)"
    )
    return gib


def _num(text: str) -> float:
    m = re.search(r"\d+(?:\.\d+)?", text or "")
    return float(m.group(0)) if m else 0.0


# ---- threads, tokens, rates -----------------------------------------------------------------------------------------


def _threads(r: _Row, flags: str) -> int:
    text = r.get("threads")
    m = re.search(r"(\d+)\s*x\s*(\d+)", text)
    if m:
        return int(m.group(1)) * int(m.group(2))
    m = re.search(r"(?:--threads|-t)[ =](\d+)", text) or re.match(r"\s*~?(\d+)\b", text)
    if m:
        return int(m.group(1))
    m = re.search(r"(?:--cpu_infer|--cpu-infer|--kt-cpuinfer|-t)\s+(\d+)", flags)
    return int(m.group(1)) if m else 0


def _tokens_measured(r: _Row) -> tuple[int, int, int]:
    """(prompt tokens, tokens already in the KV cache, generated tokens)."""
    text = r.get("ctx_or_prompt_tokens")
    ctx = re.search(r"N_KV\s*=\s*(\d+)", text)
    context = int(ctx.group(1)) if ctx else 0
    prompt = 0
    for pat in (
        r"\bpp\s*n\s*=\s*(\d+)",
        r"\bpp\s*(\d+)",
        r"(\d[\d,]*(?:\.\d+)?)\s*([kK])?\+?[- ]tokens?\b",
        r"^\s*~?(\d+)\s*(?:\(|$|tokens?\b|input|prompt)",
        r"(\d+)\s*(?:input|prompt) tokens",
    ):
        m = re.search(pat, text)
        if m:
            n = float(m.group(1).replace(",", ""))
            if len(m.groups()) > 1 and m.group(2):
                n *= 1000
            prompt = int(n)
            if "+" in m.group(0):
                r.assume(f"prompt '{m.group(0).strip()}': read as {prompt}")
            break
    gen_text = r.get("gen_tokens") + " " + text
    g = re.search(r"\btg\s*(\d+)", gen_text) or re.match(r"\s*~?(\d+)", r.get("gen_tokens"))
    return prompt, context, int(g.group(1)) if g else 0


def _rate(r: _Row, column: str) -> float | None:
    """The first number of a rate cell; a list of runs (``514.93, 534.64, 531.26``) -> their mean; None: empty."""
    text = r.get(column)
    if not text:
        return None
    runs = re.fullmatch(r"\s*~?\d+(?:\.\d+)?(?:\s*,\s*~?\d+(?:\.\d+)?)+\s*", text)
    if runs:
        return statistics.fmean(float(x) for x in re.findall(r"\d+(?:\.\d+)?", text))
    m = re.search(r"\d+(?:\.\d+)?", text)
    if not m:
        raise _bad(column, text, "is not a rate (tokens/s: a number, or runs separated by commas)")
    return float(m.group(0))


def check_hardware(setting: Setting) -> HardwareConfig:
    """The HardwareConfig a setting's machine describes (``hobbit.sim.machine.describe``)."""
    fields, _ = describe(**setting.hardware)
    return HardwareConfig(**fields)
