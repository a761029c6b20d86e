"""What the readers and writers of foreign trace formats share (``traces.llamacpp_csv``,
``traces.tec_format``, ``traces.export``).

Writes are atomic (``traces.io.atomic_write``: a hidden temporary file next to the target, renamed
over the final name only once complete). Both llama.cpp formats name a layer by its transformer block (``il``, dense blocks
included); a trace names MoE layers 0..L-1. The readers keep the block of each MoE layer
in ``meta.source["llamacpp_blocks"]`` and the writers use it, so a file read and written
back keeps its block numbers.
"""

from __future__ import annotations

import numpy as np

from hobbit.traces.arrays import TraceArrays
from hobbit.traces.schema import TraceMeta

WEIGHTS_ABSENT = "absent"  # meta.source["weights"] of a trace whose source had no gate weights
BLOCKS_KEY = "llamacpp_blocks"


def blocks_of(meta: TraceMeta) -> list[int]:
    """The llama.cpp block of each recorded MoE layer: the one the source named, else the MoE index."""
    layers = list(meta.layers)
    stored = meta.source.get(BLOCKS_KEY)
    if isinstance(stored, list) and len(stored) == meta.model.num_layers:
        return [int(stored[i]) for i in layers]
    return layers


def block_columns(blocks: np.ndarray) -> tuple[np.ndarray, list[int]]:
    """MoE layer index of each row (blocks in increasing order -> 0..L-1) and the sorted blocks."""
    order = sorted(set(blocks.tolist()))
    return np.searchsorted(np.asarray(order), blocks).astype(np.int16), order


def token_starts(a: TraceArrays) -> np.ndarray:
    """Index of each token's first row (rows in stored order, one row per recorded layer)."""
    n = len(a)
    new = np.ones(n, dtype=bool)
    if n > 1:
        new[1:] = (
            (a.request_id[1:] != a.request_id[:-1]) | (a.step[1:] != a.step[:-1]) | (a.position[1:] != a.position[:-1])
        )
    return np.flatnonzero(new)


def weights_absent(meta: TraceMeta) -> bool:
    return meta.source.get("weights") == WEIGHTS_ABSENT


def absent_weights_note(file: object, fmt: str) -> str:
    """The warning a reader records when its format carries no gate weights."""
    return (
        f"{file}: format={fmt} carries no gate weights; the trace holds uniform 1/top_k placeholders and "
        f"records weights: absent. The T1/T2 mixed-precision rule (HOBBIT's per-expert precision and its "
        f"predicted-weight prefetch) needs real weights and cannot run meaningfully on this trace; systems "
        f"with uniform precision (all high or all low) can"
    )
