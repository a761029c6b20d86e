"""A runtime configured by its own command-line flags: ``system.flags="-ngl 99 --n-cpu-moe 30 --no-mmap"``.

``system.runtime`` names the grammar (llama.cpp, ik_llama.cpp, ktransformers); ``apply_flags`` turns the flags into the system's
knobs before a run, so results show both what was typed and what it set. Flags that change what this simulator
models set knobs; flags that only change what it does not model (threads, flash attention, the server) are
accepted and listed in ``Flags.unmodelled``; any other flag is refused, naming it. The flags follow llama.cpp's
``common/arg.cpp`` (ggml-org/llama.cpp) and the expert-cache PR #27861, and KTransformers' kt-kernel as SGLang takes
it (docs/references.md, Systems compared).
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass

from hobbit.sim.config import ConfigError, SystemConfig

RUNTIMES = ("", "llama.cpp", "ik_llama.cpp", "ktransformers")
KV_TYPES = {"f16": 16.0, "bf16": 16.0, "f32": 32.0, "q8_0": 8.5, "q4_0": 4.5, "q4_1": 5.0, "q5_0": 5.5, "q5_1": 6.0}


@dataclass(frozen=True)
class Grammar:
    """One runtime's command line, the only table of its flags: what ``apply_flags`` runs and what the reader of
    published measurements (``hobbit.planner.published_flags``) finds in prose."""

    values: Mapping[str, str]
    """Every spelling of a flag that takes a value -> the flag's canonical spelling."""
    switches: Mapping[str, str]
    """Likewise, the flags that take none."""
    unmodelled: frozenset[str]
    """Canonical flags accepted but not modelled: they change speed only through what the hardware figures already
    describe (threads, flash attention), or change nothing this simulator models (the server, sampling)."""
    quiet: frozenset[str] = frozenset()
    """Of those, the flags a measurement does not depend on at all (the model's path, the server, sampling): a
    published row's are dropped without a word."""
    ints: frozenset[str] = frozenset()
    """Canonical flags whose value is a whole number."""
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """llama.cpp's ``LLAMA_ARG_<NAME>`` environment variables -> canonical flags."""

    def canonical(self, word: str) -> str | None:
        """The canonical spelling of a flag (None: not one of this runtime's)."""
        return self.values.get(word) or self.switches.get(word)


def _spellings(*groups: tuple[str, ...]) -> dict[str, str]:
    """Each group's spellings -> its first (the canonical one)."""
    return {spelling: group[0] for group in groups for spelling in group}


# llama.cpp's common/arg.cpp (ggml-org/llama.cpp) and the expert-cache PR #27861; ik_llama.cpp takes the same
LLAMA = Grammar(
    values=_spellings(
        ("-ngl", "--n-gpu-layers", "--gpu-layers"), ("--n-cpu-moe", "-ncmoe"), ("-ot", "--override-tensor"),
        ("-c", "--ctx-size"), ("-ctk", "--cache-type-k"), ("-ctv", "--cache-type-v"), ("-ub", "--ubatch-size"),
        ("-b", "--batch-size"), ("--moe-expert-cache",), ("--moe-expert-cache-inserts",), ("-t", "--threads"),
        ("-tb", "--threads-batch"), ("--numa",), ("-m", "--model"), ("--host",), ("--port",), ("-np", "--parallel"),
        ("-n", "--n-predict"), ("-p", "--prompt"), ("--temp",), ("--seed", "-s"), ("-a", "--alias"),
        ("-hf", "--hf-repo"),
    ),
    switches=_spellings(
        ("--cpu-moe", "-cmoe"), ("--no-mmap",), ("--mmap",), ("--no-op-offload", "-nopo"), ("-fa", "--flash-attn"),
        ("-fmoe", "--fused-moe"), ("-rtr", "--run-time-repack"), ("--mlock",), ("--jinja",), ("--no-warmup",),
        ("-cnv",),
    ),
    unmodelled=frozenset({
        "-t", "-tb", "--numa", "-m", "--host", "--port", "-np", "-n", "-p", "--temp", "--seed", "-a", "-hf", "-fa",
        "-fmoe", "-rtr", "--mlock", "--jinja", "--no-warmup", "-cnv",
    }),
    quiet=frozenset({"-m", "--host", "--port", "-p", "-n", "--temp", "--seed", "-np", "-a", "-hf", "--jinja",
                     "--no-warmup", "-cnv"}),
    ints=frozenset({"-ngl", "--n-cpu-moe", "-c", "-ub", "-b", "--moe-expert-cache", "--moe-expert-cache-inserts",
                    "-t", "-tb"}),
    env={
        "N_CPU_MOE": "--n-cpu-moe", "CPU_MOE": "--cpu-moe", "OVERRIDE_TENSOR": "-ot", "N_GPU_LAYERS": "-ngl",
        "CTX_SIZE": "-c", "UBATCH": "-ub", "BATCH": "-b", "CACHE_TYPE_K": "-ctk", "CACHE_TYPE_V": "-ctv",
        "NO_MMAP": "--no-mmap", "FLASH_ATTN": "-fa", "THREADS": "-t", "THREADS_BATCH": "-tb",
    },
)  # fmt: skip

