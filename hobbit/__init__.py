"""hobbit: mixed-precision expert offloading for MoE inference (after HOBBIT, arXiv:2411.01433).

The Python API (``hobbit.api``): ``read_trace``, ``simulate``, ``sweep``, ``capture`` and
``configure``; the libraries below it: ``hobbit.traces``, ``hobbit.sim``, ``hobbit.executor``,
``hobbit.analysis``; the command line: ``hobbit --help`` or ``python -m hobbit --help``.

The API's names load on first use (PEP 562), so ``hobbit --help``, the command line's dispatch and a
sweep's launching process do not import numba, pandas or pyarrow before they need them.

Importing ``hobbit`` (or any of its libraries) changes nothing outside it. ``configure_runtime()`` makes the
process-wide settings the command line makes at its start: pyarrow's memory pool (jemalloc on Linux, unless
``ARROW_DEFAULT_MEMORY_POOL`` chooses; ``hobbit.traces.schema.use_jemalloc_pool``) and a shortcut in Hydra's
start of an app (``hobbit.plumbing.glue.patch_hydra``). Call it once, early, in a program that reads many traces.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hobbit.api import capture, configure, read_trace, simulate, simulate_config, sweep
    from hobbit.sim.results import Results

__all__ = ["Results", "capture", "configure", "configure_runtime", "read_trace", "simulate", "simulate_config", "sweep"]
__version__ = "0.1.0"


def configure_runtime() -> None:
    """What the command line sets for its whole process before it runs a command (module docstring): pyarrow's
    memory pool and Hydra's mode shortcut. Idempotent."""
    from hobbit.plumbing.glue import configure_runtime as configure

    configure()


def __getattr__(name: str) -> Any:
    if name == "Results":
        from hobbit.sim.results import Results

        return Results
    if name in __all__:
        import hobbit.api

        return getattr(hobbit.api, name)
    raise AttributeError(f"module 'hobbit' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
