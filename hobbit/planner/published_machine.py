"""A published row's machine: its GPU, CPU, RAM and drive read from the words people write them in, as
``hobbit.catalogue.machine.describe`` takes them (``hardware``), with what was assumed."""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

from hobbit.catalogue.machine import lookup_cpu, parts
from hobbit.planner.published_row import NOT_STATED, Row
from hobbit.sim.config import ConfigError, HardwareConfig, ModelConfig
from hobbit.sim.formats import weights

# ---- hardware -------------------------------------------------------------------------------------------------------


def _alnum(text: str) -> str:
    return re.sub(r"^(nvidia)?(geforce)?", "", re.sub(r"[^a-z0-9]", "", text.lower()))


def gpu_key(text: str) -> str:
    """The hobbit/catalogue/data/parts.yaml ``gpus`` entry a GPU's name means ("" when none): by key or name, case, spaces and brand
    ignored, or the one entry whose key or name starts with it (``RTX 3060`` -> rtx3060-12gb, ``RTX PRO 6000
    Blackwell Max-Q`` -> rtx-pro-6000-maxq)."""
    text = re.sub(r"\([^)]*\)|^\s*\d+\s*x\s*", " ", text)
    gpus = {k: v for k, v in parts()["gpus"].items() if isinstance(v, dict)}
    for want in dict.fromkeys((_alnum(text), _alnum(re.sub(r"\b\d+\s*GB\b", " ", text, flags=re.IGNORECASE)))):
        if not want:
            continue
        for key, g in gpus.items():
            if want in (_alnum(key), _alnum(g["name"])):
                return key
        starts = [k for k, g in gpus.items() if _alnum(k).startswith(want) or _alnum(g["name"]).startswith(want)]
        if len(starts) == 1:
            return starts[0]
    return ""


def _gib(text: str) -> float:
    """GiB of a RAM or VRAM size as written (``1 TB`` -> 1024, ``96 GB`` -> 96, ``16GiB`` -> 16); 0: none."""
    m = re.search(r"(\d+(?:\.\d+)?)\s*(TB|TiB|T|GB|GiB|G)\b", text, re.IGNORECASE)
    if not m:
        return 0.0
    n = float(m.group(1))
    return n * 1024 if m.group(2).upper().startswith("T") else n


def _size(gib: float) -> str:
    return f"{gib:g}GiB"


def row_hardware(r: Row, info: dict[str, Any], fmt: str) -> dict[str, str]:
    hw: dict[str, str] = {}
    gpu_text = r.get("gpu")
    vram = r.get("vram_gb")
    key = gpu_key(gpu_text)
    if key:
        hw["gpu"] = key
        sheet = parts()["gpus"][key]["vram_bytes"] / 2**30
        if _num(vram) and abs(_num(vram) - sheet) > 0.5:
            hw["vram"] = _size(_num(vram))
    elif _num(vram):
        hw["vram"] = _size(_num(vram))
        r.assume(
            f"GPU '{gpu_text or '(not stated)'}' is not in hobbit/catalogue/data/parts.yaml: its memory from vram_gb "
            f"({vram} GB), its bandwidth and TFLOPS HardwareConfig's defaults (an RTX 4090's)"
        )
    else:
        r.cannot(f"GPU not stated ('{gpu_text}'), nor its memory: the placement and the prefill depend on it")
    count = re.match(r"\s*(\d+)\s*x\s*\D", gpu_text)
    n_gpus = _num(r.get("n_gpus")) or (int(count.group(1)) if count else 1)
    if n_gpus > 1:
        r.cannot(f"{n_gpus:g} GPUs: the simulator models one")
    pcie = r.get("pcie")
    link = re.search(r"(?:pcie|gen)\s*([1-6])(?:\.0)?\s*x\s*(\d+)", pcie, re.IGNORECASE) or re.fullmatch(
        r"\s*([1-6])\s*x\s*(\d+)\s*", pcie
    )
    if link:
        hw["pcie"] = f"{link.group(1)}x{link.group(2)}"
    elif re.search(r"(\d+(?:\.\d+)?)\s*GB/s", pcie):
        rate = re.search(r"(\d+(?:\.\d+)?)\s*GB/s", pcie)
        assert rate is not None
        hw["link_gbps"] = rate.group(1)
        r.assume(f"pcie '{pcie}': read as a measured host-to-device rate, {rate.group(1)} GB/s")
    _cpu_and_ram(r, hw, info, fmt)
    return hw