# KTransformers' kt-kernel through SGLang (kvcache-ai/sglang's server_args.py and kt_ep_wrapper.py; docs/references.md,
# Systems compared). Its flags have one spelling each (the three of the CPU threads are three flags).
_KT_MODELLED = (
    "--kt-num-gpu-experts", "--kt-gpu-experts-ratio", "--kt-expert-placement-strategy", "--chunked-prefill-size",
    "--chunk_size", "--kt-method", "--kt-max-deferred-experts-per-token", "--kt-enable-dynamic-expert-update",
    "--kt-gpu-prefill-token-threshold",
)  # fmt: skip
_KT_THREADS = ("--kt-cpuinfer", "--cpu_infer", "--cpu-infer", "--kt-threadpool-count", "--cache_lens")
_KT_SERVER = (
    "--max_new_tokens", "--kt-weight-path", "--model", "--model-path", "--port", "--host", "--mem-fraction-static",
    "--max-running-requests", "--max-total-tokens", "--tp", "--tp-size", "--attention-backend",
    "--served-model-name", "--gguf_path", "--model_path",
)  # fmt: skip
_KT_SWITCHES = ("--trust-remote-code", "--disable-shared-experts-fusion", "--enable-mixed-chunk", "--no-use_cuda_graph")
KTRANSFORMERS = Grammar(
    values={f: f for f in (*_KT_MODELLED, *_KT_THREADS, *_KT_SERVER)},
    switches={f: f for f in _KT_SWITCHES},
    unmodelled=frozenset((*_KT_THREADS, *_KT_SERVER, *_KT_SWITCHES)),
    quiet=frozenset(
        (*_KT_SERVER, *_KT_SWITCHES, "--kt-enable-dynamic-expert-update", "--kt-gpu-prefill-token-threshold")
    ),
    ints=frozenset({"--kt-num-gpu-experts", "--kt-max-deferred-experts-per-token"}),
)
GRAMMARS: dict[str, Grammar] = {"llama.cpp": LLAMA, "ik_llama.cpp": LLAMA, "ktransformers": KTRANSFORMERS}
"""Each runtime's grammar, by ``system.runtime``."""


@dataclass(frozen=True)
class Flags:
    """What a command line set: the system with its knobs set, and the flags accepted but not modelled."""

    system: SystemConfig
    unmodelled: tuple[str, ...] = ()


def _tensor_layers(pattern: str, num_layers: int, dense_layers: int) -> set[int] | None:
    """The MoE layers whose routed-expert tensors ``pattern`` (an -ot regex) matches, by llama.cpp's tensor names
    (blk.N.ffn_{gate,up,down}_exps.weight, N counting dense-first blocks too); None: it matches no expert tensor."""
    rx = re.compile(pattern)
    hit = {
        i
        for i in range(num_layers)
        for part in ("gate", "up", "down")
        if rx.search(f"blk.{i + dense_layers}.ffn_{part}_exps.weight")
    }
    return hit or None


