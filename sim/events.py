"""The schedule of a run as slices on tracks: what a timeline file and a Gantt plot show.

A ``Schedule`` holds, in seconds on the run's own clock, one slice per piece of work:
- track ``compute``: per pass a ``token`` slice, inside it a slice per ``layer`` and the LM ``head``;
  inside a layer, its ``dense`` part, ``issue`` (issuing its copies), each ``expert``'s compute, the
  ``stall`` waiting for a copy, and ``wait cpu`` (the layer's CPU experts still running); a measured
  run adds ``settle``, the replay's cache bookkeeping after a layer, and shows its loop's own time as gaps;
- track ``link``: each copy that ran (demand or prefetch, precision, layer, expert, bytes);
- track ``cpu``: each expert computed on the host CPU;
and per layer a counter of the copies each pool holds (the decisions' cache occupancy).
The simulator's schedule comes from re-timing its decisions with the plain engine (equal to
simpy's to 1e-9, ``tests/test_sim_engine.py``); the executor records its own (``executor.replay``).
Only the passes in ``window`` are kept.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hobbit.sim.config import ConfigError
from hobbit.sim.cost import CostModel
from hobbit.sim.decisions import Decisions
from hobbit.sim.plain import replay
from hobbit.sim.timeline import Timeline
from hobbit.sim.workload import Workload

PRECISION = ("high", "low")
TRACKS = ("compute", "link", "cpu")


@dataclass
class Slice:
    track: str
    name: str
    kind: str  # token | layer | head | dense | issue | expert | stall | wait_cpu | cpu_expert | settle | copy
    start: float  # seconds
    end: float
    pass_index: int
    args: dict = field(default_factory=dict)

    @property
    def dur(self) -> float:
        return self.end - self.start


@dataclass
class Schedule:
    """Slices and cache counters of passes ``window[0]`` to ``window[1] - 1``."""

    slices: list[Slice]
    counters: list[tuple[float, int, dict[str, int]]]  # (time, pass, {pool: copies held})
    pass_start: np.ndarray  # [P] of the whole run
    pass_end: np.ndarray
    window: tuple[int, int]
    tracks: tuple[str, ...] = TRACKS  # in display order


def parse_window(text: str, n_pass: int) -> tuple[int, int]:
    """``a:b`` -> passes a to b - 1 (either side may be empty; negative counts from the end), clipped."""
    parts = str(text).split(":")
    try:
        if len(parts) != 2:
            raise ValueError
        a, b = (int(x) if x.strip() else None for x in parts)
    except ValueError:
        raise ConfigError(
            f"timeline_tokens={text!r} is not a pass range (fix: A:B, e.g. 0:64, 100: or ':' for all {n_pass} passes)"
        ) from None
    if a is not None and b is not None and (a >= 0) == (b >= 0) and b <= a:
        raise ConfigError(
            f"timeline_tokens={text!r} selects no pass: its end is not after its start (fix: A:B with A < B, e.g. "
            f"{b}:{a})"
        )
    start, stop, _ = slice(a, b).indices(n_pass)
    if stop <= start:
        raise ConfigError(
            f"timeline_tokens={text!r} selects none of the run's {n_pass} passes (fix: A:B within 0:{n_pass}, or ':' "
            "for all)"
        )
    return start, stop


def occupancy(dec: Decisions, steps: int | None = None) -> np.ndarray:
    """[S, 2] copies each pool holds after each (pass, layer) step, from what the decisions kept and evicted: every
    step, or the first ``steps``."""
    n = len(dec.steps) if steps is None else min(steps, len(dec.steps))
    delta = np.zeros((n, 2), np.int64)
    if dec.tables is not None:
        for table, sign in (("kept", 1), ("evicted", -1)):
            rows = dec.tables.rows(table, 0, n)[1]
            np.add.at(delta, (rows[:, 0], rows[:, 3]), sign)
        return np.cumsum(delta, axis=0)
    for i in range(n):
        s = dec.steps[i]
        for _, _, prec in s.kept:
            delta[i, prec] += 1
        for _, _, prec in s.evicted:
            delta[i, prec] -= 1
    return np.cumsum(delta, axis=0)


def build(
    wl: Workload,
    dec: Decisions,
    tl: Timeline,
    work: list,
    window: tuple[int, int],
    copies: dict[int, tuple[float, float]],
) -> Schedule:
    """A schedule from a timeline, its compute/CPU work records (``sim.plain.replay``'s ``rec`` layout) and
    ``copies`` (tid -> (start, end) of each copy that ran)."""
    L = wl.num_layers
    copy_info = _copy_info(dec, L, window)
    out, counters = _pass_slices(wl, dec, tl, window)
    out += _work_slices(dec, work, L, window)
    for tid, (start, end) in copies.items():
        info = copy_info.get(tid)
        if info is None:
            continue
        p, args = info
        name = f"{'load' if args['demand'] else 'prefetch'} L{args['layer']} E{args['expert']} ({args['precision']})"
        out.append(Slice("link", name, "copy", float(start), float(end), p, args))
    order = {"token": 0, "layer": 1, "head": 1}
    out.sort(key=lambda s: (TRACKS.index(s.track), s.start, order.get(s.kind, 2), -s.end))
    return Schedule(out, counters, np.asarray(tl.pass_start), np.asarray(tl.pass_end), window)


def _copy_info(dec: Decisions, L: int, window: tuple[int, int]) -> dict[int, tuple[int, dict]]:
    """tid -> (its pass, its slice's args) of each copy the window's steps decided."""
    a, b = window
    copy_info = {}
    for i in range(a * L, b * L):
        step = dec.steps[i]
        for (tid, nbytes, demand), (layer, e, prec) in zip(step.loads, step.load_keys):
            copy_info[tid] = (
                step.pass_index,
                {
                    "layer": layer,
                    "expert": e,
                    "precision": PRECISION[prec],
                    "bytes": nbytes,
                    "demand": bool(demand),
                    "tid": tid,
                },
            )
    return copy_info


def _pass_slices(
    wl: Workload, dec: Decisions, tl: Timeline, window: tuple[int, int]
) -> tuple[list[Slice], list[tuple[float, int, dict]]]:
    """(each pass's slices, its layers' and its head's, on the compute track; the cache's occupancy as each layer
    starts) of the window's passes."""
    L = wl.num_layers
    a, b = window
    out: list[Slice] = []
    held = occupancy(dec, b * L)
    counters = []
    for p in range(a, b):
        t_start, t_end = float(tl.pass_start[p]), float(tl.pass_end[p])
        phase = "decode" if wl.pass_phase[p] == 1 else "prefill"
        tokens = wl.pass_end[p] - wl.pass_start[p]
        out.append(
            Slice(
                "compute",
                f"{phase} pass {p}",
                "token",
                t_start,
                t_end,
                p,
                {
                    "pass": p,
                    "request": int(wl.pass_request[p]),
                    "phase": phase,
                    "tokens": int(tokens),
                    "latency_ms": (t_end - t_start) * 1e3,
                },
            )
        )
        begin = t_start
        for layer in range(L):
            i = p * L + layer
            end = float(tl.step_end[i])
            out.append(Slice("compute", f"layer {layer}", "layer", begin, end, p, {"layer": layer}))
            counters.append(
                (begin, p, {"high": int(held[i - 1, 0]) if i else 0, "low": int(held[i - 1, 1]) if i else 0})
            )
            begin = end
        out.append(Slice("compute", "lm head", "head", begin, t_end, p))  # the pass's end, after its last layer
    return out, counters


def _work_slices(dec: Decisions, work: list, L: int, window: tuple[int, int]) -> list[Slice]:
    """The slices of the window's compute and CPU work records (``sim.plain.replay``'s ``rec`` layout): its experts,
    waits and the rest, the head left out (the rest of the pass, ``_pass_slices``)."""
    a, b = window
    out: list[Slice] = []
    for i, kind, start, end, j in work:
        p, layer = divmod(i, L)
        if not a <= p < b or kind == "head":  # the head is the rest of the pass (above)
            continue
        step = dec.steps[i]
        args: dict = {"layer": layer}
        if kind == "expert":
            tid, prec, n = step.gpu[j]
            args.update(
                expert=step.gpu_keys[j][1],
                precision=PRECISION[prec],
                tokens=n,
                weights="resident" if tid < 0 else f"copy {tid}",
            )
            name = f"expert {step.gpu_keys[j][1]} ({PRECISION[prec]})"
        elif kind == "cpu_expert":
            args.update(expert=step.cpu_keys[j][1], tokens=step.cpu[j])
            name = f"expert {step.cpu_keys[j][1]} (cpu)"
        else:
            name = "wait cpu" if kind == "wait_cpu" else kind
        out.append(Slice("cpu" if kind == "cpu_expert" else "compute", name, kind, float(start), float(end), p, args))
    return out


def simulated(wl: Workload, dec: Decisions, cost: CostModel, demand_first: bool, window: tuple[int, int]) -> Schedule:
    """The simulator's schedule of ``dec``: its decisions re-timed with the plain engine, recording.

    Only as many passes are re-timed as the window needs: a pass's times depend on nothing after it, so the passes
    up to the window's end are timed as in the whole run, and then every copy issued in the window has to be
    resolved (landed, or cancelled before it started). While one is not, the re-timed span doubles, up to the
    whole run. A window at the start of a long trace thus costs its own passes and a few more, not the trace's
    (``Schedule.pass_start`` / ``pass_end`` are 0 after the passes re-timed)."""
    L, n_pass = wl.num_layers, len(wl.pass_start)
    a, b = window
    issued = [ld.tid for i in range(a * L, b * L) for ld in dec.steps[i].loads]
    stop = max(b, 1)
    while True:
        work: list = []
        tl = replay(wl, dec, cost, demand_first, rec=work, passes=stop)
        if stop >= n_pass:
            break
        cancelled = {tid for i in range(stop * L) for tid in dec.steps[i].cancel}  # dropped unless started before
        if all(tid in tl.transfer_done or (tid in cancelled and tid not in tl.transfer_start) for tid in issued):
            break
        stop = min(2 * stop, n_pass)
    copies = {tid: (tl.transfer_start[tid], done) for tid, done in tl.transfer_done.items() if tid in tl.transfer_start}
    return build(wl, dec, tl, work, window, copies)
