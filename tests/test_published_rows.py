"""Published measurements read from their free-text descriptions (hobbit/planner/published.py): every row of the project's
development set (benchmarks/published/development.csv), the exact setting of rows covering each rule, every flag line
accepted by the simulator's flag grammar, every machine by ``describe``, and rows never seen, in other spellings."""

from __future__ import annotations

import csv
import dataclasses
from pathlib import Path

import pytest

from hobbit.catalogue.machine import describe
from hobbit.planner.published import COLUMNS, Setting, nearest_type, parse_row, read_settings
from hobbit.sim.config import HardwareConfig
from hobbit.sim.flags import apply_flags

from sim_helpers import compose_sim

DEV = Path(__file__).parents[1] / "benchmarks" / "published" / "development.csv"


@pytest.fixture(scope="module")
def read() -> tuple[dict[str, Setting], dict[str, str]]:
    settings, failed = read_settings(DEV)
    return {s.row: s for s in settings}, dict(failed)


def row(**cells: str) -> dict[str, str]:
    """A row never seen: every column empty but those given."""
    return {c: "" for c in COLUMNS} | {"row": "x1", "machine": "X", "gpu": "RTX 4090", "vram_gb": "24"} | cells


def test_every_row_is_read_or_reported_with_its_reason(read):
    settings, failed = read
    with DEV.open(newline="", encoding="utf-8") as f:
        ids = [r["row"] for r in csv.DictReader(f)]
    assert len(ids) == 38 and set(settings) | set(failed) == set(ids) and not set(settings) & set(failed)
    assert sorted(failed) == ["21", "22", "23", "24"]  # Qwen3.8-Flash-Next: no preset
    for why in failed.values():
        assert why.startswith("model: 'Qwen3.8-Flash-Next (qwen4exp)' is not a model preset (conf/model: deepseek-v3,")


