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

    # path knobs and their roles (hobbit/guard.py)
    PATHS: ClassVar[dict[str, str]] = {"checkpoint": "in", "text": "in", "out_dir": "outdir"}

    checkpoint: str | None = None  # a supported HF MoE checkpoint directory; None: the bundled model
    text: str | None = None  # held-out text; None: the bundled model's held-out text
    system: SystemConfig = field(default_factory=SystemConfig)
    precision_pair: str = "fp16-int4"  # fp16-int4 (RTX 4090) | int8-int2 (Jetson)
    renormalize: bool = False  # rescale the kept experts' weights to the original sum when some are skipped
    group: int = 128  # quantisation group along the input features (a narrower layer uses its width)
    context_length: int = 256
    max_windows: int = 32
    batch_size: int = 8
    out_dir: str = "."


@dataclass(frozen=True)
class ExecConfig:
    """What the executor runs: a model (reduced by ``scale``) on a device with a precision pair."""

    LIMITS: ClassVar[dict[str, str]] = {"scale": ">=1", "layers": ">=0", "threads": ">=1", "rounds": ">=1"}

    model: ModelConfig = field(default_factory=ModelConfig)
    scale: int = 8  # divide hidden and expert widths (a full Mixtral does not fit this machine)
    layers: int = 0  # keep only the model's first N MoE layers (and the trace's); 0: all
    device: str = "auto"  # auto | cpu | cuda
    precision_pair: str = "fp16-int4"
    threads: int = 1  # torch threads for compute on the CPU (the copy thread takes another core)
    pin_threads: bool = True  # compute on the first ``threads`` cores, the copy thread on the next (when there is one)
    # how repeated timings reduce to one: min (the machine undisturbed, timeit's rule) | median
    statistic: str = "min"
    # calibration rounds; each measures every part once, a part's value is its rounds reduced by ``statistic``.
    # 15 (executor/calibrate.py ROUNDS); ``hobbit validate`` takes at least three per replay. Fewer: a quicker,
    # noisier profile
    rounds: int = 15
    checkpoint: str | None = None  # real expert weights of the (reduced) shapes; None: synthetic, seeded
    seed: int = 0
    out_dir: str = "."


@dataclass(frozen=True)
class CalibrateConfig(ExecConfig):
    """Knobs of ``hobbit calibrate``."""

    # path knobs and their roles (hobbit/guard.py)
    PATHS: ClassVar[dict[str, str]] = {"checkpoint": "in", "out_dir": "outdir"}

    name: str | None = None  # the profile's name; None: calibrated-<device>


@dataclass(frozen=True)
class ValidateConfig(ExecConfig):
    """Knobs of ``hobbit validate``."""

    LIMITS: ClassVar[dict[str, str]] = {
        **ExecConfig.LIMITS,
        "requests": ">=1",
        "cache_fraction": "(0,1]",
        "replays": ">=2",
    }

    # path knobs and their roles (hobbit/guard.py)
    PATHS: ClassVar[dict[str, str]] = {
        "trace": "in",
        "profile": "in",
        "checkpoint": "in",
        "tuned": "in",
        "out_dir": "outdir",
    }

    trace: str | None = None  # None: the bundled trace
    system: SystemConfig = field(default_factory=SystemConfig)
    tuned: str | None = None  # a hobbit tune run directory or its experiment/tuned.yaml: its system replaces system
    profile: str | None = None  # a hardware YAML from hobbit calibrate; None: calibrate now
    requests: int = 3  # the trace's first N requests are replayed (after one more as warm-up)
    # replays of the same decisions, reduced per token by ``statistic``; their spread is noise_mape; the
    # calibration takes three rounds per replay (at least 15), so its minimum takes as many samples
    replays: int = 5
    cache_fraction: float = 0.35  # the pools hold this share of all experts' high-precision bytes
    engine: str = "fast"
    timeline: bool = False  # also write timeline.json (simulated and measured, passes aligned) and gantt.png/.svg
    timeline_tokens: str = "0:64"  # the passes the timeline keeps, A:B over the replayed requests (':' for all)
