"""Numbers of typed configs checked where they are typed: finite, and within their class's limits.

A config dataclass declares ``LIMITS: ClassVar[dict[str, str]]``, knob -> range, written
``>0``, ``>=0``, ``>=1``, ``>=-1`` or an interval ``[0,1]`` / ``(0,1]`` (a ``seed`` is ``>=0`` in every config,
``COMMON_LIMITS``); a list of numbers is
checked element by element, None (an unset optional knob) is not checked. Every float of
every config, declared or not, must be finite. ``check_knobs`` walks nested configs and
names the first bad knob by its full path (``system.cache.high_fraction=1.5``).
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

from hobbit.traces.schema import InputError

_BOUND = re.compile(r"^(>=|>)(-?[\d.]+)$")
_INTERVAL = re.compile(r"^([\[(])(-?[\d.]+),(-?[\d.]+)([\])])$")


class KnobError(InputError):
    """A numeric knob that is not finite or out of its range; the message names it."""


def within(value: float, spec: str) -> bool:
    """Whether ``value`` lies in the range ``spec`` (see the module's docstring)."""
    if m := _BOUND.match(spec):
        low = float(m.group(2))
        return value > low if m.group(1) == ">" else value >= low
    if m := _INTERVAL.match(spec):
        lo, hi = float(m.group(2)), float(m.group(3))
        return (value >= lo if m.group(1) == "[" else value > lo) and (value <= hi if m.group(4) == "]" else value < hi)
    raise ValueError(f"bad limit '{spec}'")


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


# limits every config's knob of the name has, declared or not: numpy's generators take no negative seed
COMMON_LIMITS = {"seed": ">=0"}


def limit_of(cls: type, name: str) -> str | None:
    """The range knob ``name`` of config class ``cls`` must lie in (its ``LIMITS``, else ``COMMON_LIMITS``)."""
    return getattr(cls, "LIMITS", {}).get(name, COMMON_LIMITS.get(name))


def check_knobs(cfg: Any, prefix: str = "") -> None:
    """Raise ``KnobError`` for the first number of ``cfg`` (a dataclass, nested) that is not finite or
    not within its declared limit."""
    for f in dataclasses.fields(cfg):
        v = getattr(cfg, f.name)
        name = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(v):
            check_knobs(v, name + ".")
            continue
        values = v if isinstance(v, (list, tuple)) else [v]
        for x in values:
            if not _number(x):
                continue
            if isinstance(x, float) and not math.isfinite(x):
                raise KnobError(f"{name}={v} must be a finite number")
            spec = limit_of(type(cfg), f.name)
            if spec is not None and not within(x, spec):
                raise KnobError(f"{name}={v} must be {say_limit(spec)}")


def say_limit(spec: str) -> str:
    if _INTERVAL.match(spec):
        return "in " + spec.replace(",", ", ")
    m = _BOUND.match(spec)
    assert m is not None  # ``within`` accepted the spec: an interval or a bound
    return f"{m.group(1)} {m.group(2)}"
