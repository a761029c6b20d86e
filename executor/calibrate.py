"""``hobbit calibrate``: measure this machine's costs through the executor's own code paths.

- the link: copies of 64 KB up to one high-precision expert through the copy engine,
  t0 and B fitted to t = t0 + bytes / B (least squares);
- an expert's SwiGLU per precision and token count (the kernels the replay runs), and
  the same on the host CPU;
- the dense part of a layer over tokens x context, fitted to a + b*T + c*T*C, and the LM head;
- the replay loop's own cost per layer: a run with every expert resident, minus what
  the measured parts predict for it.
Medians of repeated runs after a warm-up; writes a hardware profile (``sim.config.ProfileConfig``).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import numpy as np
import torch

from executor.link import Copy, CopyEngine
from executor.replay import Dense, sync
from executor.weights import HostStore
from sim.config import ProfileConfig
from sim.policies.base import HIGH, LOW

EXPERT_TOKENS = [1, 2, 4, 8, 16, 32, 64, 128, 256]


def _median_s(fn: Callable[[], object], device: torch.device, reps: int = 7) -> float:
    fn()
    sync(device)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def measure_link(store: HostStore, reps: int = 5) -> tuple[float, float]:
    """(t0 seconds, GB/s) of copies through the copy engine, submit to done."""
    src = store.experts[(0, 0, HIGH)]
    top = src.numel()
    sizes = sorted({int(s) for s in np.geomspace(64 * 1024, top, 8)})
    dst = torch.empty(top, dtype=torch.uint8, device=store.device)
    link = CopyEngine(store.device)
    rows = []
    try:
        tid = 0
        for size in sizes:
            times = []
            for _ in range(reps + 1):
                c = Copy(tid, src[:size], dst[:size], True)
                t0 = time.perf_counter()
                link.submit([c])
                link.wait(tid)
                times.append(time.perf_counter() - t0)
                tid += 1
            rows.append((size, statistics.median(times[1:])))
    finally:
        link.close()
    x, y = np.array([r[0] for r in rows], float), np.array([r[1] for r in rows])
    slope, t0 = np.polyfit(x, y, 1)
    return max(float(t0), 0.0), float(1.0 / max(slope, 1e-15) / 1e9)


ROTATION_BYTES = 512 * 2**20  # experts cycled through per precision: more than a large LLC (warm weights lie)


def _rotated_s(kernel, views: list, x: torch.Tensor, n: int, device: torch.device) -> float:
    """Seconds per expert call, cycling through ``views`` (median of 3 rounds)."""
    def one_round() -> None:
        for v in views:
            kernel.forward(x[:n], v)
    return _median_s(one_round, device, reps=3) / len(views)


def measure_experts(store: HostStore, tokens: list[int]) -> dict[str, list[float]]:
    dev, h, m = store.device, store.model.hidden_size, store.model
    every = [(layer, e) for layer in range(m.num_layers) for e in range(m.num_experts)]
    x = (torch.randn(max(tokens), h) * 0.1).to(torch.bfloat16)
    out: dict[str, list[float]] = {}
    for name, cls in (("high", HIGH), ("low", LOW)):
        k, xd = store.kernels[cls], x.to(dev)
        keys = every[: max(1, -(-ROTATION_BYTES // k.nbytes))]
        views = [k.views(store.experts[(*key, cls)].to(dev)) for key in keys]
        out[name] = [_rotated_s(k, views, xd, n, dev) for n in tokens]
    host = store.kernels[HIGH]
    hviews = [host.views(store.experts[(*key, HIGH)]) for key in every[: max(1, -(-ROTATION_BYTES // host.nbytes))]]
    out["cpu"] = [_rotated_s(host, hviews, x, n, torch.device("cpu")) for n in tokens]
    return out


def measure_dense(store: HostStore) -> tuple[list[float], list[float]]:
    """Fits (a, b, c) of a + b*T + c*T*C for a layer, and (a, b) of a + b*T for the LM head."""
    dev, h = store.device, store.model.hidden_size
    dense = Dense(store, 600)
    x = (torch.randn(256, h) * 0.1).to(torch.bfloat16).to(dev)
    rows = []
    with torch.no_grad():
        for t in (1, 8, 32, 128, 256):
            for extra in (64, 320):
                c = t + extra
                rows.append((t, c, _median_s(lambda t=t, c=c: dense.layer(x[:t], 0, c), dev)))
        a = np.array([[1.0, t, t * c] for t, c, _ in rows])
        coef, *_ = np.linalg.lstsq(a, np.array([r[2] for r in rows]), rcond=None)
        heads = [(t, _median_s(lambda t=t: dense.head(x[:t]), dev)) for t in (1, 32, 128, 256)]
    b, a0 = np.polyfit([t for t, _ in heads], [s for _, s in heads], 1)
    return [float(v) for v in coef], [float(a0), float(b)]


def calibrate(store: HostStore, device_name: str, progress: Callable[[str], None] = print) -> ProfileConfig:
    """Measure everything but the loop overhead (see ``loop_overhead``)."""
    m = store.model
    progress("  link: copies from 64 KB to one expert")
    t0, gbps = measure_link(store)
    progress(f"    t0 {t0 * 1e6:.1f} us, {gbps:.2f} GB/s")
    progress("  experts: SwiGLU per precision and token count")
    ex = measure_experts(store, EXPERT_TOKENS)
    progress("  dense part and LM head")
    dense, other = measure_dense(store)
    return ProfileConfig(model=m.name, hidden_size=m.hidden_size, expert_ffn=m.expert_ffn, device=device_name,
                         link_t0_s=t0, link_gbps=gbps, dense_s=dense, other_s=other, layer_overhead_s=0.0,
                         expert_tokens=list(EXPERT_TOKENS), expert_high_s=ex["high"], expert_low_s=ex["low"],
                         cpu_expert_s=ex["cpu"])
