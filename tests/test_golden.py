"""Pinned results: ``results.json`` of the bundled trace for every system (conf/system/).

A refactor must not change a single number. A change in semantics regenerates the file in
the same commit, with the reason in the commit message:

    HOBBIT_REGEN_GOLDEN=1 python -m pytest tests/test_golden.py

Compared: every key of results.json except the wall-clock time, the engine that ran (the
file was written by the simpy engine; the default compiled one must give its numbers) and
the echo of the configuration (``system_config``, whose layout is not a result); floats to
1e-9 relative.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from hobbit.sim.run import simulate

from sim_helpers import bundled, compose_sim

GOLDEN = Path(__file__).parent / "golden" / "bundled_systems.json"
SYSTEMS = sorted(p.stem for p in (Path(__file__).parents[1] / "conf" / "system").glob("*.yaml"))
UNPINNED = ("wall_s", "system_config", "engine")


def _pinned(summary: dict) -> dict:
    return json.loads(json.dumps({k: v for k, v in summary.items() if k not in UNPINNED}, default=float))


def _same(a, b, path: str = "") -> list[str]:
    """Paths where ``a`` and ``b`` differ (floats to 1e-9 relative)."""
    if isinstance(a, dict) and isinstance(b, dict):
        diff = [f"{path}.{k}: only on one side" for k in set(a) ^ set(b)]
        return diff + [d for k in set(a) & set(b) for d in _same(a[k], b[k], f"{path}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _same(x, y, f"{path}[{i}]")]
    if isinstance(a, float) or isinstance(b, float):
        if (
            isinstance(a, (int, float))
            and isinstance(b, (int, float))
            and math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
        ):
            return []
    elif a == b:
        return []
    return [f"{path}: golden {b!r}, now {a!r}"]


@pytest.fixture(scope="module")
def now() -> dict[str, dict]:
    tr = bundled()
    out = {}
    for system in SYSTEMS:
        cfg = compose_sim(f"system={system}")
        out[system] = _pinned(simulate(tr, cfg.model, cfg.hardware, cfg.system).summary)
    return out


def test_every_system_is_pinned(now):
    if os.environ.get("HOBBIT_REGEN_GOLDEN"):
        GOLDEN.write_text(json.dumps(now, indent=1, sort_keys=True) + "\n")
    golden = json.loads(GOLDEN.read_text())
    assert sorted(golden) == SYSTEMS, "a system was added or removed: regenerate the golden file"
    diffs = {s: _same(now[s], _pinned(golden[s])) for s in SYSTEMS}
    assert not any(diffs.values()), {s: d[:5] for s, d in diffs.items() if d}
