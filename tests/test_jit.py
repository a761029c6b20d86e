"""numba's inliner as the compiled core's first compile uses it (``sim.fast.jit.quick_inlining``)."""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit
from numba.core import inline_closurecall, ir

from hobbit.sim.fast import jit


@njit(inline="always")
def _inner(a, i, w):
    s = 0.0
    for j in range(i, a.shape[0]):
        if a[j] > w:
            s += a[j] * w
        else:
            s -= a[j]
    return s


@njit(inline="always")
def _middle(a, i, w):
    s = _inner(a, i, w)  # the same callee twice: its variables renamed apart in the caller
    if s > 0.0:
        s += _inner(a, i + 1, w * 0.5)
    t = 0
    for j in range(i):
        t += j
    return s, t


def _outer(a, n):
    total, count = 0.0, 0
    for i in range(n):
        s, t = _middle(a, i % a.shape[0], a[i % a.shape[0]])
        total += s
        count += t
    return total, count


def test_quick_inlining_compiles_the_same_function_and_puts_numba_back(monkeypatch):
    shared = []
    real = jit._copy_sharing_scope

    def counted(block, memo):
        shared.append(block)
        return real(block, memo)

    monkeypatch.setattr(jit, "_copy_sharing_scope", counted)
    before = inline_closurecall.InlineWorker.inline_function
    quick = njit(_outer)
    with jit.quick_inlining():
        assert inline_closurecall.InlineWorker.inline_function is not before
        quick.compile("(float64[::1], int64)")
    assert inline_closurecall.InlineWorker.inline_function is before
    assert "__deepcopy__" not in vars(ir.Block)  # numba's own again
    copied = len(shared)
    assert copied > 10  # every block of every inlined callee, at three call sites, two levels deep
    plain = njit(_outer)
    plain.compile("(float64[::1], int64)")
    assert len(shared) == copied  # numba's own inliner, outside
    rng = np.random.default_rng(7)
    for _ in range(20):
        a = rng.normal(size=int(rng.integers(1, 40)))
        n = int(rng.integers(0, 90))
        got = quick(a, n)
        assert got == plain(a, n) == _outer(a, n)  # (_outer in Python calls _middle compiled on its own)
        assert got[1] == sum(sum(range(i % a.shape[0])) for i in range(n))


def test_quick_inlining_leaves_an_inliner_it_does_not_know(monkeypatch):
    def other(self, memo):
        return self

    monkeypatch.setattr(ir.Block, "__deepcopy__", other, raising=False)
    before = inline_closurecall.InlineWorker.inline_function
    with jit.quick_inlining():
        assert inline_closurecall.InlineWorker.inline_function is before
    assert vars(ir.Block)["__deepcopy__"] is other


@pytest.mark.parametrize("failing", [True, False])
def test_quick_inlining_puts_numba_back_when_a_compile_fails(failing):
    before = inline_closurecall.InlineWorker.inline_function

    def bad(a):
        return _middle(a, 0, "x")  # no float * str: a typing error after the inlining

    with pytest.raises(Exception), jit.quick_inlining():  # noqa: B017 - numba's TypingError
        if failing:
            njit(bad).compile("(float64[::1],)")
        else:
            raise RuntimeError("an error while numba is patched")
    assert inline_closurecall.InlineWorker.inline_function is before
    assert "__deepcopy__" not in vars(ir.Block)


def test_an_entry_points_first_use_compiles_with_quick_inlining():
    from hobbit.sim import fast

    @njit
    def twice(x):
        return 2 * x

    before = inline_closurecall.InlineWorker.inline_function
    with fast.first_use(twice):
        assert inline_closurecall.InlineWorker.inline_function is jit._inline_function
        assert twice(3) == 6
    assert inline_closurecall.InlineWorker.inline_function is before
    with fast.first_use(twice):  # compiled: numba is left as it is, and no lock is taken
        assert inline_closurecall.InlineWorker.inline_function is before
    assert fast.first_use(twice) is fast.NO_WAIT


EVERY_PRESET = """
from pathlib import Path
from numba.core.dispatcher import Dispatcher
from hobbit.plumbing.glue import compose
from hobbit.sim.config import SimConfig
from hobbit.sim.run import simulate
from hobbit.traces.io import read_trace
from hobbit.traces.tiny import bundled_trace

# a call from Python that no compiled version takes (compiled or loaded from numba's cache): its argument types
seen, compile_for_args = {}, Dispatcher._compile_for_args
def recorded(self, *args, **kws):
    seen.setdefault(self, set()).add(tuple(self.typeof_pyval(a) for a in args))
    return compile_for_args(self, *args, **kws)
Dispatcher._compile_for_args = recorded

tr = read_trace(bundled_trace())
for name in sorted(p.stem for p in Path("conf/system").glob("*.yaml")):
    cfg = compose("sim", SimConfig, ["out_dir=.", f"system={name}"])
    for keep in (False, True):
        simulate(tr, cfg.model, cfg.hardware, cfg.system, profile_share=0.0, keep_decisions=keep)
assert seen, "no compiled entry point was called"
for d, sigs in seen.items():
    if len(sigs) > 1:
        print(d.py_func.__module__, d.py_func.__qualname__, *sigs, sep="\\n  ")
"""


def test_every_preset_calls_each_entry_point_with_one_signature():
    """Every preset of conf/system run in one process (as ``make demo`` and ``hobbit compare`` do), streamed and
    whole: each compiled entry point is called from Python with one type signature. A second (an argument read-only
    in one run and not in another, a strided column where a table has rows and a contiguous one where it has none)
    is compiled anew, for seconds, without ``first_use``'s quick inliner and lock."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).parents[1]
    out = subprocess.run(
        [sys.executable, "-c", EVERY_PRESET], cwd=root, capture_output=True, text=True, timeout=1500, check=True
    )
    assert out.stdout == "", out.stdout