# (row, model, weights, system, runtime, flags, hardware, threads, prompt, context, pp, tg, unmodelled contains)
EXPECTED = [
    ("1", "deepseek-v3", "q4_k_m", "ktransformers", "ktransformers", "--cpu_infer 33",
     {"gpu": "rtx4090d", "cpu": "xeon-gold-6454s", "ram": "512GiB:ddr5-4800x8"}, 33, 500, 0, 54.21, 8.73, ""),
    ("2", "deepseek-v3", "q4_k_m", "ktransformers", "ktransformers", "--cpu_infer 65",
     {"gpu": "rtx4090d", "cpu": "xeon-gold-6454s", "sockets": "2", "ram": "1024GiB:ddr5-4800x16"}, 65, 500, 0,
     82.94, 12.208, ""),
    ("3", "deepseek-v3", "q4_k_m", "ktransformers", "ktransformers", "--cpu_infer 65",
     {"gpu": "rtx4090d", "cpu": "xeon-gold-6454s", "sockets": "2", "ram": "1024GiB:ddr5-4800x16"}, 65, 500, 0,
     97.32, 13.69, "changes the model: only 6 of 8 routed experts activated"),
    ("4", "deepseek-v3", "q4_k_m", "llama-cpp", "llama.cpp", "",
     {"gpu": "rtx4090d", "cpu": "xeon-gold-6454s", "sockets": "2", "ram": "1024GiB:ddr5-4800x16"}, 64, 500, 0,
     10.31, 4.51, ""),
    ("5", "deepseek-v3", "q4_k_m", "ktransformers", "ktransformers", "",
     {"gpu": "rtx4090", "cpu": "xeon-gold-6454s", "sockets": "2", "ram": "1024GiB:ddr5-4800x16"}, 0, 969, 0,
     88.2, 13.5, ""),
    ("7", "qwen3-30b-a3b", "iq4_xs", "llama-cpp", "llama.cpp", "-t 16 -ctk q8_0 -ub 512",
     {"gpu": "rtx4080", "cpu": "ryzen9-7950x"}, 16, 512, 0, 141.84, 25.26,
     "CPU-only run: attention on the CPU is not modelled"),
    ("8", "qwen3-30b-a3b", "iq4_xs", "llama-cpp", "llama.cpp",
     r'-ngl 100 -fa -c 32768 -ot "blk\.3[4-9]\.ffn=CPU,blk\.4[0-9]\.ffn=CPU" -ub 512',
     {"gpu": "rtx4080", "cpu": "ryzen9-7950x"}, 16, 512, 0, 871.89, 68.68, ""),
    ("9", "qwen3-30b-a3b", "iq4_xs", "llama-cpp", "ik_llama.cpp",
     r'-ot "blk\.3[4-9]\.ffn=CPU,blk\.4[0-9]\.ffn=CPU" -rtr -fmoe -ub 512',
     {"gpu": "rtx4080", "cpu": "ryzen9-7950x"}, 16, 512, 0, 1445.39, 76.74, ""),
    ("10", "qwen3-235b-a22b", "bpw3.903", "llama-cpp", "ik_llama.cpp",
     r'-ngl 99 -ot "blk\.1[2-9]\.ffn.*=CPU" -ot "blk\.[2-8][0-9]\.ffn.*=CPU" -ot "blk\.9[0-3]\.ffn.*=CPU" -fa '
     r"-ctk q8_0 -ctv q8_0 -fmoe -rtr -c 32768 -ub 512",
     {"gpu": "rtx3090ti", "cpu": "ryzen9-9950x", "ram": "96GiB:ddr5-5600x2"}, 16, 512, 0, 122.94, 10.73, ""),
    ("18", "qwen3.5-122b-a10b", "q4_k_m", "llama-cpp", "llama.cpp",
     "-ot exps=CPU -b 3072 -ub 3072 -c 131072 -ctk q8_0 -ctv q8_0",
     {"gpu": "rtx4090", "cpu": "ryzen9-7950x", "ram": "96GiB"}, 0, 2928, 0, (514.93 + 534.64 + 531.26) / 3,
     (15.60 + 15.67 + 15.69) / 3, ""),
    ("19", "qwen3.5-122b-a10b", "q4_k_m", "llama-cpp", "llama.cpp",
     "--n-cpu-moe 40 -b 3072 -ub 3072 -c 131072 -ctk q8_0 -ctv q8_0",
     {"gpu": "rtx4090", "cpu": "ryzen9-7950x", "ram": "96GiB"}, 0, 2928, 0, (556.42 + 581.73 + 618.08) / 3,
     (17.93 + 17.81 + 17.87) / 3, ""),
    ("20", "qwen3.5-122b-a10b", "q4_k_m", "llama-cpp", "llama.cpp", "-b 3072 -ub 3072 -c 131072 -ctk q8_0 -ctv q8_0",
     {"gpu": "rtx4090", "cpu": "ryzen9-7950x", "ram": "96GiB"}, 0, 2928, 0, (557.18 + 542.76 + 546.77) / 3,
     (22.26 + 22.97 + 22.77) / 3, "hot-expert VRAM cache (LLAMA_ARG_MOE_HOT_K) is not modelled"),
    ("29", "qwen3.6-35b-a3b", "q4_k_m", "llama-cpp", "llama.cpp", "", {"gpu": "rtx5080"}, 0, 2700, 0, 46.0, 14.6,
     "CPU-only run"),
    ("30", "qwen3.6-35b-a3b", "q4_k_m", "llama-cpp", "llama.cpp", "--cpu-moe -ngl 99", {"gpu": "rtx5080"}, 0, 2700,
     0, 692.0, 36.5, ""),
    ("37", "gpt-oss-120b", "mxfp4_moe", "llama-cpp", "llama.cpp", "--cpu-moe", {"cpu": "core-i9-14900k"}, 0, 3440, 0,
     122.66, 18.04, "GPU not stated"),
    ("38", "gpt-oss-120b", "mxfp4_moe", "llama-cpp", "llama.cpp", "--n-cpu-moe 36 -ngl 999 -fa",
     {"cpu": "core-i9-14900k"}, 0, 12717, 0, 134.44, 25.62, "GPU not stated"),
    ("39", "glm-4.7-flash", "q5_k", "llama-cpp", "ik_llama.cpp",
     "--no-mmap -b 2048 -ub 2048 -c 131072 -ctk f16 -ctv f16",
     {"gpu": "rtx-pro-6000-maxq", "cpu": "epyc-9175f", "ram": "768GiB:ddr5-6400x12"}, 13, 30000, 0, 100.32, 20.23,
     "CPU-only run"),
    ("40", "glm-4.7-flash", "q5_k", "llama-cpp", "ik_llama.cpp", "-ot exps=CPU -b 2048 -ub 2048 -c 131072",
     {"gpu": "rtx-pro-6000-maxq", "cpu": "epyc-9175f", "ram": "768GiB:ddr5-6400x12"}, 13, 30000, 0, 1635.35, 66.84,
     ""),
    ("41", "glm-4.7-flash", "q5_k", "llama-cpp", "ik_llama.cpp", "-b 2048 -ub 2048 -c 131072 --n-cpu-moe 0",
     {"gpu": "rtx-pro-6000-maxq", "cpu": "epyc-9175f", "ram": "768GiB:ddr5-6400x12"}, 13, 30000, 0, 3723.34, 99.42,
     ""),
    ("48", "mixtral-8x7b", "fp16", "moe-infinity", "", "", {"gpu": "rtx-a5000"}, 0, 0, 0, None, 1.36, ""),
    ("49", "mixtral-8x7b", "q4_k_m", "llama-cpp", "llama.cpp", "", {"gpu": "rtx-a5000"}, 0, 0, 0, None, 1.11, ""),
    ("50", "mixtral-8x7b", "hqq2", "moe-offloading", "", "", {"gpu": "rtx-a5000"}, 0, 0, 0, None, 0.57, ""),
    ("52", "qwen3.5-397b-a17b", "q4_0", "", "", "", {"gpu": "rtx4090", "ram": "64GiB"}, 0, 0, 0, None, 5.35,
     "runtime flash-moe CUDA engine is not modelled"),
    ("53", "qwen3.5-397b-a17b", "q4_0", "", "", "", {"gpu": "rtx3060-12gb", "ram": "755GiB"}, 0, 0, 0, None, 2.92,
     "runtime flash-moe"),
    ("55", "qwen3-30b-a3b", "q4_k_m", "", "", "", {"gpu": "rtx5090", "link_gbps": "25.6"}, 0, 512, 0, 10580.0, 311.24,
     "runtime imp (custom CUDA engine) is not modelled"),
]  # fmt: skip


