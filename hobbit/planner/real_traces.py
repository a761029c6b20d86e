"""The real routing traces under ../shared/real-traces, each read from its folder in its own format as its SOURCE.md
describes it (``READERS``: folder -> reader; ``read_real``: all of them; ``unread_folders``: the folders no reader
knows yet). ``RealTrace.measure`` gives its ``locality.Locality``; benchmarks/routing_fit.py fits and writes them.

Layer: the planner (stdlib, numpy, pyarrow and hobbit.planner.locality only).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from hobbit.planner.locality import Locality, measure, measure_counts


@dataclass
class RealTrace:
    """One real trace, read from its folder under ../shared/real-traces (its SOURCE.md says what it is)."""

    name: str
    folder: str
    model: str
    num_experts: int
    top_k: int
    phase: str  # prefill | decode | prefill+decode
    citation: str  # repository@commit, as SOURCE.md gives it
    ids: list[np.ndarray] | None = None  # one [T, L, K] per request
    weights: list[np.ndarray] | None = None
    counts: np.ndarray | None = None  # [L, E] selection counts (popularity only)
    count_tokens: int = 0  # tokens behind each row of ``counts``
    count_domains: int = 0  # ``counts`` rows: count_domains x layers
    consecutive_layers: bool = True
    representative: bool = True  # stands for its model (a model's second file or phase does not): preset material
    note: str = ""

    def measure(self) -> Locality:
        if self.ids is None:
            assert self.counts is not None
            return measure_counts(self.counts, self.top_k, self.count_tokens)
        return measure(self.ids, self.num_experts, self.weights, self.consecutive_layers)


def citation(source_md: Path) -> str:
    """'github.com/owner/repo@commit' from the first 'github.com/owner/repo, commit <sha>' in a SOURCE.md, or else
    from its 'Repository: github.com/owner/repo' line and the first 40-digit commit after it."""
    text = source_md.read_text()
    m = re.search(r"github\.com/([\w.-]+/[\w.-]+?),?\s+commit\s+([0-9a-f]{40})", text)
    if not m:
        m = re.search(r"Repository:\s*github\.com/([\w-]+/[\w.-]+?)\s.*?\b([0-9a-f]{40})\b", text, re.DOTALL)
    if not m:
        raise ValueError(f"{source_md}: no 'github.com/<repo>, commit <sha>' line")
    return f"github.com/{m.group(1)}@{m.group(2)}"


def _lists(col, k: int) -> np.ndarray:
    """A list<...>[k] Arrow column -> [N, k] numpy."""
    flat = col.combine_chunks() if hasattr(col, "combine_chunks") else col
    return flat.flatten().to_numpy().reshape(-1, k)


def _split(values: np.ndarray, keys: np.ndarray, L: int, k: int) -> list[np.ndarray]:
    """Rows grouped by consecutive ``keys`` (one key per row, rows token-major and layer-minor) -> [T, L, k] each."""
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    ends = np.r_[starts[1:], len(keys)]
    return [values[s:e].reshape(-1, L, k) for s, e in zip(starts, ends)]


def read_deepseek(folder: Path) -> list[RealTrace]:
    """deepseek_v2_lite_puffin_prefill_routing.parquet: rows ordered by prompt_num, position, layer (26 MoE layers),
    expert_ids list<int16>[6] (a set, unranked), no weights; one prompt = one request, prefill only."""
    t = pq.read_table(folder / "deepseek_v2_lite_puffin_prefill_routing.parquet")
    prompt = t["prompt_num"].to_numpy()
    pos, layer = t["position"].to_numpy(), t["layer"].to_numpy()
    if np.any(np.lexsort((layer, pos, prompt)) != np.arange(len(prompt))):
        raise ValueError(f"{folder}: rows are not in (prompt_num, position, layer) order")
    ids = _lists(t["expert_ids"], 6)
    return [
        RealTrace(
            name="deepseek-v2-lite",
            folder=folder.name,
            model="DeepSeek-V2-Lite-Chat",
            num_experts=64,
            top_k=6,
            phase="prefill",
            citation=citation(folder / "SOURCE.md"),
            ids=_split(ids, prompt, 26, 6),
            note="300 Puffin prompts (2-50 tokens), one forward pass each; 8-bit model",
        )
    ]


def read_flame(folder: Path) -> list[RealTrace]:
    """flame_moe_290m_prefill_2048tok.parquet (32 sequences x 64 positions of one token stream) and
    flame_moe_290m_first10pos_64seq.parquet (positions 0-9 of 64 sequences): seq, pos, layer 2..9, expert_ids
    list<int16>[6], gate_probs list<float32>[6] (softmax probabilities, not renormalised); teacher-forced."""
    out = []
    for fname, name, note, preset in (
        ("flame_moe_290m_prefill_2048tok.parquet", "flame-moe-290m", "32 x 64 consecutive pretraining tokens", True),
        (
            "flame_moe_290m_first10pos_64seq.parquet",
            "flame-moe-290m-first10",
            "positions 0-9 of 64 sequences only (starts of sequences; overlaps the 2048-token file)",
            False,
        ),
    ):
        t = pq.read_table(folder / fname).sort_by([("seq", "ascending"), ("pos", "ascending"), ("layer", "ascending")])
        L = len(np.unique(t["layer"].to_numpy()))
        seq = t["seq"].to_numpy()
        out.append(
            RealTrace(
                name=name,
                folder=folder.name,
                model="FLAME-MoE-290M",
                num_experts=64,
                top_k=6,
                phase="prefill",
                citation=citation(folder / "SOURCE.md"),
                ids=_split(_lists(t["expert_ids"], 6), seq, L, 6),
                weights=_split(_lists(t["gate_probs"], 6), seq, L, 6),
                representative=preset,
                note=note,
            )
        )
    return out


def read_llama4(folder: Path) -> list[RealTrace]:
    """llama4_maverick_mmlu_routing.parquet: rows ordered by request, step, position, layer (24 MoE layers),
    token_index the token's place in its request, expert_ids list<int16>[1], no weights; prefill then decode."""
    t = pq.read_table(folder / "llama4_maverick_mmlu_routing.parquet")
    req = np.unique(t["request"].to_numpy(zero_copy_only=False), return_inverse=True)[1]
    tok, layer = t["token_index"].to_numpy(), t["layer"].to_numpy()
    order = np.lexsort((layer, tok, req))
    ids = _lists(t["expert_ids"], 1)[order]
    phases = t["phase"].to_numpy(zero_copy_only=False)
    n_pre = int((phases == "prefill").sum()) // 24
    return [
        RealTrace(
            name="llama4-maverick",
            folder=folder.name,
            model="Llama-4-Maverick-17B-128E-Instruct",
            num_experts=128,
            top_k=1,
            phase="prefill+decode",
            citation=citation(folder / "SOURCE.md"),
            ids=_split(ids, req[order], 24, 1),
            note=f"40 MMLU requests: {n_pre} prefill + {len(order) // 24 - n_pre} decode tokens",
        )
    ]


