"""The catalogues as data, and their loaders: ``data/parts.yaml`` (GPUs, CPUs, DRAM, PCIe, NVMe drives, each number
cited), ``data/routing.yaml`` (routing locality presets fitted to real traces); ``machine`` (a machine from the few
numbers its owner knows), ``model_files`` (a model spec from a GGUF header or a config.json).

Layer: imports sim and traces only; the plumbing, the API and the planner read it (tests/test_architecture.py)."""
