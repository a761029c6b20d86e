"""``hobbit calibrate``: measure this machine's costs through the executor's own code paths.

- the link: copies of 64 KB up to one high-precision expert through the copy engine,
  t0 and B fitted to t = t0 + bytes / B (least squares); sources and destinations rotate
  through more bytes than a large LLC holds, as the replay's copies do;
- an expert's SwiGLU per precision and token count (the kernels the replay runs), and
  the same on the host CPU;
- the dense part of a layer over tokens x context, fitted to a + b*T + c*T*C, and the LM head
  per token count (interpolated; its cost is flat until it turns compute-bound, no line fits);
- contention: the link while the compute stream works, and the dense part and a high-
  and a low-precision expert while copies run, each against itself alone in the same
  round (``ContentionProbe``); the same step's calls alone, against the probes above, give
  what each part costs more per call inside a decode step (``step_*``);
- the replay loop's own cost per layer and what a copy costs the compute stream, from recorded
  replays (``executor.validate.full_profile`` runs them between the rounds).
Rounds after a warm-up, each going through every part and shape in turn (``calibrate``), reduced by
``statistic``: ``min`` (the default: the machine undisturbed, timeit's rule, for a shared
machine whose speed moves between states) or ``median``; writes a hardware profile
(``sim.config.ProfileConfig``).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import torch
from tqdm.auto import tqdm

from hobbit.executor.config import STATISTICS
from hobbit.executor.link import Copy, CopyEngine
from hobbit.executor.replay import Dense, sync
from hobbit.executor.weights import HostStore
from hobbit.sim.config import ProfileConfig
from hobbit.sim.policies.base import HIGH, LOW

EXPERT_TOKENS = [1, 2, 4, 8, 16, 32, 64, 128, 256]


ROTATION_BYTES = 512 * 2**20  # experts cycled through per precision: more than a large LLC (warm weights lie)


class Rotation:
    """High-precision experts' host buffers and device buffers to copy them into, each cycled through
    so that neither side is warm in a cache (a replay's copies come from and go to cold memory)."""

    def __init__(self, store: HostStore) -> None:
        m = store.model
        every = [(layer, e) for layer in range(m.num_layers) for e in range(m.num_experts)]
        n = max(2, min(len(every), -(-ROTATION_BYTES // store.nbytes(HIGH))))
        self.src = [store.experts[(*key, HIGH)] for key in every[:n]]
        # zeroed: first-touch page faults would be charged to the link (the replay's pools are warm)
        self.dst = [torch.zeros(store.nbytes(HIGH), dtype=torch.uint8, device=store.device) for _ in range(n - 1)]
        self.i = 0

    def next(self, tid: int, size: int | None = None, demand: bool = True) -> Copy:
        src, dst = self.src[self.i % len(self.src)], self.dst[self.i % len(self.dst)]
        self.i += 1
        return Copy(tid, src[:size], dst[:size], demand)


SAMPLES = 5  # a minimum is taken over this many samples, as a replayed token's is (validate's replays default)


def pick(values, statistic: str, axis: int | None = None, group: int = 0):
    """The rounds' ``min`` or ``median`` (``axis`` as numpy's). With ``group`` (axis 0 only), ``min`` is the
    fastest of ``group`` samples averaged over the groups the rounds make: the minimum of more samples is
    lower, so a profile must take the same number as the measurement it predicts (a replayed token's
    minimum over the replays), or the comparison is biased by the statistic alone. A group takes every
    n-th round, so that its samples spread over the whole calibration as the replays between its rounds
    do (the minimum of samples close in time meets fewer of the machine's states)."""
    if statistic not in STATISTICS:
        raise ValueError(f"statistic={statistic} must be one of {STATISTICS}")
    if statistic == "median":
        return np.median(values, axis=axis)
    v = np.asarray(values)
    if group and axis == 0 and v.shape[0] >= 2 * group:
        n = v.shape[0] // group  # groups of every n-th round: each spans the whole calibration, as the replays do
        return np.mean(np.min(v[: n * group].reshape(group, n, *v.shape[1:]), axis=0), axis=0)
    return np.min(v, axis=axis)


class LinkProbe:
    """Copies through the copy engine, one at a time, from 64 KB up to one high-precision expert:
    per size the seconds from submission to done, and the submitting thread's time to issue one."""

    def __init__(self, store: HostStore, copy_cpu: int | None) -> None:
        self.rot = Rotation(store)
        self.sizes = sorted({int(s) for s in np.geomspace(64 * 1024, store.nbytes(HIGH), 8)})
        self.link = CopyEngine(store.device, copy_cpu)
        self.tid = 0

    def round(self) -> tuple[list[float], list[float]]:
        times, issue = [], []
        for size in self.sizes:
            t0 = time.perf_counter()
            c = self.rot.next(self.tid, size)
            self.link.submit([c])
            t1 = time.perf_counter()
            self.link.wait(self.tid)
            times.append(time.perf_counter() - t1)
            issue.append(t1 - t0)
            self.tid += 1
        return times, issue

    def close(self) -> None:
        self.link.close()


class _Cycle:
    def __init__(self, items) -> None:
        self.items, self.i = list(items), -1

    def next(self):
        self.i += 1
        return self.items[self.i % len(self.items)]


EXPERT_BUDGET_S = 0.05  # seconds of calls per (kernel, token count) and round, at least MIN_CALLS calls
MIN_CALLS = 8


class ExpertProbe:
    """An expert's SwiGLU per precision (and on the host CPU) at each token count, cycling through
    more experts than a large LLC holds (warm weights lie); a round makes about ``EXPERT_BUDGET_S``
    of calls per token count, continuing the cycle where the last call left it."""

    def __init__(self, store: HostStore, tokens: list[int]) -> None:
        dev, h, m = store.device, store.model.hidden_size, store.model
        every = [(layer, e) for layer in range(m.num_layers) for e in range(m.num_experts)]
        x = (torch.randn(max(tokens), h) * 0.1).to(torch.bfloat16)
        self.tokens = tokens
        self.runs = {}
        for name, cls in (("high", HIGH), ("low", LOW)):
            k = store.kernels[cls]
            keys = every[: max(1, -(-ROTATION_BYTES // k.nbytes))]
            self.runs[name] = (k, _Cycle(k.views(store.experts[(*key, cls)].to(dev)) for key in keys), x.to(dev), dev)
        host = store.kernels[HIGH]
        keys = every[: max(1, -(-ROTATION_BYTES // host.nbytes))]
        self.runs["cpu"] = (
            host,
            _Cycle(host.views(store.experts[(*key, HIGH)]) for key in keys),
            x,
            torch.device("cpu"),
        )
        self.calls = {name: [MIN_CALLS] * len(tokens) for name in self.runs}

    def round(self) -> dict[str, list[float]]:
        out = {}
        for name, (kernel, views, x, dev) in self.runs.items():
            row = []
            for i, n in enumerate(self.tokens):
                calls = self.calls[name][i]
                sync(dev)
                t0 = time.perf_counter()
                for _ in range(calls):
                    kernel.forward(x[:n], views.next())
                sync(dev)
                row.append((time.perf_counter() - t0) / calls)
                self.calls[name][i] = max(MIN_CALLS, min(len(views.items), int(EXPERT_BUDGET_S / row[-1])))
            out[name] = row
        return out


def _relative_fit(a: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least squares in relative error: one-token decode steps count as much as 256-token prefills."""
    w = 1.0 / np.maximum(y, 1e-12)
    coef, *_ = np.linalg.lstsq(a * w[:, None], y * w, rcond=None)
    return coef


DENSE_SHAPES = [(t, t + extra) for t in (1, 8, 32, 128, 256) for extra in (64, 320)]  # (tokens, context)


class DenseProbe:
    """The dense part of a layer per (tokens, context) and the LM head per token count."""

    def __init__(self, store: HostStore) -> None:
        self.dev = store.device
        self.dense = Dense(store, 600)
        self.x = (torch.randn(256, store.model.hidden_size) * 0.1).to(torch.bfloat16).to(self.dev)

    def _timed(self, fn: Callable[[], object]) -> float:
        """The second of two calls: in the replay the dense weights (one set, shared by every
        layer) are as warm as the second call finds them, not as the previous shape left them."""
        fn()
        sync(self.dev)
        t0 = time.perf_counter()
        fn()
        sync(self.dev)
        return time.perf_counter() - t0

    def round(self) -> tuple[list[float], list[float]]:
        d, x = self.dense, self.x
        layer = [self._timed(lambda t=t, c=c: d.layer(x[:t], 0, c)) for t, c in DENSE_SHAPES]
        head = [self._timed(lambda t=t: d.head(x[:t])) for t in EXPERT_TOKENS]
        return layer, head


CONTENTION_S = 0.06  # seconds of copies per measurement
STEP_CONTEXT = 300  # the context of the decode step the contention probe runs


class ContentionProbe:
    """The compute stream as a decode step runs it (one token): a layer's dense part, then a high- and
    a low-precision expert, layer after layer, so that each finds the caches as the replay leaves
    them; timed per kind with copies streaming beside it and without, in the same round."""

    def __init__(self, store: HostStore, link_gbps: float, copy_cpu: int | None) -> None:
        dev, m = store.device, store.model
        self.dev = dev
        every = [(layer, e) for layer in range(m.num_layers) for e in range(m.num_experts)]
        x = (torch.randn(1, m.hidden_size) * 0.1).to(torch.bfloat16).to(dev)
        dense = Dense(store, 600)
        self.kinds: dict[str, Callable[[], object]] = {}
        layers = _Cycle(range(m.num_layers))
        self.kinds["dense"] = lambda: dense.layer(x, layers.next(), STEP_CONTEXT)
        for name, cls in (("high", HIGH), ("low", LOW)):
            k = store.kernels[cls]
            keys = every[: max(1, -(-ROTATION_BYTES // k.nbytes))]
            cycle = _Cycle([k.views(store.experts[(*key, cls)].to(dev)) for key in keys])
            self.kinds[name] = lambda k=k, c=cycle: k.forward(x, c.next())
        self.rot = Rotation(store)
        self.n_copies = max(8, int(CONTENTION_S * link_gbps * 1e9 / store.nbytes(HIGH)))
        self.link = CopyEngine(dev, copy_cpu)
        self.tid = 0

    def _copies(self) -> list[Copy]:
        out = [self.rot.next(self.tid + i) for i in range(self.n_copies)]
        self.tid += self.n_copies
        return out

    @staticmethod
    def _rate(batch: list[Copy]) -> float:
        return sum(c.src.numel() for c in batch) / sum(c.end_s - c.start_s for c in batch) / 1e9

    def _steps(self, until: Callable[[], bool]) -> dict[str, float]:
        """Seconds per call of each kind, the kinds taken in turn until ``until()``."""
        spent = dict.fromkeys(self.kinds, 0.0)
        calls = 0
        while not until():
            for name, fn in self.kinds.items():
                sync(self.dev)
                t0 = time.perf_counter()
                fn()
                sync(self.dev)
                spent[name] += time.perf_counter() - t0
            calls += 1
        return {k: v / max(calls, 1) for k, v in spent.items()}

    def round(self) -> dict[str, tuple[float, float, float, float]]:
        """Per kind: (compute seconds per call with copies running, alone, link GB/s alone, with compute)."""
        batch = self._copies()
        self.link.submit(batch)
        self.link.wait(batch[-1].tid)
        rate_alone = self._rate(batch)
        batch = self._copies()
        self.link.submit(batch)
        busy = self._steps(lambda: self.link.done(batch[-1].tid))
        rate_busy = self._rate(batch)
        t_end = time.perf_counter() + CONTENTION_S
        alone = self._steps(lambda: time.perf_counter() >= t_end)
        return {k: (busy[k], alone[k], rate_alone, rate_busy) for k in self.kinds}

    def close(self) -> None:
        self.link.close()


ROUNDS = 15  # calibration rounds; each measures every shape of every part once, a value is its rounds reduced


def calibrate(
    store: HostStore,
    device_name: str,
    progress: Callable[[str], None] = print,
    copy_cpu: int | None = None,
    statistic: str = "min",
    rounds: int = ROUNDS,
    group: int = SAMPLES,
    between: Callable[[int], None] | None = None,
) -> ProfileConfig:
    """Measure everything but the loop overhead and the cost of a copy (``validate.overhead_sample`` and
    ``copy_sample``) in ``rounds`` rounds after a warm-up one. Each round goes through every part (link, experts, dense part and head,
    contention) and every shape in turn, so that each value's samples are spread over the whole
    calibration: on a shared machine whose speed moves between states, each value then meets
    each state (``statistic=min`` keeps the undisturbed one). Contention factors are the median
    over the rounds of a ratio taken within one round (both sides in the same state).
    ``between(r)`` runs after round ``r`` (0-based): what must meet the machine in the states the
    calibration meets (``executor.validate.full_profile``: the replays) runs there."""
    m = store.model
    samples, sizes, expert_kinds, contention_kinds = _measure(store, copy_cpu, rounds, between)
    link_s = pick(np.array([s[0][0] for s in samples]), statistic, axis=0, group=group)
    issue_s = float(np.min(pick(np.array([s[0][1] for s in samples]), statistic, axis=0, group=group)))
    slope, t0 = np.polyfit(np.array(sizes, float), link_s, 1)
    t0, gbps = max(float(t0), 0.0), float(1.0 / max(slope, 1e-15) / 1e9)
    progress(
        f"  link: t0 {t0 * 1e6:.1f} us, {gbps:.2f} GB/s (64 KB to one expert); issuing a copy {issue_s * 1e6:.1f} us"
    )
    ex = {
        k: [float(v) for v in pick(np.array([s[1][k] for s in samples]), statistic, axis=0, group=group)]
        for k in expert_kinds
    }
    layer_s = pick(np.array([s[2][0] for s in samples]), statistic, axis=0, group=group)
    head_s = pick(np.array([s[2][1] for s in samples]), statistic, axis=0, group=group)
    coef = _relative_fit(np.array([[1.0, t, t * c] for t, c in DENSE_SHAPES]), layer_s)
    other = _relative_fit(np.array([[1.0, t] for t in EXPERT_TOKENS]), head_s)
    progress(
        f"  experts at 1 token: high {ex['high'][0] * 1e3:.3f} ms, low {ex['low'][0] * 1e3:.3f} ms, "
        f"host CPU {ex['cpu'][0] * 1e3:.3f} ms; dense part {layer_s[0] * 1e3:.3f} ms, LM head "
        f"{head_s[0] * 1e3:.3f} ms"
    )
    f, link_ratio, step = _contention(samples, contention_kinds, statistic, group, coef, ex, progress)
    return ProfileConfig(
        model=m.name,
        hidden_size=m.hidden_size,
        expert_ffn=m.expert_ffn,
        device=device_name,
        link_t0_s=t0,
        link_gbps=gbps,
        dense_s=[float(v) for v in coef],
        other_s=[float(v) for v in other],
        head_s=[float(v) for v in head_s],
        layer_overhead_s=0.0,
        copy_issue_s=issue_s,
        expert_tokens=list(EXPERT_TOKENS),
        expert_high_s=ex["high"],
        expert_low_s=ex["low"],
        cpu_expert_s=ex["cpu"],
        busy_link_gbps=gbps * link_ratio,
        busy_dense_factor=f["dense"],
        busy_expert_high_factor=f["high"],
        busy_expert_low_factor=f["low"],
        step_dense_s=step["dense"],
        step_expert_high_s=step["high"],
        step_expert_low_s=step["low"],
    )


def _measure(
    store: HostStore, copy_cpu: int | None, rounds: int, between: Callable[[int], None] | None
) -> tuple[list, list[int], list[str], list[str]]:
    """(each round's samples of the link, the experts, the dense part and head, and contention; the link probe's
    copy sizes; the experts' kinds; contention's kinds): ``rounds`` rounds after a warm-up one (``calibrate``)."""
    with torch.no_grad():
        link = LinkProbe(store, copy_cpu)
        experts, dense = ExpertProbe(store, EXPERT_TOKENS), DenseProbe(store)
        try:
            link.round()  # warm-up: first touches and first calls out of the way
            rough = link.sizes[-1] / min(link.round()[0][-1] for _ in range(2)) / 1e9  # GB/s, to size the probe
            contention = ContentionProbe(store, rough, copy_cpu)
            try:
                experts.round()  # warm-up, as the link's above
                dense.round()
                contention.round()
                samples = []
                for r in tqdm(range(rounds), desc="calibrate", unit="round", leave=False, disable=None):
                    samples.append((link.round(), experts.round(), dense.round(), contention.round()))
                    if between is not None:
                        between(r)
            finally:
                contention.close()
        finally:
            link.close()
    return samples, link.sizes, list(experts.runs), list(contention.kinds)


def _contention(
    samples: list,
    kinds: list[str],
    statistic: str,
    group: int,
    coef: np.ndarray,
    ex: dict[str, list[float]],
    progress: Callable[[str], None],
) -> tuple[dict[str, float], float, dict[str, float]]:
    """(compute's factors while copying, the link's share of its bandwidth while computing, each part's cost per
    call in a decode step over its probe's) from the contention probe's rounds."""
    cont = {k: np.array([s[3][k] for s in samples]) for k in kinds}  # [rounds, 4]
    f = {k: max(1.0, float(np.median(v[:, 0] / v[:, 1]))) for k, v in cont.items()}
    link_ratio = min(1.0, float(np.median(np.concatenate([v[:, 3] / v[:, 2] for v in cont.values()]))))
    progress(
        f"  contention: the link at x{link_ratio:.3f} of its bandwidth while computing; compute while copying: "
        f"dense x{f['dense']:.3f}, high expert x{f['high']:.3f}, low expert x{f['low']:.3f}"
    )
    # in a decode step each part costs more per call than its probe measures back to back; the step's own
    # calls without copies (the contention probe's other half) against the probes at one token
    alone = {k: float(pick(v[:, 1], statistic, axis=0, group=group)) for k, v in cont.items()}
    step = {
        "dense": max(0.0, alone["dense"] - float(coef @ [1.0, 1.0, 1.0 * STEP_CONTEXT])),
        "high": max(0.0, alone["high"] - ex["high"][0]),
        "low": max(0.0, alone["low"] - ex["low"][0]),
    }
    progress(
        f"  in a decode step, per call: dense +{step['dense'] * 1e6:.1f} us, high expert "
        f"+{step['high'] * 1e6:.1f} us, low expert +{step['low'] * 1e6:.1f} us over their probes"
    )
    return f, link_ratio, step
