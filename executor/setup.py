"""Resolve the device, check memory, and build the reduced model's expert weights."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import torch

from hobbit.executor.config import PAIRS, STATISTICS, ExecConfig, QualityError
from hobbit.executor.kernels import ExpertKernel
from hobbit.executor.weights import HostStore, build_store, reduce_model
from hobbit.sim.config import ModelConfig


def prepare(
    cfg: ExecConfig, pool_fraction: float = 0.0
) -> tuple[torch.device, ModelConfig, tuple[str, str], HostStore]:
    """(device, reduced model, precision pair, expert weights), after checking host memory (every
    expert) and device memory (``pool_fraction`` of them, the cache's pools)."""
    if cfg.device not in ("auto", "cpu", "cuda"):
        raise QualityError(f"device={cfg.device} must be auto, cpu or cuda")
    if cfg.device == "cuda" and not torch.cuda.is_available():
        raise QualityError("device=cuda but torch sees no CUDA device (fix: device=cpu or device=auto)")
    if cfg.statistic not in STATISTICS:
        raise QualityError(f"statistic={cfg.statistic} must be one of {list(STATISTICS)}")
    if cfg.precision_pair not in PAIRS:
        raise QualityError(f"precision_pair={cfg.precision_pair} must be one of {sorted(PAIRS)}")
    device = torch.device(
        "cuda" if cfg.device == "cuda" or (cfg.device == "auto" and torch.cuda.is_available()) else "cpu"
    )
    model = reduce_model(cfg.model, cfg.scale, cfg.layers)
    pair = PAIRS[cfg.precision_pair]
    per_expert = sum(ExpertKernel(p, model.hidden_size, model.expert_ffn, torch.device("cpu")).nbytes for p in pair)
    need = model.num_layers * model.num_experts * per_expert
    avail = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    if need > 0.8 * avail:
        raise QualityError(
            f"model={model.name} needs {need / 2**30:.1f} GiB of host memory for its experts, "
            f"{avail / 2**30:.1f} GiB are free (fix: a larger scale=, e.g. scale={cfg.scale * 2})"
        )
    if device.type == "cuda" and pool_fraction > 0:  # the cache's pools live on the device
        high = ExpertKernel(pair[0], model.hidden_size, model.expert_ffn, torch.device("cpu")).nbytes
        pools = int(pool_fraction * model.num_layers * model.num_experts * high)
        free = torch.cuda.mem_get_info(device)[0]
        if pools > 0.9 * free:
            raise QualityError(
                f"model={model.name}: the cache's pools need {pools / 2**30:.1f} GiB on {device}, "
                f"{free / 2**30:.1f} GiB are free (fix: a larger scale=, fewer layers= or a smaller "
                f"cache_fraction=)"
            )
    if device.type == "cpu":
        torch.set_num_threads(max(cfg.threads, 1))
    store = build_store(model, pair, device, cfg.checkpoint, cfg.seed)
    return device, model, pair, store


def core_plan(threads: int, pin: bool) -> tuple[set[int], int | None]:
    """(cores of the compute threads, core of the copy thread) among the cores this process may use:
    compute on the first ``threads``, the copy thread on the next; nothing pinned without a spare core."""
    cores = sorted(os.sched_getaffinity(0))
    if not pin or len(cores) < threads + 1:
        return set(cores), None
    return set(cores[:threads]), cores[threads]


@contextlib.contextmanager
def pinned(cfg: ExecConfig) -> Iterator[int | None]:
    """Pin this thread (and the compute threads it starts) for the ``with`` block; yields the copy
    thread's core (None: not pinned). The previous affinity comes back after."""
    before = os.sched_getaffinity(0)
    compute, copy = core_plan(cfg.threads, cfg.pin_threads)
    if copy is not None:
        os.sched_setaffinity(0, compute)
    try:
        yield copy
    finally:
        os.sched_setaffinity(0, before)