@pytest.mark.parametrize("want", EXPECTED, ids=[w[0] for w in EXPECTED])
def test_the_setting_of_each_kind_of_row(read, want):
    rid, model, weights, system, runtime, flags, hardware, threads, prompt, context, pp, tg, unmodelled = want
    s = read[0][rid]
    assert (s.model, s.weights, s.system, s.runtime, s.flags) == (model, weights, system, runtime, flags)
    assert s.hardware == hardware
    assert (s.threads, s.prompt_tokens, s.context) == (threads, prompt, context)
    assert s.pp_tok_s == (pytest.approx(pp) if pp is not None else None)
    assert s.tg_tok_s == pytest.approx(tg)
    if unmodelled:
        assert unmodelled in s.unmodelled
    else:
        assert s.unmodelled == ""
    assert s.source and s.machine


def test_what_was_assumed_is_said(read):
    s = read[0]

    def said(rid: str, text: str) -> bool:
        return any(text in a for a in s[rid].assumed)

    assert said("1", "one socket of 2 in use (numactl")
    assert said("4", "offload flags not stated") and said("4", "socket use not stated")
    assert said("7", "the experts' type iq4_xs; the other tensors' stated types are not modelled")
    assert said("9", "row 8's -ot taken")
    assert said("10", "IQ3_K mix at its stated 3.903 bits per weight: every tensor at it (bpw3.903") and said(
        "10", "dropped: -amb 512"
    )
    assert said("10", "RAM speed not stated: DDR5-5600, the AMD Ryzen 9 9950X's rated speed")
    assert said("10", "2 DIMMs on the AMD Ryzen 9 9950X's 2 channels -> 2 channels")
    assert said("18", "Q4_K_L is not a llama.cpp file type: Q4_K_M") and said("18", "Q8_0 token embeddings")
    assert said(
        "18",
        "RAM speed not stated: its capacity 96GiB; its speed and channels the AMD Ryzen 9 7950X's rated DDR5-5200 x2",
    )
    assert said("29", "format not stated: Q4_K_M, the default of GGUF downloads") and said(
        "29", "Ollama runs llama.cpp"
    )
    assert said("37", "MXFP4_MOE") and said("38", "-c 0")
    assert said("39", "IQ5_K at 5.5 bits per weight (its block's): q5_k") and said("39", "read as 30000")
    assert said("48", "format not stated") is False and said("50", "HQQ, 2-bit experts (hqq2")
    assert said("52", "4-bit, read as q4_0") and said("55", "measured host-to-device rate, 25.6 GB/s")
    assert said("51", "host's memory bandwidth HardwareConfig's default, 60 GB/s")


