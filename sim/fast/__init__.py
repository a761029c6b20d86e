"""The compiled core: the decision walk and the timing of ``sim.decide`` / ``sim.plain`` in numba.

``engine=fast`` (the default) runs a simulation here: ``decide`` makes the decisions of
``sim.decide.Decider`` and ``time_decisions`` the times of ``sim.plain.replay``, exactly (the
differential tests, tests/test_fast.py, hold every registered system to the reference's
decisions and to its times within 1e-9 relative). What the compiled walk does not implement
(``unsupported`` names it: a kept log, a policy registered but not written here) is decided by
the reference walk and timed here. The log comes out as tables (``DecisionTables``);
``Decisions.steps`` lays them out as ``LayerStep`` records on first use, for the simpy engine,
the executor and the timelines. ``stream`` runs both a chunk of passes at a time, dropping each
chunk's log once it is timed: what ``hobbit sim``, sweeps, tuning and comparisons run (they read
only the results), in the trace's memory plus per-pass results and O(cache + chunk) state.

By job: ``compiling`` (the entry points' first compilation, its notice and lock, which copy of a policy's walk a
run uses), ``inputs`` (what the walk, the timing and the bound read, laid out), ``decisions`` (the walk over a
whole trace), ``replay`` (the timing of a run's decisions, the bound of each pass) and ``streaming`` (the walk and
its timing a chunk of passes at a time); the compiled functions themselves are in ``walk`` (the template of each eviction policy's walk: what depends on
the policy), ``steps``, ``state``, ``records`` and ``borrow`` (what does not), ``timing``, ``bound``, ``special`` (a
copy of the walk per eviction policy), ``rule`` and ``order``.
"""

from __future__ import annotations

from hobbit.sim.fast import (
    borrow,
    bound,
    compiling,
    decisions,
    inputs,
    jit,
    order,
    records,
    replay,
    rule,
    special,
    state,
    steps,
    streaming,
    timing,
    walk,
)
from hobbit.sim.fast.compiling import (
    COMPILE_MACHINE,
    COMPILE_S,
    COMPILE_S_OTHER,
    ENTRY,
    NO_WAIT,
    NOTICE,
    TICK_S,
    WAITED,
    CompileNotice,
    compile_estimate,
    first_use,
    lock_path,
    policy_walk,
)
from hobbit.sim.fast.decisions import decide, decide_or_refer
from hobbit.sim.fast.inputs import (
    PassKinds,
    Run,
    Window,
    first_uses,
    future_csr,
    mix_of,
    narrow,
    pass_kinds,
    per_pass,
    region_offsets,
    rule_args,
    rule_mix,
    unsupported,
    whole_layers,
    window_future,
    workload_kinds,
)
from hobbit.sim.fast.replay import Times, pass_bounds, time_decisions
from hobbit.sim.fast.streaming import CHUNK_STEPS, Chunk, Streamed, Totals, stream, stream_windows

__all__ = [
    "CHUNK_STEPS",
    "COMPILE_MACHINE",
    "COMPILE_S",
    "COMPILE_S_OTHER",
    "ENTRY",
    "NOTICE",
    "NO_WAIT",
    "TICK_S",
    "WAITED",
    "Chunk",
    "CompileNotice",
    "PassKinds",
    "Run",
    "Streamed",
    "Times",
    "Totals",
    "Window",
    "borrow",
    "bound",
    "compile_estimate",
    "compiling",
    "decide",
    "decide_or_refer",
    "decisions",
    "first_use",
    "first_uses",
    "future_csr",
    "inputs",
    "jit",
    "lock_path",
    "mix_of",
    "narrow",
    "order",
    "pass_bounds",
    "pass_kinds",
    "per_pass",
    "policy_walk",
    "records",
    "region_offsets",
    "replay",
    "rule",
    "rule_args",
    "rule_mix",
    "special",
    "state",
    "steps",
    "stream",
    "stream_windows",
    "streaming",
    "time_decisions",
    "timing",
    "unsupported",
    "walk",
    "whole_layers",
    "window_future",
    "workload_kinds",
]
