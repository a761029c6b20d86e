"""Train the bundled tiny MoE models on the Python standard library's own source.

    python -m hobbit.traces.train_tiny --out traces/tiny            # the bundled checkpoint
    python -m hobbit.traces.train_tiny --out /tmp/t --steps 5      # smoke run
    python -m hobbit.traces.train_tiny --arch phimoe --out traces/tiny_phimoe --threads 1
                                                                    # the bundled PhiMoE checkpoint

The corpus is every ``*.py`` file of the running interpreter's standard library (test
suites and site-packages excluded), split by a hash of the file's relative path: about
one file in ten is held out for evaluation and for the prompts file. Everything is
seeded; the log records the interpreter version and a digest of the corpus, since the
standard library differs between Python releases.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import shutil
import sys
import sysconfig
import time
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from hobbit.traces.tiny import EOS_ID, TINY_ARCHS, TINY_PHIMOE_CONFIG, build_byte_tokenizer, build_tiny_config

_EXCLUDED_PARTS = {"test", "tests", "idle_test", "site-packages", "__pycache__"}


@dataclass(frozen=True)
class TrainConfig:
    """Knobs of the training run (defaults produced the bundled checkpoint)."""

    out: str = "traces/tiny"
    arch: str = "mixtral"  # mixtral | phimoe (hobbit.traces.tiny.TINY_ARCHS)
    seed: int = 1234
    steps: int = 2000
    batch_size: int = 8
    seq_len: int = 256
    lr: float = 3e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 100
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    balance_coef: float = 0.02  # per-layer load-balancing loss (Switch / Mixtral form, see _balance_loss)
    eval_every: int = 100
    eval_batches: int = 4
    heldout_mod: int = 10  # crc32(path) % heldout_mod == 0 -> held out
    num_prompts: int = 48
    threads: int = 2


def stdlib_files() -> list[tuple[str, Path]]:
    """(relative path, path) of the standard library's source files, sorted."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = []
    for p in sorted(root.rglob("*.py")):
        rel = p.relative_to(root).as_posix()
        if _EXCLUDED_PARTS.isdisjoint(rel.split("/")):
            files.append((rel, p))
    return files


def is_heldout(rel: str, mod: int) -> bool:
    return zlib.crc32(rel.encode()) % mod == 0


def build_corpus(mod: int) -> tuple[np.ndarray, np.ndarray, list[tuple[str, Path]], str]:
    """Token arrays (train, held-out), the held-out files and a digest of all bytes."""
    train, held, held_files = [], [], []
    digest = hashlib.sha256()
    for rel, path in stdlib_files():
        data = path.read_bytes()
        digest.update(rel.encode() + b"\0" + data)
        ids = np.frombuffer(data, dtype=np.uint8).astype(np.int64)
        ids = np.append(ids, EOS_ID)
        if is_heldout(rel, mod):
            held.append(ids)
            held_files.append((rel, path))
        else:
            train.append(ids)
    return np.concatenate(train), np.concatenate(held), held_files, digest.hexdigest()


def make_prompts(held_files: list[tuple[str, Path]], n: int) -> list[dict[str, str]]:
    """One prompt per held-out file: a ``def``/``class`` line and the two lines after it."""
    prompts = []
    for rel, path in held_files:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        for i, line in enumerate(lines):
            if line.lstrip().startswith(("def ", "class ")) and len(line) < 120:
                text = "\n".join(lines[i : i + 3]) + "\n"
                prompts.append({"prompt": text[:240], "source": f"Lib/{rel}:{i + 1}"})
                break
        if len(prompts) == n:
            break
    return prompts


HELDOUT_TEXT_BYTES = 49152


def write_heldout_text(held_files: list[tuple[str, Path]], path: Path, nbytes: int = HELDOUT_TEXT_BYTES) -> None:
    """Held-out source text for quality measurements: whole held-out files, in order, up to ``nbytes``."""
    out, total = [], 0
    for _, f in held_files:
        data = f.read_text(encoding="utf-8", errors="replace")
        out.append(data)
        total += len(data.encode())
        if total >= nbytes:
            break
    path.write_bytes("".join(out).encode()[:nbytes].decode("utf-8", errors="ignore").encode())


def _batch(data: np.ndarray, rng: np.random.Generator, b: int, t: int):
    import torch

    starts = rng.integers(0, len(data) - t - 1, size=b)
    return torch.from_numpy(np.stack([data[s : s + t] for s in starts]))  # [B, T]


def _lr(step: int, cfg: TrainConfig) -> float:
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    frac = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * frac)))


