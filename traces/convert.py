"""Converters from published routing logs into schema v1.

- ``flame``: FLAME-MoE traces (CMU-FLAME/FLAME-MoE-Traces): a derived Parquet file
  (columns seq, pos, layer, expert_ids, gate_probs) or a folder of the original per-layer
  ``.pt`` files. Teacher-forced forward passes: every sequence is one prefill request.
- ``vllm``: per-layer JSONL logs of vLLM's MoE router (a ``{"type": "meta"}`` line, then
  ``{"type": "route", "token_idx", "layer", "topk_ids", "topk_weights"}`` lines; a new
  forward pass starts where ``token_idx`` returns to 0). See ``vllm_passes``.
- ``jsonl``: the generic format documented in the README (``traces.jsonl_format``).
- ``llamacpp_csv``: llama.cpp's ``moe-trace`` CSV (``traces.llamacpp_csv``): expert ids only, no
  gate weights (the trace records ``weights: absent`` and the import warns).
- ``tec``: TEC's ``RTRACE01`` router traces (``traces.tec_format``).
"""

from __future__ import annotations

import json
import os
import pickle
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from hobbit.traces.arrays import TraceArrays, sort_by_weight
from hobbit.traces.inputs import reading
from hobbit.traces.io import write_trace
from hobbit.traces.jsonl_format import read_generic_jsonl
from hobbit.traces.llamacpp_csv import read_llamacpp_csv
from hobbit.traces.schema import (
    DECODE,
    INT16_MAX,
    INT32_MAX,
    PREFILL,
    InputError,
    ModelSpec,
    TraceError,
    TraceMeta,
    now_iso,
)
from hobbit.traces.tec_format import read_tec
from hobbit.traces.validate import validate_source


@dataclass(frozen=True)
class ConvertConfig:
    """Knobs of ``hobbit convert`` (model fields override what the source says or implies)."""

    LIMITS: ClassVar[dict[str, str]] = {
        "num_layers": ">=1",
        "num_experts": ">=1",
        "top_k": ">=1",
        "prompt_tokens": ">=1",
    }

    # path knobs and their roles (hobbit/plumbing/guard.py)
    PATHS: ClassVar[dict[str, str]] = {"input": "in", "out": "out"}

    format: str = "jsonl"
    """The source's format: flame | vllm | jsonl | llamacpp_csv | tec."""
    input: str = ""
    """The routing log to convert, a file or a folder (``in=PATH`` on the command line)."""
    out: str = "trace.parquet"
    """The trace to write (Parquet, schema v1)."""
    name: str | None = None
    """The model's name, overriding what the source says; null: the source's."""
    num_layers: int | None = None
    """The model's MoE layer count, overriding or supplying what the source says; null: the source's."""
    num_experts: int | None = None
    """The model's routed expert count, overriding or supplying what the source says; null: the source's."""
    weight_rule: str | None = None
    """How the router turns logits into weights (softmax_renorm | softmax | topk_softmax | sparsemixer |
    sigmoid_group | unknown); null: what the source says or implies."""
    warmup_passes: str = "auto"
    """vllm: the leading forward passes to drop, a count or auto (dummy passes and everything before the batched
    prefill)."""
    prefill: str = "keep"
    """vllm: keep | drop the batched prefill pass (kept as request 0)."""
    teacher_forced_as: str = "prefill"
    """flame: prefill (one pass per sequence) | decode (token 0 prefill, then one step a token)."""
    top_k: int | None = None
    """llamacpp_csv, tec: experts per token, where the file does not tell it; null: inferred (llamacpp_csv from a
    decode pass, tec from a file hobbit wrote; a real TEC trace needs it)."""
    prompt_tokens: int = 1
    """tec: how many leading tokens are the prompt (prefill); the rest are decode steps."""


def _model(cfg: ConvertConfig, **defaults: Any) -> ModelSpec:
    over = {k: getattr(cfg, k) for k in ("name", "num_layers", "num_experts", "weight_rule") if getattr(cfg, k)}
    try:
        return ModelSpec(**{**defaults, **over})
    except (TypeError, ValueError) as exc:
        raise TraceError(
            cfg.input, f"model spec: {exc}", fix="set name=, num_layers=, num_experts=, weight_rule="
        ) from exc


