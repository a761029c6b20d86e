"""The plumbing under every command: Hydra apps and their typed configs (``glue``), path and input guards
(``guard``, ``path_args``), overrides, the sweeper and launcher plugins, run directories and cached results
(``results_io``), the phase checks a trace must pass, and the knob documentation Hydra's ``--help`` shows.

Layer: imports the library (traces, sim, executor, analysis) and the catalogue; never the API, the planner, the
studies or the commands above it (tests/test_architecture.py)."""
