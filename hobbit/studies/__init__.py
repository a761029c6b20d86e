"""Studies over many runs, as library code without mains: ``compare`` (every system, and HOBBIT tuned for it, on one
trace and machine, ranked) and ``reproduce`` (the paper's Table 2 grid on the bundled models' workloads).

Layer: imports the API, the plumbing and the library; the commands call it (tests/test_architecture.py)."""
