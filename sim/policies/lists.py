"""Linked lists over slots and keys, the compiled parts of the policies keep their orders in (``policies.compiled``).

Two kinds, each as plain arrays indexed by pool ``pr`` and region ``g``, so that a policy's state is a few int64
arrays:
- a list of slots ordered newest (HEAD) to oldest (TAIL): ``links[NEWER / OLDER, pr, slot]`` and ``ends[pr, g,
  HEAD / TAIL]`` (``push``, ``insert_after``, ``unlink``; LRU's, FIFO's, LFU's and SIEVE's order);
- queues whose head is their oldest: ``nxt[pr, x]`` / ``prv[pr, x]`` and, at offset ``which`` of ``ends[pr, g]``,
  the queue's head, tail and length (``Q_HEAD``, ``Q_TAIL``, ``Q_LEN``: ``q_push``, ``q_remove``, ``q_first_unpinned``;
  S3-FIFO's, ARC's and LIRS's). A ``which`` is best passed as a numpy int: numba types a Python int constant as a
  literal and compiles a helper once per value.
"""

from __future__ import annotations

from hobbit.sim.policies.compiled import kernel

NEWER, OLDER = 0, 1  # rows of ``links``
HEAD, TAIL = 0, 1  # fields of ``ends``
Q_HEAD, Q_TAIL, Q_LEN = 0, 1, 2


@kernel
def link(links, ends, pr, g, o, n):
    """Make ``o`` and ``n`` neighbours in region ``g``'s list: ``o`` just older than ``n``; -1 for ``o`` makes ``n``
    the oldest (TAIL), for ``n`` makes ``o`` the newest (HEAD)."""
    if n < 0:
        ends[pr, g, HEAD] = o
    else:
        links[OLDER, pr, n] = o
    if o < 0:
        ends[pr, g, TAIL] = n
    else:
        links[NEWER, pr, o] = n


@kernel
def insert_after(links, ends, pr, g, y, s):
    """``s`` enters the list just newer than ``y`` (-1: as its oldest)."""
    x = ends[pr, g, TAIL] if y < 0 else links[NEWER, pr, y]
    link(links, ends, pr, g, y, s)
    link(links, ends, pr, g, s, x)


@kernel
def push(links, ends, pr, g, s):
    """``s`` becomes the list's newest (HEAD; the oldest is TAIL)."""
    insert_after(links, ends, pr, g, ends[pr, g, HEAD], s)


@kernel
def unlink(links, ends, pr, g, s):
    link(links, ends, pr, g, links[OLDER, pr, s], links[NEWER, pr, s])


@kernel
def q_push(nxt, prv, ends, pr, g, which, x):
    """Append ``x`` at the newest end of queue ``which`` of region ``g``."""
    tail = ends[pr, g, which + Q_TAIL]
    nxt[pr, x], prv[pr, x] = -1, tail
    if tail >= 0:
        nxt[pr, tail] = x
    else:
        ends[pr, g, which + Q_HEAD] = x
    ends[pr, g, which + Q_TAIL] = x
    ends[pr, g, which + Q_LEN] += 1


@kernel
def q_remove(nxt, prv, ends, pr, g, which, x):
    n, o = nxt[pr, x], prv[pr, x]
    if o >= 0:
        nxt[pr, o] = n
    else:
        ends[pr, g, which + Q_HEAD] = n
    if n >= 0:
        prv[pr, n] = o
    else:
        ends[pr, g, which + Q_TAIL] = o
    ends[pr, g, which + Q_LEN] -= 1


@kernel
def q_first_unpinned(nxt, ends, pin, pr, g, which):
    """The oldest of queue ``which`` whose slot (the entry itself) is not pinned (-1: none)."""
    x = ends[pr, g, which + Q_HEAD]
    while x >= 0 and pin[x]:
        x = nxt[pr, x]
    return x
