"""``hobbit hardware``: a machine from the few numbers its owner knows, as a hardware config.

``hobbit hardware gpu=rtx4090 pcie=4x16 ram=128GB:ddr5-6000x2 ssd=7GB/s out=my.yaml`` works each field out
(``hobbit.catalogue.machine``: data sheets in hobbit/catalogue/data/parts.yaml, derivations, carried-over and assumed values), prints how each was
had, and writes the YAML that ``hobbit sim hardware=my.yaml`` takes.
"""

from __future__ import annotations

from pathlib import Path

from hobbit.catalogue.machine import describe
from hobbit.catalogue.spec import MATTER, HardwareSpecConfig, hardware_yaml, render, spec_keys
from hobbit.plumbing.glue import CONF, hydra_command
from hobbit.sim.config import ConfigError, HardwareConfig
from hobbit.traces.io import atomic_write_text


@hydra_command(CONF, "hardware", HardwareSpecConfig)
def hardware_main(cfg: HardwareSpecConfig) -> None:
    """Work a machine's hardware config out of what its owner knows; print how, write it with ``out=``."""
    keys = spec_keys(cfg)
    if not keys:
        raise ConfigError(
            "hobbit hardware needs a description of the machine, e.g. gpu=rtx4090 pcie=4x16 ram=128GB:ddr5-6000x2 "
            "ssd=7GB/s (`hobbit hardware --help` lists the keys)"
        )
    fields, lines = describe(**keys)
    hw = HardwareConfig(**fields)
    print(f"{hw.name}: " + " ".join(f"{k}={v}" for k, v in keys.items()))
    print(render(lines))
    assumed = [d.field for d in lines if d.how.startswith("assumed") and d.field in MATTER]
    if assumed:
        print(f"assumed (give them if you know them): {', '.join(assumed)}")
    if cfg.out:
        path = atomic_write_text(Path(cfg.out), hardware_yaml(fields, lines))
        print(f"wrote {path}\nuse: hobbit sim hardware={cfg.out}")
