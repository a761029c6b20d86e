"""Published offload flags read into the flags the simulator takes: llama.cpp's and ik_llama.cpp's (any spelling,
environment variables too), KTransformers', and what each row's runtime does with them (``flags``)."""

from __future__ import annotations

import math
import re
import shlex
from typing import Any

from hobbit.planner.published_row import NOT_STATED, Row
from hobbit.sim.flags import GRAMMARS, KV_TYPES, LLAMA

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


def walk(text: str, runtime: str) -> tuple[list[tuple[str, str]], list[str]]:
    """The flags a text names, in order, as (canonical flag, value or ""); and the unknown flags it names."""
    grammar = GRAMMARS.get(runtime, LLAMA)
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
        flag = grammar.values.get(name)
        if flag is not None and nxt:
            if flag not in grammar.quiet:
                found.append((flag, _clean(nxt, keep_parens=flag == "-ot")))
            i += step
            continue
        flag = grammar.switches.get(name)
        if flag is not None and runtime != "ktransformers":  # KTransformers' switches set nothing a row depends on
            if flag == "-fa" and _clean(nxt) in ("on", "off", "auto"):
                found.append((flag, _clean(nxt)))
                i += 2
                continue
            if flag not in grammar.quiet:
                found.append((flag, ""))
            i += 1
            continue
        if re.fullmatch(r"--?[a-zA-Z][\w-]*", name) and grammar.canonical(name) not in grammar.quiet:
            value = _clean(nxt)
            takes = bool(re.fullmatch(r"-?\d+(\.\d+)?|[\w.]+", value)) and not value.startswith("-") and not eq
            unknown.append(f"{name} {value}" if takes and value.isdigit() else name)
        i += 1
    return found, unknown


def _env(r: Row, text: str) -> list[tuple[str, str]]:
    """llama.cpp's LLAMA_ARG_* environment variables as flags; a fork's own expert features are not modelled."""
    out: list[tuple[str, str]] = []
    for name, value in re.findall(r"\bLLAMA_ARG_([A-Z0-9_]+)=(\S+)", text):
        value = _clean(value, keep_parens=True)
        flag = LLAMA.env.get(name)
        if flag is None:
            if "HOT" in name:
                r.cannot(f"the fork's own hot-expert VRAM cache (LLAMA_ARG_{name}) is not modelled")
            elif re.search(r"MOE|EXPERT", name):
                r.cannot(f"LLAMA_ARG_{name}: the fork's own expert setting is not modelled")
            else:
                r.assume(f"LLAMA_ARG_{name}={value}: not a setting the simulator models, dropped")
            continue
        if flag in LLAMA.switches.values():
            if value.lower() in ("1", "true", "on", "yes", "enabled"):
                out.append((flag, ""))
        else:
            out.append((flag, value))
    return out


def quote(value: str) -> str:
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


def _ot(r: Row, values: list[str], info: dict[str, Any]) -> list[str]:
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


def row_flags(r: Row, info: dict[str, Any], system: str, runtime: str) -> tuple[str, str]:
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
        if text and not NOT_STATED.search(text):
            r.assume(f"offload_flags '{text}': {system}'s own placement and prefetch (the preset), as described")
        return "", system
    found, unknown = walk(text, runtime)
    found = _env(r, text) + found
    m = re.search(r"num_gpu\s*[=:]?\s*(\d+)", low)
    if m and int(m.group(1)) > 0:
        found.append(("-ngl", m.group(1)))
    # the batch and context columns: -b/-ub, -c, the KV cache's types
    batch = r.get("batch")
    extra, _ = walk(batch, runtime)
    for pat, flags in (
        (r"\bbatch\s*=\s*ubatch\s*=\s*(\d+)", ("-b", "-ub")),
        (r"\bubatch\s*[= ]\s*(\d+)", ("-ub",)),
        (r"(?<![\w-])ub\s*[= ]?\s*(\d+)", ("-ub",)),
        (r"(?<![\w-])batch\s*=\s*(\d+)", ("-b",)),
    ):
        for n in re.findall(pat, batch, re.IGNORECASE):
            extra += [(f, n) for f in flags]
    ctx = r.get("ctx_or_prompt_tokens")
    extra += [f for f in walk(ctx, runtime)[0] if f[0] in ("-c", "-ctk", "-ctv")]
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
    r: Row, found: list[tuple[str, str]], unknown: list[str], info: dict[str, Any], low: str, text: str
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
        if flag in LLAMA.ints and not re.fullmatch(r"\d+", value):
            r.assume(f"{flag} {value}: not a whole number, dropped")
            continue
        if flag == "-c" and value == "0":
            r.assume(
                "-c 0 (llama.cpp: the model's training context): not known to the model preset, dropped (the "
                "KV cache is sized by the run)"
            )
            continue
        seen.add(flag)
        out.append(f"{flag} {quote(value)}" if value else flag)
    kept = [f"-ot {quote(v)}" for v in _ot(r, ot, info)] if ot else []
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


def _kt_flags(r: Row, text: str, low: str) -> str:
    found, _ = walk(text, "ktransformers")
    out = []
    for flag, value in found:
        if flag in ("--cpu_infer", "--cpu-infer", "--kt-cpuinfer") and not value.isdigit():
            continue
        out.append(f"{flag} {quote(value)}")
    return " ".join(dict.fromkeys(out))
