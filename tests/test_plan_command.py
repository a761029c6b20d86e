"""``hobbit plan``: three models (Mixtral-class, 128-expert top-8, 256-expert) on two machines each; every setting it
prints fits by the memory rules every run checks, the runtimes rank by predicted decode speed, the flags are the
runtime's own, and the search chose the most the GPU can hold."""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

import pytest

from hobbit.api import check, configure, read_trace
from hobbit.planner.config import PlanConfig
from hobbit.planner.search import plan
from hobbit.planner.settings import RUNTIMES, block_regex
from hobbit.plumbing.glue import compose
from hobbit.sim.config import ConfigError
from hobbit.sim.flags import _tensor_layers, apply_flags

from conftest import run_cli

MACHINES = {
    "rtx4090": ["hardware=rtx4090-pcie4"],  # HOBBIT's machine: 24 GB over PCIe 4, 256 GB of RAM
    "16gb-ddr5": ["gpu=rtx4060ti-16gb", "ram=64GB:ddr5-6000x2"],  # a 16 GB card, dual-channel DDR5 (by its parts)
}
MODELS = ["mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3"]


def _cfg(model: str, machine: str, tmp_path, *more: str) -> PlanConfig:
    return compose(
        "plan",
        PlanConfig,
        [f"model={model}", *MACHINES[machine], "tune_trials=3", "points=3", f"out_dir={tmp_path}", *more],
    )


def _system(cfg: PlanConfig, name: str, flags: str):
    """The system the plan's row says to run: the runtime's preset with the printed flags (or hobbit's knobs)."""
    rt = RUNTIMES[name]
    if rt.grammar:
        base = configure(cfg.model, "rtx4090-pcie4", rt.preset).system
        return dataclasses.replace(base, weights=cfg.weights, runtime=rt.grammar, flags=flags)
    over = flags.split()[1:] if flags.startswith("system=") else []
    return configure(cfg.model, "rtx4090-pcie4", rt.preset, overrides=over).system


@pytest.mark.parametrize("machine", list(MACHINES))
@pytest.mark.parametrize("model", MODELS)
def test_plan_prints_settings_that_fit_ranked_by_decode_speed(model, machine, tmp_path):
    from hobbit.planner.search import machine as machine_of

    cfg = _cfg(model, machine, tmp_path)
    hw = machine_of(cfg)
    result = plan(cfg, tmp_path, progress=False)
    trace = read_trace(result.trace)
    fits = [r for r in result.rows if r["fits"]]
    assert fits, result.rows
    # ranked by predicted decode speed, the runtimes that cannot run last, each saying why
    decode = [r["decode_tok_s"] for r in fits]
    assert decode == sorted(decode, reverse=True)
    assert [r["rank"] for r in fits] == list(range(1, len(fits) + 1))
    assert result.rows[: len(fits)] == fits
    for r in result.rows[len(fits) :]:
        assert r["why"].startswith("does not fit: ") and len(r["why"]) > 30
    for r in fits:
        name = r["runtime"]
        system = _system(cfg, name, r["flags"])
        # the flags are the runtime's own: its grammar reads every one of them
        applied = apply_flags(system, cfg.model.num_layers, cfg.model.dense_layers, cfg.model.num_experts)
        assert applied.unmodelled == ()
        # it fits, by the same rules a run checks (the device's and the host's memory)
        check(trace, cfg.model, hw, system, profile=trace, context=cfg.context)
        assert r["gpu_bytes"] <= hw.device_memory_bytes - hw.reserve_bytes
        lo, hi = r["decode_range"]
        assert lo <= r["decode_tok_s"] <= hi and r["prefill_tok_s"] > 0
        assert r["why"]
    # llama.cpp's chosen split holds the most expert layers the GPU can: one more is refused by the memory rules
    llama = next((r for r in fits if r["runtime"] == "llama.cpp"), None)
    if llama is not None and (m := re.search(r"--n-cpu-moe (\d+)", llama["flags"])):
        blocks = int(m.group(1)) - 1
        tighter = _system(cfg, "llama.cpp", llama["flags"].replace(m.group(0), f"--n-cpu-moe {blocks}"))
        if blocks > cfg.model.dense_layers:
            with pytest.raises(ConfigError, match="experts"):
                check(trace, cfg.model, hw, tighter, profile=trace, context=cfg.context)
    doc = json.loads((tmp_path / "plan.json").read_text())
    assert [r["runtime"] for r in doc["ranked"]] == [r["runtime"] for r in result.rows]
    assert (tmp_path / "plan.png").stat().st_size > 10_000
    md = (tmp_path / "plan.md").read_text()
    assert f"Run **{fits[0]['label']}**" in md and fits[0]["flags"] in md


