"""Memory fit (sim/memory.py): the device's and the host's bytes, every placement knob checked against them, the
host-RAM-over-SSD tier worked by hand, context as a knob."""

from __future__ import annotations

import dataclasses
import re

import pytest

from hobbit.sim.config import ConfigError, HardwareConfig, ModelConfig, SystemConfig
from hobbit.sim.cost import CostModel
from hobbit.sim.memory import fit
from hobbit.sim.run import simulate

from conftest import run_cli
from sim_helpers import bundled, compose_sim

GiB = 2**30


@pytest.fixture(scope="module")
def trace():
    return bundled(8)


def test_the_device_holds_weights_in_the_systems_format_kv_at_the_context_and_the_reserve():
    cfg = compose_sim("model=mixtral-8x7b")
    m, hw = cfg.model, cfg.hardware
    fp16 = fit(m, hw, SystemConfig(weights="fp16"), 4096)
    assert fp16.resident_bytes == m.resident_bytes()  # 16-bit: 2 bytes a parameter, as before
    assert fp16.kv_bytes == 4096 * m.kv_bytes_per_token
    assert fp16.free_bytes == hw.device_memory_bytes - fp16.resident_bytes - fp16.kv_bytes - hw.reserve_bytes
    q4 = fit(m, hw, SystemConfig(weights="q4_k_m"), 4096)
    assert q4.resident_bytes < 0.4 * fp16.resident_bytes and q4.free_bytes > fp16.free_bytes
    longer = fit(m, hw, SystemConfig(weights="fp16"), 32768)
    assert fp16.free_bytes - longer.free_bytes == (32768 - 4096) * m.kv_bytes_per_token


def test_n_cpu_moe_that_cannot_fit_exits_2_saying_how_many_layers_fit(trace, tmp_path, capsys):
    """llama.cpp with fp16 Mixtral (93 GB of experts) on a 24 GB card: --n-cpu-moe 0 cannot fit; the message says
    how many layers' experts fit, and that many do."""
    over = ["model=mixtral-8x7b", "system=llama-cpp", "system.weights=fp16", "use_cache=false"]
    assert run_cli(["sim", *over, "system.n_cpu_moe=0", f"hydra.run.dir={tmp_path / 'a'}"]) == 2
    err = capsys.readouterr().err
    got = re.search(r"at most (\d+) layers' experts fit .*system\.n_cpu_moe=(\d+) or more", err)
    assert got, err
    fitting, fix = int(got[1]), int(got[2])
    assert 0 < fitting < 32 and fitting + fix == 32
    cfg = compose_sim(*over)
    each = 8 * cfg.model.expert_bytes("fp16")  # a layer's experts at fp16
    free = fit(cfg.model, cfg.hardware, cfg.system, max(trace.arrays.position) + 1).free_bytes
    assert fitting == free // each
    for n, ok in ((fix, True), (fix - 1, False)):
        system = dataclasses.replace(cfg.system, n_cpu_moe=n)
        if ok:
            res = simulate(trace, cfg.model, cfg.hardware, system)
            assert res.summary["served_mix"]["cpu"] > 0
        else:
            with pytest.raises(ConfigError, match=f"system.n_cpu_moe={n} puts {32 - n} layers"):
                simulate(trace, cfg.model, cfg.hardware, system)


def test_cache_pools_larger_than_the_free_memory_are_refused_and_one_pool_leaves_the_other_the_rest(trace):
    cfg = compose_sim("model=mixtral-8x7b", "system=hobbit")
    m, hw = cfg.model, cfg.hardware
    free = fit(m, hw, cfg.system, max(trace.arrays.position) + 1).free_bytes
    too_big = dataclasses.replace(cfg.system, cache=dataclasses.replace(cfg.system.cache, high_bytes=free + 1))
    with pytest.raises(ConfigError, match=r"system.cache.high_bytes=\d+ and low_bytes=-1 ask for .* \(fix: pools of"):
        simulate(trace, m, hw, too_big)
    half = free // 2
    one = dataclasses.replace(cfg.system, cache=dataclasses.replace(cfg.system.cache, high_bytes=half))
    res = simulate(trace, m, hw, one)
    cache = res.summary["cache"]
    assert cache["high_bytes"] <= half and cache["low_bytes"] > 0  # the low pool gets the rest, not nothing
    assert cache["low_slots"] == (free - half) // m.expert_bytes("int4")
    assert any("low_bytes derived" in n for n in res.summary["memory"]["notes"])


