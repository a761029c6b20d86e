"""llama.cpp's ``moe-trace`` CSV (ggml-org/llama.cpp pull request #28544, ``examples/moe-trace``).

The format, as the PR's tool writes it (``MOE_TRACE_OUT``, default ``moe_trace.csv``): no
header, one ``layer,expert`` line (``"%d,%d\\n"``) per routed activation. The eval callback
copies each ``ffn_moe_topk-<il>`` tensor ([k, n_tokens] int32) as it is computed, so a
forward pass (ubatch) writes, layer after layer in graph order, its n_tokens x k ids,
token-major, each token's k ids in the router's top-k order (highest probability first).
``layer`` is the transformer block ``il`` (dense blocks have no rows). The tool evaluates
one prompt in ubatch chunks, then greedy-decodes one token per pass.

What it does not carry, and how this reader fills it in (recorded in ``meta.source``):

- gate weights: none. Each row gets uniform 1/top_k placeholders, ``weight_rule`` is
  ``unknown`` and ``source["weights"] = "absent"``; the import warns that the T1/T2
  mixed-precision rule needs weights (uniform-precision systems run as usual).
- tokens, passes, requests: a pass ends where the block number stops increasing; a run of
  one block's rows holds n_tokens x k ids. The first pass is a prefill; a pass of 2+ tokens
  after a prefill pass continues it (a ubatch chunk, kept as a step of its own: the trace
  replays the prompt in the passes the run made); a pass of 2+ tokens after a decode
  pass starts a new request (traces concatenated, as users do); a one-token pass is a
  decode step. Positions count tokens within a request. Ambiguous by construction: a
  request whose prompt is one token merges into the previous one, and a prompt whose last
  ubatch chunk is one token reads as a decode step.
- top_k: ``top_k=``, else the gcd of the per-block run lengths, which is exact once a
  one-token (decode) pass exists; otherwise the reader asks for ``top_k=``.
- num_experts: ``num_experts=``, else the largest id + 1 (a lower bound).

Source: PR description https://github.com/ggml-org/llama.cpp/pull/28544 and its
``examples/moe-trace/moe-trace.cpp`` as carried by savoflux-spec/AI.local at commit
f830d477d9724e64bc8e92ce130c772241976064.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import IO, Any

import numpy as np

from hobbit.traces import interchange as ix
from hobbit.traces.arrays import TraceArrays
from hobbit.traces.io import atomic_write
from hobbit.traces.schema import DECODE, INT16_MAX, PREFILL, ModelSpec, TraceError, TraceMeta, now_iso
from hobbit.traces.validate import validate_source

FORMAT = "llamacpp_csv"
HEADER = "layer,expert"  # not written by the tool; accepted on line 1 all the same
_LINE = re.compile(r"(\d{1,9}),(\d{1,9})")


def _parse(path: Path) -> tuple[np.ndarray, np.ndarray, int]:
    """(block [R], expert [R], number of the file's first data line)."""
    try:
        lines = path.read_text(encoding="ascii").splitlines()
    except UnicodeDecodeError as exc:
        raise TraceError(
            path,
            f"not a text file (byte {exc.start} is not ASCII)",
            fix="in= the CSV llama-moe-trace wrote (MOE_TRACE_OUT)",
        ) from None
    first = 1
    if lines and lines[0].strip() == HEADER:
        lines, first = lines[1:], 2
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines:
        raise TraceError(path, "holds no 'layer,expert' rows")
    vals = np.empty((len(lines), 2), dtype=np.int64)
    for i, line in enumerate(lines):
        m = _LINE.fullmatch(line.strip())
        if m is None:
            raise TraceError(
                path,
                f"{line[:60]!r} is not 'layer,expert' (two whole numbers >= 0)",
                row=i + first,
                unit="line",
                field="layer,expert",
                fix="in= an unedited llama-moe-trace CSV",
            )
        vals[i] = int(m.group(1)), int(m.group(2))
    for col, name in ((0, "layer"), (1, "expert")):
        bad = vals[:, col] > INT16_MAX
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise TraceError(path, f"{vals[i, col]} is larger than {INT16_MAX}", row=i + first, unit="line", field=name)
    return vals[:, 0], vals[:, 1], first


def _runs(block: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start row and length of each run of equal blocks."""
    starts = np.flatnonzero(np.r_[True, block[1:] != block[:-1]])
    return starts, np.diff(np.r_[starts, len(block)])


def _top_k(path: Path, expert: np.ndarray, lengths: np.ndarray, n_passes: int, given: int | None) -> int:
    g = int(np.gcd.reduce(lengths))
    if given is not None:
        return given
    one_token = n_passes >= 2 and bool((lengths == g).any())
    chunks = expert[: len(expert) // g * g].reshape(-1, g)
    srt = np.sort(chunks, axis=1)
    distinct = g == 1 or not (srt[:, 1:] == srt[:, :-1]).any()
    if not (one_token and distinct):
        raise TraceError(
            path,
            "cannot tell top_k: the log has no one-token (decode) pass to measure it by",
            field="top_k",
            fix="give top_k= (the model's experts per token)",
        )
    return g


def _passes(
    path: Path, block: np.ndarray, starts: np.ndarray, lengths: np.ndarray, k: int, first_line: int
) -> list[int]:
    """Tokens in each forward pass, checking that every pass covers the same blocks."""
    if (lengths % k).any():
        r = int(np.flatnonzero(lengths % k)[0])
        raise TraceError(
            path,
            f"a run of {lengths[r]} rows of layer {block[starts[r]]} is not a whole number of "
            f"tokens of top_k={k} experts",
            row=int(starts[r]) + first_line,
            unit="line",
            field="layer",
            fix="check top_k=, or that the file is complete",
        )
    run_block = block[starts]
    new_pass = np.r_[True, run_block[1:] <= run_block[:-1]]
    pass_of_run = np.cumsum(new_pass) - 1
    blocks = run_block[pass_of_run == 0].tolist()  # every pass must cover the first pass's blocks
    sizes = []
    for p, first in enumerate(np.flatnonzero(new_pass)):
        runs = np.flatnonzero(pass_of_run == p)
        have = run_block[runs].tolist()
        ntok = (lengths[runs] // k).tolist()
        bad = have != blocks or len(set(ntok)) != 1
        if bad and len(blocks) > 1:
            what = f"layers {have}, expected {blocks}" if have != blocks else f"different token counts per layer {ntok}"
            raise TraceError(
                path,
                f"forward pass {p} has {what}",
                row=int(starts[first]) + first_line,
                unit="line",
                field="layer",
                fix="in= a complete, unedited llama-moe-trace CSV",
            )
        sizes.append(int(ntok[0]) if len(blocks) > 1 else int(sum(ntok)))
    return sizes


def _tokens(sizes: list[int]) -> tuple[np.ndarray, ...]:
    """request, phase, step, position of every token, pass by pass (see the module docstring)."""
    req, phase, step, pos = [], [], [], []
    r, s, p, last = -1, 0, 0, None
    for n in sizes:
        if last is None or (n > 1 and last == DECODE):
            r, s, p, ph = r + 1, 0, 0, PREFILL
        elif n > 1:  # after a prefill pass: its next ubatch chunk, a pass of its own
            ph, s = PREFILL, s + 1
        else:
            ph, s = DECODE, s + 1
        req += [r] * n
        phase += [ph] * n
        step += [s] * n
        pos += list(range(p, p + n))
        p, last = p + n, ph
    return tuple(np.asarray(x) for x in (req, phase, step, pos))


def read_llamacpp_csv(path: Path, cfg: Any = None) -> tuple[TraceArrays, TraceMeta]:
    """A llama.cpp moe-trace CSV as a trace (weights absent: see the module docstring)."""
    block, expert, first_line = _parse(path)
    starts, lengths = _runs(block)
    run_block = block[starts]
    n_passes = int(np.r_[True, run_block[1:] <= run_block[:-1]].sum())
    k = _top_k(path, expert, lengths, n_passes, getattr(cfg, "top_k", None))
    sizes = _passes(path, block, starts, lengths, k, first_line)
    blocks = sorted(set(block.tolist()))
    L, n_tok = len(blocks), int(sum(sizes))
    # rows run pass by pass, block by block, token by token: reorder to token-major [T, L, K]
    ids = np.empty((n_tok, L, k), dtype=np.int64)
    line = np.empty((n_tok, L), dtype=np.int64)
    row, t0 = 0, 0
    for n in sizes:
        for li in range(L):
            ids[t0 : t0 + n, li] = expert[row : row + n * k].reshape(n, k)
            line[t0 : t0 + n, li] = np.arange(row, row + n * k, k) + first_line
            row += n * k
        t0 += n
    req, phase, step, pos = _tokens(sizes)
    rep = lambda x, dt: np.repeat(x, L).astype(dt)
    a = TraceArrays(
        request_id=rep(req, np.int32),
        phase=rep(phase, np.int8),
        step=rep(step, np.int32),
        position=rep(pos, np.int32),
        layer=np.tile(np.arange(L), n_tok).astype(np.int16),
        expert_ids=ids.reshape(-1, k).astype(np.int16),
        gate_weights=np.full((n_tok * L, k), 1.0 / k, dtype=np.float32),
    )
    over = {f: getattr(cfg, f) for f in ("name", "num_experts") if getattr(cfg, f, None)}
    if getattr(cfg, "num_layers", None) not in (None, L):
        raise TraceError(
            path,
            f"holds {L} MoE layers (blocks {blocks}), not num_layers={cfg.num_layers}",
            field="num_layers",
            fix="leave num_layers= unset",
        )
    try:
        spec = ModelSpec(
            **{
                "name": path.stem,
                "architecture": "unknown (llama.cpp GGUF)",
                "num_layers": L,
                "num_experts": int(expert.max()) + 1,
                "top_k": k,
                "weight_rule": "unknown",
                **over,
            }
        )
    except ValueError as exc:
        raise TraceError(path, f"model spec: {exc}", fix="set num_experts=, top_k=") from exc
    warn = ix.absent_weights_note(path, FORMAT)
    src = {
        "kind": "converter",
        "format": FORMAT,
        "input": str(path),
        "weights": ix.WEIGHTS_ABSENT,
        ix.BLOCKS_KEY: blocks,
        "pass_sizes": sizes,
        "warnings": [warn],
        "num_experts": "given" if "num_experts" in over else "largest id + 1 (pass num_experts= for the model's)",
        "request_semantics": "a new request where a pass of 2+ tokens follows a decode pass; prefill = the "
        "first pass and the 2+-token passes after it; one-token passes are decode steps",
    }
    meta = TraceMeta(model=spec, lookahead_depth=0, source=src, created=now_iso())
    return validate_source(a, meta, path, line.ravel(), unit="line"), meta


def _lines(arrays: TraceArrays, meta: TraceMeta) -> list[str]:
    blocks = np.asarray(ix.blocks_of(meta))
    L, k = len(blocks), arrays.expert_ids.shape[1]
    ids = arrays.expert_ids.reshape(-1, L, k)  # [T, L, K]
    starts = ix.token_starts(arrays)
    tok_req = arrays.request_id[starts]
    tok_step = arrays.step[starts]
    # one pass per (request, step): each prefill chunk of a request, then each decode step
    key = np.stack([tok_req, tok_step], 1)
    cut = np.flatnonzero(np.r_[True, (key[1:] != key[:-1]).any(axis=1), True])
    out = []
    text = np.char.mod("%d", ids)  # [T, L, K] strings
    for a, b in itertools.pairwise(cut):
        for li in range(L):
            prefix = f"{blocks[li]},"
            out.extend(prefix + s for s in text[a:b, li].ravel())
    return out


def write_llamacpp_csv(arrays: TraceArrays, meta: TraceMeta, path: Path) -> list[str]:
    """Write the trace as the moe-trace CSV (one pass per prefill chunk and per decode step);
    returns what the format dropped."""
    lines = _lines(arrays, meta)

    def write(f: IO) -> None:
        f.write("\n".join(lines) + "\n")

    atomic_write(path, write)
    dropped = []
    if not ix.weights_absent(meta):
        dropped.append("gate weights (the CSV has ids only; a re-import gets uniform 1/top_k placeholders)")
    if meta.lookahead_depth > 0:
        dropped.append(f"predicted experts (pred_ids/pred_weights, lookahead_depth={meta.lookahead_depth})")
    n_req = len(np.unique(arrays.request_id))
    dropped.append(
        f"request ids, phases and positions of {n_req} request(s) (a re-import infers them from "
        f"forward-pass sizes: requests that start with a one-token prompt merge into the previous one)"
    )
    if meta.model.num_experts > (int(arrays.expert_ids.max()) + 1):
        dropped.append(f"num_experts={meta.model.num_experts} (re-import with num_experts= to restore it)")
    return dropped
