"""``hobbit sim``: simulate one configuration and write its results (the I/O edge of ``sim``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from sim.config import SimConfig
from traces.cli import hydra_command


def bundled_trace() -> Path:
    from traces.tiny import bundled_model_dir

    return bundled_model_dir() / "trace.parquet"


def write_results(res, out: Path) -> list[Path]:
    """results.json, passes.parquet (one row per forward pass), layers.parquet; each written atomically."""
    import os

    from traces.io import atomic_write_text

    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, table in (("passes.parquet", res.passes), ("layers.parquet", res.layers)):
        tmp = out / f".{name}.{os.getpid()}.tmp"
        table.to_parquet(tmp, index=False)
        os.replace(tmp, out / name)
        paths.append(out / name)
    paths.append(atomic_write_text(out / "results.json", json.dumps(res.summary, indent=1, default=float) + "\n"))
    return paths


@hydra_command("pkg://conf", "sim", SimConfig)
def sim_main(cfg: SimConfig) -> None:
    """Simulate a system replaying a trace on a modelled machine."""
    from sim.run import simulate
    from traces.io import read_trace

    trace = read_trace(cfg.trace or bundled_trace())
    res = simulate(trace, cfg.model, cfg.hardware, cfg.system, np.random.default_rng(cfg.seed), cfg.engine)
    paths = write_results(res, Path(cfg.out_dir))
    s = res.summary
    d = s["decode_ms_per_token"]
    print(f"{s['system']} on {s['hardware']}, {s['model']}: decode {d['mean']:.2f} ms/token (p95 {d['p95']:.2f}), "
          f"hit rate {s['hit_rate']:.3f}, stall {s['stall_ms_per_token']:.2f} ms/token, "
          f"link busy {s['link_busy_fraction']:.2f}")
    print(f"results in {paths[-1].parent.resolve()}")


def compose_sim(overrides: list[str]) -> SimConfig:
    """A typed ``SimConfig`` from conf/ and ``overrides``, inside a Hydra app or outside one."""
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    if GlobalHydra.instance().is_initialized():
        return OmegaConf.to_object(compose("sim", overrides=overrides))
    with initialize_config_module(config_module="conf", version_base="1.3"):
        return OmegaConf.to_object(compose("sim", overrides=overrides))