def _balance_loss(router_logits, top_k: int):
    """Mean over layers of E * sum_e f_e * P_e (f: share of assignments, P: mean router prob).

    Applied per layer: transformers' built-in loss pools all layers' tokens, which lets each
    layer collapse onto its own favourite expert while the pooled counts look balanced.
    Also returns the per-layer normalised entropy of f, for the log.
    """
    import torch

    losses, entropies = [], []
    for logits in router_logits:  # [N, E] per layer
        probs = torch.softmax(logits.float(), dim=-1)
        e = probs.shape[-1]
        chosen = torch.zeros_like(probs).scatter_(1, probs.topk(top_k, dim=-1).indices, 1.0)
        f = chosen.mean(0) / top_k  # [E], sums to 1
        losses.append(e * (f * probs.mean(0)).sum())
        fd = f.detach().clamp_min(1e-12)
        entropies.append(float(-(fd * fd.log()).sum() / np.log(e)))
    return torch.stack(losses).mean(), entropies


def _eval(model, held: np.ndarray, cfg: TrainConfig) -> tuple[float, float, float]:
    """Held-out loss, and the mean and minimum over layers of the routing entropy."""
    import torch

    rng = np.random.default_rng(cfg.seed + 1)  # the same windows at every evaluation
    model.eval()
    losses, ents = [], []
    with torch.no_grad():
        for _ in range(cfg.eval_batches):
            x = _batch(held, rng, cfg.batch_size, cfg.seq_len)
            out = model(input_ids=x, labels=x)
            losses.append(out.loss.item())
            ents.append(_balance_loss(out.router_logits, model.config.num_experts_per_tok)[1])
    model.train()
    per_layer = np.mean(ents, axis=0)
    return float(np.mean(losses)), float(per_layer.mean()), float(per_layer.min())


def train(cfg: TrainConfig) -> dict:
    """Train, then write the checkpoint, tokenizer, prompts and training log to ``cfg.out``."""
    import torch
    from transformers import MixtralForCausalLM, PhimoeForCausalLM

    model_cls = {"mixtral": MixtralForCausalLM, "phimoe": PhimoeForCausalLM}[cfg.arch]
    torch.manual_seed(cfg.seed)
    torch.set_num_threads(cfg.threads)
    rng = np.random.default_rng(cfg.seed)
    train_ids, held_ids, held_files, digest = build_corpus(cfg.heldout_mod)
    # balance: see _balance_loss (PhiMoE's router returns the same [N, E] logits per layer as Mixtral's)
    mcfg = build_tiny_config(cfg.arch, output_router_logits=True, router_aux_loss_coef=0.0)
    model = model_cls(mcfg).train()  # PhiMoE: in training mode sparsemixer samples the experts
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    curve: list[dict] = []
    t_start = time.perf_counter()
    for step in range(cfg.steps):
        for group in opt.param_groups:
            group["lr"] = _lr(step, cfg)
        x = _batch(train_ids, rng, cfg.batch_size, cfg.seq_len)
        out = model(input_ids=x, labels=x)
        balance, _ = _balance_loss(out.router_logits, mcfg.num_experts_per_tok)
        (out.loss + cfg.balance_coef * balance).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        row = {"step": step + 1, "train_loss": round(out.loss.item(), 5), "balance_loss": round(balance.item(), 5)}
        if (step + 1) % cfg.eval_every == 0 or step + 1 == cfg.steps:
            ev, ent_mean, ent_min = _eval(model, held_ids, cfg)
            row.update(
                eval_loss=round(ev, 5), routing_entropy_mean=round(ent_mean, 4), routing_entropy_min=round(ent_min, 4)
            )
            elapsed = time.perf_counter() - t_start
            print(
                f"step {step + 1}/{cfg.steps} train {row['train_loss']:.3f} eval {ev:.3f} routing entropy "
                f"mean {ent_mean:.3f} min {ent_min:.3f} ({elapsed:.0f} s)",
                flush=True,
            )
        curve.append(row)
    seconds = time.perf_counter() - t_start
    return _save(model, cfg, curve, held_files, digest, len(train_ids), len(held_ids), seconds)


def _save(model, cfg: TrainConfig, curve, held_files, digest, n_train, n_held, seconds) -> dict:
    """The checkpoint and its files, written into a hidden folder inside ``cfg.out`` and then each renamed into
    place: a run that stops while writing leaves no partial file under a final name (and no hidden folder), and
    whatever else ``cfg.out`` holds stays."""
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    stage = out / f".train-tiny-{os.getpid()}"
    shutil.rmtree(stage, ignore_errors=True)
    try:
        log = _write(model, cfg, curve, held_files, digest, n_train, n_held, seconds, stage)
        for f in sorted(stage.iterdir()):
            os.replace(f, out / f.name)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return log