# ---------------------------------------------------------------- FLAME-MoE

FLAME_EXPERTS = 64  # every FLAME-MoE size routes over 64 experts (+2 shared, not logged)


def _flame_rows(
    seq: np.ndarray, pos: np.ndarray, layer: np.ndarray, ids: np.ndarray, w: np.ndarray, cfg: ConvertConfig, src: dict
) -> tuple[TraceArrays, TraceMeta]:
    for name, col, top in (
        ("seq", seq, INT32_MAX),
        ("pos", pos, INT32_MAX),
        ("layer", layer, INT16_MAX),
        ("expert_ids", ids, FLAME_EXPERTS - 1),
    ):
        col = np.asarray(col)
        if not np.issubdtype(col.dtype, np.integer):
            raise TraceError(cfg.input, f"holds {col.dtype} values, not whole numbers", field=name)
        bad = (col < 0) | (col > top)
        if bad.any():
            row = int(np.flatnonzero(bad.reshape(len(bad), -1).any(axis=1))[0])
            raise TraceError(cfg.input, f"value out of range 0..{top}", row=row, field=name)
    if not np.issubdtype(np.asarray(w).dtype, np.number):
        raise TraceError(cfg.input, "gate_probs are not numbers", field="gate_probs")
    first = int(layer.min())
    ids, w = sort_by_weight(ids, w)
    as_decode = cfg.teacher_forced_as == "decode"
    phase = np.where(as_decode & (pos > 0), DECODE, PREFILL).astype(np.int8)
    step = np.where(phase == DECODE, pos, 0).astype(np.int32)
    a = TraceArrays(
        request_id=seq.astype(np.int32),
        phase=phase,
        step=step,
        position=pos.astype(np.int32),
        layer=(layer - first).astype(np.int16),
        expert_ids=ids,
        gate_weights=w,
    )
    n_layers = int(layer.max()) - first + 1
    spec = _model(
        cfg,
        name="flame-moe-290m",
        architecture="FlameMoE (Megatron)",
        num_layers=n_layers,
        num_experts=FLAME_EXPERTS,
        top_k=ids.shape[1],
        weight_rule="softmax",
        shared_experts=2,
    )
    note = (
        "teacher-forced forward passes replayed as generation: token 0 is the prefill, each later token a decode step"
        if as_decode
        else "teacher-forced forward passes; each sequence is one prefill request"
    )
    src = {
        "kind": "converter",
        "format": "flame",
        "input": cfg.input,
        "source_layers": [first, first + n_layers - 1],
        "teacher_forced_as": cfg.teacher_forced_as,
        "note": note,
        **src,
    }
    meta = TraceMeta(model=spec, lookahead_depth=0, source=src, created=now_iso())
    return validate_source(a, meta, cfg.input), meta


def convert_flame(cfg: ConvertConfig) -> tuple[TraceArrays, TraceMeta]:
    path = Path(cfg.input)
    if path.is_dir():
        return _flame_pt(path, cfg)
    if path.suffix != ".parquet":
        raise TraceError(path, "format=flame wants a .parquet file or a folder of FLAME .pt files")
    t = pq.read_table(path)
    need = {"seq", "pos", "layer", "expert_ids", "gate_probs"}
    if need - set(t.column_names):
        raise TraceError(path, f"missing columns {sorted(need - set(t.column_names))}", field="columns")
    k = len(t.column("expert_ids")[0])
    ids = np.stack(t.column("expert_ids").to_numpy(zero_copy_only=False)).reshape(-1, k)
    w = np.stack(t.column("gate_probs").to_numpy(zero_copy_only=False)).reshape(-1, k)
    return _flame_rows(
        t.column("seq").to_numpy(), t.column("pos").to_numpy(), t.column("layer").to_numpy(), ids, w, cfg, {}
    )


