"""A model's shapes read from the files users have: a Hugging Face config.json or a GGUF file (``load_model``).

config.json: transformers builds the model on the meta device (no memory, no weights) and its parameters are counted
by name, so every count is exact for every family transformers knows. GGUF: the header and tensor infos only (the file
is memory-mapped, its tensor data never read), so the bytes are the file's own, types per tensor as quantised.

Counting rules, the same for both sources:

- A routed expert is its weight matrices (3 * hidden_size * expert_ffn); its biases (GPT-OSS) are counted with the
  layer's other parameters (``dense_params_per_layer``, and a GGUF's resident bytes), so the totals stay exact.
- ``dense_params_per_layer`` is the mean over MoE layers of their non-expert parameters; ``other_params`` the rest
  (embeddings, LM head unless tied, final norm, leading dense layers, the mean's rounding), so that
  ``num_layers * (dense_params_per_layer + num_experts * expert_params) + other_params`` is the total.
- Only leading dense layers are modelled (``dense_layers``); dense layers between MoE layers are an error.
- ``tensors`` keys are llama.cpp's GGUF names without ``blk.N.`` and ``.weight``; a bias keeps ``.bias`` (llama.cpp
  keeps 1-D tensors unquantised): ``attn_q``, ``attn_q.bias``, ``ffn_gate_exps.bias``. A tensor no table names is
  kept under ``unmapped`` (in a block) or ``unmapped_top`` (outside the blocks), never dropped.
- Caches at 16 bit: a full-attention layer adds K and V rows per token (``kv_heads * head_dim`` each); an MLA layer
  its latent, kv_lora_rank + qk_rope_head_dim (llama.cpp and vLLM cache it, not the expanded K and V); a linear-
  attention layer adds nothing per token but a fixed state: its convolution's last kernel - 1 inputs (as llama.cpp
  and vLLM keep it) and the recurrent state, heads * key_dim * value_dim (llama.cpp keeps both in F32: twice this);
  a sliding-window layer (GPT-OSS) its window's K and V, counted in ``state_bytes`` too.
"""

from __future__ import annotations

import dataclasses
import json
import re
import struct
from pathlib import Path
from typing import Any, NamedTuple

from hobbit.sim.config import ConfigError, ModelConfig

# model_type -> the llama.cpp architecture its GGUF files carry, whose tensor names gguf.TensorNameMap knows.
# llama.cpp converts Mixtral as "llama" and GLM-4.7-Flash (an MLA model) as "deepseek2".
ARCHS: dict[str, str] = {
    "mixtral": "llama",
    "phimoe": "phimoe",
    "qwen2_moe": "qwen2moe",
    "qwen3_moe": "qwen3moe",
    "olmoe": "olmoe",
    "deepseek_v2": "deepseek2",
    "deepseek_v3": "deepseek2",
    "gpt_oss": "gpt-oss",
    "glm4_moe": "glm4moe",
    "glm4_moe_lite": "deepseek2",
    "qwen3_next": "qwen3next",
    "qwen3_5_moe": "qwen35moe",
    "kimi_linear": "kimi-linear",
}
# families whose config.json names its own model_type over another's architecture, read as that one (Kimi-K2's
# config.json: model_type kimi_k2, architectures DeepseekV3ForCausalLM, the same fields)
_READ_AS = {"kimi_k2": "deepseek_v3"}
# Names transformers 5 gives that gguf 0.19's map lacks (fused or moved since llama.cpp's converters were written):
# the part after ``layers.N.`` -> the GGUF kinds it splits into evenly (llama.cpp writes dt_bias as ssm_dt.bias).
_OWN: tuple[tuple[str, tuple[str, ...]], ...] = (
    (r"mlp\.experts\.gate_up_proj_bias", ("ffn_gate_exps.bias", "ffn_up_exps.bias")),
    (r"mlp\.experts\.down_proj_bias", ("ffn_down_exps.bias",)),
    (r"(linear_attn|self_attn\.forget_gate)\.dt_bias", ("ssm_dt.bias",)),
    (r"self_attn\.forget_gate\.A_log", ("ssm_a",)),
    (r"self_attn\.forget_gate\.f_a_proj\.weight", ("ssm_f_a",)),
    (r"self_attn\.forget_gate\.f_b_proj\.weight", ("ssm_f_b",)),
    (r"self_attn\.conv1d\.weight", ("ssm_conv1d_q", "ssm_conv1d_k", "ssm_conv1d_v")),
)
_EXPERT_TENSORS = frozenset({"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps", "ffn_gate_up_exps"})
_DROP = ("model_type", "quantization_config", "auto_map")  # no bearing on shapes; a quantiser would need its package
_SWA_EVERY = {"gpt-oss": 2}  # llama.cpp's set_swa_pattern(2): layers i with i % n < n - 1 slide
_FIX = "pass a .gguf file, a config.json or a folder holding one"