def apply_flags(system: SystemConfig, num_layers: int, dense_layers: int = 0, num_experts: int = 0) -> Flags:
    """``system`` with ``system.flags`` applied (by ``system.runtime``'s grammar); ``num_layers``, ``dense_layers``,
    ``num_experts``: the model's MoE layers, dense-first layers and routed experts per layer."""
    if not system.flags:
        return Flags(system)
    if system.runtime not in RUNTIMES[1:]:
        raise ConfigError(
            f"system.flags='{system.flags}': system={system.name} has no runtime whose flags they are "
            f"(system.runtime={system.runtime or '(none)'}; fix: a system of the llama.cpp family, system=llama-cpp)"
        )
    try:
        args = shlex.split(system.flags)
    except ValueError as exc:
        raise ConfigError(f"system.flags='{system.flags}': {exc}") from None
    if system.runtime == "ktransformers":
        return _ktransformers(system, args, num_experts)
    knobs, cpu_layers, whole, unmodelled = _read_llama(system, args, num_layers, dense_layers)
    return _settle_llama(system, knobs, cpu_layers, whole, unmodelled, num_layers)


def _override_layers(flag: str, rules: str, num_layers: int, dense_layers: int) -> set[int]:
    """The MoE layers whose experts an -ot value's rules (``pattern=CPU``, comma-separated) keep on the CPU; a rule
    that names another buffer or matches no expert tensor is refused."""
    out: set[int] = set()
    for rule in rules.split(","):
        pattern, _, buffer = rule.rpartition("=")
        layers = _tensor_layers(pattern, num_layers, dense_layers) if pattern else None
        if buffer.upper() != "CPU" or layers is None:
            raise ConfigError(
                f"system.flags: {flag} {rule}: only rules that keep routed experts on the CPU are modelled "
                f"(exps=CPU, blk\\.(1[0-9])\\.ffn=CPU); this one matches no expert tensor of the model's "
                f"{num_layers} MoE layers or names another buffer"
            )
        out |= layers
    return out


def _read_llama(
    system: SystemConfig, args: list[str], num_layers: int, dense_layers: int
) -> tuple[dict, set[int], int, list[str]]:
    """The llama.cpp family's flags read one by one (``LLAMA``'s spellings): the knobs they set, the MoE layers whose
    experts they keep on the CPU, the layers -ngl leaves whole on the CPU, and the flags not modelled."""
    knobs: dict = {}
    cpu_layers: set[int] = set()
    whole = 0  # -ngl: the first MoE layers run whole on the CPU
    unmodelled: list[str] = []
    i = 0

    def value(flag: str) -> str:
        if i + 1 >= len(args):
            raise ConfigError(f"system.flags: {flag} needs a value")
        return args[i + 1]

    while i < len(args):
        a, _, inline = args[i].partition("=") if args[i].startswith("--") else (args[i], "", "")
        if inline:  # --flag=value
            args[i : i + 1] = [a, inline]
        c = LLAMA.canonical(a)
        if c == "--n-cpu-moe":  # blocks 0..N-1 (common/arg.cpp: one llm_ffn_exps_block_regex(i) per
            # block), so dense-first blocks, which have no expert tensors, count towards N
            knobs["n_cpu_moe"] = max(_int(a, value(a)) - dense_layers, 0)
            i += 2
        elif c == "--cpu-moe":
            cpu_layers |= set(range(num_layers))
            i += 1
        elif c == "-ot":
            cpu_layers |= _override_layers(a, value(a), num_layers, dense_layers)
            i += 2
        elif c == "-ngl":
            # the last N of the n_layer blocks go to the GPU (llama-model.cpp: i_gpu_start = n_layer - n_gpu_layers),
            # the first run whole on the CPU; dense-first blocks come first, so they leave the GPU first
            whole = max(num_layers - _int(a, value(a)), 0)  # n_layer - ngl blocks, less the dense-first ones
            i += 2
        elif c == "--no-op-offload":  # host-weight products stay on the CPU at any batch
            knobs["offload_min_batch"] = 0
            i += 1
        elif c == "--no-mmap":
            knobs["host_load"] = "load"
            i += 1
        elif c == "--mmap":
            knobs["host_load"] = "mmap"
            i += 1
        elif c == "-c":
            knobs["kv_context"] = _int(a, value(a))
            i += 2
        elif c in ("-ctk", "-ctv"):
            if value(a) not in KV_TYPES:
                raise ConfigError(f"system.flags: {a} {value(a)} is not one of {', '.join(KV_TYPES)}")
            knobs["kv_k" if c == "-ctk" else "kv_v"] = value(a)
            i += 2
        elif c in ("-ub", "-b"):
            knobs["ubatch" if c == "-ub" else "batch"] = _int(a, value(a))
            i += 2
        elif c == "--moe-expert-cache":
            knobs["cache"] = dataclasses.replace(system.cache, layer_slots=_int(a, value(a)))
            i += 2
        elif c == "--moe-expert-cache-inserts":
            knobs["cpu_insert"] = _int(a, value(a))
            i += 2
        elif c == "-fa":  # a switch in older builds, on|off|auto in newer ones
            takes = i + 1 < len(args) and args[i + 1] in ("on", "off", "auto")
            unmodelled.append(f"{a} {args[i + 1]}" if takes else a)
            i += 2 if takes else 1
        elif c in LLAMA.unmodelled and c in LLAMA.values.values():
            unmodelled.append(f"{a} {value(a)}")
            i += 2
        elif c in LLAMA.unmodelled:
            unmodelled.append(a)
            i += 1
        else:
            raise ConfigError(
                f"system.flags: {args[i]} is not a {system.runtime} flag this simulator knows (fix: drop it, or one "
                f"of --n-cpu-moe, --cpu-moe, -ot, -ngl, --no-mmap, -c, -ctk, -ctv, -ub, -b, --moe-expert-cache)"
            )
    return knobs, cpu_layers, whole, unmodelled


