"""Record routing traces from live greedy generation with a Hugging Face MoE model.

A forward hook on every router module records the ids and weights it returned and the
router input x_l; the lookahead predictions apply layer l+d's router to x_l
(``router.forward`` is called directly, so no hook fires for them). Generation is a
plain greedy loop with a KV cache, left padding and explicit position ids, so every
forward pass's rows are known: pad positions and finished sequences are dropped.
Legend: B batch, T tokens in the pass, K top-k, D lookahead depth, L MoE layers.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from hobbit.traces.arrays import TraceArrays, concat
from hobbit.traces.families import Family, checkpoint_family, find_routers, model_spec
from hobbit.traces.inputs import read_text, reading
from hobbit.traces.io import TraceWriter
from hobbit.traces.schema import DECODE, PREFILL, InputError, TraceMeta, now_iso
from hobbit.traces.tiny import bundled_model_dir, bundled_phimoe_dir, bundled_prompts_path


class CaptureError(InputError):
    """Bad capture input (model directory, prompts file or knob), found before any work."""


@dataclass(frozen=True)
class CaptureConfig:
    """Knobs of ``hobbit capture`` (None model / prompts: the bundled tiny model and its prompts)."""

    LIMITS: ClassVar[dict[str, str]] = {
        "max_new_tokens": ">=1",
        "lookahead": ">=0",
        "batch_size": ">=1",
        "max_prompts": ">=1",
        "max_prompt_tokens": ">=1",
    }

    # path knobs and their roles (hobbit/plumbing/guard.py)
    PATHS: ClassVar[dict[str, str]] = {"model": "in", "prompts": "in", "out": "out"}

    model: str | None = None
    """A local Hugging Face MoE checkpoint directory; null: the bundled tiny model."""
    prompts: str | None = None
    """JSONL (``{"prompt": ...}``, ``{"text": ...}`` or a JSON string a line), a JSON array of those (.json) or text,
    one prompt a line; null: the bundled held-out prompts."""
    out: str = "trace.parquet"
    """The trace to write (Parquet, schema v1)."""
    max_new_tokens: int = 32
    """Tokens generated per prompt (the last one never passes the routers)."""
    lookahead: int = 3
    """D: also record layer l+d's router applied to layer l's router input, d = 1..D; 0: no predictions."""
    batch_size: int = 1
    """Prompts per forward pass (left padding; pad rows are dropped)."""
    max_prompts: int | None = None
    """Only the first N prompts; null: all."""
    max_prompt_tokens: int = 512
    """Keep the last N tokens of longer prompts."""
    dtype: str = "auto"
    """auto (float32 on CPU, bfloat16 on CUDA) | float32 | bfloat16 | float16."""
    device: str = "auto"
    """auto (cuda when torch sees one, else cpu) | cpu | cuda."""
    stop_at_eos: bool = True
    """Stop a sequence at its end-of-sequence token."""
    progress: bool = True
    """Show a progress bar over the prompts."""


@dataclass
class CaptureResult:
    """What a capture produced: the file, its metadata, and the tokens (for checks)."""

    path: Path
    meta: TraceMeta
    prompt_ids: list[list[int]] = field(default_factory=list)
    generated_ids: list[list[int]] = field(default_factory=list)


def _prompt(obj: Any, where: str) -> str:
    """A prompt of a JSON(L) file: a string, or an object's ``prompt`` (or ``text``)."""
    text = obj if isinstance(obj, str) else (obj.get("prompt", obj.get("text")) if isinstance(obj, dict) else None)
    if not isinstance(text, str):
        raise CaptureError(f"{where}: field 'prompt' (or 'text') missing or not a string")
    return text


