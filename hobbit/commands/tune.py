"""``hobbit tune``: search T1, T2, the cache split and the four cache weights (a Hydra app over conf/).

Its inputs are checked before the search starts (``hobbit.api.check`` on the base the search varies): a trace
that does not fit the model, or a model the machine cannot hold, stops it with one line, not a failed trial.
It ends with the ``hobbit sim`` command that simulates the best configuration on the same trace, model,
hardware and seed (``sim_command``): run as printed, it reproduces the best trial's latency.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf

from hobbit.api import check, trace_of
from hobbit.plumbing.glue import CONF, hydra_command, searchpath
from hobbit.plumbing.phases import require
from hobbit.plumbing.results_io import decode_text
from hobbit.sim.config import ConfigError
from hobbit.sim.tune import TuneConfig, tune
from hobbit.studies.compare import tuning_base
from hobbit.traces.interchange import weights_absent
from hobbit.traces.io import Trace
from hobbit.traces.window import TraceFile

SIM_DEFAULT_SEED = 0  # conf/sim.yaml's seed: the printed command names another
TUNED_KNOBS = ("system.precision.mode", "system.cache.policy")  # what the search fixes besides what it writes


def check_tune(trace: Trace | TraceFile, cfg: TuneConfig) -> None:
    """What ``hobbit tune`` refuses before it searches: a trace without gate weights (the T1/T2 rule it tunes reads
    them) or without decode passes (what it minimises), and anything a simulation of the base it varies would refuse (``hobbit.api.check``)."""
    if weights_absent(trace.meta):
        raise ConfigError(
            f"trace {trace.path} has no gate weights (its source format carries none), and hobbit tune searches "
            f"the T1/T2 rule that reads them (fix: a trace with gate weights: hobbit capture, or a source that "
            f"records them)"
        )
    require(trace, "tune", "it minimises decode latency", decode=True)
    check(trace, cfg.model, cfg.hardware, tuning_base(cfg.system))


def _flat_keys(node: Any, prefix: str) -> set[str]:
    if not isinstance(node, dict):
        return {prefix.rstrip(".")}
    out: set[str] = set()
    for k, v in node.items():
        out |= _flat_keys(v, f"{prefix}{k}.")
    return out


def sim_command(
    cfg: TuneConfig,
    experiment: Path,
    task_overrides: list[str],
    choices: dict[str, Any],
    search: list[str] | tuple[str, ...] = (),
) -> str:
    """The ``hobbit sim`` command line (for a POSIX shell) that simulates the tuned system of ``experiment`` on the
    experiment ``hobbit tune`` ran: its trace, its model and hardware (their config groups, ``choices``, and any
    ``model.*`` / ``hardware.*`` knob the command line set, ``task_overrides``), its seed, the search path it was
    given (``search``: where a calibrated hardware or model lives) and the system knobs it was given that the
    search does not set. A knob set on the command line would win over the experiment file's, so those the search
    sets (the file's, ``TUNED_KNOBS``) are left out."""
    written = OmegaConf.to_container(OmegaConf.load(experiment))
    sets = _flat_keys({"system": written.get("system", {})}, "") if isinstance(written, dict) else set()
    sets |= set(TUNED_KNOBS)
    args = ["hobbit", "sim"]
    if cfg.trace:
        args.append(f"trace={Path(cfg.trace).resolve()}")
    for group in ("model", "hardware"):
        if choices.get(group):
            args.append(f"{group}={choices[group]}")
    if choices.get("system") and choices["system"] != "hobbit":
        args.append(f"system={choices['system']}")  # over the experiment's own override of it
    for o in task_overrides:
        key = o.partition("=")[0].lstrip("+~")
        tuned = any(k == key or k.startswith(key + ".") for k in sets)  # the knob, or a node holding one
        if key.startswith(("model.", "hardware.")) or (key.startswith("system.") and not tuned):
            args.append(o)
    if cfg.seed != SIM_DEFAULT_SEED:
        args.append(f"seed={cfg.seed}")
    args += [searchpath(*search, experiment.parent.parent), "+experiment=tuned"]
    return shlex.join(args)


@hydra_command(CONF, "tune", TuneConfig)
def tune_main(cfg: TuneConfig) -> None:
    """Search T1, T2, the cache split and the four cache weights with Optuna."""
    trace = trace_of(cfg.trace, cfg.window_tokens)
    check_tune(trace, cfg)
    s = tune(trace, cfg)
    print(f"study {s['study']}: {s['trials']} trials ({s['resumed_from']} from earlier runs)")
    if not s["best"]:
        print(f"no trial met the quality budget ({cfg.quality_budget}); raise quality_budget or add trials")
        return
    for b in s["best"][:5]:
        print(
            f"  trial {b['trial']}: decode {decode_text(b['latency_ms'])}, degraded gate mass {b['degraded_mass']:.3f}"
        )
    print(f"best configuration: {s['experiment']}")
    hc = HydraConfig.get()
    command = sim_command(
        cfg, Path(s["experiment"]), list(hc.overrides.task), dict(hc.runtime.choices), [str(p) for p in hc.searchpath]
    )
    print(f"use: {command}")
