"""``hobbit quality``: measure what mixed precision and skipping cost (the I/O edge of ``executor``)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

from sim.config import ModelConfig, SystemConfig, check_system
from traces.cli import hydra_command


@dataclass(frozen=True)
class QualityConfig:
    """Knobs of ``hobbit quality`` (conf/quality.yaml); the rule's knobs are ``system.precision.*``."""

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


def run_quality(cfg: QualityConfig) -> dict:
    """Check every input, then load, patch and measure; returns results.json's content."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from executor.quality import PAIRS, QualityError, install, measure, windows
    from traces.families import family_for
    from traces.tiny import bundled_heldout_text, bundled_model_dir

    check_system(cfg.system)
    if cfg.precision_pair not in PAIRS:
        raise QualityError(f"precision_pair={cfg.precision_pair} must be one of {sorted(PAIRS)}")
    for name in ("context_length", "max_windows", "batch_size", "group"):
        if getattr(cfg, name) < 1:
            raise QualityError(f"{name}={getattr(cfg, name)} must be >= 1")
    ckpt = Path(cfg.checkpoint) if cfg.checkpoint else bundled_model_dir()
    if not (ckpt / "config.json").is_file():
        raise QualityError(f"checkpoint={ckpt}: no config.json (fix: a Hugging Face checkpoint directory)")
    family = family_for(AutoConfig.from_pretrained(ckpt), f"checkpoint={ckpt}")
    text_path = Path(cfg.text) if cfg.text else bundled_heldout_text()
    if not text_path.is_file():
        raise QualityError(f"text={text_path} does not exist")
    ids = AutoTokenizer.from_pretrained(ckpt)(text_path.read_text(encoding="utf-8"))["input_ids"]
    batches = windows(ids, cfg.context_length, cfg.max_windows)
    model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32).eval()
    p = cfg.system.precision
    mixed = install(model, family, pair=PAIRS[cfg.precision_pair], mode=p.mode, t1=p.t1, t2=p.t2,
                    renormalize=cfg.renormalize, group=cfg.group)
    quality = measure(model, mixed, batches, cfg.batch_size)
    return {"quality": quality, "system": cfg.system.name, "system_config": dataclasses.asdict(cfg.system),
            "checkpoint": str(ckpt), "text": str(text_path), "precision_pair": cfg.precision_pair,
            "renormalize": cfg.renormalize, "context_length": cfg.context_length, "windows": len(batches)}


@hydra_command("pkg://conf", "quality", QualityConfig)
def quality_main(cfg: QualityConfig) -> None:
    """Perplexity, top-1 agreement and KL of the HOBBIT rule's mixed precision against full precision."""
    from traces.io import atomic_write_text

    res = run_quality(cfg)
    out = Path(cfg.out_dir)
    atomic_write_text(out / "results.json", json.dumps(res, indent=1) + "\n")
    q, p = res["quality"], cfg.system.precision
    print(f"{cfg.system.name} (mode {p.mode}, T1 {p.t1}, T2 {p.t2}, {cfg.precision_pair}): perplexity "
          f"{q['ppl']:.4f} vs {q['ppl_reference']:.4f} ({100 * q['ppl_rel_change']:+.2f} %), top-1 agreement "
          f"{q['top1_agreement']:.4f}, KL {q['kl_mean']:.5f}, degraded gate mass {q['proxy']:.3f} over {q['tokens']} tokens")
    print(f"results in {(out / 'results.json').resolve()}")


# ---------------------------------------------------------------- calibrate and validate

@dataclass(frozen=True)
class ExecConfig:
    """What the executor runs: a model (reduced by ``scale``) on a device with a precision pair."""

    model: ModelConfig = field(default_factory=ModelConfig)
    scale: int = 8  # divide hidden and expert widths (a full Mixtral does not fit this machine)
    layers: int = 0  # keep only the model's first N MoE layers (and the trace's); 0: all
    device: str = "auto"  # auto | cpu | cuda
    precision_pair: str = "fp16-int4"
    threads: int = 1  # torch threads for compute on the CPU (the copy thread takes another core)
    checkpoint: str | None = None  # real expert weights of the (reduced) shapes; None: synthetic, seeded
    seed: int = 0
    out_dir: str = "."


@dataclass(frozen=True)
class CalibrateConfig(ExecConfig):
    """Knobs of ``hobbit calibrate``."""

    name: str | None = None  # the profile's name; None: calibrated-<device>


@dataclass(frozen=True)
class ValidateConfig(ExecConfig):
    """Knobs of ``hobbit validate``."""

    trace: str | None = None  # None: the bundled trace
    system: SystemConfig = field(default_factory=SystemConfig)
    profile: str | None = None  # a hardware YAML from hobbit calibrate; None: calibrate now
    requests: int = 3  # the trace's first N requests are replayed (after one more as warm-up)
    cache_fraction: float = 0.35  # the pools hold this share of all experts' high-precision bytes
    engine: str = "simpy"