def _write(model, cfg: TrainConfig, curve, held_files, digest, n_train, n_held, seconds, out: Path) -> dict:
    import torch

    out.mkdir(parents=True)
    model.config.output_router_logits = False
    model.to(torch.float16).save_pretrained(out)
    build_byte_tokenizer().save_pretrained(out)
    prompts = make_prompts(held_files, cfg.num_prompts)
    write_heldout_text(held_files, out / "heldout.txt")
    with open(out / "prompts.jsonl", "w") as f:
        f.writelines(json.dumps(p) + "\n" for p in prompts)
    log = {
        "config": asdict(cfg),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "parameters": sum(p.numel() for p in model.parameters()),
        "corpus_sha256": digest,
        "train_tokens": n_train,
        "heldout_tokens": n_held,
        "tokens_seen": cfg.steps * cfg.batch_size * cfg.seq_len,
        "seconds": round(seconds, 1),
        "final_eval_loss_nats_per_byte": curve[-1].get("eval_loss"),
        "curve": curve,
    }
    (out / "training_log.json").write_text(json.dumps(log, indent=1) + "\n")
    _plot_curve(curve, out / "loss_curve.png")
    write_model_card(out, log)
    return log


def write_model_card(out: Path, log: dict) -> None:
    """README.md of the checkpoint: what it is, how it was trained, how to reproduce it."""
    c = log["config"]
    if c.get("arch", "mixtral") == "phimoe":
        (out / "README.md").write_text(_phimoe_card(log, (out / "model.safetensors").stat().st_size))
        return
    evals = [r for r in log["curve"] if "eval_loss" in r]
    text = f"""# hobbit-tiny-mixtral

The bundled model of hobbit: a Mixtral-topology MoE (32 MoE layers, 8 experts, top-2,
renormalised softmax router) at tiny widths (hidden 64, expert FFN 128, 4 heads, 2 KV heads),
byte-level vocabulary (256 bytes + `<|endoftext|>`), {log["parameters"] / 1e6:.2f}M parameters,
stored in float16.

- Data: the `*.py` files of the Python {log["python"]} standard library (test suites and
  site-packages excluded); files with crc32(relative path) % {c["heldout_mod"]} == 0 are held out
  (corpus sha256 `{log["corpus_sha256"][:16]}...`, {log["train_tokens"]:,} training bytes,
  {log["heldout_tokens"]:,} held-out bytes). `prompts.jsonl` holds {c["num_prompts"]} prompts taken from
  held-out files (a `def`/`class` line and the two lines after it).
- Training: seed {c["seed"]}, {c["steps"]} steps of {c["batch_size"]} x {c["seq_len"]} bytes
  ({log["tokens_seen"]:,} bytes seen), AdamW lr {c["lr"]} (warm-up {c["warmup_steps"]}, cosine to
  {c["min_lr_ratio"]}x), weight decay {c["weight_decay"]}, per-layer load-balancing loss x {c["balance_coef"]},
  {log["seconds"]:.0f} s on {c["threads"]} CPU threads with torch {log["torch"]}.
- Held-out cross-entropy: {evals[0]["eval_loss"]:.3f} nats/byte at step {evals[0]["step"]},
  {evals[-1]["eval_loss"]:.3f} at step {evals[-1]["step"]} (`loss_curve.png`, `training_log.json`).
  Routing balance on held-out text (normalised entropy of each layer's expert shares, 1 = even):
  mean {evals[-1]["routing_entropy_mean"]:.3f}, worst layer {evals[-1]["routing_entropy_min"]:.3f}.

Reproduce (the standard library differs between Python releases, so the bytes may too):

    python -m hobbit.traces.train_tiny --out traces/tiny
"""
    (out / "README.md").write_text(text)