def _cpu_and_ram(r: Row, hw: dict[str, str], info: dict[str, Any], fmt: str) -> None:
    """cpu= (and sockets=) of the CPU named, or its stated cores; ram= and ram_gbps= (see ``_ram``)."""
    cpu_text = r.get("cpu")
    flags_low = r.get("offload_flags").lower()
    entry: dict[str, Any] = {}
    m = re.search(r"(\d+)\s*sockets?|\b(dual)[- ]socket", cpu_text, re.IGNORECASE)
    sockets = (2 if m.group(2) else int(m.group(1))) if m else 1
    used = sockets
    if sockets > 1:
        if re.search(r"single[- ]socket|numactl\s+(?:-N|--cpunodebind)[ =]?\d", flags_low):
            used = 1
            r.assume(
                f"one socket of {sockets} in use (numactl binds the run and its memory to one node): that "
                f"socket's cores and memory channels, and its share of the RAM"
            )
        elif not re.search(r"dual[- ]socket|use_numa\s*=\s*1|both sockets", flags_low):
            r.assume(
                f"socket use not stated: all {sockets} sockets' cores and memory channels counted "
                f"(a runtime with one copy of the experts reads them at one socket's bandwidth: system.numa)"
            )
    if cpu_text and not NOT_STATED.search(cpu_text):
        entry, used, sockets = _catalogue_cpu(r, hw, cpu_text, used, sockets)
    _ram(r, hw, info, fmt, entry, sockets, used)
    bw = re.search(r"(\d+(?:\.\d+)?)\s*GB/s", r.get("mem_bw_stated"))
    if bw:
        hw["ram_gbps"] = bw.group(1)


def _catalogue_cpu(
    r: Row, hw: dict[str, str], cpu_text: str, used: int, sockets: int
) -> tuple[dict[str, Any], int, int]:
    """cpu= (and sockets=) of the CPU of the catalogue ``cpu_text`` names, or its stated cores (said so); the entry
    whose memory platform the RAM's defaults come from ({} for none), the sockets in use and stated."""
    try:
        key, entry = lookup_cpu(cpu_text)
    except ConfigError:
        per = re.search(r"(\d+)\s*cores?\s*/\s*socket", cpu_text, re.IGNORECASE)
        total = re.search(r"\((\d+)\s*C\)|(\d+)[- ]cores?", cpu_text, re.IGNORECASE)
        if per:
            hw["cpu_cores"] = str(int(per.group(1)) * used)
        elif total:
            hw["cpu_cores"] = next(g for g in total.groups() if g)
        r.assume(
            f"CPU '{cpu_text}' is not in the CPU catalogue (hobbit/catalogue/data/cpus.yaml, parts.yaml): its cores "
            f"{'as stated' if per or total else 'unknown'}, its memory platform unknown"
        )
        return {}, used, sockets
    if not {"channels", "dram", "mts"} <= set(entry):  # a maker that gives no memory platform (Apple)
        hw["cpu_cores"] = str(entry["cores"] * used)
        r.assume(
            f"the {entry['name']}'s cores from hobbit/catalogue/data/{entry['file']}; its maker gives no memory "
            f"channels, so the RAM is as stated or unknown"
        )
        return {}, used, sockets
    hw["cpu"] = key
    if used > entry["sockets"]:
        r.assume(f"{used} sockets stated; the {entry['name']} takes {entry['sockets']}: one counted")
        return entry, 1, 1
    if used > 1:
        hw["sockets"] = str(used)
    return entry, used, sockets


_CHANNEL_WORDS = {"dual": 2, "quad": 4, "hexa": 6, "six": 6, "octa": 8, "eight": 8, "twelve": 12}


