"""``hobbit sim``: the simulator's command (a Hydra app over conf/).

The module imports only what composing and launching need; the simulator (numba, pandas, pyarrow)
loads when a point runs, or, in a sweep whose workers are forked (``hobbit.plumbing.launcher``), once in the
launching process before it forks them (``Preload``).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

import yaml
from hydra.experimental.callback import Callback
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from hobbit.plumbing.glue import CONF, hydra_command, load_typed, set_values
from hobbit.plumbing.guard import guard
from hobbit.plumbing.launcher import TARGET as FORKING_LAUNCHER
from hobbit.plumbing.sweeper import claim
from hobbit.sim.config import ConfigError, SimConfig
from hobbit.sim.walk_copies import GENERAL
from hobbit.traces.io import atomic_write_text
from hobbit.traces.knobs import check_knobs

log = logging.getLogger(__name__)
PROGRESS_DELAY_S = 2.0  # a run's progress bar shows once it has taken this long
DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml's emitter when PyYAML has it: the same text, in C


@hydra_command(CONF, "sim", SimConfig)
def sim_main(cfg: SimConfig) -> None:
    """Simulate a system replaying a trace on a modelled machine."""
    if cfg.sweep_chunk:
        run_chunk(cfg)
        return
    run_one(cfg, walks=job_walks())


def job_walks() -> str | None:
    """The copy of each policy's walk this process's runs use (``hobbit.sim.walk_copies``): each policy's general
    copy for the jobs of a multirun (many runs, one compile per policy), else the run's choice (None)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return GENERAL if HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN else None


def run_chunk(cfg: SimConfig) -> None:
    """The sweep points of one multirun job (``hobbit.plumbing.sweeper``), claimed one by one from the queue the job
    shares with the launcher's other workers: each point's values applied to the job's composed config, each
    point's run directory written as a job of its own would be."""
    if cfg.sweep_chunk is None:
        raise ValueError("run_chunk: a sweep job's config names its queue of points (sweep_chunk)")
    chunk = Path(cfg.sweep_chunk)
    spec = json.loads(chunk.read_text())
    total = spec.get("total")
    sweep_dir = chunk.parent.parent
    base = dataclasses.replace(cfg, sweep_chunk=None)
    for point in spec["points"]:
        if not claim(chunk, point["index"]):  # another job of this queue has it
            continue
        out = sweep_dir / str(point["index"])
        try:
            pcfg = set_values(base, [*point["values"], f"out_dir={out}"])
        except OmegaConfBaseException as exc:
            raise ConfigError(f"sweep point {' '.join(point['overrides'])}: {exc}".replace("\n", " ")) from exc
        pcfg = guard(pcfg, Path.cwd(), say=lambda _: None)
        check_knobs(pcfg)
        label = point.get("label") or " ".join(point["overrides"])
        label = f"[{point['index'] + 1}/{total}] {label}" if total else label
        run_one(pcfg, progress=False, label=label, walks=GENERAL)  # a sweep's points: each policy's general copy
        atomic_write_text(out / ".hydra" / "overrides.yaml", "".join(f"- {o}\n" for o in point["overrides"]))
        atomic_write_text(
            out / ".hydra" / "config.yaml", yaml.dump(dataclasses.asdict(pcfg), Dumper=DUMPER, sort_keys=False)
        )


def summary_line(s: dict, label: str | None = None) -> str:
    """The line ``hobbit sim`` prints for a finished run (its results.json ``s``): headed by the system, hardware and
    model, or by ``label`` (a sweep point: its number and overrides)."""
    from hobbit.plumbing.results_io import decode_text

    d, pre = s["decode_ms_per_token"], s["prefill_ms_per_request"]
    late = s["prefetch"].get("late", 0)
    hits = f"hit rate {s['hit_rate']:.3f}" + (f" ({late} uses waited for a prefetch in flight)" if late else "")
    head = label if label is not None else f"{s['system']} on {s['hardware']}, {s['model']}"
    if d["mean"] is None:  # a trace without decode passes (hobbit.plumbing.phases): its prefill is what there is
        return (
            f"{head}: decode {decode_text(None)}, prefill {pre['mean']:.2f} ms/request (p95 {pre['p95']:.2f}), "
            f"{hits}, link busy {s['link_busy_fraction']:.2f}"
        )
    return (
        f"{head}: decode {decode_text(d['mean'])}, p95 {d['p95']:.2f} ms/token, "
        f"{hits}, stall {s['stall_ms_per_token']:.2f} ms/token, "
        f"link busy {s['link_busy_fraction']:.2f}"
        + (f"; {s['gap_to_bound']:.2f}x its bound" if s.get("gap_to_bound") else "")
    )