def _supported() -> str:
    return ", ".join(sorted(ARCHS))


def _read_hf(path_or_dict: str | Path | dict[str, Any]) -> tuple[dict[str, Any], str, str]:
    """The config's fields, where it came from (for messages) and the name it gives the model."""
    if isinstance(path_or_dict, dict):
        return dict(path_or_dict), "<dict>", str(path_or_dict.get("model_type", "unnamed"))
    p = Path(path_or_dict)
    if p.is_dir():
        p = p / "config.json"
    try:
        raw = json.loads(p.read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"{p}: cannot read a config.json ({e}); {_FIX}") from e
    if not isinstance(raw, dict):
        raise ConfigError(f"{p}: not a JSON object; {_FIX}")
    return raw, str(p), p.parent.name if p.name == "config.json" else p.stem


def _kinds(tmap: Any, name: str, rest: str, count: int, unknown: str) -> list[tuple[str, int]]:
    """The GGUF kinds a transformers parameter becomes, with their parameter counts."""
    for pattern, kinds in _OWN:
        if re.fullmatch(pattern, rest):
            return [(k, count // len(kinds) + (count % len(kinds) if j == 0 else 0)) for j, k in enumerate(kinds)]
    gguf_name = tmap.get_name(name, try_suffixes=(".weight", ".bias"))
    if gguf_name is None:
        return [(unknown, count)]
    return [(re.sub(r"\.weight$", "", re.sub(r"^blk\.\d+\.", "", gguf_name)), count)]


def _first(cfg: Any, names: tuple[str, ...], where: str) -> int:
    for n in names:
        if getattr(cfg, n, None):
            return int(getattr(cfg, n))
    raise ConfigError(f"{where}: none of {', '.join(names)} is set")


def _hf_cache(text: Any, shapes: list[dict[str, tuple[int, ...]]]) -> tuple[int, int, str]:
    """KV bytes per token, fixed state bytes and the attention kind, from each layer's parameter shapes."""
    kv = state = 0
    kinds: set[str] = set()
    layer_types = getattr(text, "layer_types", None) or []
    window = getattr(text, "sliding_window", None) or 0
    heads = getattr(text, "linear_num_value_heads", None) or getattr(text, "linear_num_heads", 0) or 0
    k_dim = getattr(text, "linear_key_head_dim", None) or getattr(text, "linear_head_dim", 0) or 0
    v_dim = getattr(text, "linear_value_head_dim", None) or getattr(text, "linear_head_dim", 0) or 0
    for i, sh in enumerate(shapes):
        conv = [s for r, s in sh.items() if r.endswith("conv1d.weight")]  # [channels, 1, kernel]
        if conv:
            kinds.add("linear")
            state += 2 * (sum(s[0] * (s[-1] - 1) for s in conv) + heads * k_dim * v_dim)
        elif "self_attn.kv_a_proj_with_mqa.weight" in sh:  # rows: kv_lora_rank + qk_rope_head_dim
            kinds.add("mla")
            kv += 2 * sh["self_attn.kv_a_proj_with_mqa.weight"][0]
        elif "self_attn.k_proj.weight" in sh:
            per = 2 * (sh["self_attn.k_proj.weight"][0] + sh["self_attn.v_proj.weight"][0])
            if window and i < len(layer_types) and layer_types[i] == "sliding_attention":
                state += per * window
            else:
                kv += per
    return kv, state, "hybrid" if "linear" in kinds else "mla" if "mla" in kinds else "gqa"


def _layout(where: str, moe: list[int], n_blocks: int) -> int:
    """The leading dense layers; an error where dense layers sit between MoE layers or there are no experts."""
    if not moe:
        raise ConfigError(f"{where}: no routed experts found (a dense model?); supported MoE families: {_supported()}")
    if moe != list(range(moe[0], n_blocks)):
        dense = sorted(set(range(moe[0], n_blocks)) - set(moe))
        raise ConfigError(
            f"{where}: decoder layers {dense} are dense between MoE layers; only leading dense layers "
            "(first_k_dense_replace) are modelled: set mlp_only_layers=[] / decoder_sparse_step=1"
        )
    return moe[0]


def _split(where: str, expert_params: list[int], num_experts: int, hidden: int) -> int:
    """An expert's FFN width from one MoE layer's expert parameters (all layers alike, 3 * hidden * ffn each)."""
    ffn, rem = divmod(expert_params[0], num_experts * 3 * hidden)
    if rem or any(p != expert_params[0] for p in expert_params):
        raise ConfigError(
            f"{where}: routed experts of {expert_params} parameters per layer are not {num_experts} "
            f"experts of 3 x {hidden} x ffn weights alike in every layer"
        )
    return ffn


def from_hf_config(path_or_dict: str | Path | dict[str, Any], name: str | None = None) -> ModelConfig:
    """The shapes of a Hugging Face model from its config.json (or the folder holding it, or its fields as a dict).

    The model is built on the meta device (local files only, no weights) and its parameters counted by name; a
    multimodal config (qwen3_5_moe) counts its text model only. Raises ``ConfigError`` for a family outside
    ``ARCHS`` (dense models included), naming the file, the field and the supported families.
    """
    raw, where, default_name = _read_hf(path_or_dict)
    mt = str(raw.get("model_type") or "")
    mt = _READ_AS.get(mt, mt)
    if mt not in ARCHS:
        raise ConfigError(
            f"{where}: model_type={mt!r} is not a supported MoE family (a dense model has no experts to "
            f"offload); use a config.json with model_type one of: {_supported()}"
        )
    import gguf
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        cfg = AutoConfig.for_model(mt, **{k: v for k, v in raw.items() if k not in _DROP})
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{where}: transformers cannot read it as model_type={mt}: {e}") from e
    text = cfg.get_text_config()
    try:
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(text)
    except (AssertionError, RuntimeError, TypeError, ValueError) as e:  # inconsistent fields (a pad id past the vocab)
        raise ConfigError(f"{where}: transformers cannot build model_type={mt} from it: {e}") from e
    n_blocks = int(text.num_hidden_layers)
    arch = next(a for a, n in gguf.MODEL_ARCH_NAMES.items() if n == ARCHS[mt])
    tmap = gguf.TensorNameMap(arch, n_blocks)
    resident, expert_w, expert_b = [0] * n_blocks, [0] * n_blocks, [0] * n_blocks
    shapes: list[dict[str, tuple[int, ...]]] = [{} for _ in range(n_blocks)]
    tensors: dict[str, list[int]] = {}
    total = 0
    for pname, p in model.named_parameters():  # tied weights once
        count = p.numel()
        total += count
        m = re.search(r"(?:^|\.)layers\.(\d+)\.(.+)$", pname)
        if m is None:
            for kind, c in _kinds(tmap, pname, "", count, "unmapped_top"):
                tensors.setdefault(kind, [0])[0] += c
            continue
        i, rest = int(m.group(1)), m.group(2)
        parts = rest.split(".")
        if "experts" in parts and not parts[-1].endswith("bias"):  # routed experts (shared_expert(s) differ)
            expert_w[i] += count
            continue
        expert_b[i] += count if "experts" in parts else 0
        resident[i] += count
        shapes[i][rest] = tuple(p.shape)
        for kind, c in _kinds(tmap, pname, rest, count, "unmapped"):
            tensors.setdefault(kind, [0] * n_blocks)[i] += c
    moe = [i for i in range(n_blocks) if expert_w[i]]
    first = _layout(where, moe, n_blocks)
    num_experts = _first(text, ("num_local_experts", "num_experts", "n_routed_experts"), where)
    hidden = int(text.hidden_size)
    ffn = _split(where, [expert_w[i] for i in moe], num_experts, hidden)
    dense = round(sum(resident[i] for i in moe) / len(moe))
    kv, state, attention = _hf_cache(text, shapes)
    notes = f"; routed experts' biases ({expert_b[moe[0]]} per layer) in the dense parameters" if any(expert_b) else ""
    notes += "; text model only" if text is not cfg else ""
    top_k = _first(text, ("num_experts_per_tok", "num_experts_per_token"), where)
    shape = _Shape(len(moe), num_experts, top_k, hidden, ffn, dense, total, first)
    return _model(
        shape,
        (kv, state, attention),
        tensors,
        name=name or default_name,
        source=f"{where} (config.json, model_type {mt}){notes}",
    )


class _Shape(NamedTuple):
    """What a config.json or a GGUF header says of a model's MoE shape, and its parameter total."""

    layers: int
    experts: int
    top_k: int
    hidden: int
    ffn: int
    dense: int  # non-expert parameters per MoE layer (the mean)
    total: int
    dense_layers: int


def _model(shape: _Shape, cache: tuple[int, int, str], tensors: dict[str, list[int]], **fields: Any) -> ModelConfig:
    """The model config of ``shape``: the parameters not in its MoE layers' experts and dense parts are
    ``other_params``, so the sum stays exact; ``cache``: (KV bytes per token, fixed state bytes, attention kind)."""
    kv, state, attention = cache
    expert = 3 * shape.hidden * shape.ffn
    return ModelConfig(
        num_layers=shape.layers,
        num_experts=shape.experts,
        top_k=shape.top_k,
        hidden_size=shape.hidden,
        expert_ffn=shape.ffn,
        dense_params_per_layer=shape.dense,
        other_params=shape.total - shape.layers * (shape.dense + shape.experts * expert),
        kv_bytes_per_token=kv,
        dense_layers=shape.dense_layers,
        attention=attention,
        state_bytes=state,
        tensors=tensors,
        **fields,
    )


def _gguf_parts(p: Path) -> list[Path]:
    """Every part of a split GGUF (``-00001-of-00003.gguf``), first part first; else the file alone."""
    m = re.fullmatch(r"(.*)-(\d{5})-of-(\d{5})\.gguf", p.name)
    parts = [p] if m is None else [p.with_name(f"{m[1]}-{k:05d}-of-{m[3]}.gguf") for k in range(1, int(m[3]) + 1)]
    for part in parts:
        if not part.is_file():
            raise ConfigError(f"{part}: no such file; {_FIX} (a split GGUF needs all its parts side by side)")
    return parts


def from_gguf(path: str | Path, name: str | None = None) -> ModelConfig:
    """``_from_gguf``; a file whose header cannot be read (empty, cut short, not a GGUF file) refused naming it."""
    try:
        return _from_gguf(path, name)
    except ConfigError:
        raise
    except (OSError, ValueError, IndexError, KeyError, TypeError, struct.error) as e:  # gguf's reader, cut short
        line = (str(e).splitlines() or [""])[0][:160]
        raise ConfigError(f"{path}: not a readable GGUF file ({type(e).__name__}: {line}); {_FIX}") from None


def _tally(
    p: Path, blocks: list[dict[str, Any]], top: dict[str, Any], num_experts: int
) -> tuple[dict[str, list[int]], list[int], list[int], list[int], int, int]:
    """A GGUF's tensors counted: elements of each non-expert tensor per block, one expert's bytes and the expert and
    resident elements of each MoE block, the resident bytes and all elements."""
    n_blocks = len(blocks)
    tensors: dict[str, list[int]] = {}
    layer_bytes, expert_el, resident_el = [], [], []
    resident_bytes = total = 0
    for i, b in enumerate(blocks):
        exp = [t for k, t in b.items() if k in _EXPERT_TENSORS]
        nbytes = sum(int(t.n_bytes) for t in exp)
        if exp and nbytes % num_experts:
            raise ConfigError(f"{p}: block {i}'s expert tensors ({nbytes} bytes) do not split into {num_experts}")
        if exp:
            layer_bytes.append(nbytes // num_experts)
            expert_el.append(sum(int(t.n_elements) for t in exp))
        rest = {k: t for k, t in b.items() if k not in _EXPERT_TENSORS}
        for k, t in rest.items():
            tensors.setdefault(k, [0] * n_blocks)[i] += int(t.n_elements)
        if exp:
            resident_el.append(sum(int(t.n_elements) for t in rest.values()))
        resident_bytes += sum(int(t.n_bytes) for t in rest.values())
        total += sum(int(t.n_elements) for t in b.values())
    for k, t in top.items():
        tensors[k] = [int(t.n_elements)]
        resident_bytes += int(t.n_bytes)
        total += int(t.n_elements)
    return tensors, layer_bytes, expert_el, resident_el, resident_bytes, total


def _from_gguf(path: str | Path, name: str | None = None) -> ModelConfig:
    """The shapes and the exact bytes of a GGUF model file (every part of a split one), from its header alone.

    ``layer_expert_bytes``: each MoE block's routed-expert tensors (ffn_{gate,up,down}_exps or ffn_gate_up_exps) over
    the expert count, types as stored; ``file_resident_bytes``: every other tensor. Blocks of a multi-token-prediction
    head (``{arch}.nextn_predict_layers``, GLM-4.5) are left out: llama.cpp does not run them. KV and state bytes
    come from the attention tensors' shapes (best effort: metadata head counts where a block fuses Q, K and V; the
    recurrent state from ``ssm.state_size`` or ``kda.head_dim`` times ``ssm.inner_size`` or the V convolution's width).
    """
    import gguf

    p = Path(path)
    parts = _gguf_parts(p)
    readers = [gguf.GGUFReader(x) for x in parts]
    fields = readers[0].fields

    def get(key: str, default: Any = None) -> Any:
        f = fields.get(key)
        return default if f is None else f.contents()

    arch = str(get("general.architecture", ""))
    n_blocks = int(get(f"{arch}.block_count", 0)) - int(get(f"{arch}.nextn_predict_layers", 0))
    blocks: list[dict[str, Any]] = [{} for _ in range(n_blocks)]
    top: dict[str, Any] = {}
    for t in (t for r in readers for t in r.tensors):
        m = re.fullmatch(r"blk\.(\d+)\.(.+?)(?:\.weight)?", t.name)
        if m is None:
            top[re.sub(r"\.weight$", "", t.name)] = t
        elif int(m[1]) < n_blocks:
            blocks[int(m[1])][m[2]] = t
    moe = [i for i, b in enumerate(blocks) if _EXPERT_TENSORS & b.keys()]
    if not moe:
        raise ConfigError(
            f"{p}: no routed-expert tensors (ffn_*_exps) in {n_blocks} blocks of architecture "
            f"{arch!r}: not an MoE model, or an old per-expert layout; use a current llama.cpp MoE GGUF"
        )
    first = _layout(str(p), moe, n_blocks)
    num_experts = int(get(f"{arch}.expert_count", 0))
    hidden = int(get(f"{arch}.embedding_length", 0))
    if num_experts < 1 or hidden < 1:
        raise ConfigError(f"{p}: {arch}.expert_count or {arch}.embedding_length is missing; {_FIX}")
    tensors, layer_bytes, expert_el, resident_el, resident_bytes, total = _tally(p, blocks, top, num_experts)
    ffn = _split(str(p), expert_el, num_experts, hidden)
    dense = round(sum(resident_el) / len(resident_el))
    kv, state, attention = _gguf_cache(get, arch, blocks)
    ft = get("general.file_type")
    try:
        file_type = "" if ft is None else gguf.LlamaFileType(int(ft)).name.removeprefix("MOSTLY_").removeprefix("ALL_")
    except ValueError:
        file_type = f"file_type {ft}"
    stem = re.sub(r"-\d{5}-of-\d{5}$", "", parts[0].stem)
    top_k = int(get(f"{arch}.expert_used_count", 0)) or _missing(p, f"{arch}.expert_used_count")
    shape = _Shape(len(moe), num_experts, top_k, hidden, ffn, dense, total, first)
    return _model(
        shape,
        (kv, state, attention),
        tensors,
        name=name or str(get("general.name", "") or stem),
        source=f"{p} (GGUF, architecture {arch}, {file_type or 'no file_type'}, {len(parts)} file(s))",
        layer_expert_bytes=layer_bytes,
        file_resident_bytes=resident_bytes,
        file_type=file_type,
    )


def _missing(p: Path, key: str) -> int:
    raise ConfigError(f"{p}: metadata key {key} is missing; {_FIX}")


def _gguf_cache(get: Any, arch: str, blocks: list[dict[str, Any]]) -> tuple[int, int, str]:
    """KV bytes per token, fixed state bytes and the attention kind of a GGUF's blocks (shapes are ggml's ne)."""
    kv = state = 0
    kinds: set[str] = set()
    window = int(get(f"{arch}.attention.sliding_window", 0) or 0)
    pattern = get(f"{arch}.attention.sliding_window_pattern")
    every = _SWA_EVERY.get(arch, 0)
    k_dim = int(get(f"{arch}.ssm.state_size", 0) or get(f"{arch}.kda.head_dim", 0) or 0)
    inner = int(get(f"{arch}.ssm.inner_size", 0) or 0)
    heads_kv = get(f"{arch}.attention.head_count_kv", 0)
    heads = get(f"{arch}.attention.head_count", 1)
    for i, b in enumerate(blocks):
        conv = {k: [int(d) for d in t.shape] for k, t in b.items() if k.startswith("ssm_conv1d")}  # ne: kernel, ch.
        if conv:
            kinds.add("linear")
            v_width = inner or (conv["ssm_conv1d_v"][-1] if "ssm_conv1d_v" in conv else 0)
            state += 2 * (sum((s[0] - 1) * s[-1] for s in conv.values()) + k_dim * v_width)
            continue
        if "attn_kv_a_mqa" in b:  # ne: hidden, kv_lora_rank + rope dims
            kinds.add("mla")
            kv += 2 * int(b["attn_kv_a_mqa"].shape[1])
            continue
        if "attn_k" in b and "attn_v" in b:
            per = 2 * (int(b["attn_k"].shape[1]) + int(b["attn_v"].shape[1]))
        elif not any(k.startswith("attn_") for k in b):
            continue
        else:  # fused QKV: from the head counts (per layer where the file lists them)
            hk = int(heads_kv[i] if isinstance(heads_kv, list) else heads_kv)
            h = int(heads[i] if isinstance(heads, list) else heads)
            hidden = int(get(f"{arch}.embedding_length", 0))
            length = int(get(f"{arch}.attention.key_length", 0) or hidden // max(h, 1))
            per = 2 * hk * (length + int(get(f"{arch}.attention.value_length", 0) or length))
        sliding = pattern[i] if isinstance(pattern, list) and i < len(pattern) else every and i % every < every - 1
        if window and sliding:
            state += per * window
        else:
            kv += per
    return kv, state, "hybrid" if "linear" in kinds else "mla" if "mla" in kinds else "gqa"


def load_model(path: str | Path, name: str | None = None) -> ModelConfig:
    """A model's shapes from a ``.gguf`` file (all parts of a split one), a config.json or a folder holding one."""
    p = Path(path)
    if p.suffix == ".gguf":
        return from_gguf(p, name)
    if p.is_file() or (p / "config.json").is_file():
        return from_hf_config(p, name)
    what = "holds no config.json" if p.is_dir() else "does not exist"
    raise ConfigError(f"{p}: {what}; {_FIX}")


def preset_yaml(model: ModelConfig, header: str) -> str:
    """``model`` as a conf/model preset: ``header`` (comment lines citing where the config.json comes from), then
    every field; the per-tensor parameter counts one kind a line, a list a layer an entry."""
    import yaml

    fields = dataclasses.asdict(model)
    tensors = fields.pop("tensors")
    lines = [*(f"# {line}".rstrip() for line in header.splitlines())]
    lines += [yaml.safe_dump({k: v}, width=10**6, sort_keys=False).rstrip() for k, v in fields.items()]
    lines.append("tensors:  # parameters of each non-expert tensor kind (GGUF names), one entry per decoder layer")
    lines += [f"  {kind}: [{', '.join(map(str, counts))}]" for kind, counts in tensors.items()]
    return "\n".join(lines) + "\n"