def test_a_model_whose_file_fits_in_the_gpu_is_planned_whole_on_it(tmp_path):
    """Mixtral at Q4_K_M (26 GB) on an 80 GB A100: llama.cpp keeps every expert on the GPU (no --n-cpu-moe), and
    nothing bounds it but the GPU."""
    cfg = compose(
        "plan",
        PlanConfig,
        ["model=mixtral-8x7b", "hardware=a100-pcie4", "runtimes=[llama.cpp]", "points=2", f"out_dir={tmp_path}"],
    )
    (row,) = plan(cfg, None, progress=False).rows
    assert row["flags"] == f"-ngl 999 -c {cfg.prompt + cfg.gen}"
    assert row["why"].startswith("GPU-bound")


def test_ik_llama_cpp_regex_names_exactly_the_cpu_blocks():
    """The -ot regex the plan prints for ik_llama.cpp keeps blocks 0..n-1 on the CPU, no more (llama.cpp's tensor
    names, as sim.flags reads them)."""
    for n in (1, 2, 9, 10, 11, 20, 24, 30, 56, 61, 99):
        rx = rf"blk\.{block_regex(n)}\.ffn_.*_exps"
        assert _tensor_layers(rx, 100, 0) == set(range(n)), n


def test_plan_with_a_trace_uses_it_and_gives_no_locality_range(tmp_path):
    """trace=: the user's routing (here the bundled tiny model's, as Mixtral: same topology) replaces the synthetic
    one; its range collapses to the one prediction."""
    from hobbit.traces.tiny import bundled_trace

    cfg = _cfg("mixtral-8x7b", "rtx4090", tmp_path, f"trace={bundled_trace()}", "runtimes=[llama.cpp,ktransformers]")
    result = plan(cfg, tmp_path, progress=False)
    assert result.trace == bundled_trace()
    for r in result.rows:
        assert r["decode_range"] == [r["decode_tok_s"], r["decode_tok_s"]]


def test_plan_reads_a_trace_a_window_at_a_time(tmp_path):
    """trace= with window_tokens=N: every prediction and HOBBIT's tuning trials read the file a window at a time, and
    the plan is the one over the trace read whole; the trace is never read whole."""
    from unittest import mock

    from hobbit.traces import io as trace_io
    from hobbit.traces.tiny import bundled_trace

    more = [f"trace={bundled_trace()}", "runtimes=[llama.cpp,hobbit]", "tune_trials=2", "points=2"]
    whole = plan(_cfg("mixtral-8x7b", "rtx4090", tmp_path / "a", *more), tmp_path / "a", progress=False)
    with mock.patch.object(trace_io, "read_trace", side_effect=AssertionError("read whole")):
        cfg = _cfg("mixtral-8x7b", "rtx4090", tmp_path / "b", *more, "window_tokens=300")
        win = plan(cfg, tmp_path / "b", progress=False)
    assert sorted(r["runtime"] for r in win.rows) == ["hobbit", "llama.cpp"] and all(r["fits"] for r in win.rows)
    assert [(r["runtime"], r["decode_tok_s"], r["prefill_tok_s"]) for r in win.rows] == [
        (r["runtime"], r["decode_tok_s"], r["prefill_tok_s"]) for r in whole.rows
    ]
    chosen = win.chosen["hobbit"].prediction
    assert chosen is not None and chosen.summary["windows"]["tokens"] == 300


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["runtimes=[vllm]"], "runtimes=['vllm'] are not runtimes the plan knows"),
        (["gpu=rtx9999"], "rtx9999"),
        (["ram=lots"], "ram"),
        (["hardware=rtx4090-pcie4", "gpu=rtx4060ti-16gb"], "hardware=rtx4090-pcie4 and gpu=rtx4060ti-16gb both name"),
        (["hardware.device_tflops=100", "gpu=rtx4060ti-16gb"], "hardware.device_tflops=100 and gpu=rtx4060ti-16gb"),
    ],
)
def test_bad_input_exits_2_naming_it(args, needle, tmp_path, capsys):
    assert run_cli(["plan", "model=mixtral-8x7b", *args, f"hydra.run.dir={tmp_path}"]) == 2
    assert needle in capsys.readouterr().err


