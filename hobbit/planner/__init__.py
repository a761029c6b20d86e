"""The runtime planner: for one model on one machine, which runtime, file and flags, and how many tokens a second.

- ``config``: what a plan is asked (``PlanConfig``) and what it finds (``Runtime``, ``Point``, ``Plan``);
- ``settings``: each runtime's settings that fit the machine, as the flags its users type;
- ``predict``: one setting's predicted prefill and decode speed (the simulator, on a trace or synthetic routing at a
  locality preset of catalogue/data/routing.yaml);
- ``search``: ``plan`` and ``plan_for``, the search over runtimes and settings; ``report``: its table, plot and files;
- ``published``, ``published_flags``, ``published_machine``: the reader of published measurements (a row of tok/s on a
  described machine, as a setting to predict);
- ``locality`` and ``real_traces``: routing locality measured on real traces and the synthetic knobs fitted to it
  (benchmarks/routing_fit.py writes catalogue/data/routing.yaml with them).

Layer: imports the API, the plumbing, the catalogue and the library; only the commands import it
(tests/test_architecture.py)."""