def _flame_pt(folder: Path, cfg: ConvertConfig) -> tuple[TraceArrays, TraceMeta]:
    import torch  # lazy: FLAME's .pt files only; converting Parquet or JSONL needs no torch

    files = sorted(
        Path(root) / f for root, _, names in os.walk(folder, followlinks=True) for f in names if f.endswith(".pt")
    )
    if not files:
        raise TraceError(folder, "no .pt files in this folder")
    kinds = {"encoder" if "_encoder_" in f.name else "firstTokens" for f in files}
    if len(kinds) > 1:
        subs = sorted({f.parent.relative_to(folder).as_posix() for f in files})
        shown = ", ".join(subs[:4]) + (f" ... ({len(subs)} folders)" if len(subs) > 4 else "")
        raise TraceError(
            folder,
            "holds both whole-sequence ('encoder') and per-position ('firstTokens') files",
            fix=f"point in= at a subfolder holding one kind: {shown}",
        )
    parts = []
    for f in files:
        try:
            with reading(f, "a FLAME trace file", "the .pt files FLAME-MoE's tracer wrote, whole"):
                d = torch.load(f, weights_only=True, map_location="cpu")
            n = len(d["samples"])
            if "token_position" in d:
                seq, pos = np.arange(n), np.full(n, int(d["token_position"]))
            else:
                seq, pos = np.arange(n) // int(d["sequence_length"]), np.arange(n) % int(d["sequence_length"])
            parts.append((seq, pos, np.full(n, int(d["layer"])), d["indices"].numpy(), d["scores"].float().numpy()))
        except InputError:
            raise
        except (KeyError, RuntimeError, ValueError) as exc:
            raise TraceError(f, f"not a FLAME trace file ({exc!r})") from exc
    seq, pos, layer, ids, w = (np.concatenate([p[i] for p in parts]) for i in range(5))
    return _flame_rows(seq, pos, layer, ids, w, cfg, {"files": len(files)})


# ---------------------------------------------------------------- vLLM logs

KNOWN_VLLM_MODELS: dict[str, dict[str, Any]] = {
    # Qwen1.5-MoE-A2.7B config.json: 24 layers, 60 experts, top-4, norm_topk_prob false, shared expert
    "Qwen/Qwen1.5-MoE-A2.7B-Chat": {
        "architecture": "Qwen2MoeForCausalLM",
        "num_layers": 24,
        "num_experts": 60,
        "weight_rule": "softmax",
        "hidden_size": 2048,
        "moe_intermediate_size": 1408,
        "shared_experts": 1,
    },
}
KNOWN_VLLM_MODELS["Qwen/Qwen1.5-MoE-A2.7B"] = KNOWN_VLLM_MODELS["Qwen/Qwen1.5-MoE-A2.7B-Chat"]


def _read_vllm_file(path: Path) -> tuple[dict, dict[int, list[list[tuple]]]]:
    """(meta line, layer -> forward passes -> [(ids, weights)])."""
    meta: dict = {}
    layers: dict[int, list[list[tuple]]] = {}
    last_idx: dict[int, int] = {}
    with (
        reading(path, "a vLLM routing log", "the JSONL log vLLM's routing hook wrote"),
        open(path, encoding="utf-8-sig") as fh,
    ):
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                if obj.get("type") == "meta":
                    meta = obj
                    continue
                if obj.get("type") != "route":
                    continue
                layer, idx = int(obj["layer"]), int(obj["token_idx"])
                row = (obj["topk_ids"], obj["topk_weights"])
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
                raise TraceError(path, f"line {n}: not a vLLM route record ({exc!r})", row=n) from exc
            for name, v in (("layer", layer), ("token_idx", idx)):
                if v < 0:  # the input's fault, named there (not found later in the trace it writes)
                    raise TraceError(path, f"{v} is negative", row=n, unit="line", field=name)
            passes = layers.setdefault(layer, [])
            if idx == 0 or idx <= last_idx.get(layer, -1):
                passes.append([])
            passes[-1].append(row)
            last_idx[layer] = idx
    return meta, layers