def read_prompts(path: str | Path) -> list[str]:
    """Prompts from JSONL (``{"prompt": ...}``, ``{"text": ...}`` or a JSON string a line), a JSON array of those
    (.json), or text, one a line."""
    p = Path(path)
    if not p.is_file():
        raise CaptureError(f"prompts file {p} does not exist (fix: prompts=PATH to a .jsonl or .txt file)")
    prompts = []
    text = read_text(p, "the prompts file", "a .jsonl, .json or .txt file of prompts, in UTF-8")
    if p.suffix == ".json":  # one JSON array of prompts (strings, or objects with "prompt" or "text")
        try:
            items = json.loads(text)
        except json.JSONDecodeError as exc:
            raise CaptureError(f"{p}: line {exc.lineno}: not JSON ({exc.msg}) (fix: a JSON array of prompts)") from None
        if not isinstance(items, list):
            raise CaptureError(f'{p}: not a JSON array of prompts (fix: ["a prompt", ...], or a .jsonl file)')
        for i, obj in enumerate(items):
            prompts.append(_prompt(obj, f"{p}: item {i}"))
    for n, line in enumerate(text.splitlines() if p.suffix != ".json" else [], 1):
        if not line.strip():
            continue
        if p.suffix == ".jsonl":
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise CaptureError(f"{p}: line {n}: not JSON ({exc.msg})") from None
            prompts.append(_prompt(obj, f"{p}: line {n}"))
        else:
            prompts.append(line)
    if not prompts:
        raise CaptureError(f"prompts file {p} has no prompts")
    return prompts


def check_config(cfg: CaptureConfig) -> tuple[Path, Path]:
    """Validate knobs and paths before loading anything; returns (model dir, prompts file)."""
    for name, low in (("max_new_tokens", 1), ("batch_size", 1), ("max_prompt_tokens", 1), ("lookahead", 0)):
        if getattr(cfg, name) < low:
            raise CaptureError(f"{name}={getattr(cfg, name)} must be >= {low}")
    if cfg.dtype not in ("auto", "float32", "bfloat16", "float16"):
        raise CaptureError(f"dtype={cfg.dtype} must be one of auto, float32, bfloat16, float16")
    if cfg.device not in ("auto", "cpu", "cuda"):
        raise CaptureError(f"device={cfg.device} must be auto, cpu or cuda")
    if cfg.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise CaptureError("device=cuda but torch sees no CUDA device (fix: device=cpu or device=auto)")
    model_dir = Path(cfg.model) if cfg.model else bundled_model_dir()
    if not (model_dir / "config.json").is_file():
        raise CaptureError(
            f"model={model_dir}: no config.json there (fix: a local Hugging Face checkpoint "
            f"directory, or leave model unset for the bundled tiny model)"
        )
    prompts = Path(cfg.prompts) if cfg.prompts else bundled_prompts_path()
    return model_dir, prompts


