"""Timelines of runs: ``timeline.json`` in the Chrome Trace Event format (Perfetto, ui.perfetto.dev, and
chrome://tracing open it) and a Gantt plot of a few passes for people who do not open Perfetto.

Each run is a process (pid 1, 2, ...) named after it; its tracks (a schedule's ``tracks``: compute,
link, cpu) are threads. A schedule is ``sim.events.Schedule``, read here by its fields only.
Slices are complete events (``ph: X``) with timestamps and durations in microseconds; a pass (``token``) holds its layers and the LM head, a layer holds its work
(``sim.events``). Cache occupancy per pool is a counter (``ph: C``). With ``align`` (several runs
of the same decisions: simulated and measured), pass p starts at the same time in every process,
the slot of the longest: where they diverge is where the slices of one run outgrow the other's.
Every shift is monotone in time, so slices that did not overlap on a track still do not.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from hobbit.analysis.plots import pyplot, save
from hobbit.traces.io import atomic_write_json

US = 1e6
GAP_S = 0.0  # aligned passes sit back to back
COLORS = {
    "dense": "#8c8c8c",
    "issue": "#bdbdbd",
    "stall": "#d62728",
    "wait_cpu": "#ff9896",
    "head": "#636363",
    "settle": "#e7ba52",
    "expert high": "#1f77b4",
    "expert low": "#aec7e8",
    "cpu_expert": "#2ca02c",
    "copy demand": "#ff7f0e",
    "copy prefetch": "#9467bd",
}


def _offsets(runs: list[tuple[str, Any]], align: bool) -> list[np.ndarray]:
    """Per run, the shift of each pass of the window (seconds): pass p of every run starts at the same time."""
    a, b = runs[0][1].window
    if not align:
        return [np.full(b - a, -float(s.pass_start[a]) if b > a else 0.0) for _, s in runs]
    spans = []
    for _, s in runs:
        starts = np.asarray(s.pass_start[a:b], float)
        nxt = np.append(starts[1:], s.pass_end[b - 1]) if b > a else starts
        spans.append(np.maximum(nxt - starts, np.asarray(s.pass_end[a:b]) - starts))
    slot = np.max(spans, axis=0) + GAP_S
    begin = np.concatenate([[0.0], np.cumsum(slot)[:-1]])
    return [begin - np.asarray(s.pass_start[a:b], float) for _, s in runs]


def _shift(s: Any, off: np.ndarray, p: int) -> float:
    return float(off[p - s.window[0]])


def _us(seconds: float) -> float:
    return round(seconds * US, 3)


def chrome_trace(runs: list[tuple[str, Any]], align: bool = False, meta: dict | None = None) -> dict:
    """The Trace Event JSON object of ``runs`` (name, schedule), one process each."""
    events: list[dict] = []
    offsets = _offsets(runs, align)
    for pid, ((name, s), off) in enumerate(zip(runs, offsets), start=1):
        events.append({"ph": "M", "pid": pid, "tid": 0, "name": "process_name", "args": {"name": name}})
        events.append({"ph": "M", "pid": pid, "tid": 0, "name": "process_sort_index", "args": {"sort_index": pid}})
        for tid, track in enumerate(s.tracks, start=1):
            events.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": track}})
            events.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_sort_index", "args": {"sort_index": tid}})
        for sl in s.slices:
            d = _shift(s, off, sl.pass_index)
            ts, end = _us(sl.start + d), _us(sl.end + d)  # the end rounded as the next start is: slices abut
            events.append(
                {
                    "ph": "X",
                    "pid": pid,
                    "tid": s.tracks.index(sl.track) + 1,
                    "name": sl.name,
                    "cat": sl.kind,
                    "ts": ts,
                    "dur": round(end - ts, 3),
                    "args": sl.args,
                }
            )
        for t, p, held in s.counters:
            events.append(
                {
                    "ph": "C",
                    "pid": pid,
                    "tid": 0,
                    "name": "cache copies held",
                    "ts": _us(t + _shift(s, off, p)),
                    "args": held,
                }
            )
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {"aligned": bool(align), "passes": list(runs[0][1].window), **(meta or {})},
    }


def write_timeline(path: Path, runs: list[tuple[str, Any]], align: bool = False, meta: dict | None = None) -> Path:
    """``timeline.json`` (atomically)."""
    return atomic_write_json(path, chrome_trace(runs, align, meta))


def _color(sl) -> str:
    if sl.kind == "expert":
        return COLORS[f"expert {sl.args['precision']}"]
    if sl.kind == "copy":
        return COLORS["copy demand" if sl.args["demand"] else "copy prefetch"]
    return COLORS.get(sl.kind, "#cccccc")


def first_decode(s: Any) -> int:
    """The first decode pass of a schedule's window (its first pass when it has none)."""
    return min(
        (sl.pass_index for sl in s.slices if sl.kind == "token" and sl.args.get("phase") == "decode"),
        default=s.window[0],
    )


def plot_gantt(
    runs: list[tuple[str, Any]],
    out: Path,
    passes: int = 3,
    align: bool = True,
    name: str = "gantt",
    first: int | None = None,
) -> list[Path]:
    """A Gantt chart of ``passes`` passes from ``first`` (default: the window's first decode pass): a row
    per run and track (the runs in order, top to bottom), work coloured by kind, pass boundaries dashed."""
    plt = pyplot()
    offsets = _offsets(runs, align)
    a = first_decode(runs[0][1]) if first is None else first
    last = min(a + passes, runs[0][1].window[1])
    rows = [
        (run, track)
        for run, s in runs
        for track in s.tracks
        if track != "cpu" or any(sl.track == track for sl in s.slices)
    ]
    fig, ax = plt.subplots(figsize=(13, 0.55 * len(rows) + 1.6))
    seen: set[str] = set()
    for (run, s), off in zip(runs, offsets):
        for sl in s.slices:
            if not a <= sl.pass_index < last or sl.kind in ("token", "layer"):
                continue
            y = len(rows) - 1 - rows.index((run, sl.track))
            label = (
                sl.kind
                if sl.kind not in ("expert", "copy")
                else (
                    f"expert {sl.args['precision']}"
                    if sl.kind == "expert"
                    else f"copy {'demand' if sl.args['demand'] else 'prefetch'}"
                )
            )
            start = (sl.start + _shift(s, off, sl.pass_index)) * 1e3
            ax.broken_barh(
                [(start, sl.dur * 1e3)],
                (y - 0.38, 0.76),
                facecolors=_color(sl),
                edgecolor="none",
                linewidth=0,
                label=None if label in seen else label,
            )
            seen.add(label)
        for p in range(a, last):
            x = (s.pass_start[p] + _shift(s, off, p)) * 1e3
            ax.axvline(x, color="k", lw=0.6, ls="--", alpha=0.4)
    ax.set_yticks(range(len(rows)), [f"{run}: {track}" for run, track in reversed(rows)])
    ax.set_xlabel("time (ms)" + (", passes aligned" if align and len(runs) > 1 else ""))
    ax.set_title(f"passes {a} to {last - 1}: " + " above ".join(run for run, _ in runs), fontsize=10)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.005, 1.0), frameon=False)
    return save(fig, out, name)
