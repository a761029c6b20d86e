"""Helpers for the simulator tests: composed configs and small traces."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from hobbit.glue import compose
from hobbit.sim.config import SimConfig
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