class RouterRecorder:
    """Forward hooks on every router; holds the current forward pass's decisions.

    The hooks only keep references; ``take`` sorts, applies the lookahead routers (router j
    runs once on the inputs of layers j-1..j-D together) and copies to the host once per pass.
    """

    def __init__(self, routers: list[Any], lookahead: int) -> None:
        self.routers = routers
        self.depth = lookahead
        self.pass_records: list[tuple | None] = [None] * len(routers)
        self.handles = [r.register_forward_hook(self._hook(i), with_kwargs=True) for i, r in enumerate(routers)]

    def _hook(self, m: int):
        def fn(module: Any, args: tuple, kwargs: dict, output: tuple) -> None:
            x = args[0] if args else kwargs["hidden_states"]
            self.pass_records[m] = (x.detach().reshape(-1, x.shape[-1]).clone(), output[1].detach(), output[2].detach())

        return fn

    @staticmethod
    def _sorted(w: Any, ids: Any) -> tuple[Any, Any]:
        """Highest weight first; router order on ties."""
        import torch

        w, order = torch.sort(w.float(), dim=-1, descending=True, stable=True)
        return torch.gather(ids, -1, order), w

    def take(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """ids [N, L, K], weights [N, L, K], pred ids / weights [N, L, D, K] (-1 / NaN past the last layer)."""
        import torch

        held = self.pass_records
        self.pass_records = [None] * len(self.routers)
        recs = [r for r in held if r is not None]
        if len(recs) != len(held):
            raise RuntimeError("a router did not run during the forward pass")
        L, D = len(recs), self.depth
        ids, w = self._sorted(torch.stack([r[1] for r in recs], 1), torch.stack([r[2] for r in recs], 1))
        n, _, k = ids.shape
        pid = torch.full((n, L, D, k), -1, dtype=ids.dtype, device=ids.device)
        pw = torch.full((n, L, D, k), float("nan"), device=ids.device)
        for j in range(1, L):
            src = [j - d for d in range(1, D + 1) if j - d >= 0]  # layers whose input router j predicts from
            if not src:
                continue
            out = self.routers[j].forward(torch.cat([recs[m][0] for m in src]))  # plain forward: no hook
            p_ids, p_w = self._sorted(out[1].reshape(len(src), n, k), out[2].reshape(len(src), n, k))
            for i, m in enumerate(src):
                pid[:, m, j - m - 1], pw[:, m, j - m - 1] = p_ids[i], p_w[i]
        host = lambda t, dt: t.cpu().numpy().astype(dt)
        return host(ids, np.int16), host(w, np.float32), host(pid, np.int16), host(pw, np.float32)

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


def _pass_rows(
    recs: tuple, keep: np.ndarray, req: np.ndarray, phase: int, step: int, pos: np.ndarray, depth: int
) -> TraceArrays:
    """Rows of one forward pass. keep/req/pos: [B*T] flattened like the router's input."""
    ids, w, pid, pw = recs
    L, k = ids.shape[1], ids.shape[2]
    sel = np.flatnonzero(keep)
    n = len(sel)
    rows = TraceArrays(
        request_id=np.repeat(req[sel], L).astype(np.int32),
        phase=np.full(n * L, phase, np.int8),
        step=np.full(n * L, step, np.int32),
        position=np.repeat(pos[sel], L).astype(np.int32),
        layer=np.tile(np.arange(L), n).astype(np.int16),
        expert_ids=ids[sel].reshape(n * L, k),
        gate_weights=w[sel].reshape(n * L, k),
    )
    if depth > 0:
        rows.pred_ids = pid[sel].reshape(n * L, depth, k)
        rows.pred_weights = pw[sel].reshape(n * L, depth, k)
    return rows


def _generate_batch(
    model: Any,
    rec: RouterRecorder,
    prompt_ids: list[list[int]],
    first_req: int,
    cfg: CaptureConfig,
    pad_id: int,
    eos_id: int | None,
) -> tuple[list[TraceArrays], list[list[int]]]:
    import torch

    dev = next(model.parameters()).device
    b = len(prompt_ids)
    width = max(len(p) for p in prompt_ids)
    ids = torch.full((b, width), pad_id, dtype=torch.long)
    mask = torch.zeros((b, width), dtype=torch.long)
    for i, p in enumerate(prompt_ids):  # left padding
        ids[i, width - len(p) :] = torch.tensor(p)
        mask[i, width - len(p) :] = 1
    pos = (mask.cumsum(-1) - 1).clamp(min=0)  # [B, T]
    req = np.arange(first_req, first_req + b)
    out = model(input_ids=ids.to(dev), attention_mask=mask.to(dev), position_ids=pos.to(dev), use_cache=True)
    cache_kw = "cache" if hasattr(out, "cache") else "past_key_values"  # transformers 5 releases name it either way
    parts = [
        _pass_rows(
            rec.take(),
            mask.numpy().ravel().astype(bool),
            np.repeat(req, width),
            PREFILL,
            0,
            pos.numpy().ravel(),
            cfg.lookahead,
        )
    ]
    past, nxt = getattr(out, cache_kw), out.logits[:, -1].argmax(-1).cpu()
    last_pos = pos[:, -1]
    done = np.zeros(b, dtype=bool)
    generated: list[list[int]] = [[] for _ in range(b)]
    for step in range(1, cfg.max_new_tokens):
        for i in np.flatnonzero(~done):
            generated[i].append(int(nxt[i]))
        if cfg.stop_at_eos and eos_id is not None:
            done |= nxt.numpy() == eos_id
        if done.all():
            break
        feed = torch.where(torch.from_numpy(done), torch.tensor(pad_id), nxt)[:, None]
        mask = torch.cat([mask, torch.from_numpy(~done).long()[:, None]], 1)
        last_pos = last_pos + 1
        out = model(
            input_ids=feed.to(dev),
            attention_mask=mask.to(dev),
            position_ids=last_pos[:, None].to(dev),
            use_cache=True,
            **{cache_kw: past},
        )
        parts.append(_pass_rows(rec.take(), ~done, req, DECODE, step, last_pos.numpy(), cfg.lookahead))
        past, nxt = getattr(out, cache_kw), out.logits[:, -1].argmax(-1).cpu()
    for i in np.flatnonzero(~done):  # the last token is generated but never routed
        generated[i].append(int(nxt[i]))
    return parts, generated


def _load(model_dir: Path, cfg: CaptureConfig) -> tuple[Any, Any, Family]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()

    _, family = checkpoint_family(model_dir, f"model={model_dir}")
    device = cfg.device if cfg.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = cfg.dtype if cfg.dtype != "auto" else ("bfloat16" if device == "cuda" else "float32")
    try:
        tok = AutoTokenizer.from_pretrained(model_dir)
    except (OSError, ValueError) as exc:
        raise CaptureError(f"model={model_dir}: no usable tokenizer ({exc})") from exc
    # Any: transformers declares ``to`` through functools.wraps(nn.Module.to), which a checker reads as the unbound
    # method
    with reading(model_dir, "the checkpoint's weights", "a whole Hugging Face checkpoint, its files as saved"):
        model: Any = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype))
    return model.to(device).eval(), tok, family