def vllm_passes(sizes: list[int], constant: list[bool], warmup: str) -> int:
    """Index of the prefill pass. ``auto``: the longest run of non-increasing pass sizes
    that ends the log, after dropping passes whose rows all share one routing (dummy runs);
    its first pass is the batched prefill, the rest are decode passes."""
    if warmup != "auto":
        return int(warmup)
    start = len(sizes) - 1
    while start > 0 and sizes[start - 1] >= sizes[start] and not constant[start - 1]:
        start -= 1
    return start


def convert_vllm(cfg: ConvertConfig) -> tuple[TraceArrays, TraceMeta]:
    path = Path(cfg.input)
    files = sorted(path.glob("*.jsonl")) if path.is_dir() else [path]
    if not files or not all(f.is_file() for f in files):
        raise TraceError(path, "no vLLM JSONL logs here (fix: in= a .jsonl file or a folder of them)")
    meta, layers = {}, {}
    for f in files:
        m, ls = _read_vllm_file(f)
        meta = meta or m
        for layer, passes in ls.items():
            if layer in layers:
                raise TraceError(f, f"layer {layer} appears in two files", field="layer")
            layers[layer] = (f, passes)
    if not layers:
        raise TraceError(path, "no 'route' lines: not a vLLM router log", field="type")
    order = sorted(layers)
    ref_file, ref = layers[order[0]]
    sizes = [len(p) for p in ref]
    for layer in order[1:]:
        f, passes = layers[layer]
        if [len(p) for p in passes] != sizes:
            raise TraceError(
                f,
                f"forward-pass sizes of layer {layer} differ from those in {ref_file.name}; the "
                "logs were not recorded from identical runs",
                field="token_idx",
            )
    constant = [len({json.dumps(r) for r in p}) == 1 and len(p) > 1 for p in ref]
    first = vllm_passes(sizes, constant, cfg.warmup_passes)
    if not 0 <= first < len(sizes):
        raise TraceError(path, f"warmup_passes={cfg.warmup_passes} leaves no forward pass", field="warmup_passes")
    a = _vllm_arrays(layers, order, first, cfg)
    model_id = meta.get("model_id", "unknown")
    known = KNOWN_VLLM_MODELS.get(model_id, {})
    if not known and not (cfg.num_layers and cfg.num_experts):
        raise TraceError(
            path,
            f"model '{model_id}' is not known to the converter",
            fix="give num_layers= and num_experts= (and weight_rule=) on the command line",
        )
    defaults = {"architecture": "unknown", "weight_rule": "unknown", **known}
    spec = _model(cfg, name=model_id, top_k=a.expert_ids.shape[1], **defaults)
    rec = None if order == list(range(spec.num_layers)) else tuple(order)
    src = {
        "kind": "converter",
        "format": "vllm",
        "input": cfg.input,
        "vllm": {k: v for k, v in meta.items() if k != "type"},
        "pass_sizes": sizes,
        "warmup_passes_dropped": first,
        "prefill": cfg.prefill,
        "request_semantics": "request 0 is the batched prefill pass of all prompts (kept whole: the logs do not "
        "say where one prompt ends); requests 1..B are decode batch slots, step = decode "
        "pass, position = step (vLLM condenses the batch when a request finishes, so a slot "
        "can change request after the first finish)",
    }
    meta = TraceMeta(model=spec, lookahead_depth=0, source=src, created=now_iso(), recorded_layers=rec)
    return validate_source(a, meta, cfg.input), meta


