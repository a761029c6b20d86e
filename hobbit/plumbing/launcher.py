"""The ``hobbit`` Hydra launcher: a multirun's jobs in worker processes forked from the launching one.

Hydra's joblib launcher starts its workers through loky: each is a fresh interpreter that imports
Python, Hydra, the project and its libraries again and unpickles the job before it composes
anything, over a second while the launching process waits; for a sweep of short runs that start
costs more than a second worker saves. This launcher (``hydra/launcher=hobbit``, the
default of ``hobbit sim``) forks its workers instead (``os.fork``: the launching process's
imports and Hydra's state come with them, a few milliseconds each) and hands them the jobs one
at a time (a shared counter), so a worker that finishes early takes the next job. Each job runs
as Hydra's own launchers run one (``hydra.core.utils.run_job``: its composition, run directory,
log and callbacks); its result comes back to the launching process through a pipe. (Not the standard
library's ``ProcessPoolExecutor`` with the fork context: stopping one of its workers while it runs a job
can leave the pool's shutdown waiting forever.)

- ``n_jobs``: the workers, at most one per job; -1 (the default) or 0: one per CPU, joblib's
  meaning; 1 runs every job in the launching process, as Hydra's basic launcher does.
- A job whose task raises comes back failed, as from any launcher (the sweep then names it). A
  worker that exits in error (``fail``: bad input, exit code 2, named on stderr) or dies stops the
  others, as the first failing job stops a sweep run in one process; the command exits 2 for bad
  input. An interrupted (Ctrl-C) or killed (SIGTERM) launching process stops its workers.
- Off Linux (where a forked process may not use every library it inherited), or from a process with
  threads running (a fork copies only the calling thread), the jobs run in the launching process,
  one after another, with a warning; ``hydra/launcher=joblib`` starts fresh worker processes there.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import pickle
import selectors
import signal
import struct
import sys
import threading
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.core.plugins import Plugins
from hydra.core.utils import JobReturn, JobStatus, configure_log, filter_overrides, run_job, setup_globals
from hydra.errors import HydraException
from hydra.plugins.launcher import Launcher
from omegaconf import open_dict
from omegaconf.errors import OmegaConfBaseException

from hobbit.traces.io import STOPS, raise_interrupt  # STOPS: blocked across each fork (fork_pool)

log = logging.getLogger(__name__)
TARGET = "hydra_plugins.hobbit_launcher.HobbitLauncher"
FRAME = struct.Struct("<Q")  # a result's length, then its pickle
EXIT_BAD_INPUT = 2  # as hobbit.plumbing.glue's
COUNTER = struct.Struct("<q")  # the next job number, in the workers' token pipe


@dataclass
class HobbitLauncherConf:
    """``hydra.launcher`` when ``hydra/launcher=hobbit``."""

    _target_: str = TARGET
    n_jobs: int = -1  # worker processes; -1 or 0: one per CPU; 1: the jobs run in the launching process


def workers(n_jobs: int | None, jobs: int) -> int:
    """How many workers ``n_jobs`` means for ``jobs`` jobs: joblib's reading (-1: every CPU, -2: all but one...),
    at least one, at most one per job."""
    cpus = os.cpu_count() or 1
    n = cpus if not n_jobs else n_jobs if n_jobs > 0 else max(cpus + 1 + n_jobs, 1)
    return max(min(n, jobs), 1)


def can_fork() -> bool:
    """Whether this process may fork its workers: Linux, and no thread but this one (a forked child would inherit
    the other threads' locks without the threads)."""
    return sys.platform.startswith("linux") and threading.active_count() == 1


class WorkerFailed(RuntimeError):
    """A worker process ended other than by finishing its jobs: killed by a signal, or exited in error."""


class HobbitLauncher(Launcher):
    """Run a multirun's jobs in forked worker processes (module docstring)."""

    def __init__(self, n_jobs: int = -1) -> None:
        self.n_jobs = n_jobs
        self.config: Any = None  # set by setup(), before Hydra launches anything
        self.task_function: Any = None
        self.hydra_context: Any = None

    def setup(self, *, hydra_context: Any, task_function: Any, config: Any) -> None:
        self.hydra_context, self.task_function, self.config = hydra_context, task_function, config

    def _run(self, idx: int, overrides: Sequence[str]) -> JobReturn:
        """One job, composed and run as Hydra's basic launcher runs it. A composition that fails (a config group's
        option that does not exist, a key no config has) is bad input: named on stderr, exit code 2."""
        try:
            sweep_config = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
        except (HydraException, OmegaConfBaseException) as exc:
            print(f"hobbit: error: sweep job {' '.join(filter_overrides(overrides))}: {exc}", file=sys.stderr)
            raise SystemExit(EXIT_BAD_INPUT) from None
        with open_dict(sweep_config):
            sweep_config.hydra.job.id = sweep_config.hydra.job.num = idx
        ret = run_job(
            hydra_context=self.hydra_context,
            task_function=self.task_function,
            config=sweep_config,
            job_dir_key="hydra.sweep.dir",
            job_subdir_key="hydra.sweep.subdir",
        )
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        return ret

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        Path(str(self.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
        n = workers(self.n_jobs, len(job_overrides))
        log.info(f"Launching {len(job_overrides)} jobs on {n} worker{'s' if n > 1 else ''}")
        for i, overrides in enumerate(job_overrides):
            log.info(f"\t#{initial_job_idx + i} : {' '.join(filter_overrides(overrides))}")
        if n > 1 and not can_fork():
            threads = ", ".join(t.name for t in threading.enumerate() if t is not threading.current_thread())
            log.warning(
                f"n_jobs={self.n_jobs}: the jobs run one after another in this process (workers are forked on "
                f"Linux only, from a process without threads{'; running: ' + threads if threads else ''}); "
                "hydra/launcher=joblib starts its own"
            )
            n = 1
        if n == 1:
            return [self._run(initial_job_idx + i, o) for i, o in enumerate(job_overrides)]
        return fork_pool(n, len(job_overrides), lambda i: self._run(initial_job_idx + i, job_overrides[i]))


def _take(token: tuple[int, int], count: int) -> int:
    """The next job number, from the counter the workers pass around in a pipe (one 8-byte record: a read of it
    is the lock, the write of the next number its release); ``count`` or more: none left."""
    r, w = token
    i = COUNTER.unpack(os.read(r, COUNTER.size))[0]
    os.write(w, COUNTER.pack(min(i + 1, count)))
    return i


def _child(token: tuple[int, int], count: int, run: Callable[[int], Any], out: int) -> int:
    """A worker's loop: take the next job number, run it, send back (number, result); its exit code."""
    code = 0
    try:
        with os.fdopen(out, "wb") as pipe:
            while (i := _take(token, count)) < count:
                try:
                    ret = run(i)
                finally:  # idle again: a job sets its own SIGTERM handler (hobbit.plumbing.glue); a stop now ends us quietly
                    signal.signal(signal.SIGTERM, signal.SIG_DFL)
                try:
                    data = pickle.dumps((i, ret))
                except Exception as exc:  # noqa: BLE001 - an unpicklable result or exception: sent as text
                    ret.status, ret._return_value = JobStatus.FAILED, RuntimeError(f"{type(exc).__name__}: {exc}")
                    data = pickle.dumps((i, ret))
                pipe.write(FRAME.pack(len(data)) + data)
                pipe.flush()
    except SystemExit as exc:  # fail(): the message is on stderr
        code = exc.code if isinstance(exc.code, int) else 1
    except KeyboardInterrupt:
        code = 128 + signal.SIGINT
    except BaseException:  # noqa: BLE001 - a worker must never unwind into the launching process's frames
        traceback.print_exc()
        code = 1
    return code


def fork_pool(n: int, count: int, run: Callable[[int], Any]) -> list[Any]:
    """``[run(0), ..., run(count - 1)]``, computed by ``n`` processes forked from this one, each taking the next
    number as it finishes the last. The first worker to exit in error stops the others, as the first failing job
    stops a sweep run in one process: ``SystemExit(2)`` where it exited 2 (bad input, which it has named on stderr),
    else ``WorkerFailed``. An exception here (an interrupt, ``kill``) stops the workers too."""
    token = os.pipe()
    os.write(token[1], COUNTER.pack(0))
    parent = os.getpid()
    kids: dict[int, int] = {}  # a worker's result pipe (read end) -> its pid
    for _ in range(n):
        r, w = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        signal.pthread_sigmask(signal.SIG_BLOCK, STOPS)  # none may reach the worker before it sets its own handlers
        pid = os.fork()
        if pid == 0:  # the worker: it never returns into the caller's frames
            # no Python handler that could raise out of this block before os._exit: Ctrl-C reaches the launching
            # process, which stops the workers; SIGTERM ends an idle worker (a job sets its own, hobbit.plumbing.glue)
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            _die_with(parent)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPS)
            code = 1
            try:
                for fd in (r, *kids):
                    os.close(fd)
                code = _child(token, count, run, w)
            finally:
                with contextlib.suppress(BaseException):
                    sys.stdout.flush()
                    sys.stderr.flush()
                    logging.shutdown()
                os._exit(code)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPS)
        os.close(w)
        kids[r] = pid
    results: dict[int, Any] = {}
    live = set(kids.values())
    term = signal.signal(signal.SIGTERM, raise_interrupt)  # `kill` of this process: its workers go too (finally)
    try:
        for pid in _collect(kids, results):
            live.discard(pid)
            code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
            if code == EXIT_BAD_INPUT:  # bad input: the worker has said what (fail), and the command exits 2
                raise SystemExit(2)
            if code:
                raise WorkerFailed(
                    f"sweep worker {pid} "
                    + (f"was killed by signal {-code}" if code < 0 else f"exited with code {code}")
                )
    finally:
        signal.signal(signal.SIGTERM, term)
        for pid in live:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
        for fd in (*token, *kids):
            with contextlib.suppress(OSError):
                os.close(fd)
    missing = sorted(set(range(count)) - set(results))
    if missing:
        raise WorkerFailed(f"no result came back for jobs {missing}")
    return [results[i] for i in range(count)]


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _die_with(parent: int) -> None:
    """Have the kernel send this worker SIGTERM when the launching process dies, even by kill -9 (Linux's
    PR_SET_PDEATHSIG), so that no worker goes on alone; its job's handler then cleans up as for any ``kill``. A
    parent already gone before the request took effect ends the worker at once."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)


def _collect(kids: dict[int, int], results: dict[int, Any]) -> Iterator[int]:
    """Read the workers' result pipes as they write (a full pipe would stall its worker); yield each worker's pid
    once its pipe is closed (it has exited, or is about to)."""
    buf = {r: b"" for r in kids}
    with selectors.DefaultSelector() as sel:
        for r in kids:
            sel.register(r, selectors.EVENT_READ)
        while sel.get_map():
            for key, _ in sel.select():
                r = key.fd
                chunk = os.read(r, 1 << 16)
                if not chunk:
                    sel.unregister(r)
                    yield kids[r]
                    continue
                buf[r] += chunk
                while len(buf[r]) >= FRAME.size:
                    end = FRAME.size + FRAME.unpack_from(buf[r])[0]
                    if len(buf[r]) < end:
                        break
                    i, ret = pickle.loads(buf[r][FRAME.size : end])
                    results[i] = ret
                    buf[r] = buf[r][end:]


def register() -> None:
    """Make ``hydra/launcher=hobbit`` known to Hydra (before each command, as ``hobbit.plumbing.sweeper.register``: Hydra
    instantiates only plugins it found under ``hydra_plugins``, so the class is registered under that name)."""
    ConfigStore.instance().store(group="hydra/launcher", name="hobbit", node=HobbitLauncherConf, provider="hobbit")
    Plugins.instance().class_name_to_class.setdefault(TARGET, HobbitLauncher)


__all__ = ["HobbitLauncher", "HobbitLauncherConf", "fork_pool", "workers"]