def capture(cfg: CaptureConfig) -> CaptureResult:
    """Generate greedily for every prompt and write the routing trace to ``cfg.out``."""
    import torch
    import transformers
    from tqdm import tqdm

    model_dir, prompts_path = check_config(cfg)
    prompts = read_prompts(prompts_path)[: cfg.max_prompts]
    model, tok, family = _load(model_dir, cfg)
    blocks, routers = zip(*find_routers(model, family))
    bundled = {
        bundled_model_dir().resolve(): "hobbit-tiny-mixtral",
        bundled_phimoe_dir().resolve(): "hobbit-tiny-phimoe",
    }
    name = bundled.get(model_dir.resolve(), model_dir.name)
    spec = model_spec(model.config, family, len(routers), name)
    prompt_ids = [tok(p)["input_ids"][-cfg.max_prompt_tokens :] for p in prompts]
    empty = [i for i, p in enumerate(prompt_ids) if not p]
    if empty:
        raise CaptureError(f"{prompts_path}: prompt {empty[0] + 1} is empty after tokenisation")
    source = {
        "kind": "capture",
        "model_dir": str(model_dir),
        "prompts": str(prompts_path),
        "num_prompts": len(prompts),
        "prompts_sha256": hashlib.sha256(prompts_path.read_bytes()).hexdigest(),
        "prompt_tokens": sum(map(len, prompt_ids)),
        "max_new_tokens": cfg.max_new_tokens,
        "batch_size": cfg.batch_size,
        "dtype": str(model.dtype),
        "device": str(model.device),
        "moe_blocks": list(blocks),
        "transformers": transformers.__version__,
        "torch": torch.__version__,
    }
    meta = TraceMeta(model=spec, lookahead_depth=cfg.lookahead, source=source, created=now_iso())
    eos = tok.eos_token_id
    pad = tok.pad_token_id if tok.pad_token_id is not None else (eos if eos is not None else 0)
    rec = RouterRecorder(list(routers), cfg.lookahead)
    result = CaptureResult(Path(cfg.out), meta, prompt_ids)
    bar = tqdm(total=len(prompts), unit="prompt", desc="capture", disable=None if cfg.progress else True)
    try:
        with TraceWriter(cfg.out, meta) as writer, torch.no_grad():
            for start in range(0, len(prompts), cfg.batch_size):
                batch = prompt_ids[start : start + cfg.batch_size]
                parts, gen = _generate_batch(model, rec, batch, start, cfg, pad, eos)
                writer.write(concat(parts))
                result.generated_ids.extend(gen)
                bar.update(len(batch))
                bar.set_postfix(rows=writer.rows)
    finally:
        bar.close()
        rec.remove()
    return result
