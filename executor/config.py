"""Typed configs of the executor's jobs (``hobbit quality``, ``calibrate``, ``validate``).

Frozen dataclasses; conf/{quality,calibrate,validate}.yaml extend them. Light on purpose:
the application layer registers them without loading torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from hobbit.sim.config import ModelConfig, SystemConfig
from hobbit.traces.schema import InputError

STATISTICS = ("min", "median")  # how repeated timings reduce to one (ExecConfig.statistic)
PAIRS = {"fp16-int4": ("fp16", "int4"), "int8-int2": ("int8", "int2")}  # (high, low) per device class


class QualityError(InputError):
    """Bad input to an executor job, found before any work."""


@dataclass(frozen=True)
class QualityConfig:
    """Knobs of ``hobbit quality`` (conf/quality.yaml); the rule's knobs are ``system.precision.*``."""

    LIMITS: ClassVar[dict[str, str]] = {
        "group": ">=1",
        "context_length": ">=1",
        "max_windows": ">=1",
        "batch_size": ">=1",
    }

    # path knobs and their roles (hobbit/plumbing/guard.py)
    PATHS: ClassVar[dict[str, str]] = {"checkpoint": "in", "text": "in", "out_dir": "outdir"}

    checkpoint: str | None = None
    """A supported Hugging Face MoE checkpoint directory; null: the bundled model."""
    text: str | None = None
    """The held-out text both models are scored on; null: the bundled model's held-out text
    (traces/tiny/heldout.txt)."""
    system: SystemConfig = field(default_factory=SystemConfig)
    """The system whose precision rule (``system.precision.mode``, ``t1``, ``t2``) serves each expert (config group
    ``system=NAME``); its other knobs play no part here."""
    precision_pair: str = "fp16-int4"
    """The (high, low) expert formats: fp16-int4 (RTX 4090) | int8-int2 (Jetson)."""
    renormalize: bool = False
    """Rescale the kept experts' weights to the original sum when some are skipped (the paper is silent on it)."""
    group: int = 128
    """Inputs per quantisation group along an expert's input features (a narrower layer uses its width)."""
    context_length: int = 256
    """Tokens per window: the text is cut into non-overlapping windows of context_length + 1 tokens, each scored on
    its next-token predictions."""
    max_windows: int = 32
    """At most this many windows, from the text's start."""
    batch_size: int = 8
    """Windows per forward pass."""
    out_dir: str = "."
    """Where results go (the command's run directory)."""


@dataclass(frozen=True)
class ExecConfig:
    """What the executor runs: a model (reduced by ``scale``) on a device with a precision pair."""

    LIMITS: ClassVar[dict[str, str]] = {"scale": ">=1", "layers": ">=0", "threads": ">=1", "rounds": ">=1"}

    model: ModelConfig = field(default_factory=ModelConfig)
    """The model's shapes (config group ``model=NAME``, conf/model/), reduced by ``scale`` and ``layers``."""
    scale: int = 8
    """Divide the hidden and expert widths by this (a full Mixtral does not fit a workstation's memory); it must
    divide both."""
    layers: int = 0
    """Keep only the model's first N MoE layers (and the trace's); 0: all."""
    device: str = "auto"
    """auto (cuda when torch sees one, else cpu) | cpu | cuda."""
    precision_pair: str = "fp16-int4"
    """The (high, low) expert formats: fp16-int4 (RTX 4090) | int8-int2 (Jetson)."""
    threads: int = 1
    """Torch threads for compute on the CPU (the copy thread takes another core)."""
    pin_threads: bool = True
    """Compute on the first ``threads`` cores, the copy thread on the next (when there is one)."""
    statistic: str = "min"
    """How repeated timings reduce to one: min (the machine undisturbed, timeit's rule) | median."""
    rounds: int = 15
    """Calibration rounds; each measures every part once, and a part's value is its rounds reduced by
    ``statistic``. 15: executor/calibrate.py ROUNDS; ``hobbit validate`` takes at least three per replay; fewer: a
    quicker, noisier profile."""
    checkpoint: str | None = None
    """A Hugging Face checkpoint with real expert weights of the (reduced) shapes; null: synthetic, seeded."""
    seed: int = 0
    """Seed of the synthetic weights (the experts' without a checkpoint, the dense part's always)."""
    out_dir: str = "."
    """Where results go (the command's run directory)."""


@dataclass(frozen=True)
class CalibrateConfig(ExecConfig):
    """Knobs of ``hobbit calibrate``."""

    # path knobs and their roles (hobbit/plumbing/guard.py)
    PATHS: ClassVar[dict[str, str]] = {"checkpoint": "in", "out_dir": "outdir"}

    name: str | None = None
    """The profile's name (hardware/<name>.yaml); null: calibrated-<device>."""


@dataclass(frozen=True)
class ValidateConfig(ExecConfig):
    """Knobs of ``hobbit validate``."""

    LIMITS: ClassVar[dict[str, str]] = {
        **ExecConfig.LIMITS,
        "requests": ">=1",
        "cache_fraction": "(0,1]",
        "replays": ">=2",
    }

    # path knobs and their roles (hobbit/plumbing/guard.py)
    PATHS: ClassVar[dict[str, str]] = {
        "trace": "in",
        "profile": "in",
        "checkpoint": "in",
        "tuned": "in",
        "out_dir": "outdir",
    }

    trace: str | None = None
    """A schema-v1 routing trace (Parquet); null: the bundled trace."""
    system: SystemConfig = field(default_factory=SystemConfig)
    """The offloading system simulated and replayed (config group ``system=NAME``); ``cache_fraction`` sets its
    pools' sizes."""
    tuned: str | None = None
    """A ``hobbit tune`` run directory or its experiment/tuned.yaml: the system it found replaces ``system``; null:
    none."""
    profile: str | None = None
    """A hardware YAML written by ``hobbit calibrate``; null: calibrate now."""
    requests: int = 3
    """Requests replayed: the trace's first N after one more as warm-up."""
    replays: int = 5
    """Replays of the same decisions, reduced per token by ``statistic``; their spread is noise_mape. The
    calibration takes three rounds per replay (at least ``rounds``), so its minimum takes as many samples."""
    cache_fraction: float = 0.35
    """The pools hold this share of all experts' high-precision bytes."""
    engine: str = "fast"
    """The simulator's engine: fast | plain | simpy (the same simulated times, sim.run.simulate)."""
    timeline: bool = False
    """Also write timeline.json (simulated and measured, passes aligned; ui.perfetto.dev) and gantt.png/.svg."""
    timeline_tokens: str = "0:64"
    """The passes the timeline keeps, A:B over the replayed requests (':' for all)."""
