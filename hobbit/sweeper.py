"""The ``hobbit`` Hydra sweeper: a multirun as chunks of configurations, not one job per configuration.

Hydra's basic sweeper composes every configuration twice (once to check it, once to launch
it), about half a second each here, longer than the compiled core takes to simulate one.
This sweeper (``hydra/sweeper=hobbit``, the default of ``hobbit sim``) expands the same
command-line grammar (``a=1,2 b=x,y``: the product), then:

- splits each point's overrides into structural ones (a config group such as ``system=``,
  ``+``/``~`` overrides, ``hydra.*``), which need Hydra's composition, and values, which do not;
- groups the points by their structural overrides and cuts each group into chunks
  (``chunk_size`` points; 0: about four chunks per worker of the launcher);
- launches one job per chunk through the configured launcher (joblib, Ray, ...): Hydra composes
  the chunk once; the job (``hobbit.sim_commands``) reads its points from a file under the
  sweep directory (``.chunks/<n>.json``), applies each point's values to the composed
  config, and writes each point's run directory ``<sweep dir>/<point>`` (results,
  ``.hydra/overrides.yaml`` and ``.hydra/config.yaml``) as one Hydra job per point would.

In one worker the trace is read and laid out once for all its chunks (``hobbit.api.read_trace``,
``sim.run.prepare``). The result cache and resume work per point, as before.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.core.plugins import Plugins
from hydra.plugins.sweeper import Sweeper
from omegaconf import OmegaConf

CHUNKS_DIR = ".chunks"
TARGET = "hydra_plugins.hobbit_sweeper.HobbitSweeper"


@dataclass
class HobbitSweeperConf:
    """``hydra.sweeper`` when ``hydra/sweeper=hobbit``."""

    _target_: str = TARGET
    chunk_size: int = 0  # points per launched job; 0: about four chunks per worker of the launcher


def structural(o: Override, groups: Any) -> bool:
    """Whether override ``o`` needs Hydra's composition: a config group, an added or deleted key, hydra.*."""
    key = o.key_or_group
    return (o.is_add() or o.is_delete() or o.is_force_add() or key.startswith("hydra")
            or bool(groups(key)))


class HobbitSweeper(Sweeper):
    """Sweep a grid as chunks of configurations (module docstring)."""

    def __init__(self, chunk_size: int = 0) -> None:
        self.chunk_size = chunk_size
        self.config = self.launcher = self.hydra_context = None

    def setup(self, *, hydra_context: Any, task_function: Any, config: Any) -> None:
        self.hydra_context, self.config = hydra_context, config
        self.launcher = Plugins.instance().instantiate_launcher(hydra_context=hydra_context,
                                                                task_function=task_function, config=config)

    def _workers(self) -> int:
        n = OmegaConf.select(self.config, "hydra.launcher.n_jobs", default=None)
        if n is None or n <= 0:
            n = os.cpu_count() or 1
        return int(n)

    def sweep(self, arguments: list[str]) -> Any:
        loader = self.hydra_context.config_loader
        parser = OverridesParser.create(config_loader=loader)
        overrides = parser.parse_overrides(arguments)
        repo = getattr(loader, "repository", None)

        def groups(key: str) -> bool:
            return repo is not None and repo.group_exists(key)

        kinds = [structural(o, groups) for o in overrides]
        points = BasicSweeper.split_arguments(overrides, None)[0]  # every point: its override strings, in order
        sweep_dir = Path(self.config.hydra.sweep.dir)
        (sweep_dir / CHUNKS_DIR).mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        by_shape: dict[tuple[str, ...], list[int]] = {}
        for i, point in enumerate(points):
            shape = tuple(s for s, k in zip(point, kinds) if k)
            by_shape.setdefault(shape, []).append(i)
        size = self.chunk_size or max(1, -(-len(points) // (4 * self._workers())))
        jobs = []
        for shape, idx in by_shape.items():
            for part in (idx[i:i + size] for i in range(0, len(idx), size)):
                spec = {"points": [{"index": i, "values": [s for s, k in zip(points[i], kinds) if not k],
                                    "overrides": list(points[i])} for i in part]}
                path = sweep_dir / CHUNKS_DIR / f"{len(jobs)}.json"
                tmp = path.with_suffix(".json.tmp")
                tmp.write_text(json.dumps(spec))
                tmp.replace(path)
                jobs.append([*shape, f"sweep_chunk={path.resolve()}",
                             f"hydra.sweep.subdir={CHUNKS_DIR}/{len(jobs)}"])
        results = self.launcher.launch(jobs, initial_job_idx=0)
        for r in results:
            _ = r.return_value  # a job that failed raises here
        return [results]


def register() -> None:
    """Make ``hydra/sweeper=hobbit`` known to Hydra (before each command: Hydra rebuilds its plugin registry).
    Hydra instantiates only plugins it found under the ``hydra_plugins`` namespace, by that name; the project keeps
    one import package (``hobbit``), so the class is registered under the plugin name Hydra requires (TARGET)."""
    ConfigStore.instance().store(group="hydra/sweeper", name="hobbit", node=HobbitSweeperConf, provider="hobbit")
    Plugins.instance().class_name_to_class.setdefault(TARGET, HobbitSweeper)


register()
__all__ = ["HobbitSweeper", "HobbitSweeperConf"]
