"""Runtimes configured by their own flags (sim/flags.py): llama.cpp's command line into the system's knobs."""

from __future__ import annotations

import dataclasses

import pytest

from hobbit.sim.config import ConfigError
from hobbit.sim.flags import apply_flags
from hobbit.sim.run import simulate

from sim_helpers import bundled, compose_sim


def _llama(flags: str):
    return dataclasses.replace(compose_sim("system=llama-cpp").system, flags=flags)


def test_llama_cpp_flags_set_the_knobs_they_name():
    got = apply_flags(_llama("-ngl 99 --n-cpu-moe 20 --no-mmap -c 8192 -ctk q8_0 -ctv q8_0 -t 16 -fa on"), 32)
    s = got.system
    assert (s.n_cpu_moe, s.host_load, s.kv_context, s.kv_bits) == (20, "load", 8192, 8.5)
    assert got.unmodelled == ("-t 16", "-fa on")
    assert apply_flags(_llama("--cpu-moe"), 32).system.cpu_moe_layers == list(range(32))
    assert apply_flags(_llama("-ot exps=CPU"), 32).system.cpu_moe_layers == list(range(32))
    # a published command line (development set, row 8): FFN of blocks 34-49 on the CPU, of a 48-layer model
    row8 = apply_flags(_llama(r'-ngl 100 -fa -c 32768 -ot "blk\.3[4-9]\.ffn=CPU,blk\.4[0-9]\.ffn=CPU"'), 48).system
    assert row8.cpu_moe_layers == list(range(34, 48)) and row8.kv_context == 32768
    # dense-first blocks count in llama.cpp's tensor names: blk.3 is the first MoE layer of DeepSeek-V3
    assert apply_flags(_llama(r"-ot 'blk\.3\.ffn_.*_exps=CPU'"), 58, dense_layers=3).system.cpu_moe_layers == [0]
    # and so they do in --n-cpu-moe N, which overrides blocks 0..N-1 (common/arg.cpp): 5 blocks, 2 MoE layers
    assert apply_flags(_llama("--n-cpu-moe 5"), 58, dense_layers=3).system.n_cpu_moe == 2
    assert apply_flags(_llama("--n-cpu-moe 2"), 58, dense_layers=3).system.n_cpu_moe == 0
    lru = dataclasses.replace(compose_sim("system=llama-cpp-lru").system)
    lru = apply_flags(dataclasses.replace(lru, flags="--moe-expert-cache 48 --moe-expert-cache-inserts 3"), 32).system
    assert (lru.cache.layer_slots, lru.cpu_insert) == (48, 3)
    # the PR's own command line keeps every layer's experts on the CPU (--cpu-moe): what the cache system does already
    pr = compose_sim("system=llama-cpp-lru").system
    pr = apply_flags(dataclasses.replace(pr, flags="-ngl 999 --cpu-moe --moe-expert-cache 64"), 32).system
    assert (pr.cache.layer_slots, pr.cpu_moe_layers, pr.placement) == (64, [], "cache")


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        ("-ngl 20 --n-cpu-moe 16", "some CPU layers would keep attention on the GPU"),
        ("--frobnicate", "--frobnicate is not a llama.cpp flag"),
        ("-ot attn=CPU", "matches no expert tensor"),
        ("-ot exps=CUDA0", "names another buffer"),
        ("--n-cpu-moe", "needs a value"),
        ("--n-cpu-moe x", "not a whole number"),
        ("-ctk q3_k", "not one of"),
    ],
)
def test_flags_it_cannot_model_are_refused_naming_them(flags, needle):
    with pytest.raises(ConfigError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        apply_flags(_llama(flags), 32)


def test_ngl_below_the_layer_count_runs_the_first_layers_whole_on_the_cpu():
    """llama-model.cpp: i_gpu_start = n_layer - n_gpu_layers, the blocks before it on the CPU, attention too."""
    s = apply_flags(_llama("-ngl 20"), 32).system
    assert (s.n_cpu_moe, s.cpu_layer_scope) == (12, "whole")
    # dense-first blocks leave the GPU first: 61 blocks, -ngl 40 puts blocks 0..20 on the CPU, MoE layers 0..17
    assert apply_flags(_llama("-ngl 40"), 58, dense_layers=3).system.n_cpu_moe == 18
    assert apply_flags(_llama("-ngl 999"), 32).system.cpu_layer_scope == "experts"
    cache = dataclasses.replace(compose_sim("system=llama-cpp-lru").system, flags="-ngl 20")
    with pytest.raises(ConfigError, match="does not do"):
        apply_flags(cache, 32)


def test_flags_on_a_system_without_a_runtime_are_refused():
    with pytest.raises(ConfigError, match="has no runtime whose flags they are"):
        apply_flags(dataclasses.replace(compose_sim("system=hobbit").system, flags="--cpu-moe"), 32)


def test_a_run_with_flags_reports_them_and_places_as_they_say():
    tr = bundled(8)
    cfg = compose_sim("system=llama-cpp", "system.weights=fp16")
    every = simulate(tr, cfg.model, cfg.hardware, dataclasses.replace(cfg.system, flags="--cpu-moe -t 8"))
    assert every.summary["flags"] == {"runtime": "llama.cpp", "given": "--cpu-moe -t 8", "unmodelled": ["-t 8"]}
    mix = every.summary["served_mix"]  # every routed expert on the CPU, but a prompt pass's: on the GPU (op offload)
    assert mix["cpu"] + mix["high_load"] == pytest.approx(1.0) and 0 < mix["high_load"] < 0.1
    six = r'-ot "blk\.([0-9]|1[0-9]|2[0-5])\.=CPU"'  # 26 layers' experts on the CPU, 6 (16.5 GiB at fp16) on the GPU
    some = simulate(tr, cfg.model, cfg.hardware, dataclasses.replace(cfg.system, flags=six))
    assert some.summary["system_config"]["cpu_moe_layers"] == list(range(26))
    assert 0.7 < some.summary["served_mix"]["cpu"] < 0.9
    with pytest.raises(ConfigError, match=r"leaves 31 layers' experts .* on the GPU"):
        simulate(tr, cfg.model, cfg.hardware, dataclasses.replace(cfg.system, flags=r'-ot "blk\.0\.=CPU" -c 1000'))


def test_the_kv_cache_the_flags_allocate_counts_against_the_device():
    tr = bundled(8)
    cfg = compose_sim("system=llama-cpp")
    base = simulate(tr, cfg.model, cfg.hardware, cfg.system).summary["memory"]
    big = simulate(tr, cfg.model, cfg.hardware, dataclasses.replace(cfg.system, flags="-c 32768")).summary["memory"]
    assert big["kv_bytes"] == 32768 * cfg.model.kv_bytes_per_token and big["free_bytes"] < base["free_bytes"]
    q8 = simulate(tr, cfg.model, cfg.hardware, dataclasses.replace(cfg.system, flags="-c 32768 -ctk q8_0 -ctv q8_0"))
    assert q8.summary["memory"]["kv_bytes"] == round(32768 * cfg.model.kv_bytes_per_token * 8.5 / 16)


def test_ktransformers_flags_keep_experts_on_the_gpu_as_kt_kernel_chooses_them():
    from hobbit.sim.run import gpu_experts

    kt = compose_sim("system=ktransformers").system
    got = apply_flags(
        dataclasses.replace(kt, flags="--kt-num-gpu-experts 2 --kt-method AMXINT4 --kt-cpuinfer 60"), 32, 0, 8
    )
    s = got.system
    assert (s.gpu_experts, s.precision.high, s.host_load) == (2, "int4", "load")  # kt-kernel's own buffers
    assert got.unmodelled == ("--kt-cpuinfer 60",)
    assert gpu_experts(s, 4, 8, None) == {(layer, e) for layer in range(4) for e in (0, 1)}  # uniform: ids 0, 1
    front = dataclasses.replace(s, gpu_experts_strategy="front-loading")
    assert gpu_experts(front, 4, 8, None) == {(layer, e) for layer in (0,) for e in range(8)}  # 2 x 4 = one layer
    ratio = apply_flags(dataclasses.replace(kt, flags="--kt-gpu-experts-ratio 0.25"), 32, 0, 8).system
    assert ratio.gpu_experts == 2
    with pytest.raises(ConfigError, match="deferred experts"):
        apply_flags(dataclasses.replace(kt, flags="--kt-max-deferred-experts-per-token 2"), 32, 0, 8)


def test_gpu_experts_run_on_the_gpu_and_too_many_are_refused_saying_how_many_fit():
    tr = bundled(8)
    cfg = compose_sim("system=ktransformers", "system.weights=fp16")
    two = simulate(tr, cfg.model, cfg.hardware, dataclasses.replace(cfg.system, flags="--kt-num-gpu-experts 1"))
    mix = two.summary["served_mix"]
    assert mix["high_hit"] > 0.05 and mix["cpu"] < 0.95 and mix["high_load"] == 0  # no copies: resident or CPU
    with pytest.raises(ConfigError, match=r"at most (\d) experts per layer fit .*system.gpu_experts=\1 or fewer"):
        simulate(tr, cfg.model, cfg.hardware, dataclasses.replace(cfg.system, gpu_experts=8))


def test_a_command_checks_gpu_experts_before_any_work():
    """``hobbit.api.check`` (what compare and tune run first) refuses the GPU experts that cannot fit, as a run does."""
    from hobbit.api import check

    tr = bundled(8)
    cfg = compose_sim("system=ktransformers", "system.weights=fp16")
    with pytest.raises(ConfigError, match="experts per layer fit"):
        check(tr, cfg.model, cfg.hardware, dataclasses.replace(cfg.system, gpu_experts=8))


def test_batch_flags_set_the_prompt_passes():
    """-ub sets the most tokens of a prompt pass; -b caps it (llama.cpp: n_ubatch = min(n_batch, n_ubatch));
    SGLang's --chunked-prefill-size does the same for KTransformers, -1 meaning no chunking."""
    assert _llama("").ubatch == 512  # llama.cpp's default n_ubatch
    assert apply_flags(_llama("-ub 128"), 32).system.ubatch == 128
    assert apply_flags(_llama("-b 64"), 32).system.ubatch == 64
    assert apply_flags(_llama("-b 4096 -ub 1024"), 32).system.ubatch == 1024
    assert apply_flags(_llama("--ubatch-size=256 --batch-size=100"), 32).system.ubatch == 100
    kt = compose_sim("system=ktransformers").system
    assert apply_flags(dataclasses.replace(kt, flags="--chunked-prefill-size 4096"), 32).system.ubatch == 4096
    assert apply_flags(dataclasses.replace(kt, flags="--chunked-prefill-size -1"), 32).system.ubatch == 0


def test_a_prompt_runs_in_ubatch_passes():
    """With -ub 32 each prompt of the bundled trace (up to 178 tokens) runs as ceil(P / 32) passes; a request's
    prefill time is the sum of its passes; decoding (no expert cache here) is unchanged."""
    import numpy as np

    tr = bundled(8)
    cfg = compose_sim("system=llama-cpp", "system.weights=fp16")
    whole = simulate(tr, cfg.model, cfg.hardware, cfg.system)
    chunked = simulate(tr, cfg.model, cfg.hardware, dataclasses.replace(cfg.system, flags="-ub 32"))
    pw, pc = whole.passes, chunked.passes
    prompt = pw["tokens"][pw["phase"] == 0]
    assert int((pc["phase"] == 0).sum()) == int(np.ceil(prompt / 32).sum()) > len(prompt)
    assert pc["tokens"][pc["phase"] == 0].max() == 32 and pc["tokens"].sum() == pw["tokens"].sum()
    sums = {}
    for r, ph, lat in zip(pc["request_id"], pc["phase"], pc["latency_ms"]):
        if ph == 0:
            sums[r] = sums.get(r, 0.0) + lat
    assert chunked.summary["prefill_ms_per_request"]["mean"] == pytest.approx(np.mean(list(sums.values())))
    assert chunked.summary["decode_ms_per_token"]["mean"] == pytest.approx(whole.summary["decode_ms_per_token"]["mean"])


@pytest.mark.parametrize("runtime", ["llama.cpp", "ik_llama.cpp"])
def test_op_offload_copies_the_host_experts_a_wide_pass_uses(runtime):
    """llama.cpp computes a prompt pass of 32+ tokens on the GPU, copying each host-side expert the pass uses once
    (not kept); ik_llama.cpp only at 32 x experts / top-k tokens (here 128). The bytes moved are those experts'
    bytes, worked out from the trace; one-token decode passes stay on the CPU; --no-op-offload turns it off. The
    compiled walk decides as the reference does."""
    import numpy as np

    from hobbit.sim.run import simulate as run

    tr = bundled(8)
    cfg = compose_sim("system=llama-cpp", "system.weights=fp16")
    system = dataclasses.replace(cfg.system, runtime=runtime, flags="--cpu-moe")
    on = run(tr, cfg.model, cfg.hardware, system)
    off = run(tr, cfg.model, cfg.hardware, dataclasses.replace(system, flags="--cpu-moe --no-op-offload"))
    plain = run(tr, cfg.model, cfg.hardware, system, engine="plain")
    wl = on.workload
    assert wl is not None
    at = 32 if runtime == "llama.cpp" else 32 * cfg.model.num_experts // cfg.model.top_k
    expert = on.summary["memory"]["expert_bytes"]
    want = sum(
        len(np.unique(wl.ids[a:b, layer])) * expert
        for a, b in zip(wl.pass_start, wl.pass_end)
        if b - a >= at
        for layer in range(wl.num_layers)
    )
    assert want > 0 and on.summary["bytes_loaded"] == want and off.summary["bytes_loaded"] == 0
    assert on.summary["served_mix"]["high_load"] > 0 == off.summary["served_mix"]["high_load"]
    assert on.summary["decode_ms_per_token"]["mean"] == pytest.approx(off.summary["decode_ms_per_token"]["mean"])
    assert on.summary["prefill_ms_per_request"]["mean"] != off.summary["prefill_ms_per_request"]["mean"]
    for key in ("bytes_loaded", "served_mix", "decode_ms_per_token", "prefill_ms_per_request"):
        assert plain.summary[key] == pytest.approx(on.summary[key], rel=1e-9), key