def _settle_llama(
    system: SystemConfig, knobs: dict, cpu_layers: set[int], whole: int, unmodelled: list[str], num_layers: int
) -> Flags:
    """What the llama.cpp family's flags set, together: -ngl's whole layers (refused beside the expert flags), the CPU
    layers of --n-cpu-moe, --cpu-moe and -ot as one set, -b's cap on -ub, the KV cache's bits."""
    if whole:  # -ngl below the layer count: the first layers run whole on the CPU
        if system.placement != "static":
            raise ConfigError(
                f"system.flags='{system.flags}': -ngl below the layer count keeps whole layers on the CPU, which "
                f"system={system.name} (placement={system.placement}) does not do (fix: -ngl 999, or system=llama-cpp)"
            )
        if cpu_layers or "n_cpu_moe" in knobs:
            raise ConfigError(
                f"system.flags='{system.flags}': -ngl below the layer count puts whole layers on the CPU; with "
                f"--n-cpu-moe, --cpu-moe or -ot as well some CPU layers would keep attention on the GPU and some not, "
                f"which is not modelled (fix: -ngl 999 with those flags, or -ngl alone)"
            )
        knobs["n_cpu_moe"], knobs["cpu_layer_scope"] = whole, "whole"
    if cpu_layers and system.placement == "cache" and cpu_layers >= set(range(num_layers)):
        cpu_layers = set()  # --cpu-moe with an expert cache (PR #27861): every expert is host-side already
    if cpu_layers:
        if "n_cpu_moe" in knobs:
            cpu_layers |= set(range(min(knobs.pop("n_cpu_moe"), num_layers)))
        knobs["cpu_moe_layers"] = sorted(cpu_layers)
    batch = knobs.pop("batch", None)
    if batch is not None:  # a prompt's passes are at most -ub tokens and never more than -b (llama-context.cpp)
        knobs["ubatch"] = min(batch, knobs.get("ubatch", system.ubatch) or batch)
    k, v = knobs.pop("kv_k", None), knobs.pop("kv_v", None)
    if k or v:
        knobs["kv_bits"] = (KV_TYPES[k or "f16"] + KV_TYPES[v or "f16"]) / 2
    return Flags(dataclasses.replace(system, **knobs), tuple(unmodelled))