def read_qwen(folder: Path) -> list[RealTrace]:
    """qwen15moe_batch_routing.parquet: vLLM batch rows of 5 separately logged layers (0, 8, 12, 18, 23; same seed,
    same batch sizes): layer, forward_pass, pos_in_batch, expert_ids list<int16>[4], gate_weights list<float32>[4].

    Passes before the prefill pass (the largest non-dummy one) are warm-up and dropped. Decode: a batch slot holds
    the same request from one pass to the next while the batch size stays the same (vLLM condenses the batch only
    when a request finishes), so each slot's run of same-size passes is one sequence. Prefill: the 25 prompts'
    tokens in one pass, kept as one sequence (24 unknown prompt boundaries, 24 of its 1,405 pairs; not in presets).
    The layers are not consecutive: no cross-layer statistic."""
    t = pq.read_table(folder / "qwen15moe_batch_routing.parquet")
    layers = np.unique(t["layer"].to_numpy())
    L = len(layers)
    layer_idx = np.searchsorted(layers, t["layer"].to_numpy())
    fp, pos = t["forward_pass"].to_numpy(), t["pos_in_batch"].to_numpy()
    dummy = t["warmup_dummy"].to_numpy(zero_copy_only=False)
    ids_rows, w_rows = _lists(t["expert_ids"], 4), _lists(t["gate_weights"], 4)
    n_pass = int(fp.max()) + 1
    size = np.bincount(fp[layer_idx == 0], minlength=n_pass)
    sizes_per_layer = [np.bincount(fp[layer_idx == i], minlength=n_pass) for i in range(L)]
    if any(np.any(s != size) for s in sizes_per_layer):
        raise ValueError(f"{folder}: the layers' forward-pass sizes differ")
    real = np.ones(n_pass, bool)
    real[np.unique(fp[dummy])] = False
    prefill = int(np.argmax(np.where(real, size, -1)))
    # ids[pass][pos] -> [L, K]
    grid_ids = np.full((n_pass, int(size.max()), L, 4), -1, np.int64)
    grid_w = np.zeros((n_pass, int(size.max()), L, 4), np.float64)
    grid_ids[fp, pos, layer_idx] = ids_rows
    grid_w[fp, pos, layer_idx] = w_rows
    pre_ids, pre_w = [grid_ids[prefill, : size[prefill]]], [grid_w[prefill, : size[prefill]]]
    dec_ids, dec_w = [], []
    p = prefill + 1
    while p < n_pass:
        q = p
        while q + 1 < n_pass and size[q + 1] == size[p]:
            q += 1
        for slot in range(size[p]):
            dec_ids.append(grid_ids[p : q + 1, slot])
            dec_w.append(grid_w[p : q + 1, slot])
        p = q + 1
    cite = citation(folder / "SOURCE.md")

    def trace(name: str, phase: str, ids: list[np.ndarray], w: list[np.ndarray], rep: bool, note: str) -> RealTrace:
        return RealTrace(
            name=name,
            folder=folder.name,
            model="Qwen1.5-MoE-A2.7B-Chat",
            num_experts=60,
            top_k=4,
            phase=phase,
            citation=cite,
            ids=ids,
            weights=w,
            consecutive_layers=False,
            representative=rep,
            note=note,
        )

    n_dec = sum(len(x) for x in dec_ids)
    return [
        trace(
            "qwen1.5-moe",
            "decode",
            dec_ids,
            dec_w,
            True,
            f"25 GSM8K requests batched by vLLM: {n_dec} decode tokens in {len(dec_ids)} slot runs (a batch slot between "
            f"two batch-size changes, counted as requests); layers {[int(x) for x in layers]}",
        ),
        trace(
            "qwen1.5-moe-prefill",
            "prefill",
            pre_ids,
            pre_w,
            False,
            "the batched prefill pass as one sequence (prompt boundaries unknown)",
        ),
    ]