def _phimoe_card(log: dict, nbytes: int) -> str:
    t = TINY_PHIMOE_CONFIG
    c = log["config"]
    evals = [r for r in log["curve"] if "eval_loss" in r]
    threads = f"{c['threads']} CPU thread" + ("s" if c["threads"] != 1 else "")
    return f"""# hobbit-tiny-phimoe

The second bundled model of hobbit: a PhiMoE-topology MoE (transformers' `PhimoeForCausalLM`, the
topology of Phi-3.5-MoE: 32 MoE layers, {t["num_local_experts"]} experts, top-{t["num_experts_per_tok"]}, sparsemixer router,
LayerNorm) at the widths of `traces/tiny` (hidden {t["hidden_size"]}, expert FFN {t["intermediate_size"]}, {t["num_attention_heads"]} heads, {t["num_key_value_heads"]} KV heads),
byte-level vocabulary (256 bytes + `<|endoftext|>`, the same tokenizer), {log["parameters"] / 1e6:.2f}M parameters,
stored in float16.

- Expert FFN {t["intermediate_size"]} (= 64 x {t["intermediate_size"] / 64:g}): the nearest width to Phi-3.5-MoE's expert_ffn / hidden
  ratio (6400 / 4096 = 1.5625) that keeps `model.safetensors` (float16) within 20 MB (20,000,000 bytes) and
  is a multiple of 8 (transformers' grouped_mm experts kernel needs 16-byte row strides in 16 bit):
  {nbytes:,} bytes. The exact ratio (100) gives 20,814,072 bytes and 96 gives 20,026,024.
- Everything else as `PhimoeConfig`'s defaults give it: no attention or LM-head biases, untied
  input and output embeddings, rope theta 1e6, LayerNorm eps 1e-5. `router_jitter_noise` {t["router_jitter_noise"]}
  (Phi-3.5-MoE's value) is sparsemixer's masking threshold, applied deterministically in eval mode
  (0 would make every gate weight 1); `input_jitter_noise` {t["input_jitter_noise"]}. In training mode
  sparsemixer samples the experts (Gumbel) and jitters its gradient estimate, so load the model
  with `from_pretrained` (which returns it in eval mode) or call `.eval()`: eval routing is the
  deterministic top-2 of the router logits.
- Data: as `traces/tiny`: the `*.py` files of the Python {log["python"]} standard library (test suites and
  site-packages excluded); files with crc32(relative path) % {c["heldout_mod"]} == 0 are held out
  (corpus sha256 `{log["corpus_sha256"][:16]}...`, {log["train_tokens"]:,} training bytes,
  {log["heldout_tokens"]:,} held-out bytes). `prompts.jsonl` holds {c["num_prompts"]} prompts taken from
  held-out files (a `def`/`class` line and the two lines after it); `heldout.txt` is held-out text.
- Training: as `traces/tiny`: seed {c["seed"]}, {c["steps"]} steps of {c["batch_size"]} x {c["seq_len"]} bytes
  ({log["tokens_seen"]:,} bytes seen), AdamW lr {c["lr"]} (warm-up {c["warmup_steps"]}, cosine to
  {c["min_lr_ratio"]}x), weight decay {c["weight_decay"]}, per-layer load-balancing loss x {c["balance_coef"]}
  (unchanged code: PhiMoE's router returns the same [tokens, experts] logits per layer as Mixtral's;
  its expert shares f are the top-2 of the router softmax, while the training forward pass routes
  by sparsemixer's samples), {log["seconds"]:.0f} s on {threads} with torch {log["torch"]}.
- Held-out cross-entropy: {evals[0]["eval_loss"]:.3f} nats/byte at step {evals[0]["step"]},
  {evals[-1]["eval_loss"]:.3f} at step {evals[-1]["step"]} (`loss_curve.png`, `training_log.json`).
  Routing balance on held-out text (normalised entropy of each layer's expert shares, 1 = even):
  mean {evals[-1]["routing_entropy_mean"]:.3f}, worst layer {evals[-1]["routing_entropy_min"]:.3f}.
- `trace.parquet` (captured after training, as `traces/tiny`'s): the routing trace of greedy
  generation on the first 32 prompts, 64 new tokens, batch 8, lookahead 3, float32:
  `hobbit capture model=traces/tiny_phimoe prompts=traces/tiny_phimoe/prompts.jsonl
  out=traces/tiny_phimoe/trace.parquet max_prompts=32 max_new_tokens=64 batch_size=8 lookahead=3`.

Reproduce (the standard library differs between Python releases, so the bytes may too):

    python -m hobbit.traces.train_tiny --arch phimoe --out traces/tiny_phimoe --threads {c["threads"]}
"""


def _plot_curve(curve: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot([r["step"] for r in curve], [r["train_loss"] for r in curve], lw=0.6, label="train")
    ev = [r for r in curve if "eval_loss" in r]
    ax.plot([r["step"] for r in ev], [r["eval_loss"] for r in ev], "o-", label="held-out")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats / byte)")
    ax.set_title("bundled tiny MoE: training on the Python standard library")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for name, default in asdict(TrainConfig()).items():
        choices = TINY_ARCHS if name == "arch" else None
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(default), default=default, choices=choices)
    args = parser.parse_args(argv)
    log = train(TrainConfig(**vars(args)))
    print(f"wrote {args.out} (held-out loss {log['final_eval_loss_nats_per_byte']} nats/byte, {log['seconds']} s)")


if __name__ == "__main__":
    main()
