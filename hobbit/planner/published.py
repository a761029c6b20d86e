"""Published measurements of MoE inference, read from their free-text descriptions into settings the simulator runs.

A published measurement (a row of benchmarks/published/development.csv, or any CSV with its columns) says in words
what ran: the model, its file's format, the runtime and its offload flags, the machine, the prompt, and the prefill
and decode rates it reached. ``parse_row`` turns one row into a :class:`Setting`: a conf/model preset, a weights
format ``hobbit.sim.formats`` takes, a conf/system preset with the runtime's own flags (``hobbit.sim.flags``), and
the machine as ``hobbit.catalogue.machine.describe`` takes it. It reads by pattern, never by row: flags in any of their
spellings (``--n-cpu-moe=24``, ``-ncmoe 24``, ``LLAMA_ARG_N_CPU_MOE=24``), sizes and speeds as people write them
(``1 TB``, ``DDR5-6000 2ch``, ``8x DDR5-4800 per socket``), prompts (``pp512``, ``2.7k-token prompt``, ``969 (1K)``).

What the source leaves out and is assumed is said in ``Setting.assumed``, each in words with where the value comes
from; what the simulator cannot model (a CPU-only run, another runtime, a fork's own expert cache, a changed expert
count, several GPUs) is said in ``Setting.unmodelled``, and such a row is still read. A row that cannot be read at all
(an unknown model, a format no pattern knows, a rate that is not a number) raises ``ValueError`` naming the column and
its text; ``read_settings`` reports it with the row's id and goes on.

RAM sizes stated in GB or TB are read as binary (``96 GB`` -> 96GiB, ``1 TB`` -> 1024GiB): DIMMs' GB are GiB, as
GPUs' are (hobbit/catalogue/data/parts.yaml). A RAM capacity the source does not state is left out where the type and speed are not
stated either (the simulator then takes every host-side expert to be in RAM, as the run's speed implies, and says so);
where they are, the smallest power of two that holds the file and the host's reserve is assumed, and said.
"""

from __future__ import annotations

import csv
import functools
import re
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from hobbit.catalogue.machine import describe
from hobbit.planner.published_flags import quote, row_flags, walk
from hobbit.planner.published_machine import row_hardware
from hobbit.planner.published_row import NOT_STATED, Row, bad
from hobbit.sim.config import ConfigError, HardwareConfig, SystemConfig
from hobbit.sim.flags import apply_flags
from hobbit.sim.formats import BASE_TYPE, GGML_TYPES, bits_per_weight

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
    """The machine as ``hobbit.catalogue.machine.describe`` takes it (keys of ``hobbit.catalogue.machine.KEYS``)."""
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
    r = Row({k: (v or "").strip() for k, v in cells.items()})
    row_id = r.get("row")
    if not row_id:
        raise ValueError("row: empty (every row needs an id)")
    _refer(r, rows or {})
    model = _model(r)
    info = model_presets()[model]
    system, runtime, gguf = _runtime(r)
    fmt = _weights(r, gguf, system)
    flags, system = row_flags(r, info, system, runtime)
    hardware = row_hardware(r, info, fmt)
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


def _refer(r: Row, rows: Mapping[str, Mapping[str, str]]) -> None:
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
        theirs = " ".join(f"-ot {quote(v)}" for f, v in walk(theirs, "llama.cpp")[0] if f == "-ot")
    r.assume(f"offload_flags '{m.group(0)}': row {m.group(2)}'s {m.group(1)} taken ({theirs})")
    r.cells["offload_flags"] = text.replace(m.group(0), theirs)


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


def _model(r: Row) -> str:
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
    raise bad("model", text, f"is not a model preset (conf/model: {', '.join(presets)})")


# ---- runtime and system -------------------------------------------------------------------------------------------

_PYTORCH = ("moe-infinity", "moe-offloading", "fiddler", "hobbit")  # runtimes whose experts are checkpoint tensors


def _runtime(r: Row) -> tuple[str, str, bool]:
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


def nearest_type(bpw: float) -> str:
    """The ggml type whose bits per weight are nearest ``bpw`` (K-quants first where two are as near)."""
    return min(_NEAREST, key=lambda t: (abs(bits_per_weight(t) - bpw), _NEAREST.index(t)))


def _file_type(ft: str) -> str:
    """A llama.cpp file type as system.weights spells it: lower case, upper where the name is also a ggml type."""
    return ft.upper() if ft in GGML_TYPES else ft


def _weights(r: Row, gguf: bool, system: str) -> str:
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
    if NOT_STATED.search(text) or not re.search(r"[A-Za-z0-9]", text.split("(")[0]):
        if gguf:
            r.assume("format not stated: Q4_K_M, the default of GGUF downloads")
            return "q4_k_m"
        r.assume("format not stated: fp16, the checkpoint's 16-bit weights as PyTorch runtimes load them")
        return "fp16"
    raise bad("quant", text, "names no format (a llama.cpp or ggml type such as Q4_K_M, IQ4_XS, MXFP4; FP16; or N BPW)")


def _one_type(r: Row, tok: str, text: str, gguf: bool, stated_bpw: re.Match[str] | None) -> str:
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


# ---- threads, tokens, rates -----------------------------------------------------------------------------------------


def _threads(r: Row, flags: str) -> int:
    text = r.get("threads")
    m = re.search(r"(\d+)\s*x\s*(\d+)", text)
    if m:
        return int(m.group(1)) * int(m.group(2))
    m = re.search(r"(?:--threads|-t)[ =](\d+)", text) or re.match(r"\s*~?(\d+)\b", text)
    if m:
        return int(m.group(1))
    m = re.search(r"(?:--cpu_infer|--cpu-infer|--kt-cpuinfer|-t)\s+(\d+)", flags)
    return int(m.group(1)) if m else 0


def _tokens_measured(r: Row) -> tuple[int, int, int]:
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


def _rate(r: Row, column: str) -> float | None:
    """The first number of a rate cell; a list of runs (``514.93, 534.64, 531.26``) -> their mean; None: empty."""
    text = r.get(column)
    if not text:
        return None
    runs = re.fullmatch(r"\s*~?\d+(?:\.\d+)?(?:\s*,\s*~?\d+(?:\.\d+)?)+\s*", text)
    if runs:
        return statistics.fmean(float(x) for x in re.findall(r"\d+(?:\.\d+)?", text))
    m = re.search(r"\d+(?:\.\d+)?", text)
    if not m:
        raise bad(column, text, "is not a rate (tokens/s: a number, or runs separated by commas)")
    return float(m.group(0))


def check_hardware(setting: Setting) -> HardwareConfig:
    """The HardwareConfig a setting's machine describes (``hobbit.catalogue.machine.describe``)."""
    fields, _ = describe(**setting.hardware)
    return HardwareConfig(**fields)
