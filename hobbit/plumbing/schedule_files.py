"""Timelines of runs as files: ``timeline.json`` (Chrome Trace Event format) and ``gantt.png``/``.svg``
(``analysis.schedule_views``), for ``hobbit sim``, ``hobbit validate`` and ``hobbit reproduce`` with ``timeline=true``."""

from __future__ import annotations

from pathlib import Path

from hobbit.analysis.schedule_views import plot_gantt, write_timeline
from hobbit.sim.events import Schedule, parse_window, simulated
from hobbit.sim.results import Results

GANTT_PASSES = 3  # passes in the Gantt plot: enough to see a decode step's copies and compute


def schedule_of(res: Results, demand_first: bool, tokens: str) -> Schedule:
    """The simulated schedule of a run's passes ``tokens``."""
    if res.workload is None:
        raise ValueError("a run's timeline needs its workload and decisions: simulate it with keep_decisions=True")
    return simulated(
        res.workload, res.decisions, res.cost, demand_first, parse_window(tokens, len(res.timeline.pass_start))
    )


def write_sim_timeline(
    res: Results, demand_first: bool, tokens: str, out: Path, gantt: bool = True, name: str = "timeline.json"
) -> list[Path]:
    """``out``/timeline.json (and the Gantt plot) of one simulated run; the paths written."""
    sched = schedule_of(res, demand_first, tokens)
    s = res.summary
    meta = {"model": s["model"], "hardware": s["hardware"], "system": s["system"]}
    paths = [write_timeline(out / name, [(f"simulated: {s['system']} on {s['hardware']}", sched)], meta=meta)]
    if gantt and sched.window[1] > sched.window[0]:
        paths += plot_gantt([("simulated", sched)], out, passes=GANTT_PASSES, align=False)
    return paths
