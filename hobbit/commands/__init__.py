"""One thin module per command of ``hobbit <command>``: compose the config (``plumbing.glue.hydra_command``), call
one library function, print and write. ``hobbit.cli`` imports a command's module only to run it.

Layer: the top; imports the planner, the studies, the API, the plumbing and the library (tests/test_architecture.py)."""
