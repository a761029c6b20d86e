"""A trace laid out for replay: per-token arrays and the forward passes they form.

Batch 1, requests in sequence: a request's prefill is the forward passes over its prompt
tokens as the trace records them (one, or several chunks; ``chunk_prefill`` splits it as a runtime's
batch size would), then one pass per decoded token. When the trace has no lookahead predictions,
a named fallback fills them: ``oracle`` (the true experts of layer l+d, each replaced by a
random other expert with probability 1 - accuracy), ``history`` (the experts layer l+d
used most so far in the request) or ``none``.
Legend: N tokens, L layers, K top-k, D lookahead depth, E experts, P passes.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

import numpy as np

from hobbit.traces.io import Trace
from hobbit.traces.window import held_apart


class PassArrays(NamedTuple):
    """``Workload``'s per-pass lists as int64 arrays (``Workload.pass_arrays``)."""

    request: np.ndarray
    start: np.ndarray
    end: np.ndarray
    phase: np.ndarray
    context: np.ndarray


@dataclass
class Workload:
    """Token-major arrays of a trace plus its forward passes."""

    num_layers: int  # L: layers simulated (the trace's recorded layers)
    num_experts: int
    top_k: int
    ids: np.ndarray  # [N, L, K] int16 (a view of the trace's array)
    weights: np.ndarray  # [N, L, K] float32 (a view)
    pred_ids: np.ndarray | None  # [N, L, D, K] int16 (-1: none; a view, or the fallback's)
    pred_weights: np.ndarray | None  # [N, L, D, K] float32, NaN where none
    pass_request: list[int]  # [P]
    pass_start: list[int]  # [P] first token
    pass_end: list[int]  # [P] one past the last token
    pass_phase: list[int]  # [P] 0 prefill, 1 decode
    pass_context: list[int]  # [P] sequence length after the pass (attention span)
    token_in_request: np.ndarray  # [N] 0-based index of the token in its request
    layers_total: int  # the model's MoE layers (> num_layers when only some were recorded)
    # ``derived``'s; not an init field, so that a workload made by dataclasses.replace (other arrays) starts empty
    memo: OrderedDict = field(default_factory=OrderedDict, init=False, repr=False, compare=False)

    MEMO_KEPT = 16

    def derived(self, key: tuple, make: Callable[[], Any]) -> Any:
        """``make()``, computed once per ``key`` for this workload (its arrays are never changed; the last
        ``MEMO_KEPT`` kept): the layouts and precision classes each configuration of a sweep would derive again."""
        if key in self.memo:
            self.memo.move_to_end(key)
            return self.memo[key]
        value = self.memo[key] = make()
        while len(self.memo) > self.MEMO_KEPT:
            self.memo.popitem(last=False)
        return value

    @property
    def num_tokens(self) -> int:
        return int(self.ids.shape[0])

    def pass_arrays(self) -> PassArrays:
        """The per-pass lists as int64 arrays, made once for this workload (a run reads them many times, and a
        sweep's runs the same workload's: about 7 ms a conversion for the 200,000 passes of a long trace). Shared:
        never written (left writable, as the compiled core's signatures take them)."""

        def make() -> PassArrays:
            lists = (self.pass_request, self.pass_start, self.pass_end, self.pass_phase, self.pass_context)
            return PassArrays(*(np.asarray(x, np.int64) for x in lists))

        return self.derived(("pass_arrays",), make)

    def request_matrices(self) -> list[np.ndarray]:
        """Each request's expert activation matrix: [L, E] tokens routed to each expert (MoE-Infinity's EAM)."""
        out: dict[int, np.ndarray] = {}
        L, E = self.num_layers, self.num_experts
        for req, a, b in zip(self.pass_request, self.pass_start, self.pass_end):
            m = out.setdefault(req, np.zeros((L, E), np.int64))
            np.add.at(m, (np.broadcast_to(np.arange(L)[None, :, None], self.ids[a:b].shape), self.ids[a:b]), 1)
        return list(out.values())

    def expert_counts(self) -> np.ndarray:
        """[L, E] tokens routed to each expert over the whole workload (Fiddler's popularity profile)."""
        return np.sum(self.request_matrices(), axis=0)

    def future_uses(self) -> dict[tuple[int, int], list[int]]:
        """(layer, expert) -> the (pass, layer) steps, in order, that need it (Belady)."""
        uses: dict[tuple[int, int], list[int]] = {}
        L = self.num_layers
        for p, (a, b) in enumerate(zip(self.pass_start, self.pass_end)):
            for layer in range(L):
                for e in set(self.ids[a:b, layer].ravel().tolist()):
                    uses.setdefault((layer, e), []).append(p * L + layer)
        return uses


