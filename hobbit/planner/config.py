"""What a plan is asked and what it finds: ``PlanConfig`` (the knobs of ``hobbit plan``, conf/plan.yaml), one
predicted setting (``Point``) and the whole answer (``Plan``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from hobbit.planner.predict import Prediction
from hobbit.sim.config import HardwareConfig, ModelConfig, SystemConfig
from hobbit.sim.results import Account


@dataclass(frozen=True)
class PlanConfig:
    """Knobs of ``hobbit plan`` (conf/plan.yaml)."""

    LIMITS: ClassVar[dict[str, str]] = {
        "context": ">=0",
        "prompt": ">=1",
        "gen": ">=1",
        "points": ">=2",
        "tune_trials": ">=0",
        "quality_budget": "[0,1]",
        "window_tokens": ">=0",
    }

    # path knobs and their roles (hobbit/plumbing/guard.py)
    PATHS: ClassVar[dict[str, str]] = {"trace": "in", "profile": "in", "out_dir": "outdir"}

    model: ModelConfig = field(default_factory=ModelConfig)
    """The model (config group ``model=NAME``, conf/model/, or ``model=path/to/model.gguf``)."""
    hardware: HardwareConfig = field(default_factory=HardwareConfig)
    """The machine (config group ``hardware=NAME``, conf/hardware/); ``profile`` or the machine keys (``gpu=``,
    ``ram=``, ...) name it instead (given with them, ``hardware=`` or a ``hardware.*`` knob is refused)."""
    profile: str | None = None
    """A hardware YAML (written by ``hobbit hardware`` or ``hobbit calibrate``) used instead of ``hardware``."""
    gpu: str = ""
    """The machine by what its owner knows (``hobbit hardware``'s keys): a GPU of hobbit/catalogue/data/parts.yaml (rtx4090,
    rtx4060ti-16gb, ...); the machine keys build the machine alone, so ``hardware=`` and ``profile=`` are refused
    beside them."""
    vram: str = ""
    """The GPU's memory, a size (16GB, 24GiB); overrides the data sheet's."""
    pcie: str = ""
    """The GPU's PCIe link, generation x lanes (4x16, 5x8); empty: the card's own."""
    ram: str = ""
    """Host RAM, capacity[:type-MT/s x channels] (64GB:ddr5-6000x2)."""
    ram_gbps: str = ""
    """A measured host memory bandwidth, GB/s; overrides what ``ram``'s type gives."""
    ssd: str = ""
    """The NVMe drive by name (samsung-990-pro) or its read rate (7GB/s)."""
    cpu: str = ""
    """A CPU of hobbit/catalogue/data/parts.yaml (ryzen9-7950x, epyc-9175f, ...): its cores, memory channels and DDR speed."""
    weights: str = "q4_k_m"
    """The file type the llama.cpp family and KTransformers run (a GGUF type: q4_k_m, q8_0, iq4_xs, ...); HOBBIT,
    MoE-Infinity and Fiddler run their own formats (fp16 experts; HOBBIT's int4 copies). A model read from a GGUF
    runs as its file holds it."""
    kv_cache: str = "auto"
    """The KV cache's type for the llama.cpp family (-ctk/-ctv): f16 | q8_0 | auto (q8_0 where the f16 cache of
    context + prompt + gen tokens would take more than an eighth of the GPU's memory, as long-context users run it;
    f16 otherwise)."""
    context: int = 0
    """Tokens already in the KV cache when the prompt arrives (a conversation's history)."""
    prompt: int = 512
    """Prompt tokens: the prefill speed is over a prompt of this many (llama-bench's pp512)."""
    gen: int = 128
    """Tokens generated after the prompt; the KV cache is sized for context + prompt + gen (llama.cpp's -c)."""
    trace: str | None = None
    """A schema-v1 routing trace of the model (Parquet): the plan replays it instead of synthetic routing, and has
    no locality range."""
    runtimes: list[str] = field(default_factory=list)
    """The runtimes planned (llama.cpp, ik_llama.cpp, ktransformers, llama.cpp-expert-cache, hobbit, moe-infinity,
    fiddler); []: every one whose released code runs the model."""
    points: int = 5
    """Settings predicted per runtime along its setting (the plot's points); the best is among them."""
    tune_trials: int = 12
    """Optuna trials tuning HOBBIT's T1/T2, cache split and cache weights (``hobbit tune``); 0: its preset's."""
    quality_budget: float = 0.25
    """The tuning's limit on the gate mass HOBBIT serves in low precision or skips (quality_proxy.degraded_mass)."""
    seed: int = 0
    """Seed of the synthetic routing and of the tuning's sampler."""
    out_dir: str = "."
    """Where plan.md, plan.json and plan.png go (the command's run directory)."""
    window_tokens: int = 0
    """With ``trace``: 0 reads it whole, once; N: each prediction (and each tuning trial) reads the trace file N
    tokens at a time (``sim.windowed``: the same results, the memory a window's, for traces longer than memory)."""


MACHINE_KEYS = ("gpu", "vram", "pcie", "ram", "ram_gbps", "ssd", "cpu")


@dataclass
class Point:
    """One setting of one runtime, and what it is predicted to do."""

    runtime: str
    value: float
    """The setting's value along the runtime's axis (layers, experts, slots, GiB)."""
    flags: str
    """What the user types: the runtime's flags (hobbit's knobs for HOBBIT)."""
    system: SystemConfig
    prediction: Prediction | None = None
    error: str = ""
    """Why it cannot run (the memory rules' message), when it cannot."""
    account: Account | None = None
    """What the predicted run takes and what bounds it (``hobbit.sim.results.account``), once predicted."""
    low: Prediction | None = None
    high: Prediction | None = None

    @property
    def gpu_bytes(self) -> int:
        """Device memory the setting takes: non-expert weights, KV cache and the experts it keeps there."""
        return self.account.footprint.gpu_bytes if self.account else 0

    @property
    def host_bytes(self) -> int:
        """Host RAM the experts it keeps there take (what does not fit stays on the SSD)."""
        return self.account.footprint.host_bytes if self.account else 0

    @property
    def ssd_share(self) -> float:
        """The share of host-side expert reads served from the SSD."""
        return self.account.footprint.ssd_share if self.account else 0.0

    @property
    def decode(self) -> float:
        return self.prediction.decode_tok_s if self.prediction else 0.0

    @property
    def prefill(self) -> float:
        return self.prediction.prefill_tok_s if self.prediction else 0.0


def ctx_tokens(cfg: PlanConfig) -> int:
    """The KV cache the plan sizes (llama.cpp's -c): context, prompt and generated tokens."""
    return cfg.context + cfg.prompt + cfg.gen


@dataclass
class Plan:
    """What ``plan`` found: every point predicted, each runtime's chosen one ranked, and the files written."""

    title: str
    model: str
    hardware: str
    rows: list[dict[str, Any]]
    points: list[Point]
    notes: list[str]
    trace: Path
    """The routing the settings were predicted on (the user's trace, or the synthetic one at typical locality)."""
    chosen: dict[str, Point]
    """Each runtime that fits: its chosen setting."""
    files: list[Path] = field(default_factory=list)
    wall_s: float = 0.0
