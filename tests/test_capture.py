"""Capture from live inference: every recorded decision is what the model's router returned."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from hobbit.traces.capture import CaptureConfig, CaptureError, capture
from hobbit.traces.families import FAMILIES, UnsupportedModelError, family_for, find_routers
from hobbit.traces.io import read_trace
from hobbit.traces.schema import DECODE, PREFILL

from conftest import run_cli
from hf_tiny import TINY

DEPTH = 2


def _sort(w: torch.Tensor, ids: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    wn, idn = w.detach().float().numpy(), ids.detach().numpy()
    o = np.argsort(-wn, axis=1, kind="stable")
    return np.take_along_axis(idn, o, 1), np.take_along_axis(wn, o, 1)


def _teacher_forced(model_dir: Path, tokens: list[int]):
    """Router outputs and inputs of one full forward pass over ``tokens`` (independent of capture)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    routers = [r for _, r in find_routers(model, family_for(model.config, "test"))]
    got: dict[int, tuple] = {}
    hooks = [r.register_forward_hook(lambda m, a, o, i=i: got.__setitem__(i, (a[0], o))) for i, r in enumerate(routers)]
    with torch.no_grad():
        model(torch.tensor([tokens]))
        preds = {
            (i, d): _sort(*routers[i + d].forward(got[i][0])[1:])
            for i in range(len(routers))
            for d in range(1, DEPTH + 1)
            if i + d < len(routers)
        }
    for h in hooks:
        h.remove()
    return [_sort(o[1], o[2]) for _, (x, o) in sorted(got.items())], preds


@pytest.mark.parametrize("model_type", sorted(TINY))
def test_capture_records_what_each_router_returned(model_type, tiny_checkpoints, prompts_file, tmp_path):
    d = tiny_checkpoints[model_type]
    res = capture(
        CaptureConfig(
            model=str(d),
            prompts=str(prompts_file),
            out=str(tmp_path / "t.parquet"),
            max_new_tokens=6,
            lookahead=DEPTH,
            batch_size=3,
            progress=False,
        )
    )
    tr = read_trace(res.path)
    a, L, k = tr.arrays, len(tr.meta.layers), tr.meta.model.top_k
    assert L == TINY[model_type][2] and tr.meta.model.architecture == FAMILIES[model_type].architecture
    assert len(res.prompt_ids) == 4 and len(set(map(len, res.prompt_ids))) > 1  # ragged: left padding was used
    for req, (prompt, gen) in enumerate(zip(res.prompt_ids, res.generated_ids)):
        sel = a.request_id == req
        n_tok = len(prompt) + len(gen) - 1  # the last generated token never passes the routers
        assert sel.sum() == n_tok * L
        pos = a.position[sel][::L]
        assert pos.tolist() == list(range(n_tok))  # pad rows dropped, real positions kept
        assert np.all(a.phase[sel][::L] == np.where(pos < len(prompt), PREFILL, DECODE))
        routed, preds = _teacher_forced(d, prompt + gen[:-1])
        ids = a.expert_ids[sel].reshape(n_tok, L, k)
        w = a.gate_weights[sel].reshape(n_tok, L, k)
        assert a.pred_ids is not None
        pid = a.pred_ids[sel].reshape(n_tok, L, DEPTH, k)
        for layer, (want_ids, want_w) in enumerate(routed):
            assert np.array_equal(ids[:, layer], want_ids), (model_type, req, layer)
            np.testing.assert_allclose(w[:, layer], want_w, atol=2e-5)
            for dd in range(1, DEPTH + 1):
                if layer + dd < L:
                    assert np.array_equal(pid[:, layer, dd - 1], preds[(layer, dd)][0])
                else:
                    assert np.all(pid[:, layer, dd - 1] == -1)


def test_batching_does_not_change_the_trace(tiny_checkpoints, prompts_file, tmp_path):
    d = str(tiny_checkpoints["mixtral"])
    one = read_trace(
        capture(
            CaptureConfig(
                model=d,
                prompts=str(prompts_file),
                out=str(tmp_path / "1.parquet"),
                max_new_tokens=5,
                batch_size=1,
                progress=False,
            )
        ).path
    )
    four = read_trace(
        capture(
            CaptureConfig(
                model=d,
                prompts=str(prompts_file),
                out=str(tmp_path / "4.parquet"),
                max_new_tokens=5,
                batch_size=4,
                progress=False,
            )
        ).path
    )
    assert np.array_equal(one.arrays.expert_ids, four.arrays.expert_ids)
    np.testing.assert_allclose(one.arrays.gate_weights, four.arrays.gate_weights, atol=2e-5)