def _int(flag: str, text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise ConfigError(f"system.flags: {flag} {text}: not a whole number") from None
    if n < 0:
        raise ConfigError(f"system.flags: {flag} {text}: must be 0 or more")
    return n


# --kt-method: the CPU experts' format (AMX formats are converted files; LLAMAFILE keeps the GGUF's types)
_KT_METHODS = {"AMXINT4": "int4", "AMXINT8": "int8", "LLAMAFILE": "", "BF16": "bf16", "FP8": "fp8", "RAWINT4": "int4"}


def _ktransformers(system: SystemConfig, args: list[str], num_experts: int) -> Flags:
    """KTransformers' flags: --kt-num-gpu-experts, --kt-gpu-experts-ratio, --kt-expert-placement-strategy,
    --kt-method set knobs; --kt-max-deferred-experts-per-token above 0 and the dynamic expert update are refused
    (not modelled); threads, buffers and server flags are accepted and listed."""
    knobs: dict = {}
    unmodelled: list[str] = []
    i = 0
    while i < len(args):
        a, _, inline = args[i].partition("=")
        if inline:
            args[i : i + 1] = [a, inline]
        val = args[i + 1] if i + 1 < len(args) else None
        if a in KTRANSFORMERS.switches:
            unmodelled.append(a)
            i += 1
            continue
        if val is None:
            raise ConfigError(f"system.flags: {a} needs a value")
        if a == "--kt-num-gpu-experts":
            knobs["gpu_experts"] = _int(a, val)
        elif a == "--kt-gpu-experts-ratio":
            try:
                ratio = float(val)
            except ValueError:
                raise ConfigError(f"system.flags: {a} {val}: not a number") from None
            knobs["gpu_experts_ratio"] = ratio
        elif a == "--kt-expert-placement-strategy":
            if val not in ("uniform", "frequency", "front-loading"):
                raise ConfigError(f"system.flags: {a} {val}: modelled are uniform, frequency and front-loading")
            knobs["gpu_experts_strategy"] = val
        elif a in ("--chunked-prefill-size", "--chunk_size"):  # a prompt runs in passes of at most N tokens
            knobs["ubatch"] = 0 if val.strip() == "-1" else _int(a, val)  # -1: SGLang's "no chunking"
        elif a == "--kt-method":
            if val.upper() not in _KT_METHODS:
                raise ConfigError(f"system.flags: {a} {val} is not one of {', '.join(_KT_METHODS)}")
            if _KT_METHODS[val.upper()]:
                knobs["precision"] = dataclasses.replace(system.precision, high=_KT_METHODS[val.upper()])
        elif a == "--kt-max-deferred-experts-per-token":
            if _int(a, val) > 0:
                raise ConfigError(
                    f"system.flags: {a} {val}: deferred experts (their work finishes during the next layer) are not "
                    f"modelled (fix: drop it, or 0)"
                )
        elif a in ("--kt-enable-dynamic-expert-update", "--kt-gpu-prefill-token-threshold"):
            raise ConfigError(
                f"system.flags: {a}: the GPU's experts swapped for a large prefill's most used ones is not modelled "
                f"(fix: drop it; --kt-expert-placement-strategy frequency keeps the profiling requests' most used)"
            )
        elif a in KTRANSFORMERS.unmodelled:
            unmodelled.append(f"{a} {val}")
        else:
            raise ConfigError(
                f"system.flags: {a} is not a KTransformers flag this simulator knows (fix: drop it, or one of "
                f"--kt-num-gpu-experts, --kt-gpu-experts-ratio, --kt-expert-placement-strategy, --kt-method)"
            )
        i += 2
    if any(a.startswith("--kt-") for a in args):  # kt-kernel copies every expert into its own buffers at start
        knobs.setdefault("host_load", "load")  # (kt-kernel/python/utils/llamafile.py, operators/amx/moe_base.hpp)
    ratio = knobs.pop("gpu_experts_ratio", None)
    if ratio is not None:  # a share of all experts, spread over the layers (it overrides --kt-num-gpu-experts)
        if not 0.0 <= ratio <= 1.0:
            raise ConfigError(f"system.flags: --kt-gpu-experts-ratio {ratio}: must be in [0, 1]")
        knobs["gpu_experts"] = round(ratio * num_experts)
    return Flags(dataclasses.replace(system, **knobs), tuple(unmodelled))
