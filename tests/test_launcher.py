"""The ``hobbit`` launcher: a multirun's jobs in worker processes forked from the launching one."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from hobbit import api
from hobbit.commands.sim import Preload
from hobbit.plumbing import launcher
from hobbit.plumbing.launcher import WorkerFailed, fork_pool, workers
from hobbit.sim import run as sim_run

from conftest import run_cli
from sim_helpers import write_first_requests

ROOT = Path(__file__).parents[1]


def _children(pid: int | None = None) -> set[int]:
    """The live children of process ``pid`` (this one by default), from /proc."""
    pid = pid or os.getpid()
    return {int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()}


def test_a_large_result_does_not_stall_its_worker():
    """Results larger than a pipe's buffer: the launching process reads every worker's pipe as it fills."""
    got = fork_pool(2, 4, lambda i: bytes([i]) * (1 << 18))
    assert [len(b) for b in got] == [1 << 18] * 4 and [b[0] for b in got] == [0, 1, 2, 3]


def test_jobs_run_in_forked_workers_and_come_back_in_order():
    before = _children()
    got = fork_pool(2, 7, lambda i: (i * i, os.getpid()))
    assert [v for v, _ in got] == [i * i for i in range(7)]
    assert os.getpid() not in {pid for _, pid in got}  # every job ran in a worker
    assert _children() == before  # the workers were reaped


def test_a_worker_that_exits_for_bad_input_ends_the_pool_with_exit_code_2():
    def raise_on_term(signum, frame):
        raise KeyboardInterrupt

    def run(i):
        if i == 0:
            sys.exit(2)
        signal.signal(
            signal.SIGTERM, raise_on_term
        )  # as a job does (hobbit.plumbing.glue), then busy when it is stopped
        time.sleep(30)
        return i

    old = signal.signal(signal.SIGTERM, raise_on_term)  # held by this process too, as after a command ran in it
    before = _children()
    try:
        with pytest.raises(SystemExit) as exc:
            fork_pool(2, 8, run)
    finally:
        signal.signal(signal.SIGTERM, old)
    assert exc.value.code == 2
    assert _children() == before  # the other worker was stopped mid-job and reaped


def test_a_killed_or_crashed_worker_is_named():
    before = _children()

    def killed(i):
        if i == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        return i

    with pytest.raises(WorkerFailed, match="killed by signal 9"):
        fork_pool(2, 4, killed)

    def crashed(i):
        raise ValueError(f"job {i} broke")

    with pytest.raises(WorkerFailed, match="exited with code 1"):  # its traceback is on stderr
        fork_pool(2, 4, crashed)
    assert _children() == before


def test_a_worker_killed_while_it_holds_the_job_counter_ends_the_pool(monkeypatch):
    """A worker killed between its read of the job counter and the write of the next number holds the counter for
    good: the other worker waits on it. The launching process sees the killed one's pipe close, names it and stops
    the waiting one; nothing hangs (an alarm would fail the test)."""
    before = _children()
    take, taken = launcher._take, []

    def held(token, count):
        taken.append(1)  # this worker's own list (each worker has a copy)
        if len(taken) == 2:  # its second job: take the counter and die holding it
            os.read(token[0], launcher.COUNTER.size)
            os.kill(os.getpid(), signal.SIGKILL)
        return take(token, count)

    def hung(signum, frame):
        raise TimeoutError("fork_pool hung on a counter a dead worker held")

    monkeypatch.setattr(launcher, "_take", held)
    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(60)
    try:
        with pytest.raises(WorkerFailed, match="killed by signal 9"):
            fork_pool(2, 6, lambda i: time.sleep(0.05) or i)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert _children() == before  # the waiting worker was stopped and reaped


def test_n_jobs_reads_as_joblib_reads_it():
    cpus = os.cpu_count() or 1
    assert workers(1, 10) == 1
    assert workers(4, 2) == 2  # never more workers than jobs
    assert workers(-1, 64) == workers(0, 64) == min(cpus, 64)
    assert workers(-2, 64) == max(cpus - 1, 1)
    assert workers(-1000, 5) == 1


def _results(root: Path) -> dict[int, dict]:
    out = {}
    for p in root.glob("*/results.json"):
        r = json.loads(p.read_text())
        out[int(p.parent.name)] = {k: r[k] for k in ("system", "decode_ms_per_token", "hit_rate", "system_config")}
    return out


def _hobbit(*args: str) -> subprocess.CompletedProcess:
    """A command in a fresh process, as users run it: a test process may hold threads other tests started (a
    progress bar's monitor, joblib's executor), and from a process with threads the launcher does not fork."""
    return subprocess.run(
        [sys.executable, "-m", "hobbit", *args], check=False, cwd=ROOT, capture_output=True, text=True, timeout=300
    )


def test_a_forked_sweep_reads_and_lays_out_its_trace_once_before_the_workers_fork(tmp_path):
    """``Preload``: with the forking launcher, the launching process reads the trace and lays it out for the sweep's
    base config; the workers it forks then find both (the same objects), so none reads or lays it out again."""
    path = write_first_requests(tmp_path, api.PRELOAD_REQUESTS + 4)
    cfg = dataclasses.replace(api.configure(system="hobbit"), trace=str(path))

    def multirun(target: str):
        node = OmegaConf.to_container(OmegaConf.structured(cfg))
        assert isinstance(node, dict)
        return OmegaConf.create({**node, "hydra": {"launcher": {"_target_": target, "n_jobs": 2}}})

    def read() -> bool:
        return any(k[0] == str(path.resolve()) for k in api._READ)

    Preload().on_multirun_start(multirun("hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher"))
    assert not read()  # fresh worker processes would not inherit it
    Preload().on_multirun_start(multirun(launcher.TARGET))
    assert read()
    tr = api.read_trace(path)
    layouts = [v for k, v in sim_run._PREPARED.items() if k[0] == id(tr)]
    assert len(layouts) == 1 and len(layouts[0][3].pass_start) > 0  # the whole trace's layout, (trace, ..., wl, ...)

    def job(_: int) -> tuple[int, int]:
        mine = api.read_trace(path)
        wl = sim_run.lay_out(mine, cfg.system, np.random.default_rng(cfg.seed), None, cfg.profile_share)[1]
        return id(mine), id(wl)

    assert fork_pool(2, 2, job) == [(id(tr), id(layouts[0][3]))] * 2


def test_preload_of_a_config_that_cannot_run_is_left_to_the_jobs(tmp_path):
    """A base config that fails (a missing trace) costs the preload only: each job names the problem itself."""
    cfg = dataclasses.replace(api.configure(system="hobbit"), trace=str(tmp_path / "missing.parquet"))
    base = OmegaConf.to_container(OmegaConf.structured(cfg))
    assert isinstance(base, dict)
    node = {**base, "hydra": {"launcher": {"_target_": launcher.TARGET}}}
    Preload().on_multirun_start(OmegaConf.create(node))  # no exception
    done = _hobbit(
        "sim",
        "-m",
        f"trace={tmp_path / 'missing.parquet'}",
        "system.precision.t1=0.4,0.6",
        "use_cache=false",
        "hydra.launcher.n_jobs=2",
        f"hydra.sweep.dir={tmp_path / 's'}",
    )
    assert done.returncode == 2 and "missing.parquet" in done.stderr and "Traceback" not in done.stderr


def test_a_sweep_on_two_workers_gives_what_one_worker_gives(tmp_path):
    trace = write_first_requests(tmp_path, 2)
    grid = ["system=hobbit,hobbit-lru", "system.precision.t1=0.4,0.6", "system.cache.high_fraction=0.5,0.75"]
    for n in (1, 2):
        done = _hobbit(
            "sim",
            "-m",
            f"trace={trace}",
            *grid,
            "use_cache=false",
            f"hydra.launcher.n_jobs={n}",
            f"hydra.sweep.dir={tmp_path / str(n)}",
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert f"Launching {4 if n == 2 else 2} jobs on {n} worker" in done.stdout + done.stderr
        assert "one after another" not in done.stdout + done.stderr  # forked, not run in the launching process
    one, two = _results(tmp_path / "1"), _results(tmp_path / "2")
    assert sorted(one) == list(range(8)) and one == two
    # two composition groups (system=), each a queue drained by both workers: every point claimed once
    assert sorted(p.name for p in (tmp_path / "2" / ".chunks").iterdir() if p.is_dir()) == [
        "0-0",
        "0-1",
        "0.claims",
        "1-0",
        "1-1",
        "1.claims",
    ]


def test_a_bad_value_on_two_workers_is_named_and_exits_2(tmp_path):
    trace = write_first_requests(tmp_path, 1)
    done = _hobbit(
        "sim",
        "-m",
        f"trace={trace}",
        "system.prefetch.max_depth=2,deep,3,4",
        "use_cache=false",
        "hydra.launcher.n_jobs=2",
        f"hydra.sweep.dir={tmp_path / 's'}",
    )
    assert done.returncode == 2
    assert "system.prefetch.max_depth=deep" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("n", [1, 2])
def test_a_config_group_option_that_does_not_exist_is_named_and_exits_2(tmp_path, capfd, n):
    trace = write_first_requests(tmp_path, 1)
    code = run_cli(
        [
            "sim",
            "-m",
            f"trace={trace}",
            "system=hobbit,nope",
            "use_cache=false",
            f"hydra.launcher.n_jobs={n}",
            f"hydra.sweep.dir={tmp_path / 's'}",
        ]
    )
    assert code == 2
    err = capfd.readouterr().err
    assert "hobbit: error: system=hobbit,nope: conf/system has no nope; the choices: " in err  # before any point runs
    assert "Traceback" not in err and not list((tmp_path / "s").rglob("results.json"))


def test_without_fork_the_jobs_run_here_with_a_warning(tmp_path, monkeypatch, capfd):
    trace = write_first_requests(tmp_path, 1)
    monkeypatch.setattr(launcher, "can_fork", lambda: False)
    assert (
        run_cli(
            [
                "sim",
                "-m",
                f"trace={trace}",
                "system.precision.t1=0.4,0.6",
                "use_cache=false",
                "hydra.launcher.n_jobs=2",
                f"hydra.sweep.dir={tmp_path / 's'}",
            ]
        )
        == 0
    )
    assert sorted(_results(tmp_path / "s")) == [0, 1]
    out = capfd.readouterr()
    assert "one after another in this process" in out.out + out.err


@pytest.mark.slow
def test_a_killed_sweep_stops_its_workers(tmp_path):
    """SIGTERM to the launching process: it stops and reaps its workers before it exits (no orphan simulates on)."""
    root = tmp_path / "s"
    grid = [
        "system.precision.t1=0.3,0.4,0.5,0.6,0.7",
        "system.precision.t2=0.8,0.85,0.9,0.95",
        "system.cache.high_fraction=0.5,0.75",
        "system.cache.multidim.w_fld=0.1,0.2,0.3,0.4,0.5",
    ]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hobbit",
            "sim",
            "-m",
            *grid,
            "use_cache=false",
            "hydra.launcher.n_jobs=2",
            f"hydra.sweep.dir={root}",
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        while not list(root.glob("*/results.json")) and proc.poll() is None:
            time.sleep(0.05)
        kids = _children(proc.pid)
        proc.send_signal(signal.SIGTERM)
        err = proc.communicate(timeout=60)[1].decode()
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGINT  # an interrupt, as a command in one process ends
    assert "hobbit: interrupted" in err and "Traceback" not in err
    assert len(kids) == 2
    for pid in kids:  # reaped by the launching process: gone, not orphaned
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert len(list(root.glob("*/results.json"))) < 200
    assert not [p for p in root.rglob(".*.tmp")]  # no half-written file left behind


def _gone(pid: int) -> bool:
    """Whether a process has ended (a zombie not yet reaped by its new parent counts as ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return True
    return state in ("Z", "X")


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_workers_die_with_a_parent_killed_by_sigkill(tmp_path):
    """kill -9 of the launching process (nothing of it can run): its forked workers get SIGTERM from the kernel
    (PR_SET_PDEATHSIG) and end, instead of finishing a point each and dying with BrokenPipeError tracebacks."""
    root = tmp_path / "s"
    grid = ["system.precision.t1=0.3,0.4,0.5,0.6,0.7", "system.precision.t2=0.8,0.85,0.9,0.95"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "hobbit", "sim", "-m", *grid, "use_cache=false", "engine=plain",
         "hydra.launcher.n_jobs=2", f"hydra.sweep.dir={root}"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while len(kids := _children(proc.pid)) < 2 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(kids) == 2, "the sweep did not fork its two workers"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        deadline = time.monotonic() + 30
        while not all(_gone(pid) for pid in kids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert all(_gone(pid) for pid in kids), "a worker outlived its killed parent"
    finally:
        proc.kill()
        for pid in kids if "kids" in locals() else ():  # never leave one running, whatever failed
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