def _two_layer_model() -> ModelConfig:
    return ModelConfig(name="two", num_layers=2, num_experts=4, top_k=1, hidden_size=256, expert_ffn=256)


def test_the_host_ram_over_ssd_tier_worked_by_hand():
    """2 layers x 4 experts of 393,216 bytes (3 x 256 x 256 at fp16) = 3,145,728 bytes of experts on the host. With
    1,572,864 bytes of RAM for them, half of them are in RAM: a copy of one expert also reads it from the SSD half
    the time, 0.5 x (100 us + 393,216 B / 1 GB/s) = 246.608 us on top of the link's 6 us + 393,216 / 25 GB/s."""
    m = _two_layer_model()
    assert m.expert_bytes("fp16") == 393_216
    hw = HardwareConfig(
        host_memory_bytes=1_572_864, host_reserve_bytes=0, ssd_gbps=3.0, ssd_fault_gbps=1.0, ssd_t0_s=100e-6
    )
    system = SystemConfig(
        weights="fp16", host_load="mmap", precision=dataclasses.replace(SystemConfig().precision, mode="high")
    )
    mem = fit(m, hw, system, 16)
    assert mem.host_expert_bytes == 3_145_728 and mem.ram_share == 0.5 and mem.ssd_gbps == 1.0
    cost = CostModel(m, hw, memory=mem)
    link = 6e-6 + 393_216 / 25e9
    assert cost.transfer_s(393_216) == pytest.approx(link + 0.5 * (100e-6 + 393_216 / 1e9), rel=1e-12)
    streamed = fit(m, hw, dataclasses.replace(system, host_load="stream"), 16)
    assert streamed.ssd_gbps == 3.0  # the runtime's own reads go at the drive's sequential rate
    assert CostModel(m, hw, memory=streamed).transfer_s(393_216) == pytest.approx(
        link + 0.5 * (100e-6 + 393_216 / 3e9), rel=1e-12
    )
    roomy = fit(m, dataclasses.replace(hw, host_memory_bytes=10**9), system, 16)
    assert roomy.ram_share == 1.0 and CostModel(m, hw, memory=roomy).transfer_s(393_216) == pytest.approx(link)
    with pytest.raises(ConfigError, match=r"system.host_load=load: .* \(fix: system.host_load=mmap"):
        fit(m, hw, dataclasses.replace(system, host_load="load"), 16)


def test_hobbit_keeps_a_low_precision_copy_of_every_expert_on_the_host():
    m = _two_layer_model()
    mem = fit(m, HardwareConfig(host_memory_bytes=10**9, host_reserve_bytes=0), SystemConfig(), 16)
    assert mem.host_expert_bytes == 8 * (m.expert_bytes("fp16") + m.expert_bytes("int4"))


def test_context_grows_the_kv_cache_and_the_attention_time(trace):
    cfg = compose_sim("model=mixtral-8x7b", "system=hobbit")
    base = simulate(trace, cfg.model, cfg.hardware, cfg.system)
    deep = simulate(trace, cfg.model, cfg.hardware, cfg.system, context=8192)
    kv = cfg.model.kv_bytes_per_token
    assert deep.summary["memory"]["kv_bytes"] - base.summary["memory"]["kv_bytes"] == 8192 * kv
    assert deep.summary["memory"]["context"] == base.summary["memory"]["context"] + 8192
    assert deep.summary["decode_ms_per_token"]["mean"] > base.summary["decode_ms_per_token"]["mean"]


def test_an_old_precision_knob_on_the_hardware_names_its_new_place(tmp_path, capsys):
    assert run_cli(["sim", "hardware.low_precision=q4_0", f"hydra.run.dir={tmp_path}"]) == 2
    assert "system.precision.low=q4_0" in capsys.readouterr().err


