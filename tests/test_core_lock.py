"""The compiled core's first use across processes (``sim.fast.first_use``): while one process compiles, the
others wait for it and then load its code from numba's cache; once cached, nobody waits."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

fcntl = pytest.importorskip("fcntl")

MODULE = """
from numba import njit


@njit(cache=True)
def plus_one(x):
    return x + 1
"""

CALL = """
import sys
from numba.core import event
from hobbit.sim.fast import first_use
import tiny_entry

compiled = []
class Listen(event.Listener):
    def on_start(self, e):
        compiled.append(e.data["dispatcher"].py_func.__name__)
    def on_end(self, e):
        pass
event.register("numba:compile", Listen())
with first_use(tiny_entry.plus_one):
    print("result", tiny_entry.plus_one(41), "compiled", compiled, flush=True)
"""


def _start(tmp_path):
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "nc"), "PYTHONPATH": str(tmp_path)}
    return subprocess.Popen(
        [sys.executable, "-c", CALL], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def test_a_process_waits_while_another_compiles_and_none_waits_once_cached(tmp_path):
    (tmp_path / "tiny_entry.py").write_text(MODULE)
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "nc"), "PYTHONPATH": str(tmp_path)}
    path = subprocess.run(
        [
            sys.executable,
            "-c",
            "from hobbit.sim.fast import lock_path; import tiny_entry; print(lock_path(tiny_entry.plus_one))",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    with open(path, "a") as held:  # this test plays the process that compiles
        fcntl.flock(held, fcntl.LOCK_EX)
        p = _start(tmp_path)
        assert p.stderr is not None
        said = []
        for line in p.stderr:  # to the notice it prints before it waits (or to its end, if it does not wait)
            said.append(line)
            if "another process is compiling the simulator's core" in line:
                break
        time.sleep(1.0)
        assert p.poll() is None, said  # still waiting: the lock is held, and nothing is cached
        fcntl.flock(held, fcntl.LOCK_UN)
        out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    assert "result 42 compiled ['plus_one']" in out  # nobody compiled it meanwhile: this one did, after the wait
    with open(path, "a") as held:  # held again: an entry point in the cache is loaded without waiting
        fcntl.flock(held, fcntl.LOCK_EX)
        p = _start(tmp_path)
        out, err = p.communicate(timeout=120)
        fcntl.flock(held, fcntl.LOCK_UN)
    assert p.returncode == 0, err
    assert "result 42 compiled []" in out and "another process" not in err
