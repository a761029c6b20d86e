"""Where the compiled core spends its time: perf samples named by the numba function they fell in.

    python benchmarks/profile_core.py [--topology qwen|mixtral] [--tokens N] [--seconds 15] [--top 20]

numba loads compiled code into anonymous memory, which ``perf`` cannot name. This script reads each
function's object code where numba keeps it (its on-disk cache, which the core loads from; or, for
code compiled in this process, the library's own copy; ``--fresh`` compiles every function of the core
afresh into a temporary cache, which takes a while), writes ``/tmp/perf-<pid>.map`` with the address and size
of every function of ``hobbit.sim.fast`` (the functions a caller inlined appear inside it) and of numba's
reference counting (``NRT_incref``/``NRT_decref``: every array a call or an inlined call takes, and
every array taken out of a tuple, counts up and down atomically), then records ``perf record -p``
while it simulates ``system=hobbit`` (``--system``) over and over (the Qwen3.5-397B topology of
``benchmarks/sim_speed.py`` by default), and prints ``perf report``'s top entries. Needs ``perf``
and ``nm`` (binutils) on the PATH; the recording stays in ``core.perf.data`` for ``perf report``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CACHE = None
if "--fresh" in sys.argv:  # before numba is imported: compile afresh into a cache of our own
    CACHE = tempfile.mkdtemp(prefix="hobbit-numba-")
    os.environ["NUMBA_CACHE_DIR"] = CACHE


def short(symbol: str) -> str:
    """``module.function`` out of a numba symbol (``_ZN6hobbit3sim4fast4walk13_pruned_evictB4v142...``)."""
    i = symbol.find("_ZN")
    if i < 0:
        return symbol[:60]
    i, parts = i + 3, []
    while i < len(symbol) and symbol[i].isdigit():
        m = re.match(r"\d+", symbol[i:])
        assert m is not None  # symbol[i] is a digit
        n, i = int(m.group()), i + len(m.group())
        parts.append(symbol[i : i + n])
        i += n
    prefix = "wrapper " if symbol.startswith(("cfunc.", "_ZN7cpython")) else ""
    return prefix + ".".join(parts[-2:])


def objects(disp) -> list[tuple[bytes, list]]:
    """(object code, the libraries that may hold its functions) of each overload of a dispatcher: the library's
    own copy where this process compiled it, else the copy in numba's on-disk cache it was loaded from (each index
    entry's data: the library serialized as its object code and bitcode)."""
    libs = [cres.library for cres in disp.overloads.values()]
    out = [(lib._compiled_object, [lib]) for lib in libs if lib._compiled_object is not None]
    if len(out) < len(libs) and disp._cache is not None:
        store = disp._cache._cache_file
        for data_name in store._load_index().values():
            kind, payload = store._load_data(data_name)[0][1:3]
            if kind == "object":
                out.append((payload[0], libs))
    return out


def symbols() -> list[str]:
    """``perf`` map lines: address, size and name of every compiled function of the core."""
    from numba.core.registry import CPUDispatcher
    from numba.core.runtime import nrt

    from hobbit.sim.fast import bound, timing, walk

    lines, seen = [], set()
    with tempfile.TemporaryDirectory() as d:
        copies = [m for n, m in sys.modules.items() if n.startswith("hobbit.sim.fast.walk_")]  # sim.fast.special's
        for mod in (walk, timing, bound, *copies):
            for disp in vars(mod).values():
                if not isinstance(disp, CPUDispatcher):
                    continue
                for obj, libs in objects(disp):
                    path = Path(d) / "o.o"
                    path.write_bytes(obj)
                    nm = subprocess.run(
                        ["nm", "-S", "--defined-only", str(path)], capture_output=True, text=True, check=True
                    ).stdout
                    for row in nm.splitlines():
                        parts = row.split()
                        if len(parts) != 4 or parts[2] not in "tTW":  # the helpers a caller did not inline: W
                            continue
                        for lib in libs:
                            try:
                                addr = lib.get_pointer_to_function(parts[3])
                            except Exception:  # noqa: BLE001 - not this library's
                                addr = 0
                            if addr and addr not in seen:
                                seen.add(addr)
                                lines.append(f"{addr:x} {int(parts[1], 16):x} {short(parts[3])}")
                                break
    lib = nrt.rtsys.library
    for name in ("NRT_incref", "NRT_decref"):
        addr = lib.get_pointer_to_function(name)
        if addr:
            lines.append(f"{addr:x} 10 NRT:{name}")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--topology", choices=["qwen", "mixtral"], default="qwen")
    ap.add_argument("--tokens", type=int, default=0, help="trace tokens (default: 1,920 for qwen, 10,000 for mixtral)")
    ap.add_argument("--seconds", type=float, default=15.0, help="how long to record")
    ap.add_argument("--top", type=int, default=20)
    ap.add_argument("--system", default="hobbit", help="a conf/system option (default: hobbit)")
    ap.add_argument(
        "--fresh",
        action="store_true",
        help="compile the core afresh (every function: a while) instead of reading the object code numba's cache holds",
    )
    ap.add_argument(
        "--profile-share",
        type=float,
        default=0.0,
        help="the requests held out as the profile (0.25 for a system that learns from one, moe-infinity)",
    )
    args = ap.parse_args()
    for tool in ("perf", "nm"):
        if shutil.which(tool) is None:
            sys.exit(f"profile_core: `{tool}` is not on the PATH (perf: linux-tools; nm: binutils)")
    sys.path.insert(0, str(Path(__file__).parent))
    from sim_speed import qwen_trace, repeated_trace

    from hobbit.plumbing.glue import compose
    from hobbit.sim.config import SimConfig
    from hobbit.sim.run import simulate

    extra = ["model=qwen3.5-397b-a17b", "hardware=h200-pcie5"] if args.topology == "qwen" else []
    cfg = compose("sim", SimConfig, ["out_dir=.", f"system={args.system}", *extra])
    trace = qwen_trace(args.tokens or 1920) if args.topology == "qwen" else repeated_trace(args.tokens or 10_000)
    if CACHE:
        print(f"compiling the core afresh into {CACHE} (every function: a while) ...", flush=True)
    simulate(trace, cfg.model, cfg.hardware, cfg.system, profile_share=args.profile_share)
    Path(f"/tmp/perf-{os.getpid()}.map").write_text("\n".join(symbols()) + "\n")
    perf = subprocess.Popen(["perf", "record", "-q", "-o", "core.perf.data", "-p", str(os.getpid())])
    time.sleep(0.5)
    runs, t_end = [], time.perf_counter() + args.seconds
    while time.perf_counter() < t_end:
        t0 = time.perf_counter()
        simulate(trace, cfg.model, cfg.hardware, cfg.system, profile_share=args.profile_share)
        runs.append(time.perf_counter() - t0)
    perf.send_signal(signal.SIGINT)
    perf.wait()
    n = len(trace.arrays)
    print(f"{len(runs)} runs, best {min(runs):.3f} s ({n / min(runs):,.0f} token-layers/s)")
    report = subprocess.run(
        ["perf", "report", "-i", "core.perf.data", "--no-children", "--sort", "sym", "--stdio"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    rows = [r for r in report.splitlines() if r.strip() and not r.startswith("#")]
    print("\n".join(rows[: args.top]))
    if CACHE:
        shutil.rmtree(CACHE, ignore_errors=True)


if __name__ == "__main__":
    main()
