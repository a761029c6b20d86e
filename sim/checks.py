"""The checks a run makes of its inputs before any work, in one order (``check_run``).

Every entry point that simulates calls ``check_run``: the whole-trace run (``sim.run.simulate``), the run over a
trace file read a window at a time (``sim.windowed.simulate_file``) and the API's check of a configuration without
its run (``hobbit.api.check``), so one bad input meets one refusal, naming the knob and its fix, whichever way it
comes in. The order: the knobs of the model, the hardware and the system (``traces.knobs.check_knobs``); the system
with its runtime's flags applied, checked as a whole (``sim.system_checks.check_system``); the engine (and, read a window at
a time, the window and the compiled core); the trace's topology against the model's, then the profiling trace's; the
gate weights where the system's rule reads them; a calibrated profile's shapes and tables; and, read a window at a
time, whether the compiled walk decides for the system.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from hobbit.sim import fast
from hobbit.sim.config import ConfigError, HardwareConfig, ModelConfig, SystemConfig
from hobbit.sim.flags import Flags, apply_flags
from hobbit.sim.system_checks import check_system
from hobbit.traces.interchange import weights_absent
from hobbit.traces.knobs import check_knobs
from hobbit.traces.schema import TraceMeta

ENGINES = ("fast", "plain", "simpy")


class Source(Protocol):
    """What the checks read of a trace: its metadata and where it came from (a ``Trace``, a ``TraceFile``)."""

    @property
    def meta(self) -> TraceMeta: ...

    @property
    def path(self) -> str | None: ...


@dataclass(frozen=True)
class Described:
    """A trace known by its metadata alone (``traces.io.read_meta``): what a run that reads the file later checks."""

    meta: TraceMeta
    path: str | None = None


def check_run(
    model: ModelConfig,
    hw: HardwareConfig,
    system: SystemConfig,
    trace: Source,
    profile: Source | None = None,
    *,
    engine: str = "fast",
    window_tokens: int | None = None,
) -> Flags:
    """Every check of a run's inputs, in the module's order; ``system`` with its runtime's flags applied
    (``Flags.system``) and the flags not modelled. ``profile``: the profiling trace, if one is given;
    ``window_tokens``: None, the trace is read whole; a number, it is read that many tokens at a time
    (``sim.windowed``). Raises ``ConfigError`` naming the first problem and its fix."""
    for prefix, cfg in (("model.", model), ("hardware.", hw), ("system.", system)):
        check_knobs(cfg, prefix)
    flags = apply_flags(system, model.num_layers, model.dense_layers, model.num_experts)
    system = flags.system
    check_system(system)
    check_engine(engine, window_tokens)
    check_topology(trace, model)
    if profile is not None:
        check_topology(profile, model)
    check_weights(trace, system)
    check_profile(model, hw)
    if window_tokens is not None:
        check_windowed(system, trace.path)
    return flags


def check_engine(engine: str, window_tokens: int | None = None) -> None:
    """``engine`` is one of ``ENGINES``; a trace read a window at a time (``window_tokens`` not None) is read at
    least a token at a time, by the compiled core."""
    if engine not in ENGINES:
        raise ConfigError(f"engine={engine} must be one of {', '.join(ENGINES)}")
    if window_tokens is None:
        return
    if window_tokens < 1:
        raise ConfigError(f"sim.window_tokens={window_tokens} must be >= 1 for a windowed run (0 reads it whole)")
    if engine != "fast":
        raise ConfigError(f"sim.window_tokens={window_tokens} runs the compiled core only (fix: engine=fast)")


def check_topology(trace: Source, model: ModelConfig) -> None:
    """The trace's MoE layers, experts and top-k are the model's."""
    m = trace.meta.model
    got = (m.num_layers, m.num_experts, m.top_k)
    want = (model.num_layers, model.num_experts, model.top_k)
    if got != want:
        raise ConfigError(
            f"trace {trace.path} ({m.name}: {got[0]} MoE layers, {got[1]} experts, top-{got[2]}) does "
            f"not fit model={model.name} ({want[0]} layers, {want[1]} experts, top-{want[2]}); pick a "
            f"model with the trace's topology"
        )


def needs_weights(system: SystemConfig) -> bool:
    """Whether ``system``'s decisions read the gate weights (HOBBIT's T1/T2 precision rule)."""
    return system.precision.mode == "hobbit"


def check_weights(trace: Source, system: SystemConfig) -> None:
    """A trace whose source carried no gate weights (``traces.interchange``) cannot drive the T1/T2 rule."""
    if weights_absent(trace.meta) and needs_weights(system):
        raise ConfigError(
            f"trace {trace.path} has no gate weights (its source format carries none; it holds "
            f"placeholders), so system={system.name}'s T1/T2 rule (system.precision.mode=hobbit) "
            f"cannot run on it (fix: a uniform-precision system, system.precision.mode=high or low, "
            f"e.g. system=on-demand, freetoken or tec)"
        )


def check_profile(model: ModelConfig, hw: HardwareConfig) -> None:
    """A measured profile only holds for the shapes it was measured with."""
    prof = hw.profile
    if prof is None:
        return
    if (prof.hidden_size, prof.expert_ffn) != (model.hidden_size, model.expert_ffn):
        raise ConfigError(
            f"hardware={hw.name} was calibrated for model {prof.model} (hidden {prof.hidden_size}, "
            f"expert FFN {prof.expert_ffn}), not model={model.name} (hidden {model.hidden_size}, expert "
            f"FFN {model.expert_ffn}); calibrate again for this model"
        )
    if not prof.expert_tokens or len(prof.expert_high_s) != len(prof.expert_tokens):
        raise ConfigError(f"hardware={hw.name}: profile.expert_tokens and expert_high_s are empty or differ in length")
    for name in ("expert_low_s", "cpu_expert_s", "head_s"):
        table = getattr(prof, name)
        if table and len(table) != len(prof.expert_tokens):
            raise ConfigError(
                f"hardware={hw.name}: profile.{name} has {len(table)} values for "
                f"{len(prof.expert_tokens)} expert_tokens (fix: one per token count, or none)"
            )


def check_windowed(system: SystemConfig, path: str | None) -> None:
    """Refuse ``system`` on the trace at ``path`` read a window at a time where the compiled walk cannot decide for it
    (the reference walk reads the whole trace), with the fix."""
    why = fast.unsupported(system)
    if why is not None:
        raise ConfigError(
            f"system={system.name} cannot run on trace {path} read a window at a time: the compiled walk does not "
            f"implement {why}, and the reference walk reads the whole trace (fix: window_tokens=0, which reads the "
            f"trace whole)"
        )
