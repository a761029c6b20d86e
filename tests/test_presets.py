"""The model presets read from published config.json files (conf/model/, tests/data/hf-configs/): each equals what
``from_hf_config`` counts from its config, so a preset can be regenerated and nothing in it is typed by hand."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from hobbit.catalogue.model_files import from_hf_config

from sim_helpers import compose_sim

CONFIGS = Path(__file__).parent / "data" / "hf-configs"
PRESETS = sorted(p.stem for p in CONFIGS.glob("*.json"))


@pytest.mark.parametrize("name", PRESETS)
def test_a_preset_is_its_config_counted(name):
    preset = compose_sim(f"model={name}").model
    counted = from_hf_config(CONFIGS / f"{name}.json", name=name)
    assert dataclasses.replace(counted, source=preset.source) == preset
    assert f"tests/data/hf-configs/{name}.json" in preset.source
    assert name in (CONFIGS / "SOURCES.md").read_text()  # where the copy was read


def test_the_presets_sizes_are_the_published_ones():
    """Totals as the model cards state them (parameters, routed experts, top-k)."""
    total = {}
    for name in ("deepseek-v3", "qwen3.5-397b-a17b", "qwen3-235b-a22b", "gpt-oss-120b"):
        m = compose_sim(f"model={name}").model
        total[name] = m.num_layers * (m.num_experts * m.expert_params + m.dense_params_per_layer) + m.other_params
    assert total["deepseek-v3"] == 671_026_404_352  # 671 B without the MTP module
    assert round(total["qwen3.5-397b-a17b"] / 1e9) == 396  # "397B"
    assert round(total["qwen3-235b-a22b"] / 1e9) == 235
    assert round(total["gpt-oss-120b"] / 1e9) == 117  # "117B" on the model card
