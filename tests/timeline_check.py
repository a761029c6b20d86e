"""Checks of a Chrome Trace Event file (the subset hobbit writes), shared by the timeline tests.

The format (Trace Event Format, the document Chrome's and Perfetto's importers follow): a JSON
object with ``traceEvents``, a list of events; each has ``ph`` (phase), ``pid``, ``tid``,
``name``; complete events (``X``) have ``ts`` and ``dur`` in microseconds, counters (``C``) ``ts``
and numeric ``args``, metadata (``M``) ``args``. On one thread, complete events must nest: each
lies inside the one it starts in, or starts after it ends.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

TOL_US = 2e-3  # timestamps are rounded to the nanosecond


def load(path: Path) -> dict:
    doc = json.loads(path.read_text())
    assert isinstance(doc, dict) and isinstance(doc["traceEvents"], list) and doc["displayTimeUnit"] in ("ms", "ns")
    return doc


def check_format(doc: dict) -> dict[tuple[int, int], list[dict]]:
    """Every event well formed; complete events nest per thread. Returns them per (pid, tid), sorted."""
    threads: dict[tuple[int, int], list[dict]] = defaultdict(list)
    names: dict[tuple[int, int], str] = {}
    for ev in doc["traceEvents"]:
        assert ev["ph"] in ("X", "C", "M"), ev
        assert isinstance(ev["pid"], int) and isinstance(ev["tid"], int) and isinstance(ev["name"], str), ev
        if ev["ph"] == "M":
            assert ev["name"] in ("process_name", "process_sort_index", "thread_name", "thread_sort_index"), ev
            assert isinstance(ev["args"], dict)
            if ev["name"] == "thread_name":
                names[(ev["pid"], ev["tid"])] = ev["args"]["name"]
            continue
        assert isinstance(ev["ts"], (int, float)) and ev["ts"] >= 0, ev
        if ev["ph"] == "C":
            assert ev["args"] and all(isinstance(v, (int, float)) for v in ev["args"].values()), ev
            continue
        assert isinstance(ev["dur"], (int, float)) and ev["dur"] >= 0 and isinstance(ev.get("args", {}), dict), ev
        threads[(ev["pid"], ev["tid"])].append(ev)
    for key, evs in threads.items():
        assert key in names, f"thread {key} has no thread_name"
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack: list[dict] = []
        for ev in evs:
            while stack and ev["ts"] >= stack[-1]["ts"] + stack[-1]["dur"] - TOL_US:
                stack.pop()
            if stack:
                top = stack[-1]
                assert ev["ts"] + ev["dur"] <= top["ts"] + top["dur"] + TOL_US, (
                    f"{names[key]}: {ev['name']} at {ev['ts']} overlaps {top['name']} without nesting"
                )
            stack.append(ev)
    return threads


def tokens(threads: dict, pid: int) -> list[tuple[dict, list[dict], list[dict]]]:
    """Per pass of process ``pid``'s compute track: (its token slice, its layer and head slices, its work)."""
    compute = threads[(pid, 1)]
    out = []
    for tok in (e for e in compute if e["cat"] == "token"):
        end = tok["ts"] + tok["dur"] + TOL_US
        inside = [e for e in compute if e is not tok and tok["ts"] - TOL_US <= e["ts"] and e["ts"] + e["dur"] <= end]
        out.append(
            (
                tok,
                [e for e in inside if e["cat"] in ("layer", "head")],
                [e for e in inside if e["cat"] not in ("layer", "head", "token")]
                + [e for e in inside if e["cat"] == "head"],
            )
        )
    return out