def _vllm_arrays(layers: dict, order: list[int], first: int, cfg: ConvertConfig) -> TraceArrays:
    passes = layers[order[0]][1]
    req, phase, step, pos = [], [], [], []
    for p_i in range(first, len(passes)):
        n = len(passes[p_i])
        if p_i == first:
            if cfg.prefill == "drop":
                continue
            req.append(np.zeros(n))
            phase.append(np.full(n, PREFILL))
            step.append(np.zeros(n))
            pos.append(np.arange(n))
        else:
            s = p_i - first
            req.append(np.arange(1, n + 1))
            phase.append(np.full(n, DECODE))
            step.append(np.full(n, s))
            pos.append(np.full(n, s))
    if not req:
        raise TraceError(cfg.input, "no forward passes left after dropping warm-up and prefill")
    keep = [p for p in range(first, len(passes)) if not (p == first and cfg.prefill == "drop")]
    ids_l, w_l = [], []
    for layer in order:
        rows = [r for p in keep for r in layers[layer][1][p]]
        ids_l.append(np.array([r[0] for r in rows], dtype=np.int64))
        w_l.append(np.array([r[1] for r in rows], dtype=np.float32))
    L, k = len(order), ids_l[0].shape[1]
    ids = np.stack(ids_l, 1).reshape(-1, k)  # [N_tok * L, K], token-major
    w = np.stack(w_l, 1).reshape(-1, k)
    ids, w = sort_by_weight(ids, w)
    rep = lambda x: np.repeat(np.concatenate(x), L)
    return TraceArrays(
        request_id=rep(req).astype(np.int32),
        phase=rep(phase).astype(np.int8),
        step=rep(step).astype(np.int32),
        position=rep(pos).astype(np.int32),
        layer=np.tile(np.array(order), ids.shape[0] // L).astype(np.int16),
        expert_ids=ids,
        gate_weights=w,
    )


# ---------------------------------------------------------------- generic JSONL


def convert_jsonl(cfg: ConvertConfig) -> tuple[TraceArrays, TraceMeta]:
    return read_generic_jsonl(Path(cfg.input), cfg)


def convert_llamacpp_csv(cfg: ConvertConfig) -> tuple[TraceArrays, TraceMeta]:
    return read_llamacpp_csv(Path(cfg.input), cfg)


def convert_tec(cfg: ConvertConfig) -> tuple[TraceArrays, TraceMeta]:
    return read_tec(Path(cfg.input), cfg)


CONVERTERS = {
    "flame": convert_flame,
    "vllm": convert_vllm,
    "jsonl": convert_jsonl,
    "llamacpp_csv": convert_llamacpp_csv,
    "tec": convert_tec,
}


def convert(cfg: ConvertConfig) -> Path:
    """Run the converter named by ``cfg.format`` and write ``cfg.out``."""
    if cfg.format not in CONVERTERS:
        raise TraceError(cfg.input, f"format={cfg.format} is not one of {sorted(CONVERTERS)}", field="format")
    if not cfg.input or not Path(cfg.input).exists():
        raise TraceError(cfg.input or "<in>", "input does not exist (fix: in=PATH)")
    if re.fullmatch(r"\d+|auto", str(cfg.warmup_passes)) is None:
        raise TraceError(
            cfg.input, f"warmup_passes={cfg.warmup_passes} must be 'auto' or a count", field="warmup_passes"
        )
    if cfg.teacher_forced_as not in ("prefill", "decode"):
        raise TraceError(
            cfg.input, f"teacher_forced_as={cfg.teacher_forced_as} must be prefill or decode", field="teacher_forced_as"
        )
    if cfg.prefill not in ("keep", "drop"):
        raise TraceError(cfg.input, f"prefill={cfg.prefill} must be keep or drop", field="prefill")
    try:
        arrays, meta = CONVERTERS[cfg.format](cfg)
    except (TraceError, InputError):  # a converter's own refusal, or the input helper's, naming the file
        raise
    except (
        ValueError,
        TypeError,
        KeyError,
        IndexError,
        AttributeError,
        OverflowError,
        UnicodeDecodeError,
        RecursionError,
        pa.ArrowException,
        EOFError,
        pickle.UnpicklingError,
    ) as exc:
        # the input is not what format= says; each converter names the cases it knows, this the rest
        raise TraceError(
            cfg.input,
            f"cannot be read as format={cfg.format} ({type(exc).__name__}: {exc})",
            fix="check format= and that in= is a complete file of that format",
        ) from exc
    return write_trace(cfg.out, arrays, meta)
