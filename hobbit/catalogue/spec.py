"""A machine's description as ``hobbit hardware`` takes it (``HardwareSpecConfig``: the keys its owner knows, or a
YAML of them) and shows it: each field's derivation as a table (``render``) and the hardware YAML that ``hobbit sim
hardware=PATH`` takes, each field under a comment saying how it was had (``hardware_yaml``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import yaml

from hobbit.catalogue.machine import KEYS, Derivation
from hobbit.sim.config import ConfigError, HardwareConfig

# the fields a simulation's answer depends on most (docs/guides/your-machine.md)
MATTER = (
    "device_memory_bytes",
    "device_mem_gbps",
    "link_gbps",
    "host_memory_bytes",
    "cpu_mem_gbps",
    "ssd_gbps",
    "compute_efficiency",
)


@dataclass(frozen=True)
class HardwareSpecConfig:
    """Knobs of ``hobbit hardware``: the machine's description (each empty: not given) and where to write it."""

    PATHS: ClassVar[dict[str, str]] = {"spec": "in", "out": "out"}
    EMPTY_OUT_OK: ClassVar[tuple[str, ...]] = ("out",)  # no out=: the hardware YAML is printed, not written

    gpu: str = ""
    """A GPU of hobbit/catalogue/data/parts.yaml by name (rtx4090, rtx3090, h100-sxm, ...): its memory, bandwidth and TFLOPS."""
    vram: str = ""
    """The GPU's memory, a size (24GB: 1e9 bytes a GB; 80GiB: 2**30 a GiB); overrides the data sheet's."""
    gpu_gbps: str = ""
    """The GPU's memory bandwidth, GB/s."""
    gpu_tflops: str = ""
    """The GPU's dense 16-bit tensor TFLOPS."""
    pcie: str = ""
    """The GPU's PCIe link as generation x lanes (4x16, gen5x8); empty: the card's own."""
    link_gbps: str = ""
    """A measured pinned host-to-device copy rate, GB/s (hobbit calibrate device=cuda prints it); overrides pcie."""
    ram: str = ""
    """Host RAM: capacity[:type-MT/s x channels] (128GB:ddr5-6000x2, or 128GB alone)."""
    ram_gbps: str = ""
    """A measured host memory bandwidth, GB/s (STREAM, Intel MLC); overrides what ram's type gives."""
    ssd: str = ""
    """The NVMe drive by name (samsung-990-pro) or its sequential read rate (7GB/s)."""
    ssd_fault_gbps: str = ""
    """A measured rate of memory-mapped page faults from the SSD, GB/s."""
    cpu: str = ""
    """A CPU of hobbit/catalogue/data/parts.yaml by name (ryzen9-7950x, xeon-gold-6454s, ...): its cores, and the memory channels and
    rated speed ram= takes when it gives a capacity alone."""
    sockets: str = ""
    """CPU sockets (2 for a dual-socket server): cores and memory channels per socket count this many times."""
    cpu_cores: str = ""
    """The CPU's physical cores."""
    cpu_tflops: str = ""
    """The CPU's 16-bit GEMV throughput, TFLOP/s."""
    expert_source: str = ""
    """Where experts off the GPU live: host (RAM) | ssd."""
    name: str = ""
    """The machine's name in results (empty: from the GPU and the link)."""
    spec: str = ""
    """A YAML file of these keys (gpu: rtx4090, ram: ..., ...); keys given on the command line win."""
    out: str = ""
    """Write the hardware YAML here (``hobbit sim hardware=PATH`` takes it); empty: print only."""


def spec_keys(cfg: HardwareSpecConfig) -> dict[str, str]:
    """The description's keys: those of ``cfg.spec``'s YAML, then those given (non-empty) on the command line."""
    keys: dict[str, str] = {}
    if cfg.spec:
        try:
            data = yaml.safe_load(Path(cfg.spec).read_text())
        except (OSError, yaml.YAMLError, ValueError) as exc:
            raise ConfigError(f"spec={cfg.spec}: not a readable YAML file ({exc}) (fix: a file of key: value lines)")
        if not isinstance(data, dict):
            raise ConfigError(f"spec={cfg.spec}: not a mapping (fix: key: value lines, keys {', '.join(KEYS)})")
        keys.update({str(k): str(v) for k, v in data.items()})
    given = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.name in KEYS}
    keys.update({k: v for k, v in given.items() if v != ""})
    return keys


def render(lines: list[Derivation]) -> str:
    """The derivations as a table (field, value, how it was had), then the sources, each once, numbered."""
    width = max(len(d.field) for d in lines)
    sources = list(dict.fromkeys(d.source for d in lines if d.source))
    out = []
    for d in lines:
        value = f"{d.value:,}" if isinstance(d.value, int) and not isinstance(d.value, bool) else str(d.value)
        ref = f" [{sources.index(d.source) + 1}]" if d.source else ""
        out.append(f"  {d.field:<{width}}  {value:<18}  {d.how}{ref}")
    out += ["sources:", *(f"  [{i}] {src}" for i, src in enumerate(sources, 1))]
    return "\n".join(out)


def hardware_yaml(fields: dict[str, Any], lines: list[Derivation]) -> str:
    """The hardware config as YAML, each field under a comment saying how it was had and its source."""
    values = dataclasses.asdict(HardwareConfig(**fields))
    values.pop("profile")
    how = {d.field: d.how + (f" ({d.source})" if d.source else "") for d in lines}
    out = [f"# {values['name']}: written by hobbit hardware ({values['source']})"]
    for key, value in values.items():
        out.append(f"# {how[key]}")
        out.append(yaml.safe_dump({key: value}, width=10**6, sort_keys=False).rstrip())
    return "\n".join(out) + "\n"
