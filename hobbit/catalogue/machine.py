"""A machine described by the few numbers its owner knows, worked out into a hardware config.

``describe(gpu="rtx4090", pcie="4x16", ram="128GB:ddr5-6000x2", ssd="7GB/s", cpu="ryzen9-7950x")`` returns the
``HardwareConfig`` field values and, for each field, a :class:`Derivation`: how the value was had (given, a data
sheet, derived, carried over from a preset, or assumed) and its source. The data sheets are hobbit/catalogue/data/parts.yaml (package
data of ``hobbit.conf``), each figure citing its own source. ``compute_efficiency`` is never fitted here: it is
carried over from the preset the GPU's entry names (``like``). A CPU (``cpu=``, its ``sockets=``) gives the cores and,
where ``ram=`` leaves them out, the platform's memory channels (x sockets) and rated DDR speed. What cannot be derived
keeps HardwareConfig's default, said to be assumed. ``KEYS`` lists the keys and ``*_FORMS`` their forms; sizes in GB or G are decimal (1e9 bytes),
in GiB binary. Bad input raises ``ConfigError`` naming the key, the value and the accepted forms.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import re
from collections.abc import Callable
from importlib import resources
from typing import Any, NamedTuple

import yaml

from hobbit.sim.config import ConfigError, HardwareConfig
from hobbit.traces.knobs import KnobError, check_knobs

KEYS: dict[str, str] = {
    "gpu": "a GPU of hobbit/catalogue/data/parts.yaml by name (rtx4090, h100-sxm, ...)",
    "vram": "the GPU's memory, a size (24GB, 80GiB)",
    "gpu_gbps": "the GPU's memory bandwidth, GB/s (1008)",
    "gpu_tflops": "the GPU's dense 16-bit tensor TFLOPS (165)",
    "pcie": "the GPU's PCIe link, generation x lanes (4x16, gen5x8)",
    "link_gbps": "a measured pinned host-to-device copy rate, GB/s (25)",
    "ram": "host RAM, capacity[:type-MT/s x channels] (128GB:ddr5-6000x2, 128GB)",
    "ram_gbps": "a measured host memory bandwidth, GB/s (85)",
    "ssd": "an NVMe drive of hobbit/catalogue/data/parts.yaml or its sequential read rate (samsung-990-pro, 7GB/s)",
    "ssd_fault_gbps": "a measured mmap page-fault read rate, GB/s",
    "cpu": "a CPU as its maker names it (7950X3D, EPYC 9355, TR PRO 7975WX, i5-12600K, Xeon 8480+; hobbit/catalogue/data/cpus.yaml): cores, memory channels, DDR speed",
    "sockets": "CPU sockets in use, with cpu= (2: each socket's cores and memory channels count, one NUMA node each)",
    "cpu_cores": "the CPU's physical cores (16)",
    "cpu_tflops": "the CPU's 16-bit GEMV TFLOP/s (1.5)",
    "expert_source": "where experts off the GPU live: host | ssd",
    "name": "the machine's name in results",
}
SIZE_FORMS = "a size such as 128GB, 128G, 24 GB (1e9 bytes) or 96GiB (2**30 bytes)"
RATE_FORMS = "a rate such as 7GB/s, 3.5 GB/s or 7000MB/s"
PCIE_FORMS = "generation x lanes: 4x16, gen4x16, 5x8 (generation 1-6, lanes 1, 2, 4, 8 or 16)"
RAM_FORMS = "capacity[:type-MT/s x channels], such as 128GB:ddr5-6000x2 or 128GB"
DEFAULT_PRESET = "rtx4090-pcie4"  # whose compute_efficiency a GPU given by its numbers carries over
_UNITS = {"b": 1} | {
    p + s: base**i for i, p in enumerate("kmgt", 1) for s, base in (("b", 1000), ("", 1000), ("ib", 1024))
}
_SIZE = re.compile(r"^(\d+(?:\.\d+)?)\s*([a-z]+)$", re.IGNORECASE)
_RATE = re.compile(r"^(\d+(?:\.\d+)?)\s*(gb/s|mb/s)$", re.IGNORECASE)
_PCIE = re.compile(r"^(?:pcie|gen)?\s*([1-6])(?:\.0)?\s*x\s*(\d+)$", re.IGNORECASE)
_RAM_TYPE = re.compile(r"^([a-z0-9]+)-(\d+)(?:\s*x\s*(\d+))?$", re.IGNORECASE)


@dataclasses.dataclass(frozen=True)
class Derivation:
    """How one HardwareConfig field got its value: ``how`` says given / data sheet / derived / carried over /
    assumed, with the arithmetic; ``source`` is where the numbers come from (a file, a URL, a docs section)."""

    field: str
    value: Any
    how: str
    source: str = ""

    def __str__(self) -> str:
        return f"{self.field} = {self.value}: {self.how}" + (f" [{self.source}]" if self.source else "")


class Ram(NamedTuple):
    """Host RAM as given: capacity, and the DRAM type, MT/s and 64-bit channels when stated."""

    capacity_bytes: int
    kind: str = ""
    mts: int = 0
    channels: int = 0
    channels_given: bool = True


@functools.cache
def parts() -> dict[str, Any]:
    """hobbit/catalogue/data/parts.yaml, read once from the package."""
    return yaml.safe_load((resources.files("hobbit.catalogue") / "data" / "parts.yaml").read_text())


CPU_FILES = ("parts.yaml", "cpus.yaml")  # hobbit/catalogue/data/'s files with CPUs, the first one's entries first


@functools.cache
def cpus() -> dict[str, dict[str, Any]]:
    """Every CPU ``cpu=`` can name: parts.yaml's ``cpus`` (which also carry an fp32 peak) and cpus.yaml's, each CPU
    once (by its name's words; parts.yaml's entry where both name it, with the other's spellings), each entry with
    the file it came from (``file``)."""
    table: dict[str, dict[str, Any]] = {}
    by_name: dict[str, str] = {}
    for file in CPU_FILES:
        data = yaml.safe_load((resources.files("hobbit.catalogue") / "data" / file).read_text())
        for key, entry in data["cpus"].items():
            name = "".join(_cpu_words(entry["name"]))
            if name in by_name:
                first = table[by_name[name]]
                first["aliases"] = [*first.get("aliases", ()), *entry.get("aliases", ())]
                continue
            table[key] = {**entry, "file": file}
            by_name[name] = key
    return table


@functools.cache
def _cpu_spellings() -> dict[str, str]:
    """Each CPU's key, name and aliases as ``_cpu_words`` joins them -> its key."""
    out: dict[str, str] = {}
    for key, cpu in cpus().items():
        for text in (key, cpu["name"], *cpu.get("aliases", ())):
            out.setdefault("".join(_cpu_words(str(text))), key)
    return out


def _bad(key: str, value: object, forms: str) -> ConfigError:
    return ConfigError(f"{key}={value}: not understood; accepted: {forms}")


def parse_size(key: str, value: object) -> int:
    """Bytes of a size: ``128GB`` / ``128G`` / ``24 GB`` are decimal (1e9), ``96GiB`` binary; an int is bytes."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    m = _SIZE.match(str(value).strip())
    unit = _UNITS.get(m.group(2).lower()) if m else None
    if not m or unit is None or float(m.group(1)) <= 0:
        raise _bad(key, value, SIZE_FORMS)
    return round(float(m.group(1)) * unit)


def parse_rate(key: str, value: object) -> float:
    """GB/s of a rate written with its unit: ``7GB/s``, ``3.5 GB/s``, ``7000MB/s``."""
    m = _RATE.match(str(value).strip())
    if not m or float(m.group(1)) <= 0:
        raise _bad(key, value, RATE_FORMS)
    return float(m.group(1)) / (1000.0 if m.group(2).lower() == "mb/s" else 1.0)


def parse_number(key: str, value: object, whole: bool = False) -> float:
    """A positive finite number, ``whole`` or not (``*_gbps`` keys also take ``85GB/s``)."""
    if isinstance(value, str) and _RATE.match(value.strip()) and key.endswith("_gbps"):
        return parse_rate(key, value)
    forms = "a whole number such as 16" if whole else "a positive number"
    try:
        x = float(value)  # pyright: ignore[reportArgumentType]
    except (TypeError, ValueError):
        raise _bad(key, value, forms) from None
    if isinstance(value, bool) or not math.isfinite(x) or x <= 0 or (whole and x != int(x)):
        raise _bad(key, value, forms)
    return x


def parse_pcie(key: str, value: object) -> tuple[int, int]:
    """(generation, lanes) of ``4x16``, ``gen4x16``, ``5x8``."""
    m = _PCIE.match(str(value).strip())
    if not m or int(m.group(2)) not in (1, 2, 4, 8, 16):
        raise _bad(key, value, PCIE_FORMS)
    return int(m.group(1)), int(m.group(2))


def parse_ram(key: str, value: object) -> Ram:
    """``128GB:ddr5-6000x2`` (channels of 64 bits; 2 assumed when left out) or ``128GB`` alone."""
    cap, _, spec = str(value).partition(":")
    try:
        capacity = parse_size(key, cap.strip())
    except ConfigError:
        raise _bad(key, value, RAM_FORMS) from None
    if not spec:
        return Ram(capacity)
    m = _RAM_TYPE.match(spec.strip())
    types = parts()["dram"]["types"]
    if not m or m.group(1).lower() not in types or int(m.group(2)) <= 0 or (m.group(3) and int(m.group(3)) <= 0):
        raise _bad(key, value, f"{RAM_FORMS}; types: {', '.join(types)}")
    return Ram(capacity, m.group(1).lower(), int(m.group(2)), int(m.group(3) or 2), m.group(3) is not None)


def _norm(name: str) -> str:
    return re.sub(r"^(nvidia)?(geforce)?", "", re.sub(r"[^a-z0-9]", "", name.lower()))


def lookup(key: str, value: object, table: dict[str, Any], also: str) -> tuple[str, dict[str, Any]]:
    """The entry of ``table`` named ``value`` (case, spaces and dashes ignored); an unknown name raises
    ``ConfigError`` with the closest names (difflib) and every known one."""
    by = {_norm(k): k for k in table if isinstance(table[k], dict)}
    want = _norm(str(value))
    if want in by:
        return by[want], table[by[want]]
    close = [by[c] for c in difflib.get_close_matches(want, list(by), n=3, cutoff=0.5)]
    hint = f"; did you mean {' or '.join(close)}?" if close else ""
    raise ConfigError(
        f"{key}={value}: not in hobbit/catalogue/data/parts.yaml{hint} Known: {', '.join(by.values())}; {also}"
    )


def _cpu_words(name: str) -> list[str]:
    """A CPU name's words, lower case, without the maker, trademarks and filler (``AMD Ryzen™ 9 7950X`` -> ryzen, 9,
    7950x)."""
    words = re.findall(r"[a-z0-9]+", name.lower().replace("™", " ").replace("®", " "))
    return [w for w in words if w not in ("amd", "intel", "processor", "cpu", "r", "tm")]


def lookup_cpu(value: object) -> tuple[str, dict[str, Any]]:
    """The CPU (``cpus``) that ``value`` names: by its key, name or one of its aliases as users write them (case,
    spaces, dashes, maker and trademarks ignored: ``AMD Ryzen 9 7950X``, ``ryzen9-7950x``, ``7950X3D``, ``EPYC
    9355``, ``TR PRO 7975WX``, ``Xeon 8480+``), else the one entry whose model number (the key's last part: 7950x,
    14900k, 6454s) is a word of ``value`` (``Intel i9-14900K``); an unknown name raises ``ConfigError`` with the
    closest names."""
    table = cpus()
    want = "".join(_cpu_words(str(value)))
    if want in _cpu_spellings():
        key = _cpu_spellings()[want]
        return key, table[key]
    words = {w for w in _cpu_words(str(value)) if re.search(r"\d", w)}  # model numbers, not "pro" or "max"
    hits = [key for key in table if key.rsplit("-", 1)[-1] in words]
    if len(hits) == 1:
        return hits[0], table[hits[0]]
    close = difflib.get_close_matches(want, list(_cpu_spellings()), n=3, cutoff=0.6)
    names = list(dict.fromkeys(table[_cpu_spellings()[c]]["name"] for c in close))
    hint = f"; did you mean {' or '.join(names)}?" if names else ""
    raise ConfigError(
        f"cpu={value}: not among the {len(table)} CPUs of hobbit/catalogue/data/cpus.yaml and parts.yaml{hint} "
        f"(fix: a CPU as its maker names it, or give cpu_cores= and ram=capacity:type-MT/s x channels)"
    )


def pcie_gbps(gen: int, lanes: int) -> float:
    """Theoretical PCIe bandwidth per direction, GB/s: GT/s x lanes x encoding's payload share / 8."""
    g = parts()["pcie"]["generations"][gen]
    return g["gt_s"] * lanes * g["payload"] / g["total"] / 8


