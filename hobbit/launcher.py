"""The ``hobbit`` Hydra launcher: a multirun's jobs in worker processes forked from the launching one.

Hydra's joblib launcher starts its workers through loky: each is a fresh interpreter that imports
Python, Hydra, the project and its libraries again and unpickles the job before it composes
anything, 1-1.5 s here while the launching process waits; a two-worker sweep of the bundled trace
spent more time there than the second worker saved. This launcher (``hydra/launcher=hobbit``, the
default of ``hobbit sim``) forks its workers instead: the standard library's
``ProcessPoolExecutor`` with the fork context (the launching process's imports and Hydra's state
come with them, a few milliseconds each), which hands out the jobs as workers free up. Each job
runs as Hydra's own launchers run one (``hydra.core.utils.run_job``: its composition, run
directory, log and callbacks); only its number goes to the worker and its ``JobReturn`` comes back.

- ``n_jobs``: the workers, at most one per job; -1 (the default) or 0: one per CPU, joblib's
  meaning; 1 runs every job in the launching process, as Hydra's basic launcher does.
- A job whose task raises comes back failed, as from any launcher (the sweep then names it). A job
  that exits (``fail``: bad input, exit code 2, named on stderr) or a worker that dies stops the
  others, as the first failing job stops a sweep run in one process; the command exits 2 for bad
  input. An interrupted (Ctrl-C) or killed (SIGTERM) launching process stops its workers.
- Off Linux (where a forked process may not use every library it inherited), or from a process with
  threads running (a fork copies only the calling thread), the jobs run in the launching process,
  one after another, with a warning; ``hydra/launcher=joblib`` starts fresh worker processes there.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.core.plugins import Plugins
from hydra.core.utils import JobReturn, configure_log, filter_overrides, run_job, setup_globals
from hydra.errors import HydraException
from hydra.plugins.launcher import Launcher
from omegaconf import open_dict
from omegaconf.errors import OmegaConfBaseException

log = logging.getLogger(__name__)
TARGET = "hydra_plugins.hobbit_launcher.HobbitLauncher"
EXIT_BAD_INPUT = 2  # as hobbit.glue's


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
        self.config = self.task_function = self.hydra_context = None

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
        ret = run_job(hydra_context=self.hydra_context, task_function=self.task_function, config=sweep_config,
                      job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")
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
            log.warning(f"n_jobs={self.n_jobs}: the jobs run one after another in this process (workers are forked on "
                        f"Linux only, from a process without threads{'; running: ' + threads if threads else ''}); "
                        "hydra/launcher=joblib starts its own")
            n = 1
        if n == 1:
            return [self._run(initial_job_idx + i, o) for i, o in enumerate(job_overrides)]
        return fork_pool(n, len(job_overrides), lambda i: self._run(initial_job_idx + i, job_overrides[i]))


_RUN: list[Callable[[int], Any]] = []  # the running pool's job function, inherited by its forked workers


def _job(i: int) -> Any:
    """In a worker: job ``i`` of the pool that forked it (only the number crosses the pipe)."""
    return _RUN[-1](i)


def fork_pool(n: int, count: int, run: Callable[[int], Any]) -> list[Any]:
    """``[run(0), ..., run(count - 1)]``, computed by ``n`` worker processes forked from this one (the standard
    library's ``ProcessPoolExecutor`` with the fork context), each taking the next job as it finishes the last.
    The first job to fail stops the pool, as the first failing job stops a sweep run in one process: its exception
    is raised here (``SystemExit(2)`` from ``fail``, whose message the worker has printed). A worker that dies
    (killed, out of memory) raises ``WorkerFailed``; an exception here (an interrupt, ``kill``) stops the workers."""
    _RUN.append(run)
    pool = ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("fork"), initializer=_worker_signals)
    term = signal.signal(signal.SIGTERM, _interrupted)  # `kill` of this process: its workers go too (finally)
    done = False
    try:
        futures = [pool.submit(_job, i) for i in range(count)]
        wait(futures, return_when=FIRST_EXCEPTION)
        for f in futures:
            if f.done() and f.exception() is not None:
                exc = f.exception()
                if isinstance(exc, BrokenProcessPool):
                    raise WorkerFailed(f"a sweep worker died: {exc}") from exc
                raise exc
        done = True
        return [f.result() for f in futures]
    finally:
        signal.signal(signal.SIGTERM, term)
        _RUN.pop()
        if not done:  # the workers still running go now, not when their jobs end
            for p in list((pool._processes or {}).values()):  # the executor keeps them there (3.9-3.13)
                with contextlib.suppress(Exception):
                    p.terminate()
        pool.shutdown(wait=True, cancel_futures=True)


def _interrupted(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _worker_signals() -> None:
    """A worker's signals: Ctrl-C reaches the launching process, which stops the workers (SIGTERM); SIGTERM ends an
    idle worker quietly, and a job's own handler (``hobbit.glue``) lets its writers clean up first."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def register() -> None:
    """Make ``hydra/launcher=hobbit`` known to Hydra (before each command, as ``hobbit.sweeper.register``: Hydra
    instantiates only plugins it found under ``hydra_plugins``, so the class is registered under that name)."""
    ConfigStore.instance().store(group="hydra/launcher", name="hobbit", node=HobbitLauncherConf, provider="hobbit")
    Plugins.instance().class_name_to_class.setdefault(TARGET, HobbitLauncher)


register()
__all__ = ["HobbitLauncher", "HobbitLauncherConf", "fork_pool", "workers"]
