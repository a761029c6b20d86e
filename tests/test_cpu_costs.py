"""The host CPU's costs: its compute rate from the CPU's data sheet, a runtime's share of it, and NUMA nodes."""

from __future__ import annotations

import dataclasses

import pytest

from hobbit.catalogue.machine import hardware_config
from hobbit.sim.config import ConfigError
from hobbit.sim.cost import GB, CostModel
from hobbit.sim.run import host_bandwidth
from hobbit.sim.system_checks import check_system

from sim_helpers import compose_sim


def test_a_cpu_named_gives_its_fp32_peak_and_its_sockets_numa_nodes():
    one = hardware_config(gpu="rtx4090", cpu="xeon-gold-6454s")
    two = hardware_config(gpu="rtx4090", cpu="xeon-gold-6454s", sockets="2")
    # 32 cores x 2.2 GHz x 64 fp32 FLOP a cycle, per socket (hobbit/catalogue/data/parts.yaml)
    assert one.cpu_tflops == pytest.approx(32 * 2.2 * 64 / 1000, rel=1e-3)
    assert two.cpu_tflops == pytest.approx(2 * one.cpu_tflops) and (one.numa_nodes, two.numa_nodes) == (1, 2)
    assert hardware_config(gpu="rtx4090", cpu="xeon-gold-6454s", cpu_tflops="3").cpu_tflops == 3.0  # given wins
    assert hardware_config(gpu="rtx4090").numa_nodes == 1


def test_one_copy_of_the_experts_reads_at_one_nodes_bandwidth():
    """llama.cpp (numa=single) on two sockets reads its CPU experts at one socket's bandwidth; KTransformers with
    USE_NUMA=1 (numa=replicate) at both sockets'. A one-token expert is bound by memory, so its time halves."""
    cfg = compose_sim("system=llama-cpp", "model=deepseek-v3")
    hw = hardware_config(gpu="rtx4090d", cpu="xeon-gold-6454s", sockets="2", ram="1024GiB:ddr5-4800x16")
    single = dataclasses.replace(cfg.system, numa="single")
    replicate = dataclasses.replace(cfg.system, numa="replicate")
    assert host_bandwidth(hw, single).cpu_mem_gbps == pytest.approx(hw.cpu_mem_gbps / 2)
    assert host_bandwidth(hw, replicate) is hw
    t_single = CostModel(cfg.model, host_bandwidth(hw, single)).cpu_expert_s(1)
    t_replicate = CostModel(cfg.model, host_bandwidth(hw, replicate)).cpu_expert_s(1)
    move = 2 * (hw.link_t0_s + 2 * cfg.model.hidden_size / (hw.link_gbps * GB))
    assert (t_single - move) == pytest.approx(2 * (t_replicate - move), rel=1e-6)
    with pytest.raises(ConfigError, match="system.numa=both must be single or replicate"):
        check_system(dataclasses.replace(cfg.system, numa="both"))


def test_a_prompts_experts_on_the_cpu_run_at_the_runtimes_share_of_its_flops():
    """cpu_flops_efficiency sets the compute-bound rate (many tokens an expert) and leaves the memory-bound one (one
    token) to cpu_kernel_efficiency; 0 means the same share for both."""
    cfg = compose_sim("model=deepseek-v3")
    hw = hardware_config(gpu="rtx4090d", cpu="xeon-gold-6454s")
    base = CostModel(cfg.model, hw, cpu_efficiency=1.0)
    half = CostModel(cfg.model, hw, cpu_efficiency=1.0, cpu_flops_efficiency=0.5)
    assert half.cpu_expert_s(1) == pytest.approx(base.cpu_expert_s(1))
    move = lambda t: 2 * (hw.link_t0_s + 2 * t * cfg.model.hidden_size / (hw.link_gbps * GB))
    assert half.cpu_expert_s(512) - move(512) == pytest.approx(2 * (base.cpu_expert_s(512) - move(512)), rel=1e-6)


def test_a_quantised_kv_cache_reads_fewer_bytes_at_long_context():
    """system.kv_bits (llama.cpp's -ctk/-ctv) scales the KV bytes attention reads: at 64K tokens of context a
    decode step's dense part is bound by memory, and its KV part costs 8.5/16 of f16's."""
    cfg = compose_sim("model=qwen3-30b-a3b")
    hw = hardware_config(gpu="rtx4060ti-16gb")
    f16, q8 = CostModel(cfg.model, hw), CostModel(cfg.model, hw, kv_scale=8.5 / 16)
    base = f16.dense_s(1, 0)
    assert q8.dense_s(1, 0) == base  # no context, no KV read
    assert q8.dense_s(1, 65536) - base == pytest.approx((f16.dense_s(1, 65536) - base) * 8.5 / 16, rel=1e-9)
