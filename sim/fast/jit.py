"""The kernels of policies' compiled parts (``policies.compiled.kernel``) made numba functions, in place in their
modules, so that a kernel calls the compiled functions of the others by their own names."""

from __future__ import annotations

import copy
import inspect
from collections.abc import Iterator
from contextlib import contextmanager
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


def _copy_sharing_scope(block: Any, memo: dict) -> Any:
    """A copy of numba IR block ``block`` (``copy.deepcopy``'s) whose variables keep the block's scope rather than a
    copy of it."""
    memo[id(block.scope)] = block.scope
    new = block.__class__.__new__(block.__class__)
    memo[id(block)] = new
    new.__dict__.update(copy.deepcopy(block.__dict__, memo))
    return new


def _inline_function(self: Any, caller_ir: Any, block: Any, i: int, function: Any, arg_typs: Any = None) -> Any:
    """numba's ``InlineWorker.inline_function``, whose callee's IR, made anew for this call site, is copied without
    copying its scope once per block (``_copy_sharing_scope``)."""
    from numba.core import ir

    callee_ir = self.run_untyped_passes(function)
    ir.Block.__deepcopy__ = _copy_sharing_scope
    try:
        return self.inline_ir(caller_ir, block, i, callee_ir, function.__code__.co_freevars, arg_typs=arg_typs)
    finally:
        del ir.Block.__deepcopy__


@contextmanager
def quick_inlining() -> Iterator[None]:
    """While numba compiles a walk: functions marked ``inline="always"`` are inlined without copying the callee's
    whole scope once per block of it.

    numba's inliner (``InlineWorker.inline_ir``) copies a callee's IR block by block, each with ``copy.deepcopy``, and
    a block's variables hold the callee's scope, which holds all its variables: a copy costs the callee's blocks times
    its variables, twice (numba issues #8989 and #9204; NVIDIA/numba-cuda#688). The walk inlines helpers that inline
    others; its largest took most of the inlining pass's time. Here the callee's IR is fresh (its untyped passes run for
    this call site alone, and nothing else holds it), so its copies may share its scope; the inlined code is the same.
    Where numba's inliner is not as this expects, nothing changes."""
    from numba.core import inline_closurecall, ir

    worker = getattr(inline_closurecall, "InlineWorker", None)
    expected = (
        worker is not None
        and "__deepcopy__" not in vars(ir.Block)
        and all(hasattr(worker, f) for f in ("inline_function", "inline_ir", "run_untyped_passes"))
    )
    if not expected:
        yield
        return
    assert worker is not None
    before = worker.inline_function
    worker.inline_function = _inline_function
    try:
        yield
    finally:
        worker.inline_function = before
