"""hobbit: mixed-precision expert offloading for MoE inference (after HOBBIT, arXiv:2411.01433).

The Python API (``hobbit.api``): ``read_trace``, ``simulate``, ``sweep``, ``capture`` and
``configure``; the libraries below it: ``hobbit.traces``, ``hobbit.sim``, ``hobbit.executor``,
``hobbit.analysis``; the command line: ``hobbit --help`` or ``python -m hobbit --help``.
"""

from hobbit.api import capture, configure, read_trace, simulate, simulate_config, sweep
from hobbit.sim.results import Results

__all__ = ["Results", "capture", "configure", "read_trace", "simulate", "simulate_config", "sweep"]
__version__ = "0.1.0"