def test_every_modelled_flag_line_is_taken_by_the_simulator_and_every_machine_by_describe(read):
    modelled = 0
    for s in read[0].values():
        fields, _ = describe(**s.hardware)
        HardwareConfig(**fields)
        if s.unmodelled:
            continue
        modelled += 1
        cfg = compose_sim(f"system={s.system}", f"model={s.model}")
        system = dataclasses.replace(cfg.system, runtime=s.runtime, flags=s.flags, weights=s.weights)
        m = cfg.model
        applied = apply_flags(system, m.num_layers, m.dense_layers, m.num_experts).system
        if "--n-cpu-moe" in s.flags or "-ot" in s.flags or "--cpu-moe" in s.flags:
            assert applied.cpu_moe_layers or applied.n_cpu_moe >= 0, s.row
    assert modelled == 17
    cfg = compose_sim("system=llama-cpp", "model=qwen3-235b-a22b")
    ten = dataclasses.replace(cfg.system, runtime="ik_llama.cpp", flags=read[0]["10"].flags)
    assert apply_flags(ten, 94).system.cpu_moe_layers == list(range(12, 94))  # FFN of layers 12-93 on the CPU


def test_rows_never_seen_in_other_spellings():
    s = parse_row(
        row(
            model="Qwen3-30B-A3B-Instruct-2507",
            quant="Q5_K_M",
            runtime="llama.cpp b6000",
            offload_flags="--n-cpu-moe=24 -ngl 99 --no-mmap -amb 512",
            cpu="AMD Ryzen 9 7950X",
            ram_size="64 GB",
            ram_type_speed_channels="DDR5-6000 2ch",
            ctx_or_prompt_tokens="pp512",
            pp_tok_s="900",
            tg_tok_s="40",
        )
    )
    assert (s.model, s.weights, s.system, s.runtime) == ("qwen3-30b-a3b", "q5_k_m", "llama-cpp", "llama.cpp")
    assert s.flags == "--n-cpu-moe 24 -ngl 99 --no-mmap" and s.unmodelled == ""
    assert s.hardware == {"gpu": "rtx4090", "cpu": "ryzen9-7950x", "ram": "64GiB:ddr5-6000x2"}
    assert (s.prompt_tokens, s.pp_tok_s, s.tg_tok_s) == (512, 900.0, 40.0)
    # an -ot rule matching no expert tensor is dropped, said so; -cmoe and environment spellings
    s = parse_row(
        row(
            model="Qwen3-30B-A3B",
            quant="UD-Q4_K_XL",
            runtime="llama.cpp",
            offload_flags=r'-ncmoe 20 -ot "per_layer_token_embd\.weight=CPU"',
        )
    )
    assert s.flags == "--n-cpu-moe 20" and s.weights == "q4_k_m"
    assert any("per_layer_token_embd" in a and "dropped" in a for a in s.assumed)
    assert any("unsloth's dynamic Q4_K_XL" in a for a in s.assumed)
    s = parse_row(
        row(
            model="qwen3-30b-a3b",
            quant="Q8_0",
            runtime="llama.cpp",
            offload_flags="LLAMA_ARG_N_CPU_MOE=12 LLAMA_ARG_FLASH_ATTN=1 LLAMA_ARG_CTX_SIZE=16384",
        )
    )
    assert (s.flags, s.weights) == ("--n-cpu-moe 12 -fa -c 16384", "Q8_0")
    # experts placed on a GPU buffer first: first-match-wins, one CPU rule over the rest
    s = parse_row(
        row(
            model="qwen3-30b-a3b",
            quant="Q4_K_M",
            runtime="ik_llama.cpp",
            offload_flags=r'-ngl 99 -ot "blk\.(0|1)\.ffn.*=CUDA0" -ot exps=CPU -c 8k',
        )
    )
    cfg = compose_sim("system=llama-cpp", "model=qwen3-30b-a3b")
    applied = apply_flags(dataclasses.replace(cfg.system, runtime=s.runtime, flags=s.flags), 48)
    assert applied.system.cpu_moe_layers == list(range(2, 48)) and applied.system.kv_context == 8192
    # an expert cache: llama-cpp-lru
    s = parse_row(
        row(
            model="qwen3-30b-a3b",
            quant="Q4_K_M",
            runtime="llama.cpp (PR #27861)",
            offload_flags="--cpu-moe --moe-expert-cache 64 -ngl 99",
        )
    )
    assert (s.system, s.flags) == ("llama-cpp-lru", "--cpu-moe --moe-expert-cache 64 -ngl 99")


