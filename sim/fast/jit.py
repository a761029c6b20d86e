"""The kernels of policies' compiled parts (``policies.compiled.kernel``) made numba functions, in place in their
modules, so that a kernel calls the compiled functions of the others by their own names."""

from __future__ import annotations

import inspect
from types import ModuleType
from typing import Any

from numba import njit

from hobbit.sim.policies.compiled import INLINE, KERNEL, NRT

_DISPATCHERS: dict[Any, Any] = {}  # a kernel -> its numba function, one per process


def is_kernel(v: object) -> bool:
    """Whether ``v`` is a kernel not yet compiled (a plain function marked ``@kernel``)."""
    return inspect.isfunction(v) and bool(getattr(v, KERNEL, False))


def jit(fn: Any) -> Any:
    """A kernel's numba function (made once; anything else, as it is). Compiled without numba's reference counts
    (``_nrt=False``, as the walk's own hooks: counting each array of a policy's state up and down on every hit was
    most of a walk's time), so a kernel allocates nothing: its state is built beforehand. A kernel marked ``nrt``
    may allocate (it keeps the counts); one marked ``inline`` is inlined where it is called, in the caller's code
    (numba's ``inline="always"``)."""
    if not is_kernel(fn):
        return fn
    if fn not in _DISPATCHERS:
        mark = getattr(fn, KERNEL)
        if mark == INLINE:
            _DISPATCHERS[fn] = njit(cache=True, inline="always")(fn)
        elif mark == NRT:
            _DISPATCHERS[fn] = njit(cache=True)(fn)
        else:
            _DISPATCHERS[fn] = njit(cache=True, _nrt=False)(fn)
    return _DISPATCHERS[fn]


def in_place(mod: ModuleType) -> ModuleType:
    """Every kernel of ``mod`` replaced by its numba function (``jit``)."""
    for name, v in list(vars(mod).items()):
        if is_kernel(v):
            setattr(mod, name, jit(v))
    return mod
