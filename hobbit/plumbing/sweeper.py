"""The ``hobbit`` Hydra sweeper: a multirun as chunks of configurations, not one job per configuration.

Hydra's basic sweeper composes every configuration twice (once to check it, once to launch
it), and one composition takes longer than the compiled core takes to simulate one.
This sweeper (``hydra/sweeper=hobbit``, the default of ``hobbit sim``) expands the same
command-line grammar (``a=1,2 b=x,y``: the product), then:

- splits each point's overrides into structural ones (a config group such as ``system=``,
  ``+``/``~`` overrides, ``hydra.*``), which need Hydra's composition, and values, which do not;
- groups the points by their structural overrides; each group becomes one queue of points
  (``.chunks/<n>.json`` under the sweep directory), drained by one job per worker of the launcher,
  each job claiming the next point no job has taken (an exclusively created file per point under
  ``.chunks/<n>.claims/``), so Hydra composes a group once per worker and a slow point holds up no
  one; ``chunk_size: N`` cuts each group into fixed chunks of N points instead, one job each;
- launches the jobs through the configured launcher (joblib, Ray, ...): the job
  (``hobbit.commands.sim``) reads its points from the queue's file, applies each point's values to
  the composed config, and writes each point's run directory ``<sweep dir>/<point>`` (results,
  ``.hydra/overrides.yaml`` and ``.hydra/config.yaml``) as one Hydra job per point would.

In one worker the trace is read and laid out once for all its points (``hobbit.api.read_trace``,
``sim.run.prepare``). The result cache and resume work per point. Each point's spec also carries its
number in the sweep (of ``total``) and ``label``, the overrides that vary across the sweep, which its
printed line names (``[3/12] system=hobbit system.cache.high_fraction=0.5: decode ...``).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
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

from hobbit.plumbing.launcher import EXIT_BAD_INPUT
from hobbit.traces.io import atomic_write_text, os_error_message

CHUNKS_DIR = ".chunks"
TARGET = "hydra_plugins.hobbit_sweeper.HobbitSweeper"


@dataclass
class HobbitSweeperConf:
    """``hydra.sweeper`` when ``hydra/sweeper=hobbit``."""

    _target_: str = TARGET
    chunk_size: int = 0  # points per launched job; 0: each group's points as one queue, one job per worker


def claims_dir(spec: Path) -> Path:
    """Where the jobs sharing the points of ``spec`` claim them: one empty file per point taken (``claim``)."""
    return spec.with_suffix(".claims")


def claim(spec: Path, index: int) -> bool:
    """Take point ``index`` of ``spec`` for this job: true for exactly one of the jobs that ask (the file's
    exclusive creation is the lock; a shared file system across machines works as it does for the specs)."""
    d = claims_dir(spec)
    d.mkdir(exist_ok=True)
    try:
        os.close(os.open(d / str(index), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
    except FileExistsError:
        return False
    return True


def structural(o: Override, groups: Any) -> bool:
    """Whether override ``o`` needs Hydra's composition: a config group, an added or deleted key, hydra.*."""
    key = o.key_or_group
    return o.is_add() or o.is_delete() or o.is_force_add() or key.startswith("hydra") or bool(groups(key))


