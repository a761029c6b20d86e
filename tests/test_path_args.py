"""Models and machines as files (hobbit/plumbing/path_args.py, hobbit/commands/hardware.py): ``model=path/to/model.gguf`` or a
config.json, ``hobbit hardware ... out=my.yaml`` and ``hardware=my.yaml`` on a command line."""

from __future__ import annotations

import json

import yaml
from test_model_files import E, _write_gguf

from hobbit.sim.config import HardwareConfig
from hobbit.traces.io import write_trace
from hobbit.traces.synthetic import SyntheticConfig, generate

from conftest import run_cli


def _trace(tmp_path, layers: int, experts: int, top_k: int):
    arrays, meta = generate(SyntheticConfig(num_layers=layers, num_experts=experts, top_k=top_k, requests=4, seed=3))
    return write_trace(tmp_path / "trace.parquet", arrays, meta)


def _results(run_dir) -> dict:
    return json.loads((run_dir / "results.json").read_text())


def test_a_gguf_runs_with_its_own_per_layer_sizes(tmp_path, capsys):
    """A Q4_K_M GGUF whose second MoE layer stores ffn_down_exps as Q6_K: the run sizes experts as the file does."""
    _write_gguf(tmp_path / "tiny.gguf")
    trace = _trace(tmp_path, 3, E, 2)
    run = tmp_path / "run"
    args = ["sim", f"trace={trace}", f"model={tmp_path / 'tiny.gguf'}", "system=llama-cpp", "use_cache=false"]
    assert run_cli([*args, f"hydra.run.dir={run}"]) == 0, capsys.readouterr().err
    s = _results(run)
    assert s["model"] == "tiny-ds" and s["memory"]["weights_format"] == "file"
    assert s["memory"]["expert_bytes"] == round((221_184 + 254_976 + 221_184) / 3)
    assert any("Q4_K_M" in n for n in s["memory"]["notes"])
    assert s["memory"]["resident_bytes"] == 413_760  # every non-expert tensor of the file, as stored


def test_a_config_json_runs_as_a_model(tmp_path, capsys):
    from transformers import Qwen3MoeConfig

    folder = tmp_path / "my-qwen"
    folder.mkdir()
    Qwen3MoeConfig(
        num_hidden_layers=4, hidden_size=64, moe_intermediate_size=32, num_experts=8, num_experts_per_tok=2
    ).to_json_file(folder / "config.json")
    trace = _trace(tmp_path, 4, 8, 2)
    run = tmp_path / "run"
    assert run_cli(["sim", f"trace={trace}", f"model={folder}", f"hydra.run.dir={run}", "use_cache=false"]) == 0, (
        capsys.readouterr().err
    )
    s = _results(run)
    assert s["model"] == "my-qwen" and s["memory"]["expert_bytes"] == 3 * 64 * 32 * 2  # fp16, HOBBIT's default


def test_a_model_file_that_is_not_there_exits_2_naming_it(tmp_path, capsys):
    assert run_cli(["sim", f"model={tmp_path / 'nope.gguf'}", f"hydra.run.dir={tmp_path / 'r'}"]) == 2
    assert "nope.gguf" in capsys.readouterr().err


def test_hobbit_hardware_writes_a_machine_that_sim_takes(tmp_path, capsys):
    out = tmp_path / "my.yaml"
    keys = ["gpu=rtx4090", "pcie=4x16", "ram=128GB:ddr5-6000x2", "ssd=7GB/s", "cpu_cores=16"]
    assert run_cli(["hardware", *keys, f"out={out}"]) == 0
    printed = capsys.readouterr().out
    assert "link_gbps" in printed and "data sheet of the NVIDIA GeForce RTX 4090" in printed
    hw = HardwareConfig(**{k: v for k, v in yaml.safe_load(out.read_text()).items() if k != "profile"})
    assert (hw.device_memory_bytes, hw.link_gbps, hw.host_memory_bytes) == (24 * 2**30, 25.0, 128 * 10**9)
    assert (hw.cpu_mem_gbps, hw.ssd_gbps, hw.cpu_cores) == (72.0, 7.0, 16)  # 2 x 6000 MT/s x 8 B x 0.75
    run = tmp_path / "run"
    assert run_cli(["sim", f"hardware={out}", f"hydra.run.dir={run}", "use_cache=false"]) == 0
    assert _results(run)["hardware"] == "rtx4090-pcie4x16"
    described = tmp_path / "described.yaml"  # the same keys in a YAML, given to sim directly
    described.write_text("gpu: rtx4090\npcie: 4x16\nram: 128GB:ddr5-6000x2\nssd: 7GB/s\ncpu_cores: 16\n")
    run2 = tmp_path / "run2"
    assert run_cli(["sim", f"hardware={described}", f"hydra.run.dir={run2}", "use_cache=false"]) == 0
    assert _results(run2)["decode_ms_per_token"] == _results(run)["decode_ms_per_token"]


def test_hobbit_hardware_refuses_what_it_cannot_read(tmp_path, capsys):
    assert run_cli(["hardware", "gpu=rtx4900"]) == 2
    assert "rtx4090" in capsys.readouterr().err  # the nearest name
    assert run_cli(["hardware", "ram=lots"]) == 2
    assert "ram" in capsys.readouterr().err
    assert run_cli(["hardware"]) == 2
    assert "gpu=rtx4090" in capsys.readouterr().err
    assert run_cli(["sim", f"hardware={tmp_path / 'none.yaml'}", f"hydra.run.dir={tmp_path / 'r'}"]) == 2
    assert "none.yaml: no such file" in capsys.readouterr().err