class Profiled(Protocol):
    """What a run learns from its profiling requests: a ``Workload`` of them, or their matrices read a window at a
    time (``RequestMatrices``)."""

    def request_matrices(self) -> list[np.ndarray]: ...

    def expert_counts(self) -> np.ndarray: ...


@dataclass
class RequestMatrices:
    """The profiling requests' activation matrices (``Workload.request_matrices``), added up a window of the trace
    at a time (``add``): a request cut by a window's edge is one matrix, as in the whole trace."""

    matrices: list[np.ndarray] = field(default_factory=list)
    last: int | None = None  # the request of the last matrix

    def add(self, wl: Workload) -> None:
        """Add the requests of ``wl``, the window after those added so far."""
        firsts = [r for i, r in enumerate(wl.pass_request) if i == 0 or r != wl.pass_request[i - 1]]
        for r, m in zip(dict.fromkeys(firsts), wl.request_matrices()):
            if r == self.last:
                self.matrices[-1] = self.matrices[-1] + m
            else:
                self.matrices.append(m)
                self.last = r

    def request_matrices(self) -> list[np.ndarray]:
        return self.matrices

    def expert_counts(self) -> np.ndarray:
        return np.sum(self.matrices, axis=0)


def split_requests(trace: Trace, share: float) -> tuple[Trace | None, Trace]:
    """(the first ``share`` of the trace's requests, the rest): a profiling set held apart from the
    requests that are timed. At least one request is always timed; (None, trace) when the share
    holds no request. Rows are stored sorted by request, so both parts are views of the trace's arrays."""
    req = trace.arrays.request_id
    ids = np.unique(req)
    n = held_apart(len(ids), share)
    if n == 0:
        return None, trace
    held = req < ids[n]
    cut = int(held.sum())
    if held[:cut].all():  # the held requests are the first rows
        parts = slice(0, cut), slice(cut, None)
    else:
        parts = np.flatnonzero(held), np.flatnonzero(~held)
    held_rows, timed_rows = parts
    return (
        Trace(trace.meta, trace.arrays.take(held_rows), trace.path),
        Trace(trace.meta, trace.arrays.take(timed_rows), trace.path),
    )


def chunk_prefill(wl: Workload, ubatch: int) -> Workload:
    """``wl`` with every prefill pass longer than ``ubatch`` tokens split into passes of at most ``ubatch`` (the last
    one shorter), as a runtime with that batch size runs a prompt (llama.cpp's -ub): each chunk attends over the
    tokens before it, so its context is the sequence length at its end. Decode passes, and prefill passes already
    within the size (a trace recorded in chunks), are kept."""
    req, start, end, phase, ctx = [], [], [], [], []
    for r, a, b, ph, c in zip(wl.pass_request, wl.pass_start, wl.pass_end, wl.pass_phase, wl.pass_context):
        cuts = range(a, b, ubatch) if ph == 0 else range(a, a + 1)
        for lo in cuts:
            hi = min(lo + ubatch, b) if ph == 0 else b
            req.append(r)
            start.append(lo)
            end.append(hi)
            phase.append(ph)
            ctx.append(c - (b - hi))
    return dataclasses.replace(wl, pass_request=req, pass_start=start, pass_end=end, pass_phase=phase, pass_context=ctx)


