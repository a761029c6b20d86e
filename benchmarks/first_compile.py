"""The first run's compilation: seconds numba spends compiling the simulator's core from an empty cache.

    python benchmarks/first_compile.py [--systems hobbit] [--all]

Each measurement runs in a fresh process with ``NUMBA_CACHE_DIR`` pointed at an empty folder, so nothing is loaded
from a cache: it simulates the bundled trace's first 2 requests (``use_cache=false``: no result cache either) for
each system named, in turn, in one process (as ``hobbit compare`` would), and sums the time of every entry point's
compilation (numba's ``numba:compile`` events of the core's entry points: each policy's walk, the replays, the
bound). The first list runs as ``hobbit sim`` does (``walks`` unset: a walk specialised for each system's
settings); ``--all`` adds every preset of conf/system as ``make demo``'s comparison of every system compiles them
(``walks="general"``: one walk per eviction policy). Prints each entry point's seconds, then ``first_compile_s=<f>`` for the first list (target: 30 s for
the default system on a 2-core machine) and, with ``--all``, ``all_presets_compile_s=<f>`` (target: no more than
the 113 s the whole core took before it was split by policy).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

CHILD = r"""
import json, sys, time
from numba.core import event

times, stack = {}, []
class Timed(event.Listener):
    def on_start(self, e):
        stack.append((e.data["dispatcher"], time.perf_counter()))
    def on_end(self, e):
        d, t = stack.pop()
        if not stack:  # an entry point (its helpers compile inside it)
            f = d.py_func
            name = f"{f.__module__.rsplit('.', 1)[-1]}.{f.__name__}"
            times[name] = times.get(name, 0.0) + time.perf_counter() - t
event.register("numba:compile", Timed())

import hobbit
from hobbit.traces.io import Trace
import numpy as np

tr = hobbit.read_trace(sys.argv[1])
keep = np.flatnonzero(tr.arrays.request_id < np.unique(tr.arrays.request_id)[2])
tr = Trace(tr.meta, tr.arrays.take(keep), tr.path)
t0 = time.perf_counter()
for system in sys.argv[2].split(","):
    hobbit.simulate(tr, system=system, keep_decisions=False, walks=sys.argv[3] or None)
print(json.dumps({"entries": times, "wall_s": time.perf_counter() - t0}))
"""


def measure(systems: list[str], walks: str = "") -> dict:
    from hobbit.commands.demo import bundled_trace

    with tempfile.TemporaryDirectory(prefix="hobbit-numba-") as cache:
        env = {**os.environ, "NUMBA_CACHE_DIR": cache}
        env.pop("HOBBIT_WALK", None)  # the run's choice is its argument
        out = subprocess.run(
            [sys.executable, "-c", CHILD, str(bundled_trace()), ",".join(systems), walks],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
    return json.loads(out.stdout.strip().splitlines()[-1])


def show(label: str, got: dict) -> float:
    total = sum(got["entries"].values())
    print(f"{label}: {total:.1f} s compiling ({got['wall_s']:.1f} s in all)")
    for name, s in sorted(got["entries"].items(), key=lambda x: -x[1]):
        print(f"  {s:6.1f} s  {name}")
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--systems", default="hobbit", help="comma-separated presets simulated in one fresh process")
    ap.add_argument("--all", action="store_true", help="also every preset of conf/system in one fresh process")
    args = ap.parse_args()
    first = show(f"systems {args.systems}", measure(args.systems.split(",")))
    if args.all:
        from hobbit.planner.published import system_presets

        every = show("every preset", measure(list(system_presets()), walks="general"))
        print(f"all_presets_compile_s={every:.1f}")
    print(f"first_compile_s={first:.1f}")


if __name__ == "__main__":
    main()
