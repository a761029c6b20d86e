"""``hobbit plan``: each runtime's best flags for a model on your machine, and its predicted prefill and decode
tok/s, ranked (``hobbit.planner.search.plan``); prints the table and writes plan.md, plan.json and plan.png."""

from __future__ import annotations

from pathlib import Path

from hydra.core.hydra_config import HydraConfig

from hobbit.planner.config import PlanConfig
from hobbit.planner.report import plan_table
from hobbit.planner.search import plan
from hobbit.plumbing.glue import CONF, hydra_command


@hydra_command(CONF, "plan", PlanConfig)
def plan_main(cfg: PlanConfig) -> None:
    """The best settings and predicted speed of each runtime for a model on a machine, ranked."""
    out = Path(cfg.out_dir)
    task = list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []
    named = [o for o in task if o.lstrip("+~").split("=")[0].split(".")[0] == "hardware"]
    result = plan(cfg, out, named=named)
    print(f"# {result.title}\n")
    print(plan_table(result.rows))
    print(f"\n{'; '.join(result.notes)}; done in {result.wall_s:.0f} s")
    for p in result.files:
        print(f"  {Path(p).resolve()}")