def _setup(cfg: ExecConfig, pool_fraction: float = 0.0):
    """Resolve the device, check memory (host: every expert; device: ``pool_fraction`` of them),
    build the reduced model and its weights."""
    import os

    import torch

    from executor.quality import PAIRS, QualityError
    from executor.weights import build_store, reduce_model

    if cfg.device not in ("auto", "cpu", "cuda"):
        raise QualityError(f"device={cfg.device} must be auto, cpu or cuda")
    if cfg.device == "cuda" and not torch.cuda.is_available():
        raise QualityError("device=cuda but torch sees no CUDA device (fix: device=cpu or device=auto)")
    if cfg.precision_pair not in PAIRS:
        raise QualityError(f"precision_pair={cfg.precision_pair} must be one of {sorted(PAIRS)}")
    device = torch.device("cuda" if cfg.device == "cuda" or (cfg.device == "auto" and torch.cuda.is_available())
                          else "cpu")
    model = reduce_model(cfg.model, cfg.scale, cfg.layers)
    pair = PAIRS[cfg.precision_pair]
    from executor.kernels import ExpertKernel

    per_expert = sum(ExpertKernel(p, model.hidden_size, model.expert_ffn, torch.device("cpu")).nbytes for p in pair)
    need = model.num_layers * model.num_experts * per_expert
    avail = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    if need > 0.8 * avail:
        raise QualityError(f"model={model.name} needs {need / 2**30:.1f} GiB of host memory for its experts, "
                           f"{avail / 2**30:.1f} GiB are free (fix: a larger scale=, e.g. scale={cfg.scale * 2})")
    if device.type == "cuda" and pool_fraction > 0:  # the cache's pools live on the device
        high = ExpertKernel(pair[0], model.hidden_size, model.expert_ffn, torch.device("cpu")).nbytes
        pools = int(pool_fraction * model.num_layers * model.num_experts * high)
        free = torch.cuda.mem_get_info(device)[0]
        if pools > 0.9 * free:
            raise QualityError(f"model={model.name}: the cache's pools need {pools / 2**30:.1f} GiB on {device}, "
                               f"{free / 2**30:.1f} GiB are free (fix: a larger scale=, fewer layers= or a smaller "
                               f"cache_fraction=)")
    if device.type == "cpu":
        torch.set_num_threads(max(cfg.threads, 1))
    store = build_store(model, pair, device, cfg.checkpoint, cfg.seed)
    return device, model, pair, store


def _write_yaml(node, path: Path) -> Path:
    from omegaconf import OmegaConf

    from traces.io import atomic_write_text

    return atomic_write_text(path, OmegaConf.to_yaml(OmegaConf.structured(node)))


def write_profile(hw, model, out: Path) -> tuple[Path, Path]:
    """hardware/<name>.yaml and model/<model>-div<scale>.yaml: a search path ``hobbit sim`` accepts."""
    model_file = model.name.replace("/", "-div")
    return (_write_yaml(hw, out / "hardware" / f"{hw.name}.yaml"),
            _write_yaml(dataclasses.replace(model, name=model_file), out / "model" / f"{model_file}.yaml"))


@hydra_command("pkg://conf", "calibrate", CalibrateConfig)
def calibrate_main(cfg: CalibrateConfig) -> None:
    """Measure copies, expert and dense compute through the executor; write a hardware profile."""
    from executor.validate import full_profile
    from sim.commands import bundled_trace
    from traces.io import read_trace

    device, model, pair, store = _setup(cfg)
    print(f"calibrating {model.name} on {device}")
    hw = full_profile(store, device, pair, read_trace(bundled_trace()))
    if cfg.name:
        hw = dataclasses.replace(hw, name=cfg.name)
    hw_file, model_file = write_profile(hw, model, Path(cfg.out_dir))
    root = Path(cfg.out_dir).resolve()
    print(f"profile: {hw_file.resolve()}\nmodel:   {model_file.resolve()}")
    print(f"use: hobbit sim hydra.searchpath=[file://{root}] hardware={hw.name} model={model_file.stem}")


@hydra_command("pkg://conf", "validate", ValidateConfig)
def validate_main(cfg: ValidateConfig) -> None:
    """Simulate and replay the same trace and decisions; report the per-token error."""
    from executor.validate import validate_run

    out = Path(cfg.out_dir)
    v = validate_run(cfg, out)
    print(f"validation on {v['device']}: {v['tokens']} decode tokens, MAPE {100 * v['mape']:.1f} %, "
          f"|error| P50 {v['p50_abs_ms']:.2f} ms, P95 {v['p95_abs_ms']:.2f} ms "
          f"(simulated {v['mean_simulated_ms']:.1f} vs measured {v['mean_measured_ms']:.1f} ms/token)")
    print(f"results in {out.resolve()}")
