"""A machine from the few numbers its owner knows (hobbit/catalogue/machine.py, hobbit/catalogue/data/parts.yaml): the parsers, a whole machine
worked out by hand, and the data sheets' own hygiene (every GPU sourced, every number commented)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import yaml

from hobbit.catalogue.machine import (
    KEYS,
    describe,
    hardware_config,
    link_share,
    lookup_cpu,
    parse_machine,
    parse_number,
    parse_pcie,
    parse_ram,
    parse_rate,
    parse_size,
    parts,
    pcie_gbps,
)
from hobbit.sim.config import ConfigError, HardwareConfig

ROOT = Path(__file__).parents[1]
PARTS = ROOT / "hobbit" / "catalogue" / "data" / "parts.yaml"


def preset(name: str) -> dict:
    return yaml.safe_load((ROOT / "conf" / "hardware" / f"{name}.yaml").read_text())


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("128GB", 128 * 10**9),
        ("128G", 128 * 10**9),
        ("96GiB", 96 * 2**30),
        ("24 GB", 24 * 10**9),
        ("1.5TB", 15 * 10**11),
        ("512MiB", 2**29),
        (2**30, 2**30),
    ],
)
def test_sizes_are_decimal_in_gb_and_binary_in_gib(text, size):
    assert parse_size("vram", text) == size


@pytest.mark.parametrize("bad", ["128", "GB", "128XB", "-5GB", "0GB", "twelve", 0, True])
def test_a_bad_size_names_the_key_the_value_and_the_forms(bad):
    with pytest.raises(ConfigError, match=r"vram=.*not understood; accepted: .*128GB.*GiB"):
        parse_size("vram", bad)


def test_rates_and_numbers():
    assert parse_rate("ssd", "7GB/s") == 7.0
    assert parse_rate("ssd", "3.5 GB/s") == 3.5
    assert parse_rate("ssd", "7000MB/s") == 7.0
    assert parse_number("ram_gbps", "85") == 85.0
    assert parse_number("ram_gbps", "85GB/s") == 85.0
    assert parse_number("cpu_cores", 16, whole=True) == 16
    for bad in ("7", "7GB", "fast", "-1GB/s"):
        with pytest.raises(ConfigError, match=r"^ssd=.*accepted: a rate such as 7GB/s"):
            parse_rate("ssd", bad)
    for bad in ("0", "-3", "nan", "inf", "x", True):
        with pytest.raises(ConfigError, match=r"^gpu_gbps="):
            parse_number("gpu_gbps", bad)
    with pytest.raises(ConfigError, match=r"^cpu_cores=16.5: .*whole number"):
        parse_number("cpu_cores", "16.5", whole=True)


@pytest.mark.parametrize(
    ("text", "link"),
    [
        ("4x16", (4, 16)),
        ("gen4x16", (4, 16)),
        ("5x8", (5, 8)),
        ("PCIe 4.0 x16", (4, 16)),
        ("GEN3 x 4", (3, 4)),
        ("6x16", (6, 16)),
    ],
)
def test_pcie_forms(text, link):
    assert parse_pcie("pcie", text) == link


@pytest.mark.parametrize("bad", ["7x16", "4x3", "x16", "4", "4x32", "gen4"])
def test_a_bad_pcie_link_says_the_forms(bad):
    with pytest.raises(ConfigError, match=r"^pcie=.*accepted: generation x lanes: 4x16, gen4x16"):
        parse_pcie("pcie", bad)


def test_ram_forms():
    r = parse_ram("ram", "128GB:ddr5-6000x2")
    assert (r.capacity_bytes, r.kind, r.mts, r.channels, r.channels_given) == (128 * 10**9, "ddr5", 6000, 2, True)
    assert parse_ram("ram", "64GiB").capacity_bytes == 64 * 2**30 and parse_ram("ram", "64GiB").kind == ""
    r = parse_ram("ram", "512GB:DDR5-4800x8")
    assert (r.kind, r.channels) == ("ddr5", 8)
    assert parse_ram("ram", "32GB:lpddr5x-8533").channels_given is False  # two channels assumed, and said so
    for bad in ("128GB:ddr9-6000x2", "128GB:ddr5", "lots", "128GB:ddr5-6000x0", ":ddr5-6000x2"):
        with pytest.raises(ConfigError, match=r"^ram=.*accepted: capacity\[:type-MT/s x channels\]"):
            parse_ram("ram", bad)


def test_unknown_keys_list_the_valid_ones_with_a_suggestion():
    with pytest.raises(ConfigError, match=r"unknown key 'vrm'; did you mean vram\? Valid keys: gpu, vram, "):
        describe(vrm="24GB")
    with pytest.raises(ConfigError, match=r"unknown key 'zzz' Valid keys: " + ", ".join(KEYS)):
        describe(zzz=1)


@pytest.mark.parametrize(("name", "near"), [("rtx4900", "rtx4090"), ("rtx4090ti", "rtx4090"), ("h100", "h100-sxm")])
def test_an_unknown_gpu_suggests_the_nearest(name, near):
    with pytest.raises(
        ConfigError, match=rf"^gpu={name}: not in hobbit/catalogue/data/parts.yaml; did you mean [^?]*\b{near}\b"
    ):
        describe(gpu=name)


def test_gpu_names_ignore_case_spaces_and_brand():
    want = describe(gpu="rtx4090")[0] | {"source": ""}
    for name in ("RTX 4090", "GeForce RTX 4090", "nvidia-rtx-4090", "Rtx4090"):
        assert describe(gpu=name)[0] | {"source": ""} == want


def test_a_whole_machine_worked_out_by_hand():
    """RTX 4090 in a PCIe 4.0 x16 slot, 128 GB of dual-channel DDR5-6000, a 7 GB/s SSD, 16 cores."""
    keys = {"gpu": "rtx4090", "pcie": "4x16", "ram": "128GB:ddr5-6000x2", "ssd": "7GB/s", "cpu_cores": 16}
    f, lines = describe(**keys)
    why = {d.field: d for d in lines}
    assert f["device_memory_bytes"] == 24 * 2**30  # 24 GB GDDR6X is 24 GiB
    assert f["device_mem_gbps"] == 1008.0 and f["device_tflops"] == 165.2  # Ada whitepaper, Appendix A
    assert f["compute_efficiency"] == preset("rtx4090-pcie4")["compute_efficiency"]  # carried over (0.27)
    # PCIe 4.0 x16: 16 GT/s x 16 lanes x 128/130 / 8 = 31.51 GB/s; copies reach 25 of it on PCIe 4 x16
    assert pcie_gbps(4, 16) == pytest.approx(16 * 16 * 128 / 130 / 8)
    assert f["link_gbps"] == pytest.approx(25.0) and f["link_t0_s"] == 6e-6
    assert f["host_memory_bytes"] == 128 * 10**9
    assert f["cpu_mem_gbps"] == pytest.approx(2 * 6000 * 8 / 1000 * 0.75)  # 96 GB/s peak x 0.75 = 72
    assert f["ssd_gbps"] == 7.0 and f["ssd_fault_gbps"] == pytest.approx(7.0 * 0.29)
    assert f["cpu_cores"] == 16 and f["name"] == "rtx4090-pcie4x16"
    assert f["cpu_tflops"] == HardwareConfig().cpu_tflops and "assumed" in why["cpu_tflops"].how
    assert "nvidia-ada-gpu-architecture.pdf" in why["device_tflops"].source
    assert "carried over from the rtx4090-pcie4 preset (derived there)" in why["compute_efficiency"].how
    assert "31.51 GB/s" in why["link_gbps"].how and "Links and devices" in why["link_gbps"].source
    assert "96 GB/s peak x 0.75" in why["cpu_mem_gbps"].how and "llama.cpp PR #7420" in why["ssd_fault_gbps"].source
    assert [d.field for d in lines] == [x.name for x in dataclasses.fields(HardwareConfig) if x.name != "profile"]
    cfg = hardware_config(**keys)
    assert isinstance(cfg, HardwareConfig) and cfg.link_gbps == f["link_gbps"]
    assert parse_machine("gpu=rtx4090 pcie=4x16 ram=128GB:ddr5-6000x2 ssd=7GB/s cpu_cores=16") == {
        k: str(v) for k, v in keys.items()
    }


def test_the_link_and_its_assumptions():
    f, lines = describe(gpu="rtx3090", pcie="5x16")  # a PCIe 4.0 card in a PCIe 5.0 slot runs at 4.0
    how = next(d.how for d in lines if d.field == "link_gbps")
    assert f["link_gbps"] == pytest.approx(25.0) and "limited by the NVIDIA GeForce RTX 3090" in how
    f, lines = describe(pcie="3x16")  # no measurement on PCIe 3: PCIe 4's share, said to be assumed
    assert f["link_gbps"] == pytest.approx(pcie_gbps(3, 16) * 25.0 / pcie_gbps(4, 16))
    assert "carried to PCIe 3 (assumed)" in next(d.how for d in lines if d.field == "link_gbps")
    assert link_share(6) == (pytest.approx(55.0 / pcie_gbps(5, 16)), 5)
    assert f["name"] == "gpu-pcie3x16"
    assert describe(gpu="h100-sxm")[0]["link_gbps"] == pytest.approx(55.0)  # the card's own PCIe 5.0 x16
    assert describe(gpu="rtx4090", link_gbps=23.9)[0]["link_gbps"] == 23.9  # a measurement wins
    assert [round(pcie_gbps(g, 16), 2) for g in (3, 4, 5)] == [15.75, 31.51, 63.02]  # docs/references.md


def test_given_numbers_win_over_the_data_sheet_and_defaults_say_assumed():
    f, lines = describe(gpu="a100-80gb", gpu_gbps=2039, vram="80GiB")
    assert f["device_mem_gbps"] == 2039.0 and f["device_tflops"] == 312.0
    assert f["compute_efficiency"] == preset("a100-pcie4")["compute_efficiency"]
    assert "(assumed there)" in next(d.how for d in lines if d.field == "compute_efficiency")
    f, lines = describe(vram="12GB", gpu_gbps=360, gpu_tflops=25)
    assert (f["device_memory_bytes"], f["compute_efficiency"]) == (
        12 * 10**9,
        preset("rtx4090-pcie4")["compute_efficiency"],
    )
    f, lines = describe(ram="64GB")
    assert f["cpu_mem_gbps"] == HardwareConfig().cpu_mem_gbps
    assert "assumed" in next(d.how for d in lines if d.field == "cpu_mem_gbps")
    assert describe(ram="64GB", ram_gbps=85)[0]["cpu_mem_gbps"] == 85.0
    assert describe(ssd="samsung 990 pro")[0]["ssd_gbps"] == 7.45
    assert describe(ssd="7GB/s", ssd_fault_gbps=2)[0]["ssd_fault_gbps"] == 2.0
    assert describe()[0] == {n: getattr(HardwareConfig(), n) for n in describe()[0]} | {
        "name": "machine",
        "compute_efficiency": preset("rtx4090-pcie4")["compute_efficiency"],  # carried over with no GPU named
        "source": "hobbit.catalogue.machine: (nothing given); data sheets: hobbit/catalogue/data/parts.yaml",
    }
    with pytest.raises(ConfigError, match=r"^ssd=wd sn580: not in hobbit/catalogue/data/parts.yaml; did you mean"):
        describe(ssd="wd sn580")
    with pytest.raises(ConfigError, match=r"^expert_source=gpu"):
        describe(expert_source="gpu")


def test_every_gpu_has_a_source_and_positive_numbers():
    presets = {p.stem for p in (ROOT / "conf" / "hardware").glob("*.yaml")}
    gpus = parts()["gpus"]
    assert {"rtx4090", "rtx3090", "rtx5090", "a100-80gb", "h100-sxm", "h200"} <= set(gpus)
    for key, g in gpus.items():
        assert g["source"].startswith("https://"), key
        assert g["vram_bytes"] > 2**30 and g["mem_gbps"] > 0 and g["tflops"] > 0, key
        assert g["pcie_gen"] in range(1, 7) and g["pcie_lanes"] in (1, 2, 4, 8, 16), key
        assert g["like"] in presets, key
        assert g["vram_bytes"] % 2**30 == 0 or key == "rtx2080ti", key  # GiB, as data sheets' device GB are
        f, _ = describe(gpu=key)
        HardwareConfig(**f)
    for key, d in parts()["ssds"].items():
        if isinstance(d, dict):
            assert d["source"].startswith("https://") and d["read_gbps"] > 0, key


_NUMBER = re.compile(r"^\s*[\w-]+:\s*-?\d[\d.e+-]*\s*(#|$)|\{[^}]*:\s*-?\d")


def uncommented_numbers(text: str) -> list[str]:
    """The lines of a YAML text that set a number (``key: 1.5``, ``{a: 1}``) with no comment beside them."""
    return [ln for ln in text.splitlines() if _NUMBER.search(ln.split("#")[0] + "#") and "#" not in ln]


def test_every_number_in_parts_yaml_has_a_comment():
    assert not uncommented_numbers(PARTS.read_text())
    # the check catches what it exists for (a guard that cannot fail guards nothing)
    assert uncommented_numbers("a:\n  mem_gbps: 1008.0\n  x: {gt_s: 2.5}\n  ok: 3  # cited\n  s: text 5\n") == [
        "  mem_gbps: 1008.0",
        "  x: {gt_s: 2.5}",
    ]


def test_parts_yaml_is_package_data_and_parses():
    assert parts() == yaml.safe_load(PARTS.read_text())
    from importlib import resources

    assert Path(str(resources.files("hobbit.catalogue") / "data" / "parts.yaml")).resolve() == PARTS.resolve()


def test_a_cpu_gives_its_cores_and_the_ram_speed_and_channels_ram_leaves_out():
    """cpu= names a CPU of hobbit/catalogue/data/parts.yaml: its cores (x sockets), and where ram= gives only a capacity, its platform's
    rated DDR speed and channels (x sockets), derived and said so."""
    f, lines = describe(cpu="ryzen9-7950x", ram="96GiB")
    why = {d.field: d for d in lines}
    assert f["cpu_cores"] == 16 and "data sheet of the AMD Ryzen 9 7950X: 16 physical cores" in why["cpu_cores"].how
    assert f["host_memory_bytes"] == 96 * 2**30
    assert f["cpu_mem_gbps"] == pytest.approx(2 * 5200 * 8 / 1000 * 0.75)  # DDR5-5200 x2: 83.2 GB/s peak x 0.75
    how = why["cpu_mem_gbps"].how
    assert how.startswith("derived from ddr5-5200 x2 (ram= gave no type and speed: the AMD Ryzen 9 7950X's rated speed")
    assert "cpus.ryzen9-7950x" in why["cpu_mem_gbps"].source and "amd.com" in why["cpu_mem_gbps"].source
    # cpu= alone: the platform's bandwidth; the RAM's size stays unstated
    f, lines = describe(cpu="AMD Ryzen 9 7950X")
    assert f["host_memory_bytes"] == 0 and f["cpu_mem_gbps"] == pytest.approx(62.4)
    assert "ram= not given" in next(d.how for d in lines if d.field == "cpu_mem_gbps")
    # a type and speed without channels: the platform's channels x sockets, not the two assumed without a CPU
    f, lines = describe(cpu="xeon-gold-6454s", sockets=2, ram="1TB:ddr5-4400")
    assert f["cpu_cores"] == 64 and f["cpu_mem_gbps"] == pytest.approx(16 * 4400 * 8 / 1000 * 0.75)
    how = next(d.how for d in lines if d.field == "cpu_mem_gbps")
    assert "(channels: the Intel Xeon Gold 6454S's 8 x 2 sockets)" in how and "assumed)" not in how.split(":")[0]
    assert describe(ram="1TB:ddr5-4400")[0]["cpu_mem_gbps"] == pytest.approx(2 * 4400 * 8 / 1000 * 0.75)
    # channels given win (sockets do not multiply them), as do given cores and a measured bandwidth
    f, _ = describe(cpu="xeon-gold-6454s", sockets=2, ram="512GiB:ddr5-4800x8")
    assert f["cpu_mem_gbps"] == pytest.approx(8 * 4800 * 8 / 1000 * 0.75) and f["cpu_cores"] == 64
    f, _ = describe(cpu="core-i9-14900k", cpu_cores=8, ram="64GB", ram_gbps=80)
    assert (f["cpu_cores"], f["cpu_mem_gbps"]) == (8, 80.0)
    assert describe(cpu="epyc-9175f", ram="768GiB:ddr5-6400x12")[0]["cpu_mem_gbps"] == pytest.approx(460.8)


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("Intel i9-14900K", "core-i9-14900k"),
        ("Intel Core i9-14900K", "core-i9-14900k"),
        ("AMD EPYC 9175F (16C)", "epyc-9175f"),
        ("Intel Xeon Gold 6454S, 32 cores/socket, 2 sockets", "xeon-gold-6454s"),
        ("amd ryzen 9 9950x", "ryzen9-9950x"),
        ("AMD Ryzen™ 9 7950X", "ryzen9-7950x"),
    ],
)
def test_cpu_names_as_people_write_them(name, key):
    assert lookup_cpu(name)[0] == key


def test_cpu_errors_name_the_key_and_the_known_cpus():
    with pytest.raises(
        ConfigError, match=r"^cpu=Ryzen 7 5899X3D: not among the \d+ CPUs of .*did you mean AMD Ryzen 7 5800X3D"
    ):
        describe(cpu="Ryzen 7 5899X3D")
    with pytest.raises(ConfigError, match=r"^sockets=2: the AMD Ryzen 9 7950X takes at most 1"):
        describe(cpu="ryzen9-7950x", sockets=2)
    with pytest.raises(ConfigError, match=r"^sockets=2: needs cpu="):
        describe(sockets=2)
    with pytest.raises(ConfigError, match=r"^sockets=1.5: .*whole number"):
        describe(cpu="epyc-9175f", sockets="1.5")


def test_every_cpu_has_a_source_and_positive_numbers():
    cpus = parts()["cpus"]
    assert {"ryzen9-7950x", "ryzen9-9950x", "epyc-9175f", "xeon-gold-6454s", "core-i9-14900k"} <= set(cpus)
    for key, c in cpus.items():
        assert c["source"].startswith("https://"), key
        assert c["cores"] > 0 and c["channels"] > 0 and c["mts"] > 0 and c["sockets"] >= 1, key
        assert c["dram"] in parts()["dram"]["types"], key
        f, _ = describe(cpu=key)
        assert f["cpu_cores"] == c["cores"] and HardwareConfig(**f).cpu_mem_gbps > 0


CPU_FIELDS = {"name", "aliases", "maker", "segment", "launched", "cores", "threads", "sockets", "channels", "dram", "mts",
              "base_ghz", "boost_ghz", "isa", "numa", "mem_gbps", "source"}  # fmt: skip


def test_the_cpu_catalogue_holds_what_people_run_within_physical_ranges():
    """hobbit/catalogue/data/cpus.yaml: at least 150 CPUs, every entry's fields known and within physical ranges, a
    source on each, and no spelling that names two CPUs."""
    from hobbit.catalogue.machine import _cpu_words, cpus

    data = yaml.safe_load((PARTS.parent / "cpus.yaml").read_text())["cpus"]
    assert len(data) >= 150
    makers = {c["maker"] for c in data.values()}
    assert makers == {"AMD", "Intel", "Apple"}
    seen: dict[str, str] = {}
    for key, c in data.items():
        assert set(c) <= CPU_FIELDS and {"name", "cores", "sockets", "source"} <= set(c), key
        assert c["source"] and c["segment"] in ("desktop", "workstation", "server", "laptop", "soc"), key
        assert 1 <= c["cores"] <= 288 and c.get("threads", c["cores"]) >= c["cores"], key
        assert c["sockets"] in (1, 2, 4, 8), key
        assert 1 <= c.get("channels", 1) <= 16 and 1600 <= c.get("mts", 3200) <= 10000, key
        assert c.get("dram", "ddr5") in ("ddr4", "ddr5", "lpddr4x", "lpddr5", "lpddr5x"), key
        assert 0.5 <= c.get("base_ghz", 1.0) <= c.get("boost_ghz", 6.5) <= 6.5, key
        assert set(c.get("isa", ())) <= {"avx2", "avx512", "avx_vnni", "avx512_vnni", "avx512_bf16", "amx"}, key
        assert 50 <= c.get("mem_gbps", 100) <= 1000, key
        for text in (key, c["name"], *c.get("aliases", ())):
            spelled = "".join(_cpu_words(str(text)))
            assert seen.setdefault(spelled, c["name"]) == c["name"], (text, seen[spelled], c["name"])
    assert len(cpus()) >= len(data)  # parts.yaml's and cpus.yaml's, each CPU once


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("EPYC 9355", "epyc-9355"),
        ("7950X3D", "ryzen9-7950x3d"),
        ("TR PRO 7975WX", "tr-pro-7975wx"),
        ("i5-12600K", "i5-12600k"),
        ("Xeon 8480+", "xeon-platinum-8480plus"),
        ("Threadripper PRO 7975WX", "tr-pro-7975wx"),
        ("AMD EPYC 7763", "epyc-7763"),
        ("M4 Max", "apple-m4-max"),
        ("i9-14900K", "core-i9-14900k"),  # parts.yaml's entry, with cpus.yaml's spellings
        ("AMD Threadripper PRO 7975WX (FCLK=2100)", "tr-pro-7975wx"),  # as a published row writes it
        ("AMD Ryzen Threadripper PRO 5975WX (32 cores)", "tr-pro-5975wx"),
    ],
)
def test_cpus_of_the_catalogue_by_the_names_people_type(name, key):
    assert lookup_cpu(name)[0] == key


def test_a_catalogue_cpu_gives_its_platform_and_says_what_it_lacks():
    """The Threadripper PRO 7975WX of the issue's example: 32 cores and eight channels of DDR5-5200 from its maker's
    data (not a 60 GB/s default), its fp32 peak assumed and said so; a CPU whose maker gives no channel count asks
    for ram= with them."""
    f, lines = describe(cpu="TR PRO 7975WX", ram="256GB")
    why = {d.field: d for d in lines}
    assert f["cpu_cores"] == 32
    assert f["cpu_mem_gbps"] == pytest.approx(8 * 5200 * 8 / 1000 * 0.75)
    assert "cpus.yaml (cpus.tr-pro-7975wx)" in why["cpu_mem_gbps"].source
    assert why["cpu_tflops"].how.startswith("assumed")
    with pytest.raises(ConfigError, match=r"^cpu=apple-m4-max: .* has no channels for the Apple M4 Max .*fix: ram="):
        describe(cpu="M4 Max", ram="128GB")
    f, _ = describe(cpu="M4 Max", ram="128GB:lpddr5x-8533x4")  # given in full, it plans
    assert f["cpu_mem_gbps"] > 0 and f["cpu_cores"] == 16
