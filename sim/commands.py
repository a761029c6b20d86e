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
    from traces.io import atomic_write_parquet, atomic_write_text

    paths = [atomic_write_parquet(res.passes, out / "passes.parquet"),
             atomic_write_parquet(res.layers, out / "layers.parquet")]
    paths.append(atomic_write_text(out / "results.json", json.dumps(res.summary, indent=1, default=float) + "\n"))
    return paths


RESULT_FILES = ("results.json", "passes.parquet", "layers.parquet")
CACHED_MARK = ".cached"  # in a run dir whose results came from the result cache


def cache_root(cfg: SimConfig) -> Path:
    import os

    return Path(cfg.cache_dir or os.environ.get("HOBBIT_CACHE") or Path.home() / ".cache" / "hobbit") / "sim"


def config_key(cfg: SimConfig, trace_path: Path) -> str:
    """What determines a run's results: the trace's bytes and every knob of the run."""
    import dataclasses
    import hashlib

    digest = hashlib.sha256(trace_path.read_bytes()).hexdigest()
    knobs = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in ("trace", "out_dir", "cache_dir", "use_cache")}
    blob = json.dumps({"trace_sha256": digest, "knobs": knobs, "format": 1}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def _from_cache(entry: Path, out: Path) -> bool:
    import shutil

    if not all((entry / f).is_file() for f in RESULT_FILES):
        return False
    out.mkdir(parents=True, exist_ok=True)
    for f in RESULT_FILES:
        shutil.copyfile(entry / f, out / f)
    (out / CACHED_MARK).write_text(entry.name + "\n")
    return True


def _to_cache(out: Path, entry: Path) -> None:
    import os
    import shutil

    tmp = entry.with_name(f".{entry.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for f in RESULT_FILES:
        shutil.copyfile(out / f, tmp / f)
    try:
        os.replace(tmp, entry)  # atomic; a concurrent twin may have won, which is as good
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)


@hydra_command("pkg://conf", "sim", SimConfig)
def sim_main(cfg: SimConfig) -> None:
    """Simulate a system replaying a trace on a modelled machine."""
    from sim.run import simulate
    from traces.io import read_trace

    trace_path = Path(cfg.trace) if cfg.trace else bundled_trace()
    trace = read_trace(trace_path)
    out = Path(cfg.out_dir)
    entry = cache_root(cfg) / config_key(cfg, trace_path)
    if cfg.use_cache and _from_cache(entry, out):
        s = json.loads((out / "results.json").read_text())
        print(f"{s['system']}: already simulated (result cache {entry}); results in {out.resolve()}")
        return
    res = simulate(trace, cfg.model, cfg.hardware, cfg.system, np.random.default_rng(cfg.seed), cfg.engine)
    paths = write_results(res, out)
    if cfg.use_cache:
        _to_cache(out, entry)
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


try:
    from hydra.experimental.callback import Callback
except ImportError:  # pragma: no cover
    Callback = object  # type: ignore[misc,assignment]


class SweepSummary(Callback):  # type: ignore[misc]
    """At the end of a multirun: how many runs came from the result cache."""

    def on_multirun_end(self, config, **kwargs) -> None:
        root = Path(config.hydra.sweep.dir)
        runs = [p.parent for p in root.rglob("results.json") if "report" not in p.parts]
        cached = sum((r / CACHED_MARK).exists() for r in runs)
        print(f"sweep {root}: {len(runs)} runs finished, {cached} skipped as already simulated (result cache)")


from sim.tune import TuneConfig  # noqa: E402


@hydra_command("pkg://conf", "tune", TuneConfig)
def tune_main(cfg: TuneConfig) -> None:
    """Search T1, T2, the cache split and the four cache weights with Optuna."""
    from sim.tune import tune
    from traces.io import read_trace

    trace = read_trace(cfg.trace or bundled_trace())
    s = tune(trace, cfg)
    print(f"study {s['study']}: {s['trials']} trials ({s['resumed_from']} from earlier runs)")
    if not s["best"]:
        print(f"no trial met the quality budget ({cfg.quality_budget}); raise quality_budget or add trials")
        return
    for b in s["best"][:5]:
        print(f"  trial {b['trial']}: {b['latency_ms']:.2f} ms/token, degraded gate mass {b['degraded_mass']:.3f}")
    print(f"best configuration: {s['experiment']}")
    print(f"  hobbit sim hydra.searchpath=[file://{Path(s['experiment']).parent.parent.resolve()}] +experiment=tuned")
