"""``hobbit quality``: measure what mixed precision and skipping cost (the I/O edge of ``executor``)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

from sim.config import SystemConfig, check_system
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