def _passes(request: np.ndarray, step: np.ndarray, position: np.ndarray, phase: np.ndarray):
    n = len(request)
    new = np.ones(n, dtype=bool)
    new[1:] = (request[1:] != request[:-1]) | (step[1:] != step[:-1])
    starts = np.flatnonzero(new)
    ends = np.append(starts[1:], n)
    return starts, ends, request[starts], phase[starts], position[ends - 1] + 1


def oracle_predictions(
    ids: np.ndarray, weights: np.ndarray, depth: int, accuracy: float, num_experts: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Predictions that are the true experts of l+d, each wrong with probability 1 - accuracy."""
    n, L, k = ids.shape
    pid = np.full((n, L, depth, k), -1, np.int16)
    pw = np.full((n, L, depth, k), np.nan, np.float32)
    for d in range(1, min(depth, L - 1) + 1):
        true = ids[:, d:].astype(np.int64)  # [N, L-d, K]
        wrong = rng.random(true.shape) >= accuracy
        # a wrong guess: an expert shifted by 1..E-1 (never the true one; may repeat another slot's)
        shift = rng.integers(1, max(num_experts, 2), size=true.shape)
        guess = np.where(wrong, (true + shift) % num_experts, true)
        pid[:, : L - d, d - 1] = guess
        pw[:, : L - d, d - 1] = weights[:, d:]
    return pid, pw


def build_workload(
    trace: Trace,
    fallback: str = "oracle",
    accuracy: float = 0.9,
    depth: int = 3,
    rng: np.random.Generator | None = None,
    tokens_before: int = 0,
) -> Workload:
    """Lay ``trace`` out for replay; fill predictions with ``fallback`` when it has none. The trace's arrays are
    reshaped, not copied (a 10^6-token trace is laid out in its own memory). ``trace`` may be a window of a longer
    one (``traces.window``) whose first request had ``tokens_before`` tokens before it."""
    meta, a = trace.meta, trace.arrays
    L, k = len(meta.layers), meta.model.top_k
    ids = a.expert_ids.reshape(-1, L, k)
    weights = a.gate_weights.reshape(-1, L, k)
    pick = slice(None, None, L)
    starts, ends, req, phase, ctx = _passes(a.request_id[pick], a.step[pick], a.position[pick], a.phase[pick])
    first_of_request = np.r_[0, np.flatnonzero(np.diff(a.request_id[pick])) + 1]
    token_in_req = np.arange(len(ids)) - np.repeat(first_of_request, np.diff(np.r_[first_of_request, len(ids)]))
    if tokens_before:
        token_in_req[: first_of_request[1] if len(first_of_request) > 1 else len(ids)] += tokens_before
    pred_ids = pred_w = None
    if a.pred_ids is not None:
        assert a.pred_weights is not None  # a trace's predictions carry both columns
        d = meta.lookahead_depth
        pred_ids = a.pred_ids.reshape(-1, L, d, k)
        pred_w = a.pred_weights.reshape(-1, L, d, k)
    elif fallback == "oracle":
        pred_ids, pred_w = oracle_predictions(
            ids, weights, depth, accuracy, meta.model.num_experts, rng if rng is not None else np.random.default_rng(0)
        )
    return Workload(
        num_layers=L,
        num_experts=meta.model.num_experts,
        top_k=k,
        ids=ids,
        weights=weights,
        pred_ids=pred_ids,
        pred_weights=pred_w,
        pass_request=req.tolist(),
        pass_start=starts.tolist(),
        pass_end=ends.tolist(),
        pass_phase=phase.tolist(),
        pass_context=ctx.tolist(),
        token_in_request=token_in_req,
        layers_total=meta.model.num_layers,
    )