def run_one(cfg: SimConfig, progress: bool = True, label: str | None = None, walks: str | None = None) -> None:
    """One configuration: from the result cache, or simulated; its run directory ``cfg.out_dir``. ``progress``: a
    bar on stderr for a run that takes more than a couple of seconds (passes timed; a sweep's points have none).
    ``label``: what heads its printed line in place of the system, hardware and model (a sweep point's overrides);
    ``walks``: which compiled copy of the policy's walk runs (``hobbit.sim.walk_copies``)."""
    from tqdm import tqdm

    from hobbit.api import read_trace, simulate_config, simulate_file_config, trace_file
    from hobbit.plumbing.results_io import cache_root, config_blob, from_cache, key_of, to_cache, write_results
    from hobbit.sim.events import parse_window
    from hobbit.sim.windowed import check_whole_read

    if cfg.timeline:  # its range's syntax and direction, before the run (the pass count comes with the trace)
        parse_window(cfg.timeline_tokens, 1 << 30)
    if cfg.timeline and cfg.window_tokens:
        raise ConfigError(
            f"timeline=true draws the decisions of a trace read whole, window_tokens={cfg.window_tokens} reads it a "
            f"window at a time (fix: window_tokens=0, or timeline=false)"
        )
    trace_path = trace_file(cfg.trace, cfg.model, cfg.seed)
    if not cfg.window_tokens:
        check_whole_read(trace_path)
    trace = None if cfg.window_tokens else read_trace(trace_path)  # a windowed run reads it a window at a time
    out = Path(cfg.out_dir)
    root = cache_root(cfg) if cfg.use_cache else None
    blob = config_blob(cfg, trace_path) if root is not None else ""
    entry = root / key_of(blob) if root is not None else None
    if entry is not None and not cfg.timeline and from_cache(entry, out, blob):  # a timeline needs the run itself
        s = json.loads((out / "results.json").read_text())
        print(summary_line(s, label) + f" (already simulated: result cache {entry})")
        if label is None:
            print_memory_notes(s)
        print(f"results in {out.resolve()}")
        return
    tqdm.monitor_interval = (
        0  # no monitor thread: a process that later sweeps forks its workers (hobbit.plumbing.launcher)
    )
    with tqdm(
        desc="simulate", unit="pass", delay=PROGRESS_DELAY_S, leave=False, disable=None if progress else True
    ) as bar:  # None: shown on a terminal only

        def advance(done: int, total: int) -> None:
            bar.total = total
            bar.update(done - bar.n)

        # streamed, unless a timeline is to be drawn from the decisions
        if trace is None:
            res = simulate_file_config(trace_path, cfg, progress=advance, walks=walks)
        else:
            res = simulate_config(trace, cfg, keep_decisions=bool(cfg.timeline), progress=advance, walks=walks)
    if cfg.timeline:  # a range past the trace's end is known now, before anything is written
        parse_window(cfg.timeline_tokens, len(res.timeline.pass_start))
    paths = write_results(res, out)
    if cfg.timeline:
        from hobbit.plumbing.schedule_files import write_sim_timeline  # pandas and matplotlib: only for a timeline

        for p in write_sim_timeline(res, cfg.system.demand_first, cfg.timeline_tokens, out):
            print(f"timeline: {p.resolve()}")
    if entry is not None:
        to_cache(out, entry, blob)
    print(summary_line(res.summary, label))
    if label is None:  # a single run: what its answer rests on (a sweep's points print one line each)
        print_memory_notes(res.summary)
    print(f"results in {paths[-1].parent.resolve()}")


def print_memory_notes(summary: dict) -> None:
    """The run's memory notes (what was derived or assumed: RAM's share of the experts, a pool's size), one a line."""
    for note in summary.get("memory", {}).get("notes", []):
        print(f"  memory: {note}")


class SweepSummary(Callback):
    """At the end of a multirun: how many runs came from the result cache."""

    def on_multirun_end(self, config, **kwargs) -> None:
        from hobbit.plumbing.results_io import CACHED_MARK

        root = Path(config.hydra.sweep.dir)
        runs = [p.parent for p in root.rglob("results.json") if "report" not in p.parts]
        cached = sum((r / CACHED_MARK).exists() for r in runs)
        print(f"sweep {root}: {len(runs)} runs finished, {cached} skipped as already simulated (result cache)")


class Preload(Callback):
    """At the start of a multirun whose workers are forked from the launching process (``hobbit.plumbing.launcher``): the trace
    read and laid out and the compiled core loaded there, once, before the fork (``hobbit.api.preload``, for the sweep's
    base config), instead of in every worker at once. The workers then share one copy of the trace's arrays."""

    def on_multirun_start(self, config, **kwargs) -> None:
        if OmegaConf.select(config, "hydra.launcher._target_") != FORKING_LAUNCHER:
            return  # joblib's or Ray's workers are fresh processes: they would load it all again
        from hobbit.api import preload

        try:
            node = OmegaConf.masked_copy(config, [str(k) for k in config if k not in ("hydra", "out_dir")])
            # the copies the jobs run (``job_walks``)
            preload(guard(load_typed(SimConfig, node), Path.cwd(), say=lambda _: None), walks=GENERAL)
        except Exception as exc:  # noqa: BLE001 - a head start only: each job composes, checks and reports its own
            log.debug(f"preload skipped: {type(exc).__name__}: {exc}")
