"""Helpers for the simulator tests: composed configs and small traces."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from hobbit.plumbing.glue import compose
from hobbit.sim.config import SimConfig
from hobbit.sim.workload import Workload
from hobbit.traces.io import Trace, read_trace

BUNDLED = Path(__file__).parents[1] / "traces" / "tiny" / "trace.parquet"


def compose_sim(*overrides: str):
    """The typed SimConfig Hydra composes from conf/ with ``overrides``."""
    return compose("sim", SimConfig, ["out_dir=.", *overrides])


def first_requests(trace: Trace, n: int) -> Trace:
    """The first ``n`` requests of a trace."""
    keep = np.flatnonzero(trace.arrays.request_id < np.unique(trace.arrays.request_id)[n])
    return Trace(trace.meta, trace.arrays.take(keep), trace.path)


def bundled(n_requests: int | None = None) -> Trace:
    tr = read_trace(BUNDLED)
    return tr if n_requests is None else first_requests(tr, n_requests)


def without_predictions(trace: Trace) -> Trace:
    a = dataclasses.replace(trace.arrays)
    a.pred_ids = a.pred_weights = None
    return Trace(dataclasses.replace(trace.meta, lookahead_depth=0), a, trace.path)


def write_first_requests(directory: Path, n: int) -> Path:
    """The bundled trace's first ``n`` requests, written as a trace file in ``directory``."""
    from hobbit.traces.io import write_trace

    tr = bundled(n)
    return write_trace(directory / f"first{n}.parquet", tr.arrays, tr.meta)


def decode_workload(ids: list, weights: list, num_experts: int = 4, pred: list | None = None) -> Workload:
    """One request of decode passes, one token each: ids / weights [N][L][K] (highest weight first),
    ``pred`` [N][L][D][K] predicted ids (their weights: the true ones of the same rank)."""
    ids_a, w_a = np.array(ids, np.int64), np.array(weights, np.float32)
    n, L, k = ids_a.shape
    pred_ids = pred_w = None
    if pred is not None:
        pred_ids = np.array(pred, np.int64)
        pred_w = np.broadcast_to(w_a[:, :, None, :], pred_ids.shape).copy()
    return Workload(
        num_layers=L,
        num_experts=num_experts,
        top_k=k,
        ids=ids_a,
        weights=w_a,
        pred_ids=pred_ids,
        pred_weights=pred_w,
        pass_request=[0] * n,
        pass_start=list(range(n)),
        pass_end=list(range(1, n + 1)),
        pass_phase=[1] * n,
        pass_context=list(range(1, n + 1)),
        token_in_request=np.arange(n),
        layers_total=L,
    )
