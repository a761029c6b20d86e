"""Which compiled copy of a policy's walk the runs of a process use (``sim.fast.policy_walk``), read from
``$HOBBIT_WALK`` where a run starts (``sim.run.simulate``, ``sim.windowed``) and passed down to the compiled core as
an argument (``sim.fast.Run.walks``). Apart from the compiled core, so that commands and launchers that only set it (a sweep's launcher
starts without numba) need not import it.

- ``auto`` (the default): the copy specialised for the run's settings (``sim.fast.special.Variant``), unless only
  the policy's general copy is compiled already (in this process or in numba's cache: it decides alike, and
  compiling the variant would only cost time);
- ``specialised``: that copy always;
- ``general``: the policy's general copy, which reads those settings at run time: what a process that runs many
  simulations compiles once per policy and runs them on (``hobbit compare``, ``reproduce``, ``plan``, ``tune`` and
  sweeps set it, ``general_walks``, as does the test suite). It is also the faster of the two for HOBBIT's
  prefetcher (docs/performance-log.md, 2026-12-06).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from hobbit.sim.config import ConfigError

WALK_ENV = "HOBBIT_WALK"
WALK_COPIES = ("auto", "specialised", "general")


def walk_copies() -> str:
    """The copies the runs of this process use (``$HOBBIT_WALK``, default ``auto``)."""
    mode = os.environ.get(WALK_ENV, "") or WALK_COPIES[0]
    if mode not in WALK_COPIES:
        raise ConfigError(
            f"environment variable {WALK_ENV}={mode!r}: use one of {', '.join(WALK_COPIES)} (or leave it unset)"
        )
    return mode


@contextmanager
def general_walks() -> Iterator[None]:
    """Within it (and in the processes it starts), runs use each policy's general copy (``walk_copies``): for
    commands that run many simulations, which would otherwise compile a copy per system and setting."""
    before = os.environ.get(WALK_ENV)
    os.environ[WALK_ENV] = "general"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(WALK_ENV, None)
        else:
            os.environ[WALK_ENV] = before