def link_share(gen: int) -> tuple[float, int]:
    """The share of the theoretical rate pinned copies reach, and the generation it was measured on (the nearest
    measured one: the same share is assumed for generations without a measurement)."""
    measured = parts()["pcie"]["measured_x16_gbps"]
    near = min(measured, key=lambda m: (abs(m - gen), -m))
    return measured[near] / pcie_gbps(near, 16), near


def preset_efficiency(preset: str) -> tuple[float, bool]:
    """``compute_efficiency`` of conf/hardware/``preset``.yaml, and whether that file marks it assumed."""
    text = (resources.files("hobbit.conf") / "hardware" / f"{preset}.yaml").read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith("compute_efficiency:"))
    return float(yaml.safe_load(text)["compute_efficiency"]), "assumed" in line


def describe(**keys: object) -> tuple[dict[str, Any], list[Derivation]]:
    """HardwareConfig field values for the machine ``keys`` describe (see ``KEYS``), and how each was had."""
    for k in (k for k in keys if k not in KEYS):
        close = difflib.get_close_matches(k, list(KEYS), n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        raise ConfigError(f"unknown key '{k}'{hint} Valid keys: {', '.join(KEYS)}")
    names = [f.name for f in dataclasses.fields(HardwareConfig) if f.name != "profile"]
    base = HardwareConfig()
    out: dict[str, Any] = {n: getattr(base, n) for n in names}
    lines: dict[str, Derivation] = {}

    def put(field: str, value: Any, how: str, source: str) -> None:
        out[field] = value
        lines[field] = Derivation(field, value, how, source)

    gpu_key, gpu = _gpu(keys, put)
    link_name = _link(keys, gpu, put)
    _ssd(keys, out, put)
    cpu = _cpu(keys, put)
    _ram(keys, out, put, cpu)
    for key, field in (("cpu_cores", "cpu_cores"), ("cpu_tflops", "cpu_tflops"), ("ram_gbps", "cpu_mem_gbps")):
        if key in keys:
            value = parse_number(key, keys[key], whole=key == "cpu_cores")
            value = int(value) if key == "cpu_cores" else value
            put(field, value, "given (measured)" if key == "ram_gbps" else "given", "")
    if "expert_source" in keys:
        if keys["expert_source"] not in ("host", "ssd"):
            raise _bad("expert_source", keys["expert_source"], "host or ssd")
        put("expert_source", keys["expert_source"], "given", "")
    derived = "-".join(p for p in (gpu_key or ("gpu" if link_name else ""), link_name) if p) or "machine"
    name = str(keys["name"]) if "name" in keys else derived
    put("name", name, "given" if "name" in keys else "derived from gpu= and pcie=", "")
    given = " ".join(f"{k}={v}" for k, v in keys.items()) or "(nothing given)"
    put("source", f"hobbit.catalogue.machine: {given}; data sheets: hobbit/catalogue/data/parts.yaml", "derived", "")
    assumed = "docs/references.md (Values assumed without a source)"
    for n in (n for n in names if n not in lines):
        lines[n] = Derivation(n, out[n], "assumed: HardwareConfig's default", assumed)
    return out, [lines[n] for n in names]


Put = Callable[[str, Any, str, str], None]


def _gpu(keys: dict[str, object], put: Put) -> tuple[str, dict[str, Any]]:
    """The GPU's memory, bandwidth and TFLOPS (given, else its data sheet) and the compute_efficiency carried over
    from the preset its entry names."""
    gpu_key, gpu = ("", {})
    if "gpu" in keys:
        gpu_key, gpu = lookup("gpu", keys["gpu"], parts()["gpus"], "or give vram=, gpu_gbps=, gpu_tflops=")
    sheet = f"hobbit/catalogue/data/parts.yaml (gpus.{gpu_key}): {gpu.get('source', '')}"
    for field, key, entry in (
        ("device_memory_bytes", "vram", "vram_bytes"),
        ("device_mem_gbps", "gpu_gbps", "mem_gbps"),
        ("device_tflops", "gpu_tflops", "tflops"),
    ):
        if key in keys:
            given = parse_size(key, keys[key]) if key == "vram" else parse_number(key, keys[key])
            put(field, given, f"given ({key}={keys[key]})", "")
        elif gpu:
            value = int(gpu[entry]) if entry == "vram_bytes" else float(gpu[entry])
            put(field, value, f"data sheet of the {gpu['name']}", sheet)
    preset = gpu.get("like", DEFAULT_PRESET)
    eff, assumed = preset_efficiency(preset)
    how = f"carried over from the {preset} preset ({'assumed' if assumed else 'derived'} there), not fitted here"
    put("compute_efficiency", eff, how, f"conf/hardware/{preset}.yaml")
    return gpu_key, gpu


def _link(keys: dict[str, object], gpu: dict[str, Any], put: Put) -> str:
    """link_gbps: given, or the PCIe link's theoretical rate x the share pinned copies reach; returns its name."""
    if "link_gbps" in keys:
        put("link_gbps", parse_number("link_gbps", keys["link_gbps"]), "given (measured)", "")
        return ""
    if "pcie" not in keys and not gpu:
        return ""
    gen, lanes = parse_pcie("pcie", keys["pcie"]) if "pcie" in keys else (gpu["pcie_gen"], gpu["pcie_lanes"])
    why = "pcie= given" if "pcie" in keys else f"the {gpu['name']}'s own link, pcie= not given"
    if "pcie" in keys and gpu and (gpu["pcie_gen"] < gen or gpu["pcie_lanes"] < lanes):
        gen, lanes = min(gen, gpu["pcie_gen"]), min(lanes, gpu["pcie_lanes"])
        why = f"the slot, limited by the {gpu['name']}'s own PCIe {gpu['pcie_gen']}.0 x{gpu['pcie_lanes']}"
    share, near = link_share(gen)
    theory = pcie_gbps(gen, lanes)
    carried = "" if near == gen else f", carried to PCIe {gen} (assumed)"
    how = (
        f"derived from PCIe {gen}.0 x{lanes} ({why}): {theory:.2f} GB/s per direction x {share:.3f}, the share "
        f"pinned copies reach on PCIe {near} x16{carried}"
    )
    refs = "docs/references.md (Links and devices)"
    put("link_gbps", round(theory * share, 6), how, f"hobbit/catalogue/data/parts.yaml (pcie); {refs}")
    put("link_t0_s", float(parts()["pcie"]["link_t0_s"]), "a PCIe copy's issue cost", refs)
    return f"pcie{gen}x{lanes}"


def _ssd(keys: dict[str, object], out: dict[str, Any], put: Put) -> None:
    """ssd_gbps (a rate, or a drive's data sheet) and the page-fault rate derived from it, unless given."""
    ssds = parts()["ssds"]
    if "ssd" in keys:
        if _RATE.match(str(keys["ssd"]).strip()):
            put("ssd_gbps", parse_rate("ssd", keys["ssd"]), f"given (ssd={keys['ssd']})", "")
        else:
            drive_key, drive = lookup("ssd", keys["ssd"], ssds, f"or a rate: {RATE_FORMS}")
            src = f"hobbit/catalogue/data/parts.yaml (ssds.{drive_key}): {drive['source']}"
            put("ssd_gbps", float(drive["read_gbps"]), f"data sheet of the {drive['name']}", src)
        frac = ssds["fault_fraction"]
        how = f"derived: {frac} x ssd_gbps, the share mmap page faults reached in one measurement"
        put(
            "ssd_fault_gbps",
            round(out["ssd_gbps"] * frac, 6),
            how,
            "hobbit/catalogue/data/parts.yaml (ssds): llama.cpp PR #7420",
        )
    if "ssd_fault_gbps" in keys:
        put("ssd_fault_gbps", parse_number("ssd_fault_gbps", keys["ssd_fault_gbps"]), "given (measured)", "")


class Cpu(NamedTuple):
    """A CPU of hobbit/catalogue/data/parts.yaml as a machine uses it: its entry's key, sockets in use, and the entry."""

    key: str
    sockets: int
    entry: dict[str, Any]

    @property
    def source(self) -> str:
        return f"hobbit/catalogue/data/{self.entry['file']} (cpus.{self.key}): {self.entry['source']}"

    def platform(self, field: str) -> Any:
        """The entry's memory ``field`` (channels, dram, mts), refused where its maker gives none."""
        if field not in self.entry:
            raise ConfigError(
                f"cpu={self.key}: hobbit/catalogue/data/{self.entry['file']} has no {field} for the "
                f"{self.entry['name']} (its maker's data gives none) (fix: ram=SIZE:TYPE-MT/s x channels, e.g. "
                f"ram=64GB:ddr5-5600x2, or ram_gbps=)"
            )
        return self.entry[field]


def _cpu(keys: dict[str, object], put: Put) -> Cpu | None:
    """cpu_cores from cpu= (cores x sockets) unless given; the CPU, for the RAM's defaults."""
    if "cpu" not in keys:
        if "sockets" in keys:
            raise ConfigError(f"sockets={keys['sockets']}: needs cpu= (the CPU whose sockets they are)")
        return None
    key, entry = lookup_cpu(keys["cpu"])
    sockets = int(parse_number("sockets", keys["sockets"], whole=True)) if "sockets" in keys else 1
    if sockets > entry["sockets"]:
        raise ConfigError(
            f"sockets={sockets}: the {entry['name']} takes at most {entry['sockets']} (hobbit/catalogue/data/parts.yaml)"
        )
    cpu = Cpu(key, sockets, entry)
    if sockets > 1:
        put("numa_nodes", sockets, f"sockets={sockets}: one NUMA node a socket", cpu.source)
    if "cpu_tflops" not in keys and "fp32_tflops" in entry:
        per = f" x {sockets} sockets" if sockets > 1 else ""
        how = f"data sheet of the {entry['name']}: {entry['fp32_tflops']:g} TFLOP/s fp32 vector FMA peak{per}"
        put("cpu_tflops", round(entry["fp32_tflops"] * sockets, 6), how, cpu.source)
    if "cpu_cores" not in keys:
        cores = entry["cores"] * sockets
        per = f" x {sockets} sockets" if sockets > 1 else ""
        put("cpu_cores", cores, f"data sheet of the {entry['name']}: {entry['cores']} physical cores{per}", cpu.source)
    return cpu


def _ram(keys: dict[str, object], out: dict[str, Any], put: Put, cpu: Cpu | None = None) -> None:
    """host_memory_bytes from ram=; cpu_mem_gbps from its type, speed and channels (ram_gbps= overrides it), those
    ram= leaves out taken from the CPU's platform (its rated speed; its channels x sockets) when cpu= names it."""
    if "ram" not in keys and cpu is None:
        return
    ram = parse_ram("ram", keys["ram"]) if "ram" in keys else None
    if ram is not None:
        put("host_memory_bytes", ram.capacity_bytes, f"given (ram={keys['ram']})", "")
    if cpu is None and (ram is None or not ram.kind):
        how = "assumed: HardwareConfig's default (ram= gave no type and speed: ram=128GB:ddr5-6000x2, or ram_gbps=)"
        put("cpu_mem_gbps", out["cpu_mem_gbps"], how, "docs/references.md (Values assumed without a source)")
        return
    dram = parts()["dram"]
    source = "hobbit/catalogue/data/parts.yaml (dram)"
    if ram is not None and ram.kind:
        kind, mts, channels = ram.kind, ram.mts, ram.channels
        note = "" if ram.channels_given else " (2 channels assumed)"
    else:
        kind, mts, channels, note = "", 0, 0, ""
    if "ram_gbps" in keys and cpu is not None and not (ram is not None and ram.kind):
        return  # measured: it stands for what the platform would give
    if cpu is not None and not (ram is not None and ram.kind and ram.channels_given):
        e, per = cpu.entry, f" x {cpu.sockets} sockets" if cpu.sockets > 1 else ""
        channels = cpu.platform("channels") * cpu.sockets
        source = f"{source}; {cpu.source}"
        if kind:
            note = f" (channels: the {e['name']}'s {e['channels']}{per})"
        else:
            kind, mts = cpu.platform("dram"), cpu.platform("mts")
            what = "ram= not given" if ram is None else "ram= gave no type and speed"
            note = (
                f" ({what}: the {e['name']}'s rated speed and its {e['channels']} channels{per}, assumed populated "
                f"at one DIMM per channel)"
            )
    peak = channels * mts * dram["channel_bytes"] / 1000
    how = (
        f"derived from {kind}-{mts} x{channels}{note}: {channels} x {mts} MT/s x "
        f"{dram['channel_bytes']} B = {peak:g} GB/s peak x {dram['stream_fraction']} (assumed streaming share)"
    )
    put("cpu_mem_gbps", round(peak * dram["stream_fraction"], 6), how, source)


def hardware_config(**keys: object) -> HardwareConfig:
    """The HardwareConfig of the machine ``keys`` describe (``describe``), its numbers checked against its limits."""
    fields, _ = describe(**keys)
    cfg = HardwareConfig(**fields)
    try:
        check_knobs(cfg, "hardware.")
    except KnobError as e:
        raise ConfigError(str(e)) from None
    return cfg


def parse_machine(text: str) -> dict[str, str]:
    """``gpu=rtx4090 pcie=4x16 vram=24 GB`` -> {key: value}; a word without ``=`` continues the previous value."""
    keys: dict[str, str] = {}
    last = ""
    for word in text.split():
        key, eq, value = word.partition("=")
        if eq:
            keys[key], last = value, key
        elif last:
            keys[last] = f"{keys[last]} {word}"
        else:
            raise ConfigError(f"'{word}': expected key=value (keys: {', '.join(KEYS)})")
    return keys
