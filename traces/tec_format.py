"""TEC's router traces: the ``RTRACE01`` binary of fitz-tec (Temporal Expert Caching, Apache-2.0).

``llama-router-trace`` in the TEC-patched llama.cpp (``examples/eval-callback/router-trace.cpp``)
writes, to ``ROUTER_TRACE_OUT``, little-endian::

    8 bytes   magic "RTRACE01"
    int32     n_experts
    int32     header_version (0)
    then one record per (token, layer):
      int32   token_idx            running token number of the run, 0..T-1
      int32   layer_idx            llama.cpp block index (dense blocks have no records)
      float32 probs[n_experts]     the router's softmax over all experts

This is exactly what fitz-tec's own reader parses (``fitz_tec/tools/_trace_format.py``,
``load_trace``, used by ``fitz calibrate`` / ``build_pin_list``, which takes each record's
top-K experts by probability); fitz-tec 0.1.1 on PyPI, https://github.com/yafitzdev/fitz-tec.

Reading: each record's top_k experts by probability (stable: ties by expert id) and their
probabilities as the gate weights; ``weight_rule`` is ``softmax`` (top-k mass as is) unless
given. ``top_k=`` is needed for a real trace (all probabilities are non-zero); a file this
module wrote has exactly top_k non-zero probabilities per record and tells it. The file
has no requests or phases: tokens form one request, the first ``prompt_tokens`` (default 1)
the prefill, each later token a decode step (step = position = token_idx).

Writing: each row's top-k weights at their ids, 0 for every other expert (the trace never
had the rest of the distribution); ``token_idx`` numbers the trace's tokens in stored order.
Request boundaries, phases and predicted experts are dropped with a warning.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import IO, Any

import numpy as np

from hobbit.traces.arrays import TraceArrays
from hobbit.traces.interchange import BLOCKS_KEY, block_columns, blocks_of, token_starts, weights_absent
from hobbit.traces.io import atomic_write
from hobbit.traces.schema import DECODE, INT16_MAX, PREFILL, ModelSpec, TraceError, TraceMeta, now_iso
from hobbit.traces.validate import validate_source

FORMAT = "tec"
MAGIC = b"RTRACE01"
HEADER = struct.Struct("<8sii")


def _record_dtype(n_experts: int) -> np.dtype:
    return np.dtype([("token_idx", "<i4"), ("layer_idx", "<i4"), ("probs", "<f4", (n_experts,))])


def _load(path: Path) -> tuple[np.ndarray, int, int]:
    raw = path.read_bytes()
    if len(raw) < HEADER.size or raw[:8] != MAGIC:
        raise TraceError(
            path,
            f"not a TEC router trace: starts {raw[:8]!r}, not {MAGIC!r}",
            field="magic",
            fix="in= the file llama-router-trace wrote (ROUTER_TRACE_OUT)",
        )
    _, n_experts, version = HEADER.unpack_from(raw)
    if version != 0:  # the one layout this reader knows; another's records would be read as garbage
        raise TraceError(
            path,
            f"header_version {version}: only version 0 (llama-router-trace's layout this reader follows) is known",
            field="header_version",
            fix="in= a trace of llama-router-trace's version 0, or convert it with the tool of its version",
        )
    if not 1 <= n_experts <= INT16_MAX + 1:
        raise TraceError(path, f"n_experts {n_experts} is not in 1..{INT16_MAX + 1}", field="n_experts")
    dt = _record_dtype(n_experts)
    body = len(raw) - HEADER.size
    if body == 0:
        raise TraceError(path, "holds a header but no records")
    if body % dt.itemsize:
        n = body // dt.itemsize
        raise TraceError(
            path,
            f"ends inside record {n} ({body % dt.itemsize} of its {dt.itemsize} bytes): the file is truncated",
            row=n,
            unit="record",
            fix="re-run the trace to completion",
        )
    return np.frombuffer(raw, dtype=dt, offset=HEADER.size), n_experts, version


def _check(path: Path, rec: np.ndarray) -> None:
    for name in ("token_idx", "layer_idx"):
        bad = (rec[name] < 0) | (rec[name] > (INT16_MAX if name == "layer_idx" else 2**31 - 2))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise TraceError(path, f"{rec[name][i]} is out of range", row=i, unit="record", field=name)
    p = rec["probs"]
    bad = ~np.isfinite(p).all(axis=1) | (p < 0).any(axis=1)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise TraceError(path, "probabilities must be finite and >= 0", row=i, unit="record", field="probs")


def _top_k(path: Path, probs: np.ndarray, given: int | None) -> int:
    if given is not None:
        return given
    nz = np.count_nonzero(probs, axis=1)
    if nz.min() == nz.max() and 0 < nz[0] < probs.shape[1]:
        return int(nz[0])
    raise TraceError(
        path,
        "cannot tell top_k: the records hold the router's whole distribution",
        field="top_k",
        fix="give top_k= (the model's experts per token)",
    )


def read_tec(path: Path, cfg: Any = None) -> tuple[TraceArrays, TraceMeta]:
    """A TEC RTRACE01 router trace as a trace (see the module docstring)."""
    rec, n_experts, version = _load(path)
    _check(path, rec)
    k = _top_k(path, rec["probs"], getattr(cfg, "top_k", None))
    if not 1 <= k <= n_experts:
        raise TraceError(path, f"top_k={k} is not in 1..n_experts={n_experts}", field="top_k")
    order = np.argsort(-rec["probs"], axis=1, kind="stable")[:, :k]  # [R, K]
    w = np.take_along_axis(rec["probs"], order, 1).astype(np.float32)
    layer, blocks = block_columns(rec["layer_idx"].astype(np.int64))
    tok = rec["token_idx"].astype(np.int64)
    prompt = max(1, int(getattr(cfg, "prompt_tokens", 1) or 1))
    phase = np.where(tok < prompt, PREFILL, DECODE).astype(np.int8)
    step = np.where(phase == PREFILL, 0, tok - prompt + 1).astype(np.int32)
    a = TraceArrays(
        request_id=np.zeros(len(rec), np.int32),
        phase=phase,
        step=step,
        position=tok.astype(np.int32),
        layer=layer,
        expert_ids=order.astype(np.int16),
        gate_weights=w,
    )
    if getattr(cfg, "num_layers", None) not in (None, len(blocks)):
        raise TraceError(
            path,
            f"holds {len(blocks)} MoE layers (blocks {blocks}), not num_layers={cfg.num_layers}",
            field="num_layers",
            fix="leave num_layers= unset",
        )
    over = {f: getattr(cfg, f) for f in ("name", "weight_rule") if getattr(cfg, f, None)}
    if getattr(cfg, "num_experts", None) not in (None, n_experts):
        raise TraceError(
            path,
            f"the header says n_experts={n_experts}, not num_experts={cfg.num_experts}",
            field="num_experts",
            fix="leave num_experts= unset",
        )
    try:
        spec = ModelSpec(
            **{
                "name": path.stem,
                "architecture": "unknown (llama.cpp GGUF)",
                "num_layers": len(blocks),
                "num_experts": n_experts,
                "top_k": k,
                "weight_rule": "softmax",
                **over,
            }
        )
    except ValueError as exc:
        raise TraceError(path, f"model spec: {exc}", fix="set top_k=, weight_rule=") from exc
    src = {
        "kind": "converter",
        "format": FORMAT,
        "input": str(path),
        "header_version": version,
        BLOCKS_KEY: blocks,
        "prompt_tokens": prompt,
        "request_semantics": f"one request: tokens 0..{prompt - 1} the prefill, each later token a decode step",
    }
    meta = TraceMeta(model=spec, lookahead_depth=0, source=src, created=now_iso())
    return validate_source(a, meta, path, np.arange(len(rec)), unit="record"), meta


def tec_bytes(arrays: TraceArrays, meta: TraceMeta) -> bytes:
    """The RTRACE01 bytes of a trace (rows in stored order)."""
    e = meta.model.num_experts
    blocks = np.asarray(blocks_of(meta))
    starts = token_starts(arrays)
    rec = np.zeros(len(arrays), dtype=_record_dtype(e))
    rec["token_idx"] = np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, len(arrays)]))
    rec["layer_idx"] = blocks[np.searchsorted(np.asarray(meta.layers), arrays.layer)]
    probs = np.zeros((len(arrays), e), dtype=np.float32)
    np.put_along_axis(probs, arrays.expert_ids.astype(np.int64), arrays.gate_weights.astype(np.float32), 1)
    rec["probs"] = probs
    return HEADER.pack(MAGIC, e, 0) + rec.tobytes()


def write_tec(arrays: TraceArrays, meta: TraceMeta, path: Path) -> list[str]:
    """Write the trace as a TEC router trace; returns what the format dropped."""
    data = tec_bytes(arrays, meta)

    def write(f: IO) -> None:
        f.write(data)

    atomic_write(path, write, binary=True)
    dropped = ["the probabilities of the experts outside each row's top-k (the trace never had them; written as 0)"]
    n_req = len(np.unique(arrays.request_id))
    dropped.append(
        f"request ids, phases and positions of {n_req} request(s) (TEC numbers tokens 0..N-1 in one "
        f"stream; a re-import reads one request)"
    )
    if meta.lookahead_depth > 0:
        dropped.append(f"predicted experts (pred_ids/pred_weights, lookahead_depth={meta.lookahead_depth})")
    if weights_absent(meta):
        dropped.append(
            "real gate weights: this trace has none (weights: absent), so the file holds uniform 1/top_k placeholders"
        )
    if (arrays.gate_weights <= 0).any():
        dropped.append("the identity of zero-weight experts (a probability of 0 reads as not selected)")
    return dropped
