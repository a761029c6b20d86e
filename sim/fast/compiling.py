"""The compiled core's entry points and their first compilation: the notice on stderr while numba compiles
(``CompileNotice``), the lock that lets one process at a time compile an entry point (``first_use``), and which
compiled copy of a policy's walk a run uses (``policy_walk``)."""

from __future__ import annotations

import hashlib
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any

import numba
from numba.core import event as numba_event

try:
    import fcntl
except ImportError:  # not POSIX: no lock, every process compiles for itself (as numba alone does)
    fcntl = None

from hobbit.sim.fast import bound, special, timing
from hobbit.sim.fast.jit import quick_inlining
from hobbit.sim.walk_copies import WALK_COPIES

# Seconds (low, high) numba takes to compile each entry point, measured on a 2-core VM (numba compiles on one core,
# so more cores do not shorten it; a faster core does; benchmarks/first_compile.py). The walk is most of it: one
# large function with its helpers, a walk per eviction policy (``special``), or per policy and settings, 21-28 s
# each in a quiet hour, up to 45 s when the VM is slow (docs/performance-log.md, 2026-12-06), the first a run
# compiles the longest (the helpers its policy shares with the others compile with it); the replay 4.2-4.5 s.
COMPILE_S: dict[str, tuple[float, float]] = {
    "walk": (20.0, 45.0),
    "replay": (3.0, 6.0),
    "replay_shared": (3.0, 6.0),
    "pass_bounds": (1.0, 2.0),
}
CORE = __name__.rpartition(".")[0]  # the compiled core's package: its functions' modules start so
COMPILE_S_OTHER = (1.0, 5.0)  # an entry point not listed above
COMPILE_MACHINE = "a 2-core VM"  # where COMPILE_S was measured
TICK_S = 15.0  # while an entry point compiles, a line of progress this often


def compile_estimate(names: list[str]) -> str:
    """How long compiling the entry points ``names`` takes, as a range a person reads: ``about 1-2 minutes``."""
    lo = sum(COMPILE_S.get(n, COMPILE_S_OTHER)[0] for n in names)
    hi = sum(COMPILE_S.get(n, COMPILE_S_OTHER)[1] for n in names)
    if hi < 90:
        return f"about {lo:.0f}-{hi:.0f} s"
    return f"about {max(round(lo / 60), 1)}-{max(round(hi / 60), 1)} minutes"


