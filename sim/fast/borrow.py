"""Arrays without reference counts, for the compiled walk's hot path (``sim.fast.walk``), and the growth of its
tables: numba counts references up and down, atomically, for every array an inlined call takes and every view made of
it; a borrowed array (``borrowed``, ``borrowed_all``) has no meminfo, so those counts do nothing."""

from __future__ import annotations

import numpy as np
from numba import config, njit, types
from numba.extending import intrinsic


@intrinsic
def borrowed(typingctx, a):
    """The array ``a`` without a reference count of its own: the same data, shape and strides, no meminfo (as
    ``numba.carray`` makes). Numba counts references up and down, atomically, for every array an inlined call takes
    and every view made of it; on a borrowed array those counts find no meminfo and do nothing. The caller keeps
    ``a`` itself alive for as long as the borrowed array is used, and never returns the borrowed one."""
    if not isinstance(a, types.Array):
        return None

    def codegen(context, builder, sig, args):
        src = context.make_array(sig.args[0])(context, builder, value=args[0])
        out = context.make_array(sig.return_type)(context, builder)
        context.populate_array(
            out, data=src.data, shape=src.shape, strides=src.strides, itemsize=src.itemsize, meminfo=None, parent=None
        )
        return out._getvalue()

    return a(a), codegen


def _borrow_items(context, builder, ty, value):
    """``borrowed_all``'s code for one tuple: each array borrowed, each tuple in it likewise, the rest as it is."""
    items = []
    for i, item in enumerate(ty):
        v = builder.extract_value(value, i)
        if isinstance(item, types.Array):
            src = context.make_array(item)(context, builder, value=v)
            out = context.make_array(item)(context, builder)
            context.populate_array(
                out,
                data=src.data,
                shape=src.shape,
                strides=src.strides,
                itemsize=src.itemsize,
                meminfo=None,
                parent=None,
            )
            v = out._getvalue()
        elif isinstance(item, types.BaseTuple):
            v = _borrow_items(context, builder, item, v)
        items.append(v)
    return context.make_tuple(builder, ty, items)


@intrinsic
def borrowed_all(typingctx, t):
    """The tuple (or named tuple) ``t`` with each of its arrays borrowed (``borrowed``), and those of the tuples it
    holds, its other items as they are: a policy's state, which its hooks take on every step. (An item that holds an
    array some other way would be counted down without having been counted up: there is none.)"""
    if not isinstance(t, types.BaseTuple):
        return None

    def codegen(context, builder, sig, args):
        return _borrow_items(context, builder, sig.args[0], args[0])

    return t(t), codegen


if config.DISABLE_JIT:  # pure Python (NUMBA_DISABLE_JIT=1, for debugging): the array itself

    def borrowed(a):
        return a

    def borrowed_all(t):
        return t


@njit(cache=True)
def keep(owners):
    """Nothing: a use of ``owners`` at the walk's end, so that numba keeps them (the memory its borrowed arrays
    point into) alive until then."""
    return len(owners)


@njit(cache=True)
def grow(a, need, used):
    """``a`` (C-contiguous, 2-D) with room for ``need`` rows: itself, or a copy 1.5 times longer (or ``need``) that
    holds its first ``used`` rows. The rest is neither copied nor written, so its pages are never touched: a whole
    run's tables, grown a few times, fault in about the rows they hold, not every buffer's length. The copy runs over
    the flat buffers, which compiles to a plain block copy (a 2-D slice assignment copies element by element through
    its broadcasting indices, several times slower)."""
    if need <= a.shape[0]:
        return a
    b = np.empty((max(need, a.shape[0] + a.shape[0] // 2), a.shape[1]), a.dtype)
    fa, fb = a.reshape(-1), b.reshape(-1)
    for x in range(used * a.shape[1]):
        fb[x] = fa[x]
    return b
