"""Which compiled copy of a policy's walk a run uses (``sim.fast.policy_walk``): an argument of the runs
(``sim.run.simulate``, ``sim.windowed.simulate_file``, ``hobbit.api``'s ``walks=``), passed down to the compiled core
(``sim.fast.Run.walks``). Apart from the compiled core, so that callers that only name a choice need not import it.

- ``auto`` (the default): the copy specialised for the run's settings (``sim.fast.special.Variant``), unless only
  the policy's general copy is compiled already (in this process or in numba's cache: it decides alike, and
  compiling the variant would only cost time). A single run compiles its own copy, about a third sooner than the
  general one (docs/performance-log.md, 2026-12-07);
- ``specialised``: that copy always;
- ``general``: the policy's general copy, which reads those settings at run time: what a command that runs many
  simulations compiles once per policy and runs them on (``hobbit compare``, ``reproduce``, ``plan``, ``tune``,
  sweeps and ``hobbit.api.sweep`` pass it). It is also the faster of the two for HOBBIT's prefetcher
  (docs/performance-log.md, 2026-12-06).

A run given no choice (``walks=None``) takes ``$HOBBIT_WALK`` where it is set (the test suite sets ``general``, so that
its thousand runs compile one copy per policy), else ``auto``: read where the run starts, never set by hobbit.
"""

from __future__ import annotations

import os

from hobbit.sim.config import ConfigError

WALK_ENV = "HOBBIT_WALK"
WALK_COPIES = ("auto", "specialised", "general")
GENERAL = "general"  # the choice of a command that runs many simulations


def walk_copies(walks: str | None = None) -> str:
    """The copies a run uses: ``walks`` where given, else ``$HOBBIT_WALK`` where set, else ``auto``."""
    if walks is not None:
        if walks not in WALK_COPIES:
            raise ConfigError(f"walks={walks!r}: use one of {', '.join(WALK_COPIES)}")
        return walks
    mode = os.environ.get(WALK_ENV, "") or WALK_COPIES[0]
    if mode not in WALK_COPIES:
        raise ConfigError(
            f"environment variable {WALK_ENV}={mode!r}: use one of {', '.join(WALK_COPIES)} (or leave it unset)"
        )
    return mode
