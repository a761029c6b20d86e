"""The catalogue's published config.json files (hobbit/catalogue/data/hf-configs/, cited in its SOURCES.md), and
``model=`` taking them by the names users type: a Hugging Face id, its last part, or the file's name."""

from __future__ import annotations

import json
import re

import pytest

from hobbit.catalogue.model_files import from_hf_config
from hobbit.catalogue.models import catalogue, find, folder
from hobbit.sim.config import ConfigError


def _total(m) -> int:
    return m.num_layers * (m.num_experts * m.expert_params + m.dense_params_per_layer) + m.other_params


def test_every_config_is_cited_and_a_moe_config():
    cat = catalogue()
    assert sorted(p.name for p in folder().glob("*.json")) == sorted(m.path.name for m in cat.values())
    assert len(cat) >= 20
    for name, m in cat.items():
        assert re.search(r"@ [0-9a-f]{12}", m.read_from), name  # a repository at a commit
        assert m.hf_ids and all(re.fullmatch(r"[\w.-]+/[\w.-]+", i) for i in m.hf_ids), (name, m.hf_ids)
        raw = json.loads(m.path.read_text(encoding="utf-8"))
        assert raw.get("model_type"), name
        assert "expert" in json.dumps(raw).lower(), name  # routed experts, under one of the families' names


@pytest.mark.parametrize(
    ("value", "file"),
    [
        ("deepseek-ai/DeepSeek-R1", "deepseek-r1"),
        ("DeepSeek-R1", "deepseek-r1"),
        ("deepseek-r1", "deepseek-r1"),
        ("Qwen/Qwen3-Coder-480B-A35B-Instruct", "qwen3-coder-480b-a35b"),
        ("mistralai/Mixtral-8x22B-v0.1", "mixtral-8x22b"),
        ("MiniMaxAI/MiniMax-M1-80k", "minimax-m1"),
        ("moonshotai/Kimi-K2-Instruct", "kimi-k2-instruct"),
    ],
)
def test_a_model_by_its_hugging_face_id(value, file):
    found = find(value)
    assert found is not None and found.path.stem == file
    assert find("deepseek-ai/DeepSeek-R2") is None


def test_catalogue_models_count_as_their_cards_say():
    """DeepSeek-R1 has DeepSeek-V3's architecture: 671 B without its MTP module, the V3 preset's count; the others
    as their model cards name them (Qwen3-Coder-480B-A35B, Mixtral-8x22B's 141 B, DeepSeek-V2-Lite's 15.7 B, Kimi-K2's
    1 T)."""
    r1 = from_hf_config(find("deepseek-ai/DeepSeek-R1").path)  # pyright: ignore[reportOptionalMemberAccess]
    assert _total(r1) == 671_026_404_352 and (r1.num_experts, r1.top_k, r1.dense_layers) == (256, 8, 3)
    coder = from_hf_config(find("Qwen/Qwen3-Coder-480B-A35B-Instruct").path)  # pyright: ignore[reportOptionalMemberAccess]
    assert round(_total(coder) / 1e9) == 480 and coder.num_experts == 160
    big = from_hf_config(find("mistralai/Mixtral-8x22B-v0.1").path)  # pyright: ignore[reportOptionalMemberAccess]
    assert round(_total(big) / 1e9) == 141 and (big.num_experts, big.top_k) == (8, 2)
    lite = from_hf_config(find("deepseek-ai/DeepSeek-V2-Lite").path)  # pyright: ignore[reportOptionalMemberAccess]
    assert round(_total(lite) / 1e9, 1) == 15.7 and (lite.num_experts, lite.top_k, lite.dense_layers) == (64, 6, 1)
    # Kimi-K2's config.json names its own model_type over DeepSeek-V3's architecture: read as that ("1T total")
    kimi = from_hf_config(find("moonshotai/Kimi-K2-Instruct").path)  # pyright: ignore[reportOptionalMemberAccess]
    assert round(_total(kimi) / 1e12, 2) == 1.03 and (kimi.num_experts, kimi.top_k, kimi.attention) == (384, 8, "mla")


def test_plan_takes_a_hugging_face_id(tmp_path):
    """``hobbit plan model=deepseek-ai/DeepSeek-R1`` on a 4090, an EPYC 9355 and twelve channels of DDR5: a plan whose
    settings fit by the rules a run checks; a family the catalogue holds but cannot count yet is refused naming
    the model, its file and its family."""
    from hobbit.planner.search import plan_for

    result = plan_for(
        "deepseek-ai/DeepSeek-R1", gpu="RTX 4090", cpu="EPYC 9355", ram="768GB:ddr5-6000x12",
        runtimes=["llama.cpp"], points=2, out=tmp_path,
    )  # fmt: skip
    assert result.model == "deepseek-r1"
    fits = [r for r in result.rows if r["fits"]]
    assert fits and fits[0]["decode_tok_s"] > 0 and fits[0]["gpu_bytes"] <= 24 * 2**30
    with pytest.raises(ConfigError, match=r"model=zai-org/GLM-5: .*in the catalogue .*glm-5\.json.*glm_moe_dsa"):
        plan_for("zai-org/GLM-5", gpu="RTX 4090", ram="512GB", runtimes=["llama.cpp"])


def test_a_name_that_is_nothing_says_the_nearest():
    """A name no preset, file or catalogue model has: exit 2's message names the nearest (a preset or a catalogue
    model) and how to pass a file."""
    from hobbit.planner.config import PlanConfig
    from hobbit.plumbing.glue import compose

    with pytest.raises(ConfigError, match=r"model=deepseek-r2: conf/model has no deepseek-r2 \(did you mean model="
                       r"deepseek-r1\?\).*or a model of the catalogue by its Hugging Face id"):  # fmt: skip
        compose("plan", PlanConfig, ["model=deepseek-r2"])
    with pytest.raises(
        ConfigError, match=r"DeepSeek-R2 does not exist, nor .*did you mean model=deepseek-ai/DeepSeek-R1"
    ):
        compose("plan", PlanConfig, ["model=deepseek-ai/DeepSeek-R2"])
