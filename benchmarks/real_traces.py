"""The shared real traces as schema-v1 traces, for the benchmarks (never copied into the project).

FLAME-MoE-290M's 2,048 teacher-forced tokens replayed as decode, and Qwen1.5-MoE's vLLM batches (warm-up
passes dropped), converted into ``directory`` from ``../shared/real-traces``.
"""

from __future__ import annotations

from pathlib import Path

from hobbit.traces.convert import ConvertConfig, convert
from hobbit.traces.io import Trace, read_trace

REAL = Path(__file__).resolve().parents[1] / ".." / "shared" / "real-traces"


def flame_and_qwen(directory: Path) -> tuple[Trace, Trace]:
    directory.mkdir(parents=True, exist_ok=True)
    flame = read_trace(
        convert(
            ConvertConfig(
                "flame",
                str(REAL / "flame-moe-290m-iter5473" / "flame_moe_290m_prefill_2048tok.parquet"),
                str(directory / "flame.parquet"),
                teacher_forced_as="decode",
            )
        )
    )
    qwen = read_trace(
        convert(
            ConvertConfig("vllm", str(REAL / "qwen1.5-moe-a2.7b-chat-gsm8k" / "raw"), str(directory / "qwen.parquet"))
        )
    )
    return flame, qwen
