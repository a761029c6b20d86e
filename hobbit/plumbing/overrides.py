"""A command line's overrides checked against the command's schema before Hydra composes anything.

A frozen-dataclass schema's knobs form a tree (``knob_tree``); an override that names no knob of it, or ``+``
on a knob of a typed config, is refused on one line, exit code 2, with the nearest knob ("did you mean
system.precision.t1?"); a config group's option that does not exist names the choices. Hydra's own suggestion
("to append use +key") would point past the schema, and following it ends in a traceback.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import math
import sys
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import IntervalSweep, Override
from hydra.errors import HydraException

from hobbit.catalogue.models import catalogue
from hobbit.traces.knobs import limit_of, say_limit, within

_BOOLS = {"true", "false", "yes", "no", "on", "off", "y", "n", "1", "0"}
OPEN = "*"  # a knob tree's node under which any key may follow (a mapping, a list, Any)


# knobs that moved, and where to (an old command line gets the new one)
MOVED = {"hardware.high_precision": "system.weights", "hardware.low_precision": "system.precision.low"}


def knob_tree(schema: type) -> dict[str, Any]:
    """A frozen-dataclass schema's knobs as a tree: name -> its subtree (a dict), ``OPEN``, or None (a leaf). What
    Hydra composes for the schema has these keys and no others: the YAML of conf/ extends the schema, never adds."""
    try:
        hints = typing.get_type_hints(schema)
    except (NameError, TypeError):  # an annotation only a type checker resolves: its knobs are not checked here
        hints = {}
    return {f.name: _subtree(hints.get(f.name, Any)) for f in dataclasses.fields(schema)}


def _subtree(hint: Any) -> Any:
    origin = typing.get_origin(hint)
    if origin is typing.Union or origin is types.UnionType:
        subs = [_subtree(a) for a in typing.get_args(hint) if a is not type(None)]
        return subs[0] if len(subs) == 1 else OPEN if any(s is not None for s in subs) else None
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return knob_tree(hint)
    if hint is Any or origin in (dict, list, tuple, Mapping) or hint in (dict, list, tuple):
        return OPEN
    return None


def knob_paths(tree: dict[str, Any], prefix: str = "") -> list[str]:
    """Every dotted path of a knob tree, nodes and leaves."""
    out = []
    for k, v in tree.items():
        out.append(prefix + k)
        if isinstance(v, dict):
            out += knob_paths(v, f"{prefix}{k}.")
    return out


def has_knob(tree: dict[str, Any], path: str) -> bool:
    node: Any = tree
    for part in path.split("."):
        if node == OPEN:
            return True
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def nearest_knob(tree: dict[str, Any], path: str) -> str | None:
    """The knob ``path`` most likely meant: each misspelt part replaced by the closest name at its level
    (``system.precison.t1`` -> ``system.precision.t1``); else a knob that ends as ``path`` does (``precision.t1``);
    else the closest whole path; None when nothing is close."""
    parts, node, fixed = path.split("."), tree, []
    for part in parts:
        if node == OPEN:
            fixed.append(part)
            continue
        if not isinstance(node, dict):
            break
        close = [part] if part in node else difflib.get_close_matches(part, list(node), n=1, cutoff=0.6)
        if not close:
            break
        fixed.append(close[0])
        node = node[close[0]]
    else:
        return ".".join(fixed)
    paths = knob_paths(tree)
    tails = [p for p in paths if p.endswith("." + path)]
    if len(tails) == 1:
        return tails[0]
    close = difflib.get_close_matches(path, paths, n=1, cutoff=0.75)
    return close[0] if close else None


def _conf_dir(config_path: str) -> Path:
    """The directory of a ``pkg://`` config path."""
    module = importlib.import_module(config_path.removeprefix("pkg://"))
    return Path(cast(str, module.__file__)).parent


def _command(config_name: str) -> str:
    """The command's name as a user types it: ``hobbit sim``."""
    prog = Path(sys.argv[0]).name if sys.argv else ""
    return "hobbit " + (prog.removeprefix("hobbit-") if prog.startswith("hobbit-") else config_name.replace("_", "-"))


def override_problem(
    o: Override, tree: dict[str, Any], groups: dict[str, list[str]], command: str, extended: bool
) -> str | None:
    """What is wrong with one override for a schema's knob ``tree`` (None: nothing this check can see). ``groups``:
    the config groups of the command's conf/ and their options; ``extended``: a search path or config directory
    adds configs (an unknown group or option may live there)."""
    key = o.key_or_group
    if key == "hydra" or key.startswith(("hydra.", "hydra/")) or o.package:
        return None
    add = o.is_add()
    sign = "+" if add else "++" if o.is_force_add() else "~" if o.is_delete() else ""
    line = o.input_line or f"{sign}{key}"
    if isinstance(o.value(), IntervalSweep):
        return f"{line}: interval() is a search's range, not a list of runs (fix: a list, or range(start,stop,step))"
    if o.is_delete() and (key in groups or has_knob(tree, key)):
        return f"{line}: a knob of {command} cannot be removed ('~' deletes it); set it instead ({key}=...)"
    if key in groups and not add:
        if extended:
            return None
        values = sweep_values(o)
        if values == []:
            return f"{line}: the sweep gives no value (fix: a list or range that is not empty)"
        for v in values or [o.value()]:
            if not isinstance(v, str) or v in groups[key]:
                continue
            listed = list(catalogue()) if key == "model" else []  # the catalogue's configs (``model=`` takes them)
            near = difflib.get_close_matches(v, [*groups[key], *listed], n=1, cutoff=0.6)
            return (
                f"{line}: conf/{key} has no {v}"
                + (f" (did you mean {key}={near[0]}?)" if near else "")
                + f"; the choices: {', '.join(groups[key])}"
                + (f"; or a model of the catalogue by its Hugging Face id ({', '.join(listed)}), or a .gguf or "
                   "config.json file" if listed else "")
            )  # fmt: skip
        return None
    if has_knob(tree, key):
        if add:
            value = line.partition("=")[2]
            return f"{line}: {key} is a knob of {command} already; set it without '+' ({key}={value})"
        return None
    if extended and "." not in key:  # +experiment=NAME: a group of the added search path
        return None
    for old, new in MOVED.items():
        if key.endswith(old) and has_knob(tree, key.removesuffix(old) + new):
            value = line.partition("=")[2]
            return f"{line}: the experts' formats are the system's, not the machine's: {new}={value}"
    near = nearest_knob(tree, key)
    return (
        f"{line}: {command} has no knob {key}"
        + (f" (did you mean {near}?)" if near else "")
        + ("; '+' adds no knob to a typed config" if add or o.is_force_add() else "")
        + f"; `{command} --help` lists the knobs"
    )


