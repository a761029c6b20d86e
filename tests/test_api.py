"""The Python API as the README shows it, and the MRU example policy on the bundled trace."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import hobbit
from hobbit.sim.config import SystemConfig, policy_knobs
from hobbit.sim.policies.registry import EVICTION

from sim_helpers import bundled

README = Path(__file__).parents[1] / "README.md"


def test_the_readme_example_runs_as_written(capsys):
    text = README.read_text()
    found = re.search(r"### From Python\n.*?```python\n(.*?)```", text, re.DOTALL)
    assert found is not None
    block = found.group(1)
    scope: dict = {}
    exec(compile(block, "README.md (From Python)", "exec"), scope)
    r, table = scope["r"], scope["table"]
    assert isinstance(r, hobbit.Results) and r.decode_ms_per_token is not None
    assert r.decode_ms_per_token > 0 and 0 < r.hit_rate <= 1
    assert r.summary["system_config"]["precision"]["t1"] == 0.5
    assert len(table) == 4 and set(table["knob.system"]) == {"hobbit", "moe-offloading"}
    assert "ms/token, hit rate" in capsys.readouterr().out


def test_simulate_is_what_the_cli_runs(tmp_path):
    """``hobbit sim`` and ``hobbit.simulate`` compose the same config and give the same numbers."""
    import json

    from conftest import run_cli
    from sim_helpers import write_first_requests

    path = write_first_requests(tmp_path, 2)
    assert (
        run_cli(
            [
                "sim",
                f"trace={path}",
                "system=moe-offloading",
                "engine=plain",
                "use_cache=false",
                f"hydra.run.dir={tmp_path / 'run'}",
            ]
        )
        == 0
    )
    cli = json.loads((tmp_path / "run" / "results.json").read_text())
    api = hobbit.simulate(path, system="moe-offloading", engine="plain").summary
    assert cli["decode_ms_per_token"] == api["decode_ms_per_token"] and cli["system_config"] == api["system_config"]


def test_typed_configs_and_knobs_by_path():
    base = hobbit.configure(system="hobbit")
    mine = hobbit.configure(system=base.system, system__cache__multidim__w_fld=0.9, hardware__link_gbps=32)
    mine_md, base_md = policy_knobs(mine.system.cache, "multidim"), policy_knobs(base.system.cache, "multidim")
    assert mine_md.w_fld == 0.9 and mine.hardware.link_gbps == 32
    assert mine_md.w_lru == base_md.w_lru
    with pytest.raises(hobbit.sim.config.ConfigError, match="warp"):
        hobbit.configure(system="warp")
    with pytest.raises(hobbit.sim.config.ConfigError, match="must be a name"):
        hobbit.configure(system=SystemConfig().precision)  # pyright: ignore[reportArgumentType]  # wrong on purpose


def test_mru_is_one_file_and_one_registry_line():
    assert EVICTION["mru"] == "hobbit.sim.policies.eviction.mru:MRU"
    registry = (Path(hobbit.sim.policies.registry.__file__)).read_text()
    assert sum("eviction.mru" in line for line in registry.splitlines()) == 1
    cfg = hobbit.configure(system="hobbit-lru", system__cache__policy="mru")
    assert cfg.system.cache.policy == "mru"


def test_mru_runs_on_the_bundled_trace_and_beats_lru_on_its_loop():
    """Layers run in a loop larger than the cache, LRU's worst case: MRU hits more (the reason
    HOBBIT's FLD term, which evicts the layer just passed, carries most of its gain). On-demand loading at one
    precision, so that the cache's policy is the only difference."""
    tr = bundled(8)
    lru = hobbit.simulate(tr, system="on-demand")
    mru = hobbit.simulate(tr, system="on-demand", system__cache__policy="mru")
    assert mru.summary["system_config"]["cache"]["policy"] == "mru" and mru.summary["evictions"] > 0
    assert lru.hit_rate < mru.hit_rate < 1