class CompileNotice(numba_event.Listener):
    """Says on stderr when the compiled core is being compiled, not loaded from numba's on-disk cache: once per
    machine and version, a minute or two on a small machine, silent otherwise. Numba fires ``numba:compile`` only
    on a cache miss, so a process that loads the core from the cache runs none of this. The first compilation
    announces itself with an estimate for the entry points (``ENTRY``) still to compile; while one compiles, a
    line every ``tick`` seconds names it, its place among them (``walk, 1 of 4``), the time so far and the helper
    numba is on; each ends with its time. The lines come from a thread that lives only while an entry point
    compiles (``tick=None``: no thread; ``progress()`` writes the line)."""

    def __init__(
        self,
        entry: tuple[Callable, ...],
        out=None,
        tick: float | None = TICK_S,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.entry, self.out, self.tick, self.clock = entry, out, tick, clock
        self.started: dict = {}  # entry point -> when it started compiling
        self.order: list = []  # the entry points compiled or to compile, in the order they started
        self.pending = 0  # how many entry points this process is expected to compile (the N of "n of N")
        self.current = None  # the entry point compiling now, and the helper numba is on inside it
        self.helper: str | None = None
        self._stop: threading.Event | None = None
        self._thread: threading.Thread | None = None

    def _say(self, text: str) -> None:
        print(f"hobbit: {text}", file=self.out or sys.stderr, flush=True)

    def _place(self, d) -> str:
        return f"{self.order.index(d) + 1} of {max(self.pending, len(self.order))}"

    def on_start(self, event: numba_event.Event) -> None:
        d = event.data["dispatcher"]
        if d not in self.entry:
            f = getattr(d, "py_func", None)
            if self.current is not None and getattr(f, "__module__", "").startswith(CORE):  # ours, not numba's
                self.helper = getattr(f, "__name__", None)
            return
        if d not in self.order:
            if not self.order:
                todo = [e for e in self.entry if e is d or not (e.overloads or _in_cache(e))]
                self.pending = len(todo)
                self.order.append(d)
                self._say(
                    f"compiling the simulator's core ({d.py_func.__name__} first): "
                    f"{f'up to {len(todo)} functions' if len(todo) > 1 else 'one function'}, once for this machine "
                    f"and version, "
                    f"{compile_estimate([e.py_func.__name__ for e in todo])} on {COMPILE_MACHINE}; later runs load "
                    f"it from numba's cache"
                )
            else:
                self.order.append(d)
        self.started[d] = self.clock()
        self.current, self.helper = d, None
        if self.tick:
            self._stop = threading.Event()
            self._thread = threading.Thread(target=self._ticker, args=(self._stop,), name="hobbit-compile", daemon=True)
            self._thread.start()

    def progress(self) -> None:
        """One line on the entry point compiling now: which, its place, the seconds so far, the helper it is on."""
        d = self.current
        if d is None:
            return
        on = f"; now on {self.helper}" if self.helper else ""
        self._say(
            f"compiling {d.py_func.__name__} ({self._place(d)}): {self.clock() - self.started[d]:.0f} s so far{on}"
        )

    def _ticker(self, stop: threading.Event) -> None:
        while not stop.wait(self.tick):
            self.progress()

    def on_end(self, event: numba_event.Event) -> None:
        d = event.data["dispatcher"]
        if d not in self.started:
            return
        if self._stop is not None and self._thread is not None:
            self._stop.set()
            self._thread.join()  # gone before the caller goes on: a sweep's launcher forks only without threads
            self._stop = self._thread = None
        self.current, self.helper = None, None
        self._say(f"compiled {d.py_func.__name__} in {self.clock() - self.started[d]:.0f} s ({self._place(d)})")


ENTRY = (timing.replay, timing.replay_shared, bound.pass_bounds)  # and each policy's walk, as a run asks for it
NOTICE = CompileNotice(ENTRY)
numba_event.register("numba:compile", NOTICE)


def _compiled(d) -> bool:
    return bool(getattr(d, "overloads", None)) or _in_cache(d)


def policy_walk(policy: str, variant: special.Variant | None = None, walks: str = WALK_COPIES[0]) -> Callable:
    """The walk compiled for eviction policy ``policy`` (``special.core``) for a run of settings ``variant`` (None:
    the policy's general copy), as ``walks`` chooses (``sim.walk_copies.WALK_COPIES``): ``auto`` the variant's copy
    unless only the general one is compiled already, ``specialised`` the variant's, ``general`` the general one; an
    entry point ``NOTICE`` announces. Every copy decides alike; a specialised one compiles about a fifth less code
    than the general one."""
    mode = walks
    if mode not in WALK_COPIES:
        raise ValueError(f"walks={mode!r}: one of {', '.join(WALK_COPIES)}")
    if variant is None or mode == "general":
        d = special.core(policy).walk
    else:
        d = special.core(policy, variant).walk
        if mode == "auto" and not _compiled(d) and _compiled(general := special.core(policy).walk):
            d = general
    if d not in NOTICE.entry:
        NOTICE.entry = (*NOTICE.entry, d)
    return d


WAITED: list[str] = []  # the entry points this process waited on another's compilation for (said once)


def lock_path(d) -> Path:
    """The file whose lock the processes compiling entry point ``d`` take (``first_use``): one per entry point's
    source file and name, numba version and cache directory, so that two policies' walks compile side by side."""
    f = d.py_func
    where = f"{Path(f.__code__.co_filename).resolve()}:{f.__qualname__}"
    key = f"{Path(__file__).resolve().parent}|{where}|{numba.__version__}|{numba.config.CACHE_DIR}"
    return Path(tempfile.gettempdir()) / f"hobbit-core-{hashlib.sha1(key.encode()).hexdigest()[:16]}.lock"


def _in_cache(d) -> bool:
    """Whether numba's on-disk cache holds compiled code of dispatcher ``d`` for its current source (read from
    the cache's index; anything unexpected reads as no)."""
    try:
        return bool(d._cache._cache_file._load_index())
    except Exception:  # noqa: BLE001 - numba's cache internals: when they differ, the lock is simply taken
        return False


NO_WAIT = nullcontext()


def first_use(d, out=None) -> AbstractContextManager[Any]:
    """Around a call of compiled entry point ``d``: before its first compilation in this process, ``_one_at_a_time``
    with numba's inliner as ``jit.quick_inlining`` makes it; once compiled, nothing (a streamed run calls each
    entry point once a chunk, a few hundred times a run)."""
    if getattr(d, "overloads", None):
        return NO_WAIT
    return _first_compile(d, out)


@contextmanager
def _first_compile(d, out=None) -> Iterator[None]:
    with quick_inlining(), _one_at_a_time(d, out):
        yield


@contextmanager
def _one_at_a_time(d, out=None) -> Iterator[None]:
    """Around the first call of a compiled entry point in a process: when numba would have to compile it (neither
    this process nor the on-disk cache has it), one process at a time goes on (an exclusive lock on
    ``lock_path(d)``). A sweep's workers all start at once; without the lock each of them compiles the walk for
    itself (each taking the whole compilation's time and most of a GB), with the lock one compiles and the others
    then load its code from the cache. A process that dies releases the lock."""
    if (
        fcntl is None or not hasattr(d, "overloads") or d.overloads or _in_cache(d)
    ):  # (a function under NUMBA_DISABLE_JIT)
        yield
        return
    try:
        f = open(lock_path(d), "a")  # noqa: SIM115 - held to the end of the block
    except OSError:
        yield
        return
    with f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not WAITED:
                print(
                    "hobbit: another process is compiling the simulator's core; waiting for it, then loading its "
                    "code from numba's cache",
                    file=out or sys.stderr,
                    flush=True,
                )
            WAITED.append(d.py_func.__name__)
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