def test_metadata_describes_the_capture(tiny_checkpoints, prompts_file, tmp_path):
    d = tiny_checkpoints["qwen2_moe"]
    res = capture(
        CaptureConfig(
            model=str(d),
            prompts=str(prompts_file),
            out=str(tmp_path / "t.parquet"),
            max_new_tokens=1,
            lookahead=1,
            max_prompts=2,
            progress=False,
        )
    )
    tr = read_trace(res.path)
    m, src = tr.meta.model, tr.meta.source
    assert (m.num_layers, m.num_experts, m.top_k, m.weight_rule, m.shared_experts) == (3, 12, 4, "softmax", 1)
    assert (m.hidden_size, m.moe_intermediate_size) == (32, 16)
    assert src["kind"] == "capture" and src["moe_blocks"] == [0, 2, 3]  # block 1 is a dense MLP
    assert src["num_prompts"] == 2 and tr.meta.lookahead_depth == 1
    assert np.all(tr.arrays.phase == PREFILL)  # max_new_tokens=1: only the prompt passes the routers


def test_unsupported_model_lists_the_families(tmp_path, prompts_file, capsys):
    import transformers

    from hobbit.traces.tiny import build_byte_tokenizer

    cfg = transformers.LlamaConfig(
        vocab_size=257,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
    )
    transformers.AutoModelForCausalLM.from_config(cfg).save_pretrained(tmp_path / "llama")
    build_byte_tokenizer().save_pretrained(tmp_path / "llama")
    with pytest.raises(UnsupportedModelError, match="mixtral.*granitemoe"):
        capture(
            CaptureConfig(model=str(tmp_path / "llama"), prompts=str(prompts_file), out=str(tmp_path / "o.parquet"))
        )
    assert (
        run_cli(["capture", f"model={tmp_path / 'llama'}", f"prompts={prompts_file}", f"out={tmp_path / 'o.parquet'}"])
        == 2
    )
    err = capsys.readouterr().err
    assert "model_type 'llama'" in err and "deepseek_v3" in err
    assert not (tmp_path / "o.parquet").exists()


def test_bad_inputs_fail_before_any_work(tmp_path, tiny_checkpoints, capsys):
    d = tiny_checkpoints["mixtral"]
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    badjson = tmp_path / "bad.jsonl"
    badjson.write_text('{"prompt": "ok"}\n{"text": 3}\n')
    out = tmp_path / "o.parquet"
    cases = [
        ([f"model={tmp_path / 'nowhere'}"], "nowhere does not exist"),
        ([f"model={d}", f"prompts={tmp_path / 'missing.txt'}"], "does not exist"),
        ([f"model={d}", f"prompts={empty}"], "has no prompts"),
        ([f"model={d}", f"prompts={badjson}"], "line 2"),
        ([f"model={d}", "lookahead=-1"], "lookahead=-1"),
        ([f"model={d}", "max_new_tokens=abc"], ""),
    ]
    if not torch.cuda.is_available():
        cases.append(([f"model={d}", "device=cuda"], "no CUDA device"))
    for args, msg in cases:
        assert run_cli(["capture", *args, f"out={out}"]) == 2, args
        assert msg in capsys.readouterr().err, args
    assert not out.exists()
    with pytest.raises(CaptureError, match="line 2"):
        capture(CaptureConfig(model=str(d), prompts=str(badjson)))


def _process_state(pid: int) -> str:
    """A running process's blocked, ignored and caught signals (/proc) and its Python stacks (py-spy, where
    installed), then the process killed."""
    status = Path(f"/proc/{pid}/status")
    lines = [ln for ln in status.read_text().splitlines() if ln.startswith("Sig")] if status.exists() else []
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    stacks = ""
    if Path(spy).exists():
        stacks = subprocess.run([spy, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=60).stdout
    os.kill(pid, signal.SIGKILL)
    return " ".join(lines) + "\n" + stacks


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_capture_leaves_no_file(tiny_checkpoints, tmp_path, sig):
    prompts = tmp_path / "many.txt"
    prompts.write_text("".join(f"line {i} of a long list of prompts\n" for i in range(200)))
    out = tmp_path / "trace.parquet"
    cmd = [
        sys.executable,
        "-m",
        "hobbit",
        "capture",
        f"model={tiny_checkpoints['mixtral']}",
        f"prompts={prompts}",
        "max_new_tokens=40",
        "progress=false",
        f"out={out}",
        f"hydra.run.dir={tmp_path / 'run'}",
    ]
    # Ctrl-C's default action in the capture, as a shell's foreground job has it, also where the suite itself runs
    # with SIGINT ignored (a background job of a shell without job control: an ignored signal stays ignored
    # across exec, and Python then installs no KeyboardInterrupt)
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        proc = subprocess.Popen(cmd, cwd=Path(__file__).parents[1], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    finally:
        signal.signal(signal.SIGINT, inherited)
    tmp = out.with_name(f".{out.name}.{proc.pid}.tmp")
    deadline = time.time() + 120
    while not tmp.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.1)
    assert tmp.exists(), proc.communicate()[1].decode()[-2000:]
    while tmp.stat().st_size < 5000 and time.time() < deadline:  # at least one row group is down
        time.sleep(0.1)
    os.kill(proc.pid, sig)
    try:
        proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:  # say why the signal did not end it: its mask and handlers, its stacks
        pytest.fail(f"the signal did not end the capture: {_process_state(proc.pid)}")
    assert proc.returncode != 0
    assert not out.exists() and not tmp.exists()
