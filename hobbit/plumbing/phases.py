"""What a trace's phases let a command report: the one place every command asks.

A trace may hold no decode pass (a prompt-only capture), no prefill pass (a routing log converted from decode, as
vLLM's and llama.cpp's moe-trace often are) or a single request. ``Phases.of`` counts them. A command that reports
a phase the trace lacks prints ``n/a`` for it; a command that cannot run without it
calls ``require``, which refuses (``ConfigError``: exit 2) naming the file, what the command needs and what the trace
holds, before any work. A phase a trace lacks is None in results.json, printed ``n/a``
(``hobbit.plumbing.results_io.decode_text``, the compare table).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hobbit.sim.config import ConfigError
from hobbit.traces.io import Trace
from hobbit.traces.schema import DECODE, PREFILL
from hobbit.traces.window import Scan, TraceFile


@dataclass(frozen=True)
class Phases:
    """Tokens of each phase and requests in a trace (a token counted once, whatever its layers)."""

    prefill_tokens: int
    decode_tokens: int
    requests: int

    @classmethod
    def of(cls, trace: Trace | TraceFile) -> Phases:
        if isinstance(trace, TraceFile):
            return cls.of_requests(trace.scan, 0, len(trace.scan.requests))
        a = trace.arrays
        first = a.layer == (a.layer.min() if len(a.layer) else 0)  # one row a token: its first recorded layer
        return cls(
            prefill_tokens=int(np.count_nonzero(first & (a.phase == PREFILL))),
            decode_tokens=int(np.count_nonzero(first & (a.phase == DECODE))),
            requests=len(np.unique(a.request_id)),
        )

    @classmethod
    def of_requests(cls, scan: Scan, first: int, stop: int) -> Phases:
        """Those of a scanned trace's requests ``first:stop`` (in the file's order)."""
        tokens, decode = scan.request_tokens[first:stop], scan.request_decode[first:stop]
        return cls(int(tokens.sum() - decode.sum()), int(decode.sum()), len(tokens))

    def __str__(self) -> str:
        return (
            f"{self.prefill_tokens} prefill and {self.decode_tokens} decode tokens in {self.requests} "
            f"request{'s' if self.requests != 1 else ''}"
        )


def require(
    trace: Trace | TraceFile,
    command: str,
    why: str,
    *,
    decode: bool = False,
    prefill: bool = False,
    requests: int = 1,
    fewer: str = "",
    phases: Phases | None = None,
) -> Phases:
    """``trace``'s phases, or ``ConfigError`` where ``command`` (which needs them ``why``) cannot run on it: no decode
    tokens when ``decode``, no prefill tokens when ``prefill``, fewer than ``requests`` requests (``fewer``: the knob
    that asks for fewer, named in the fix). ``phases``: those of the part of ``trace`` the command runs on, where it is
    not the whole (``Phases.of_requests``)."""
    ph = phases if phases is not None else Phases.of(trace)
    missing = []
    if decode and ph.decode_tokens == 0:
        missing.append("decode tokens")
    if prefill and ph.prefill_tokens == 0:
        missing.append("prefill tokens")
    if ph.requests < requests:
        missing.append(f"{requests} requests")
    if missing:
        fixes = []
        if ph.requests < requests:
            fixes.append(f"a trace of {requests} requests or more" + (f", or a smaller {fewer}" if fewer else ""))
        if len(missing) > len(fixes):
            fixes.append(
                "a trace whose requests have both phases (hobbit capture records both, max_new_tokens=2 or more); "
                "hobbit sim reports whichever phase a trace has"
            )
        raise ConfigError(
            f"trace={trace.path}: hobbit {command} needs {' and '.join(missing)} ({why}); the trace holds {ph} "
            f"(fix: {'; '.join(fixes)})"
        )
    return ph