def test_an_lru_page_cache_worked_by_hand():
    """Reads 0, 1, 0, 2, 1 through a page cache of two experts: 0 miss, 1 miss, 0 hit, 2 miss (1 leaves, the least
    recently used), 1 miss: 1 of 5 served from RAM."""
    import numpy as np

    from hobbit.sim.memory import lru_ram_share

    assert lru_ram_share([np.array([k]) for k in (0, 1, 0, 2, 1)], 2) == pytest.approx(0.2)
    assert lru_ram_share([np.array([0, 1]), np.array([1, 0])], 2) == pytest.approx(0.5)
    assert lru_ram_share([np.array([0])], 0) == 0.0


def test_skewed_routing_finds_more_in_ram_than_the_uniform_rule(trace):
    """RAM for a third of fp16 Mixtral's experts: the bundled trace's hot experts stay in an LRU page cache, so it
    serves more than a third of the reads; the uniform rule serves exactly RAM's share."""
    cfg = compose_sim("model=mixtral-8x7b", "system=ktransformers", "system.weights=fp16")
    m = cfg.model
    hw = dataclasses.replace(cfg.hardware, host_memory_bytes=m.num_layers * 8 * m.expert_bytes("fp16") // 3)
    hw = dataclasses.replace(hw, host_reserve_bytes=0)
    runs = {c: simulate(trace, m, hw, dataclasses.replace(cfg.system, host_cache=c)) for c in ("lru", "uniform")}
    share = {c: r.summary["memory"]["ram_share"] for c, r in runs.items()}
    assert share["uniform"] == pytest.approx(1 / 3, rel=1e-6)
    assert share["lru"] > share["uniform"]
    ms = {c: r.summary["decode_ms_per_token"]["mean"] for c, r in runs.items()}
    assert ms["lru"] < ms["uniform"]  # fewer reads from the SSD
    assert "RAM serves" in runs["lru"].summary["memory"]["notes"][-1]


def test_a_copy_moves_its_own_layers_bytes_in_every_engine(tmp_path):
    """A GGUF whose middle MoE layer stores its down projections as Q6_K: each copy charges its layer's bytes (the
    simulator moves exactly what the file holds), and the three engines agree on the times."""
    import numpy as np
    from test_model_files import E, _write_gguf

    from hobbit.catalogue.model_files import load_model
    from hobbit.traces.io import Trace
    from hobbit.traces.synthetic import SyntheticConfig, generate

    _write_gguf(tmp_path / "tiny.gguf")
    m = load_model(tmp_path / "tiny.gguf")
    assert m.layer_expert_bytes == [221_184, 254_976, 221_184]
    arrays, meta = generate(SyntheticConfig(num_layers=3, num_experts=E, top_k=2, requests=4, seed=5))
    trace = Trace(meta, arrays, "synthetic")
    cfg = compose_sim("system=on-demand")
    system = dataclasses.replace(
        cfg.system, cache=dataclasses.replace(cfg.system.cache, high_bytes=2 * 254_976, low_bytes=0)
    )
    runs = {
        e: simulate(trace, m, cfg.hardware, system, engine=e, profile_share=0.0) for e in ("fast", "plain", "simpy")
    }
    plain = runs["plain"]
    loads = [(k.layer, ld.nbytes) for s in plain.decisions.steps for ld, k in zip(s.loads, s.load_keys)]
    assert loads and all(n == m.layer_expert_bytes[layer] for layer, n in loads)
    assert {layer for layer, _ in loads} == {0, 1, 2}
    moved = sum(n for _, n in loads)
    for e, r in runs.items():
        assert r.summary["bytes_loaded"] == moved, e
        np.testing.assert_allclose(r.timeline.pass_end, plain.timeline.pass_end, rtol=1e-9, err_msg=e)


def test_sim_prints_what_its_answer_rests_on(tmp_path, capsys):
    """RAM for a third of the experts: the command's output says how much of them RAM holds and serves."""
    over = ["system=ktransformers", "hardware.host_memory_bytes=10000000000", "hardware.host_reserve_bytes=0"]
    assert run_cli(["sim", *over, "use_cache=false", f"hydra.run.dir={tmp_path}"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"memory: host RAM holds \d+% of the host-side experts, .* RAM serves [\d.]+% of their reads", out)
