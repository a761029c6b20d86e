"""``hobbit calibrate``: measure this machine's costs through the executor's own code paths.

- the link: copies of 64 KB up to one high-precision expert through the copy engine,
  t0 and B fitted to t = t0 + bytes / B (least squares);
- an expert's SwiGLU per precision and token count (the kernels the replay runs), and
  the same on the host CPU;
- the dense part of a layer over tokens x context, fitted to a + b*T + c*T*C, and the LM head;
- the replay loop's own cost per layer: a run with every expert resident, minus what
  the measured parts predict for it.
Medians of repeated rounds after a warm-up, each round going through every shape in turn;
writes a hardware profile (``sim.config.ProfileConfig``).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import numpy as np
import torch

from hobbit.executor.link import Copy, CopyEngine
from hobbit.executor.replay import Dense, sync
from hobbit.executor.weights import HostStore
from hobbit.sim.config import ProfileConfig
from hobbit.sim.policies.base import HIGH, LOW

EXPERT_TOKENS = [1, 2, 4, 8, 16, 32, 64, 128, 256]


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


ROUNDS = 5  # rounds over every token count; a count's time is its median round


def _rotated_s(kernel, views: list, x: torch.Tensor, tokens: list[int], device: torch.device) -> list[float]:
    """Seconds per expert call for each token count, cycling through ``views``. The rounds go
    over all token counts in turn, so a slow spell of a shared machine lands on one round of
    every count (and the median drops it) rather than on every round of one count."""
    def one_round(n: int) -> float:
        sync(device)
        t0 = time.perf_counter()
        for v in views:
            kernel.forward(x[:n], v)
        sync(device)
        return (time.perf_counter() - t0) / len(views)

    one_round(tokens[0])  # warm-up
    rounds = [[one_round(n) for n in tokens] for _ in range(ROUNDS)]
    return [statistics.median(r[i] for r in rounds) for i in range(len(tokens))]


def measure_experts(store: HostStore, tokens: list[int]) -> dict[str, list[float]]:
    dev, h, m = store.device, store.model.hidden_size, store.model
    every = [(layer, e) for layer in range(m.num_layers) for e in range(m.num_experts)]
    x = (torch.randn(max(tokens), h) * 0.1).to(torch.bfloat16)
    out: dict[str, list[float]] = {}
    for name, cls in (("high", HIGH), ("low", LOW)):
        k, xd = store.kernels[cls], x.to(dev)
        keys = every[: max(1, -(-ROTATION_BYTES // k.nbytes))]
        views = [k.views(store.experts[(*key, cls)].to(dev)) for key in keys]
        out[name] = _rotated_s(k, views, xd, tokens, dev)
    host = store.kernels[HIGH]
    hviews = [host.views(store.experts[(*key, HIGH)]) for key in every[: max(1, -(-ROTATION_BYTES // host.nbytes))]]
    out["cpu"] = _rotated_s(host, hviews, x, tokens, torch.device("cpu"))
    return out


def _relative_fit(a: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least squares in relative error: one-token decode steps count as much as 256-token prefills."""
    w = 1.0 / np.maximum(y, 1e-12)
    coef, *_ = np.linalg.lstsq(a * w[:, None], y * w, rcond=None)
    return coef


def measure_dense(store: HostStore) -> tuple[list[float], list[float]]:
    """Fits (a, b, c) of a + b*T + c*T*C for a layer, and (a, b) of a + b*T for the LM head,
    in relative error over rounds that go through every shape in turn (medians)."""
    dev, h = store.device, store.model.hidden_size
    dense = Dense(store, 600)
    x = (torch.randn(256, h) * 0.1).to(torch.bfloat16).to(dev)
    shapes = [(t, t + extra) for t in (1, 8, 32, 128, 256) for extra in (64, 320)]
    head_t = (1, 8, 32, 128, 256)

    def timed(fn: Callable[[], object]) -> float:
        """The second of two calls: in the replay the dense weights (one set, shared by every
        layer) are as warm as the second call finds them, not as the previous shape left them."""
        fn()
        sync(dev)
        t0 = time.perf_counter()
        fn()
        sync(dev)
        return time.perf_counter() - t0

    with torch.no_grad():
        for t, c in shapes[:2]:  # warm-up
            timed(lambda t=t, c=c: (dense.layer(x[:t], 0, c), dense.head(x[:t])))
        layer_rounds, head_rounds = [], []
        for _ in range(ROUNDS + 2):
            layer_rounds.append([timed(lambda t=t, c=c: dense.layer(x[:t], 0, c)) for t, c in shapes])
            head_rounds.append([timed(lambda t=t: dense.head(x[:t])) for t in head_t])
    layer_s = np.median(np.array(layer_rounds), axis=0)
    head_s = np.median(np.array(head_rounds), axis=0)
    coef = _relative_fit(np.array([[1.0, t, t * c] for t, c in shapes]), layer_s)
    head = _relative_fit(np.array([[1.0, t] for t in head_t]), head_s)
    return [float(v) for v in coef], [float(v) for v in head]


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
