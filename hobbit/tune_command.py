"""``hobbit tune``: search T1, T2, the cache split and the four cache weights (a Hydra app over conf/)."""

from __future__ import annotations

from pathlib import Path

from hobbit.api import read_trace
from hobbit.glue import CONF, hydra_command
from hobbit.sim.tune import TuneConfig, tune


@hydra_command(CONF, "tune", TuneConfig)
def tune_main(cfg: TuneConfig) -> None:
    """Search T1, T2, the cache split and the four cache weights with Optuna."""
    s = tune(read_trace(cfg.trace), cfg)
    print(f"study {s['study']}: {s['trials']} trials ({s['resumed_from']} from earlier runs)")
    if not s["best"]:
        print(f"no trial met the quality budget ({cfg.quality_budget}); raise quality_budget or add trials")
        return
    for b in s["best"][:5]:
        print(f"  trial {b['trial']}: {b['latency_ms']:.2f} ms/token, degraded gate mass {b['degraded_mass']:.3f}")
    print(f"best configuration: {s['experiment']}")
    print(f"  hobbit sim hydra.searchpath=[file://{Path(s['experiment']).parent.parent.resolve()}] +experiment=tuned")