def _leaf(schema: type, path: str) -> tuple[type, Any, str] | None:
    """The dataclass that holds knob ``path`` of ``schema``, its type hint and its field name; None where the path
    runs through an open node or a hint only a type checker resolves."""
    cls: Any = schema
    parts = path.split(".")
    for i, part in enumerate(parts):
        try:
            hints = typing.get_type_hints(cls)
        except (NameError, TypeError):
            return None
        if part not in hints:
            return None
        hint = hints[part]
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if typing.get_origin(hint) in (typing.Union, types.UnionType) and len(args) == 1:
            hint = args[0]
        if i == len(parts) - 1:
            return cls, hint, part
        if not (isinstance(hint, type) and dataclasses.is_dataclass(hint)):
            return None
        cls = hint
    return None


def value_problem(o: Override, schema: type) -> str | None:
    """What is wrong with the value(s) of a knob's override (every value of a sweep's list): a whole-number knob
    given a fraction or a word, a number knob given a word, a number outside the knob's declared limits
    (``LIMITS``, as ``check_knobs`` checks a composed config). None: nothing this check can see."""
    key = o.key_or_group
    leaf = _leaf(schema, key)
    if leaf is None or o.is_delete():
        return None
    cls, hint, name = leaf
    if hint not in (int, float, bool):
        return None
    if o.is_sweep_override():
        values = sweep_values(o)
        if values is None:  # an interval: a tuning search's, drawn from within its bounds
            return None
        if not values:
            return f"{o.input_line or key}: the sweep gives no value (fix: a list or range that is not empty)"
    else:
        values = [o.value()]
    spec = limit_of(cls, name)
    for x in values:
        if x is None:
            continue
        if hint is bool:  # OmegaConf's readings of a boolean
            if not (isinstance(x, bool) or x in (0, 1) or str(x).lower() in _BOOLS):
                return f"{key}={x}: {key} is true or false"
            continue
        if isinstance(x, bool) or not isinstance(x, (int, float)):
            return f"{key}={x}: {key} takes a number" + (", a whole one" if hint is int else "")
        if hint is int and not isinstance(x, int):
            return f"{key}={x}: {key} takes a whole number"
        if not math.isfinite(x):
            return f"{key}={x} must be a finite number"
        if spec is not None and not within(x, spec):
            return f"{key}={x} must be {say_limit(spec)}" + (
                " (a value of the sweep's list)" if len(values) > 1 else ""
            )
    return None


def sweep_values(o: Override) -> list[Any] | None:
    """The values a sweep override takes, as Hydra expands them (a list, a range: ``range(0.9,0.1,0.1)`` takes none);
    None for an override that is no sweep, or an interval (no list of values)."""
    if not o.is_sweep_override():
        return None
    try:
        return list(o.sweep_iterator())
    except HydraException:  # an interval sweep cannot be listed
        return None


def syntax_problem(overrides: list[str]) -> str | None:
    """The first override Hydra's grammar cannot read, named with Hydra's reason and the fix, or None."""
    parser = OverridesParser.create()
    for text in overrides:
        try:
            parser.parse_overrides([text])
        except HydraException as exc:
            reason = (str(exc).strip().splitlines() or ["not an override"])[0]
            return (
                f"{text}: not an override hobbit can read ({reason}) (fix: key=value; quote a value that holds "
                "brackets, commas, quotes or spaces: key='...')"
            )
    return None


def overrides_problem(
    config_path: str,
    config_name: str,
    schema: type,
    overrides: list[str],
    extended: bool,
    command: str | None = None,
    multirun: bool = True,
) -> str | None:
    """The first problem ``override_problem`` finds in ``overrides`` (Hydra's syntax), or None; ``command``: how
    the message names the command (default: the one running, ``hobbit sim``); ``multirun``: whether ``-m`` was
    given (without it a sweep is a mistake Hydra explains in 6 lines)."""
    problem = syntax_problem(overrides)
    if problem is not None:
        return problem
    parsed = OverridesParser.create().parse_overrides(overrides)
    for o in parsed:
        if not multirun and o.is_sweep_override() and not o.key_or_group.startswith("hydra"):
            return (
                f"{o.input_line}: a list of values is a sweep (fix: add -m for one run per value; "
                f"{o.key_or_group}=[a,b] for one list value; {o.key_or_group}='a,b' for text)"
            )
    tree = knob_tree(schema)
    conf = _conf_dir(config_path)
    groups = {
        d.name: sorted(p.stem for p in d.glob("*.yaml")) for d in conf.iterdir() if d.is_dir() and any(d.glob("*.yaml"))
    }
    command = command or _command(config_name)
    for o in parsed:
        problem = override_problem(o, tree, groups, command, extended) or value_problem(o, schema)
        if problem is not None:
            return problem
    return None