def _ram(
    r: Row, hw: dict[str, str], info: dict[str, Any], fmt: str, cpu: dict[str, Any], sockets: int, used: int
) -> None:
    """ram= from the RAM's size and its type, speed and channels as stated (per socket: x the sockets in use; DIMMs:
    the channels they fill), what is not stated from the CPU's platform (said so) or left to the machine."""
    spec = r.get("ram_type_speed_channels")
    low = spec.lower()
    gib = _gib(r.get("ram_size")) * used / sockets
    kind_speed = re.search(r"\b(lpddr\d+x?|ddr\d)[\s-]*(\d{4,5})\b", low)
    kind_only = re.search(r"\b(lpddr\d+x?|ddr\d)\b", low)
    speed_only = re.search(r"(\d{4,5})\s*mt/?s", low)
    kind = kind_speed.group(1) if kind_speed else kind_only.group(1) if kind_only else ""
    mts = int(kind_speed.group(2)) if kind_speed else int(speed_only.group(1)) if speed_only else 0
    per_socket = "per socket" in low
    scope = 1 if per_socket else sockets  # the sockets the stated channels or DIMMs are spread over
    ch = re.search(r"(\d+)\s*[- ]?(?:ch\b|channels?\b)", low)
    ch_word = re.search(r"\b(dual|quad|hexa|six|octa|eight|twelve)[- ]channel", low)
    dimms = re.search(r"(\d+)\s*x\s*(?:\d+\s*gb\s*)?(?:lp)?ddr|(\d+)\s*(?:x\s*)?dimms?\b", low)
    channels = int(ch.group(1)) if ch else _CHANNEL_WORDS[ch_word.group(1)] if ch_word else 0
    if not channels and dimms:
        n = int(next(g for g in dimms.groups() if g))
        channels = min(n, cpu["channels"] * scope) if cpu else n
        on = f" on the {cpu['name']}'s {cpu['channels']} channels{' a socket' if sockets > 1 else ''}" if cpu else ""
        r.assume(
            f"memory channels from the DIMMs: {n} DIMMs{' per socket' if per_socket else ''}{on} -> "
            f"{channels} channels{'' if cpu else ' (one DIMM a channel, assumed)'}"
        )
    channels = channels * used // scope
    if cpu and (kind or mts or channels) and not (kind and mts):
        kind = kind or cpu["dram"]
        if not mts:
            mts = cpu["mts"]
            r.assume(
                f"RAM speed not stated: {kind.upper()}-{mts}, the {cpu['name']}'s rated speed (its data sheet, "
                f"hobbit/catalogue/data/{cpu['file']})"
            )
    if not gib and kind and mts:
        gib = _assumed_capacity(r, info, fmt)
    if not (kind and mts):
        if cpu:
            unstated = (
                "its capacity left unstated (every host-side expert taken to be in RAM, as the run's speed implies)"
            )
            what = f"its capacity {_size(gib)}" if gib else unstated
            r.assume(
                f"RAM speed not stated: {what}; its speed and channels the {cpu['name']}'s rated "
                f"{cpu['dram'].upper()}-{cpu['mts']} x{cpu['channels'] * used} (its data sheet, hobbit/catalogue/data/{cpu['file']})"
            )
        elif not r.get("mem_bw_stated"):
            left = (
                f"host RAM {_size(gib)}"
                if gib
                else "host RAM left unstated (every host-side expert taken to be in RAM)"
            )
            r.assume(
                f"RAM type and CPU not stated: {left}, and the host's memory bandwidth HardwareConfig's default, "
                f"{HardwareConfig().cpu_mem_gbps:g} GB/s (assumed; a CPU-side expert's speed rests on it)"
            )
        if gib:
            hw["ram"] = _size(gib)
        return
    hw["ram"] = f"{_size(gib)}:{kind}-{mts}" + (f"x{channels}" if channels else "")
    if not channels:
        plat = (
            f"the {cpu['name']}'s {cpu['channels']}{f' x {used} sockets' if used > 1 else ''}" if cpu else "2 (assumed)"
        )
        r.assume(f"memory channels not stated: {plat}")


def _assumed_capacity(r: Row, info: dict[str, Any], fmt: str) -> float:
    """The smallest power-of-two GiB that holds the model's file and the host's reserve (assumed, said so)."""
    size = _gib(r.get("file_size"))
    if not size:
        names = {f.name for f in dataclasses.fields(ModelConfig)}
        try:
            w = weights(ModelConfig(**{k: v for k, v in info.items() if k in names}), fmt)
            size = (w.experts_bytes + w.resident_bytes) / 2**30
        except (ConfigError, ValueError, TypeError):
            size = 0.0
    need = size + HardwareConfig().host_reserve_bytes / 2**30
    gib = float(2 ** math.ceil(math.log2(max(need, 1.0))))
    r.assume(
        f"RAM capacity not stated: {gib:g} GiB, the smallest power of two holding the {size:.1f} GiB file and "
        f"the host's reserve (the run's speed implies it fit)"
    )
    return gib


def _num(text: str) -> float:
    m = re.search(r"\d+(?:\.\d+)?", text or "")
    return float(m.group(0)) if m else 0.0