class HobbitSweeper(Sweeper):
    """Sweep a grid as chunks of configurations (module docstring)."""

    def __init__(self, chunk_size: int = 0) -> None:
        self.chunk_size = chunk_size
        self.config: Any = None
        self.launcher: Any = None
        self.hydra_context: Any = None

    def setup(self, *, hydra_context: Any, task_function: Any, config: Any) -> None:
        self.hydra_context, self.config = hydra_context, config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )

    def _workers(self) -> int:
        n = OmegaConf.select(self.config, "hydra.launcher.n_jobs", default=None)
        if n is None or n <= 0:
            n = os.cpu_count() or 1
        return int(n)

    def sweep(self, arguments: list[str]) -> Any:
        if not isinstance(self.chunk_size, int) or self.chunk_size < 0:  # a negative size cut the points into no job
            _refuse(f"hydra.sweeper.chunk_size={self.chunk_size} must be a whole number >= 0 (0: one queue per worker)")
        try:
            return self._sweep(arguments)
        except BrokenPipeError:
            raise
        except OSError as exc:  # the sweep directory's own files (multirun.yaml, the chunks), a full disk: named
            _refuse(os_error_message(exc, "hydra.sweep.dir"))

    def _sweep(self, arguments: list[str]) -> Any:
        loader = self.hydra_context.config_loader
        parser = OverridesParser.create(config_loader=loader)
        overrides = parser.parse_overrides(arguments)
        repo = getattr(loader, "repository", None)

        def groups(key: str) -> bool:
            return repo is not None and repo.group_exists(key)

        kinds = [structural(o, groups) for o in overrides]
        points = BasicSweeper.split_arguments(overrides, None)[0]  # every point: its override strings, in order
        swept = [o.is_sweep_override() for o in overrides]
        labels = [" ".join(s for s, v in zip(point, swept) if v) or " ".join(point) for point in points]
        sweep_dir = Path(self.config.hydra.sweep.dir)
        (sweep_dir / CHUNKS_DIR).mkdir(parents=True, exist_ok=True)
        atomic_write_text(sweep_dir / "multirun.yaml", OmegaConf.to_yaml(self.config))
        by_shape: dict[tuple[str, ...], list[int]] = {}
        for i, point in enumerate(points):
            shape = tuple(s for s, k in zip(point, kinds) if k)
            by_shape.setdefault(shape, []).append(i)
        jobs: list[list[str]] = []
        specs = 0
        for shape, idx in by_shape.items():
            if self.chunk_size:  # fixed chunks of points: one job each
                parts = [(idx[i : i + self.chunk_size], 1) for i in range(0, len(idx), self.chunk_size)]
            else:  # the shape's points as one queue, drained by one job per worker
                parts = [(idx, min(self._workers(), len(idx)))]
            for part, takers in parts:
                spec = {
                    "total": len(points),
                    "points": [
                        {
                            "index": i,
                            "values": [s for s, k in zip(points[i], kinds) if not k],
                            "overrides": list(points[i]),
                            "label": labels[i],
                        }
                        for i in part
                    ],
                }
                path = sweep_dir / CHUNKS_DIR / f"{specs}.json"
                shutil.rmtree(claims_dir(path), ignore_errors=True)  # a rerun into the same sweep dir claims afresh
                atomic_write_text(path, json.dumps(spec))
                jobs += [
                    [
                        *shape,
                        f"sweep_chunk={path.resolve()}",
                        f"hydra.sweep.subdir={CHUNKS_DIR}/{specs}" + (f"-{j}" if takers > 1 else ""),
                    ]
                    for j in range(takers)
                ]
                specs += 1
        results = self.launcher.launch(jobs, initial_job_idx=0)
        for r in results:
            _ = r.return_value  # a job that failed raises here
        return [results]


def _refuse(message: str) -> None:
    """Bad input found by the sweeper, which runs outside the command's task (``hobbit.plumbing.glue.fail`` is not importable
    here): one line, exit 2."""
    print(f"hobbit: error: {message}", file=sys.stderr)
    raise SystemExit(EXIT_BAD_INPUT)


def register() -> None:
    """Make ``hydra/sweeper=hobbit`` known to Hydra (before each command: Hydra rebuilds its plugin registry).
    Hydra instantiates only plugins it found under the ``hydra_plugins`` namespace, by that name; the project keeps
    one import package (``hobbit``), so the class is registered under the plugin name Hydra requires (TARGET)."""
    ConfigStore.instance().store(group="hydra/sweeper", name="hobbit", node=HobbitSweeperConf, provider="hobbit")
    Plugins.instance().class_name_to_class.setdefault(TARGET, HobbitSweeper)


__all__ = ["HobbitSweeper", "HobbitSweeperConf"]