def test_machines_never_seen():
    s = parse_row(
        row(
            model="DeepSeek-R1 (671B)",
            quant="Q2_K_XL",
            runtime="KTransformers",
            offload_flags="--kt-num-gpu-experts 4 --cpu_infer 60 --foo 3",
            gpu="2x RTX 3090",
            cpu="Intel Xeon Platinum 8480+ (56 cores/socket), dual socket",
            ram_size="1.5 TB",
            ram_type_speed_channels="quad-channel DDR4-3200 per socket",
        )
    )
    assert (s.model, s.weights, s.flags, s.threads) == (
        "deepseek-v3",
        "Q2_K",
        "--kt-num-gpu-experts 4 --cpu_infer 60",
        60,
    )
    assert any("DeepSeek-V3's architecture" in a for a in s.assumed)
    assert s.hardware == {"gpu": "rtx3090", "cpu_cores": "112", "ram": "1536GiB:ddr4-3200x8"}
    assert "2 GPUs: the simulator models one" in s.unmodelled
    describe(**s.hardware)
    # RAM type without a size: the smallest power of two holding the file (said); an unknown GPU: its memory only
    s = parse_row(
        row(
            model="gpt-oss-20b",
            quant="MXFP4",
            runtime="llama.cpp",
            offload_flags="--cpu-moe",
            gpu="Radeon RX 7900 XTX",
            vram_gb="24",
            ram_type_speed_channels="DDR5-5600 dual channel",
        )
    )
    assert s.hardware == {"vram": "24GiB", "ram": "16GiB:ddr5-5600x2"}  # 12.1 GB file + 4 GiB reserve
    assert any(a.startswith("RAM capacity not stated: 16 GiB") for a in s.assumed)
    assert any("'Radeon RX 7900 XTX' is not in hobbit/catalogue/data/parts.yaml" in a for a in s.assumed)
    describe(**s.hardware)
    # -ngl 0 is CPU-only, said; -ngl below the layer count runs the first layers whole on the CPU (modelled)
    assert "CPU-only" in parse_row(row(model="qwen3-30b-a3b", runtime="llama.cpp", offload_flags="-ngl 0")).unmodelled
    part = parse_row(row(model="qwen3-30b-a3b", runtime="llama.cpp", offload_flags="-ngl 30"))
    assert "flags not modelled" not in part.unmodelled and part.flags == "-ngl 30"


def test_unreadable_and_unmodelled_rows_are_reported_not_raised(tmp_path):
    rows = [
        row(row="a", model="Qwen3-30B-A3B", quant="Q4_K_M", runtime="vLLM 0.8.5", tg_tok_s="12"),
        row(row="b", model="Qwen3-30B-A3B", quant="AQLM", runtime="llama.cpp"),
        row(row="c", model="Qwen3-30B-A3B", quant="Q4_K_M", runtime="llama.cpp", pp_tok_s="fast"),
        row(row="d", model="Mistral-Large-3", runtime="llama.cpp"),
    ]
    path = tmp_path / "new.csv"
    with path.open("w", newline="", encoding="utf-8") as f:
        fields: list[str] = list(COLUMNS)
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    settings, failed = read_settings(path)
    assert [s.row for s in settings] == ["a"] and settings[0].system == ""
    assert settings[0].unmodelled.startswith("runtime vLLM 0.8.5 is not modelled")
    why = dict(failed)
    assert why["b"].startswith("quant: 'AQLM' names no format")
    assert why["c"].startswith("pp_tok_s: 'fast' is not a rate")
    assert why["d"].startswith("model: 'Mistral-Large-3' is not a model preset")


def test_nearest_type_by_bits_per_weight():
    assert [nearest_type(b) for b in (3.903, 3.4375, 5.5, 2.6, 2.3, 8.4)] == [
        "iq4_xs",
        "q3_k",
        "q5_k",
        "q2_k",
        "iq2_xs",
        "q8_0",
    ]
