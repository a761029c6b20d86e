"""Shared fixtures: the shared real traces, synthetic traces, tiny HF checkpoints."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # tests/hf_tiny.py

# The suite runs every policy under many settings: one general copy of each policy's walk, compiled once, rather than
# a copy per settings (sim.fast.policy_walk); tests/test_special.py holds the specialised copies to the general ones.
# Set here, at import, so that the processes the tests start use them too.
os.environ.setdefault("HOBBIT_WALK", "general")

REAL_TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "real-traces"


@pytest.fixture(autouse=True, scope="session")
def _private_result_cache(tmp_path_factory):
    """Runs cache their results by configuration; the suite keeps its own cache."""
    import os

    os.environ["HOBBIT_CACHE"] = str(tmp_path_factory.mktemp("hobbit-cache"))


@pytest.fixture(scope="session")
def real_traces() -> Path:
    if not REAL_TRACES.is_dir():
        pytest.skip("../shared/real-traces is absent")
    return REAL_TRACES


@pytest.fixture(scope="session")
def real_converted(real_traces, tmp_path_factory) -> dict:
    """The shared real traces as schema-v1 traces: FLAME-MoE-290M's 2,048 teacher-forced tokens replayed as
    decode, and Qwen1.5-MoE's vLLM batches (warm-up passes dropped)."""
    from hobbit.traces.convert import ConvertConfig, convert
    from hobbit.traces.io import read_trace

    d = tmp_path_factory.mktemp("real")
    flame = convert(
        ConvertConfig(
            "flame",
            str(real_traces / "flame-moe-290m-iter5473" / "flame_moe_290m_prefill_2048tok.parquet"),
            str(d / "flame.parquet"),
            teacher_forced_as="decode",
        )
    )
    qwen = convert(
        ConvertConfig("vllm", str(real_traces / "qwen1.5-moe-a2.7b-chat-gsm8k" / "raw"), str(d / "qwen.parquet"))
    )
    return {"flame": read_trace(flame), "qwen": read_trace(qwen)}


@pytest.fixture(scope="session")
def synthetic_small():
    from hobbit.traces.synthetic import SyntheticConfig, generate

    return generate(
        SyntheticConfig(num_layers=6, num_experts=8, top_k=2, requests=3, prompt_tokens=5, decode_tokens=7, seed=7)
    )


@pytest.fixture(scope="session")
def tiny_checkpoints(tmp_path_factory) -> dict[str, Path]:
    """A random tiny checkpoint of every supported family, saved once per session."""
    from hf_tiny import TINY, save_tiny

    root = tmp_path_factory.mktemp("hf")
    return {mt: save_tiny(mt, root / mt) for mt in TINY}


@pytest.fixture(scope="session")
def prompts_file(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("prompts") / "prompts.txt"
    p.write_text("def add(a, b):\n    return a + b\nimport os\nclass Foo(object):\n")
    return p


def run_cli(args: list[str]) -> int:
    """Run ``hobbit`` in-process; returns the exit code (0 when it returns)."""
    from hobbit.cli import main
    from hobbit.plumbing.glue import STATE

    STATE.started = False
    try:
        main(args)
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0