def test_a_long_context_runs_the_llama_cpp_familys_kv_cache_at_q8_0(tmp_path):
    """At 64K tokens of history Qwen3-30B-A3B's f16 KV cache (6 GiB) would take over an eighth of a 16 GB card:
    kv_cache=auto runs it at q8_0 (with the flash attention a quantised V cache needs), which leaves room for more
    expert layers on the GPU and reads half the bytes, so it decodes faster than the f16 plan of the same machine."""
    machine = ["gpu=rtx4060ti-16gb", "ram=64GB:ddr5-6000x2", "context=65536", "points=3", f"out_dir={tmp_path}"]
    auto = plan(compose("plan", PlanConfig, ["model=qwen3-30b-a3b", "runtimes=[llama.cpp,ik_llama.cpp]", *machine]))
    f16 = plan(compose("plan", PlanConfig, ["model=qwen3-30b-a3b", "runtimes=[llama.cpp]", "kv_cache=f16", *machine]))
    by = {r["runtime"]: r for r in auto.rows}
    assert by["llama.cpp"]["flags"].endswith("-fa on -ctk q8_0 -ctv q8_0")
    assert by["ik_llama.cpp"]["flags"].endswith("-fa -ctk q8_0 -ctv q8_0")
    assert any("KV cache at q8_0" in n for n in auto.notes)
    model = compose("plan", PlanConfig, ["model=qwen3-30b-a3b", "out_dir=."]).model
    for name, want in (("llama.cpp", ("-fa on",)), ("ik_llama.cpp", ("-fa",))):
        applied = apply_flags(auto.chosen[name].system, model.num_layers, 0, model.num_experts)
        assert applied.system.kv_bits == 8.5 and applied.unmodelled == want
    (plain,) = f16.rows
    assert "-ctk" not in plain["flags"] and by["llama.cpp"]["decode_tok_s"] > plain["decode_tok_s"]


def test_a_preset_beside_machine_keys_is_refused_not_dropped():
    """plan_for with a hardware preset and machine keys: the keys would build the machine alone, dropping the
    preset, so the call is refused naming both; either alone plans."""
    from hobbit.planner.search import plan_for
    from hobbit.sim.config import ConfigError

    with pytest.raises(ConfigError, match="hardware=rtx4090-pcie4 and gpu=rtx4060ti-16gb both name the machine"):
        plan_for("mixtral-8x7b", "rtx4090-pcie4", gpu="rtx4060ti-16gb", runtimes=["llama.cpp"])
    with pytest.raises(ConfigError, match="hardware.device_tflops=100 and gpu=rtx4060ti-16gb"):
        knob: dict[str, Any] = {"hardware.device_tflops": 100}
        plan_for("mixtral-8x7b", gpu="rtx4060ti-16gb", runtimes=["llama.cpp"], **knob)


def test_a_settings_memory_and_bottleneck_are_the_simulators_answer():
    """``sim.results.account``: llama.cpp with the experts of 20 of Mixtral's 32 layers on the CPU keeps the other 12
    layers' experts on the GPU beside the resident weights and the KV cache, and is bound by the CPU's memory; with
    every expert on the GPU, by the GPU. The planner asks this one question of each setting and works out neither
    itself."""
    from pathlib import Path

    from hobbit.planner.predict import predict_config
    from hobbit.sim.results import account

    sim = configure("mixtral-8x7b", "a100-pcie4", "llama-cpp")
    for flags, layers_on_gpu, bound in (
        ("-ngl 999 --n-cpu-moe 20 -c 640", 12, "CPU-memory-bound: the experts of 20 of 32 layers run on the CPU"),
        ("-ngl 999 -c 640", 32, "GPU-bound: every expert on the GPU"),
    ):
        system = dataclasses.replace(sim.system, runtime="llama.cpp", flags=flags, weights="q4_k_m")
        summary = predict_config(dataclasses.replace(sim, system=system), prompt=64, decode=4).summary
        acc = account(summary, system, sim.model, sim.hardware)
        m = summary["memory"]
        assert acc.footprint.gpu_bytes == m["resident_bytes"] + m["kv_bytes"] + layers_on_gpu * 8 * m["expert_bytes"]
        assert acc.bound_by.startswith(bound), acc.bound_by
    room = Path(__file__).parents[1] / "hobbit" / "planner"
    planner = "".join((room / f"{name}.py").read_text() for name in ("config", "settings", "search", "report"))
    for key in ("resident_bytes", "kv_bytes", "host_expert_bytes", "link_busy_fraction", "cpu_moe_layers"):
        assert f'["{key}"]' not in planner, f"the planner works out {key} itself: ask sim.results.account"