def read_routing_counts(folder: Path) -> list[RealTrace]:
    """routing_counts.json: models -> {model} -> expert_counts[domain][layer][expert] = top-K selections of 208,896
    tokens (popularity only: no per-token order). One trace per model; each (domain, layer) is a row of counts, so
    the skew is averaged over domains and layers. The SFT and DPO variants stand for OLMoE less than the base model
    (``representative`` false)."""
    doc = json.loads((folder / "routing_counts.json").read_text())
    shapes = {"OLMoE-1B-7B-0924": (64, 8), "Mixtral-8x7B-v0.1": (8, 2), "olmoe-sft": (64, 8), "olmoe-dpo": (64, 8)}
    names = {"OLMoE-1B-7B-0924": "olmoe-1b-7b", "Mixtral-8x7B-v0.1": "mixtral-8x7b"}
    out = []
    for model, body in doc["models"].items():
        E, k = shapes[model]
        rows, domains, tokens = [], [], set()
        for domain, per_layer in body["expert_counts"].items():
            domains.append(domain)
            for layer in sorted(per_layer, key=int):
                c = np.zeros(E)
                for e, n in per_layer[layer].items():
                    c[int(e)] = n
                rows.append(c)
                tokens.add(int(c.sum()) // k)
        out.append(
            RealTrace(
                name=names.get(model, model) or folder.name,
                folder=folder.name,
                model=model,
                num_experts=E,
                top_k=k,
                phase="prefill",
                citation=citation(folder / "SOURCE.md"),
                counts=np.array(rows),
                count_tokens=max(tokens),
                count_domains=len(domains),
                representative=model in names,
                note=f"selection counts only ({', '.join(domains)}; layers 0, 7, 15)",
            )
        )
    return out


def read_warp(folder: Path) -> list[RealTrace]:
    """raw/tests/trace_kimi_300.jsonl (Kimi-Linear-48B-A3B, 300 decode steps, 26 MoE layers x 8 of 256) and
    raw/tests/trace_olmoe_299.jsonl (OLMoE-1B-7B, 299 decode steps, 16 layers x 8 of 64): one line per decode step,
    ``{"tok": n, "layers": [[ids], ...]}``, each layer's ids sorted (no top-k order), no weights; batch 1, one request
    per file. The OLMoE file is that model's second trace and another phase (the routing counts stand for it)."""
    out = []
    for fname, name, model, E, L, rep, note in (
        (
            "trace_kimi_300.jsonl",
            "kimi-linear-48b",
            "Kimi-Linear-48B-A3B",
            256,
            26,
            True,
            "300 decode steps of one coding prompt, batch 1, greedy; 3-bit experts (warp's own container)",
        ),
        (
            "trace_olmoe_299.jsonl",
            "olmoe-1b-7b-decode",
            "OLMoE-1B-7B",
            64,
            16,
            False,
            "299 decode steps of one prompt, batch 1, temperature 0.7 (the full sequence run again at each step)",
        ),
    ):
        path = folder / "raw" / "tests" / fname
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        toks = [int(r["tok"]) for r in rows]
        if toks != sorted(set(toks)):
            raise ValueError(f"{path}: the 'tok' field does not increase from line to line")
        for line, r in enumerate(rows, 1):
            layers = r["layers"]
            if len(layers) != L or any(len(x) != 8 or min(x) < 0 or max(x) >= E for x in layers):
                raise ValueError(f"{path}: 'layers' is not {L} lists of 8 expert ids below {E} on line {line}")
        ids = np.asarray([r["layers"] for r in rows], np.int64)  # [T, L, 8]
        out.append(
            RealTrace(
                name=name,
                folder=folder.name,
                model=model,
                num_experts=E,
                top_k=8,
                phase="decode",
                citation=citation(folder / "SOURCE.md"),
                ids=[ids],
                representative=rep,
                note=note,
            )
        )
    return out


def read_nemotron(folder: Path) -> list[RealTrace]:
    """raw/nemotron3_decode_routing_trace.json: ``decode_topk_by_step`` [127 steps][23 MoE layers][6 ids of 128], in
    the router's top-k order, no weights; one request (a 2,048-token prompt, then decode), batch 1, vLLM on a B200.
    The 23 MoE layers follow one another among the model's MoE layers (Mamba and attention layers between them). The
    prefill's active-expert sets (no per-token routing) are not read."""
    path = folder / "raw" / "nemotron3_decode_routing_trace.json"
    doc = json.loads(path.read_text())
    shape = doc["shape"]
    E, k, L = int(shape["experts"]), int(shape["top_k"]), int(shape["layers"])
    ids = np.asarray(doc["decode_topk_by_step"], np.int64)  # [T, L, k]
    if ids.ndim != 3 or ids.shape[1:] != (L, k) or ids.min() < 0 or ids.max() >= E:
        raise ValueError(f"{path}: 'decode_topk_by_step' is not [steps][{L}][{k}] expert ids below {E}")
    return [
        RealTrace(
            name="nemotron3-nano-30b",
            folder=folder.name,
            model="NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4",
            num_experts=E,
            top_k=k,
            phase="decode",
            citation=citation(folder / "SOURCE.md"),
            ids=[ids],
            note=f"{len(ids)} decode steps after a {shape['context_tokens']:,}-token prompt, batch 1 (vLLM, B200)",
        )
    ]


READERS: dict[str, Callable[[Path], list[RealTrace]]] = {
    "deepseek-v2-lite-chat-puffin-prefill": read_deepseek,
    "flame-moe-290m-iter5473": read_flame,
    "llama4-maverick-17b-128e-mmlu": read_llama4,
    "qwen1.5-moe-a2.7b-chat-gsm8k": read_qwen,
    "olmoe-mixtral-routing-counts": read_routing_counts,
    "warp-kimi-linear-olmoe-decode": read_warp,
    "nemotron3-nano-30b-a3b-decode-plena": read_nemotron,
}


def read_real(root: Path) -> list[RealTrace]:
    """Every real trace under ``root`` (../shared/real-traces) whose folder has a reader in ``READERS``
    (``unread_folders``: the others)."""
    return [t for folder in sorted(root.iterdir()) if folder.name in READERS for t in READERS[folder.name](folder)]


def unread_folders(root: Path) -> list[str]:
    """The trace folders under ``root`` that no reader knows (each needs one, written from its SOURCE.md)."""
    return sorted(p.name for p in root.iterdir() if p.is_dir() and p.name not in READERS)
