"""What each knob of a command means, read from the config dataclasses themselves.

A knob is documented once, in code, by the string literal right after its field (an attribute
docstring, which editors show on hover too)::

    @dataclass(frozen=True)
    class PrecisionConfig:
        t1: float = 0.6
        \"\"\"Score at or below which a missing expert loads at high precision (paper §3.2).\"\"\"

``hobbit <command> --help`` and the docs' knob reference (``hobbit.docs_gen``) both print these
texts, so the two never disagree. A nested config's own heading is its field's docstring, or else
the first paragraph of its class's docstring. Nodes made by ``make_dataclass`` (a policy's knobs
under ``system.cache.<policy>``) take their class's docstring.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import itertools
import textwrap
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Union


@dataclass(frozen=True)
class Knob:
    """One row of a command's knob listing: a dotted key, its default in this composition, its meaning."""

    key: str
    default: Any
    doc: str
    group: bool = False  # a nested config (its knobs follow), not a value


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """Field name -> attribute docstring, over ``cls`` and its bases (a subclass's text wins)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass is object or not dataclasses.is_dataclass(klass):
            continue
        try:
            source = textwrap.dedent(inspect.getsource(klass))
        except (OSError, TypeError):  # made at run time (make_dataclass): no source of its own
            continue
        node = ast.parse(source).body[0]
        if not isinstance(node, ast.ClassDef):
            continue
        body = node.body
        for stmt, after in itertools.pairwise(body):
            if (
                isinstance(stmt, ast.AnnAssign)
                and isinstance(stmt.target, ast.Name)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                docs[stmt.target.id] = " ".join(inspect.cleandoc(after.value.value).split())
    return docs


def class_summary(cls: type) -> str:
    """The first paragraph of a class's docstring, on one line."""
    doc = inspect.getdoc(cls) or ""
    return " ".join(doc.split("\n\n")[0].split())


def _dataclass_of(hint: Any) -> type | None:
    """The dataclass a field's type names, also through ``X | None``; None for a plain value."""
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return hint
    if typing.get_origin(hint) in (Union, types.UnionType):
        inner = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(inner) == 1:
            return _dataclass_of(inner[0])
    return None


def knobs(schema: type, values: Any = None, prefix: str = "") -> list[Knob]:
    """Every knob of ``schema`` in field order, nested configs flattened to dotted keys.

    ``values``: what a command really starts from, its YAML and config groups applied: an instance of
    ``schema``, or the composed config as plain mappings (interpolations left as written); without it,
    the dataclass defaults.
    """
    hints = typing.get_type_hints(schema)
    docs = field_docs(schema)
    rows: list[Knob] = []
    for f in dataclasses.fields(schema):
        key = f"{prefix}{f.name}"
        if values is None:
            value = _default(f)
        elif isinstance(values, Mapping):
            value = values.get(f.name, _default(f))
        else:
            value = getattr(values, f.name)
        nested = _dataclass_of(hints.get(f.name))
        if nested is not None and (isinstance(value, Mapping) or dataclasses.is_dataclass(value)):
            kind = nested if isinstance(value, Mapping) else type(value)
            rows.append(Knob(key, None, docs.get(f.name) or class_summary(kind), group=True))
            rows += knobs(kind, value, f"{key}.")
        else:
            rows.append(Knob(key, value, docs.get(f.name, "")))
    return rows


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def undocumented(schema: type) -> list[str]:
    """Dotted keys of ``schema``'s knobs without a text: what a test holds at empty."""
    return [k.key for k in knobs(schema) if not k.doc]


def shown(value: Any) -> str:
    """A default as a user would type it in an override."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value if value else "''"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(shown(v) for v in value) + "]"
    return str(value)


def render_help(rows: list[Knob], width: int = 100) -> str:
    """The knob listing of ``--help``: ``key=default`` and, wrapped below it, what it means."""
    lines: list[str] = []
    for k in rows:
        depth = k.key.count(".")
        pad = "  " * depth
        head = f"{pad}{k.key}:" if k.group else f"{pad}{k.key}={shown(k.default)}"
        lines.append(head)
        if k.doc:
            lines += textwrap.wrap(k.doc, width=width, initial_indent=pad + "    ", subsequent_indent=pad + "    ")
    return "\n".join(lines)


def render_markdown(rows: list[Knob]) -> str:
    """The knob listing as a Markdown table (the docs' reference)."""
    out = ["| knob | default | meaning |", "|---|---|---|"]
    for k in rows:
        cell = "" if k.group else f"`{shown(k.default)}`"
        key = f"**`{k.key}`**" if k.group else f"`{k.key}`"
        out.append(f"| {key} | {cell} | {k.doc.replace('|', '&#124;')} |")
    return "\n".join(out)
