"""``hobbit reproduce``: HOBBIT's Table 2 grid on the bundled models' workloads, beside the paper's numbers
(``hobbit.studies.reproduce.reproduce``); prints the table and writes reproduce.md, .json and the plot."""

from __future__ import annotations

import time
from pathlib import Path

from hobbit.plumbing.glue import CONF, hydra_command
from hobbit.studies.reproduce import ReproduceConfig, render, reproduce


@hydra_command(CONF, "reproduce", ReproduceConfig)
def reproduce_main(cfg: ReproduceConfig) -> None:
    """The paper's Table 2 grid on the bundled models' workloads (or on one trace)."""
    out = Path(cfg.out_dir)
    t0 = time.perf_counter()
    table = reproduce(cfg, out)
    print(render(table))
    print(f"done in {time.perf_counter() - t0:.0f} s; results in {out.resolve()}:")
    for name in ("reproduce.md", "reproduce.json", "reproduce.png", "reproduce.svg"):
        print(f"  {(out / name).resolve()}")
