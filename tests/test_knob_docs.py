"""hobbit.plumbing.knob_docs: the knobs' texts read from the config dataclasses (attribute docstrings)."""

from __future__ import annotations

from dataclasses import dataclass, field, make_dataclass

from hobbit.plumbing.knob_docs import field_docs, knobs, render_help, render_markdown, shown


@dataclass(frozen=True)
class _Inner:
    """An inner node.

    Its second paragraph is not part of a heading."""

    depth: int = 2
    """How deep.
    Wrapped over two lines."""
    plain: str = "x"


@dataclass(frozen=True)
class _Outer:
    name: str | None = None
    """The name; null: none."""
    inner: _Inner = field(default_factory=_Inner)
    flags: list[int] = field(default_factory=lambda: [1, 2])
    """Some flags."""


@dataclass(frozen=True)
class _Child(_Outer):
    name: str | None = "kid"
    """The child's own text for an inherited knob."""


def test_attribute_docstrings_are_read_and_a_subclass_overrides_its_base():
    assert field_docs(_Inner) == {"depth": "How deep. Wrapped over two lines."}
    assert field_docs(_Outer) == {"name": "The name; null: none.", "flags": "Some flags."}
    assert field_docs(_Child)["name"] == "The child's own text for an inherited knob."
    assert field_docs(_Child)["flags"] == "Some flags."


def test_knobs_flatten_nested_configs_with_composed_values_and_headings():
    rows = knobs(_Outer)
    assert [(k.key, k.group) for k in rows] == [
        ("name", False),
        ("inner", True),
        ("inner.depth", False),
        ("inner.plain", False),
        ("flags", False),
    ]
    by = {k.key: k for k in rows}
    assert by["inner"].doc == "An inner node."  # no field text: the class's first paragraph
    assert by["inner.plain"].doc == ""
    composed = _Outer(name="m", inner=_Inner(depth=5))
    assert {k.key: k.default for k in knobs(_Outer, composed)}["inner.depth"] == 5
    made = make_dataclass("Made", [("w", float, field(default=0.5))], frozen=True)
    made.__doc__ = "A node made at run time."
    assert [k.doc for k in knobs(made)] == [""]  # no source of its own: nothing invented


def test_help_and_markdown_show_each_text_once_as_an_override_would_type_it():
    rows = knobs(_Outer)
    text = render_help(rows, width=60)
    assert "name=null" in text and "  inner.depth=2" in text and "flags=[1,2]" in text
    assert text.count("How deep. Wrapped over two lines.") == 1
    md = render_markdown(rows)
    assert "| `inner.depth` | `2` | How deep. Wrapped over two lines. |" in md
    assert "| **`inner`** |  | An inner node. |" in md
    assert [shown(v) for v in (None, True, "", "a", 1.5, [1, "b"])] == ["null", "true", "''", "a", "1.5", "[1,b]"]


def test_every_knob_of_every_command_has_its_text():
    """Documented once, in code: every field of every command's schema, nested configs and policy knobs included."""
    from hobbit.docs_gen import command_configs
    from hobbit.plumbing.knob_docs import undocumented

    configs = command_configs()
    assert {c.replace("-", "_") for c in configs} >= {"sim", "compare", "tune", "validate", "capture", "convert"}
    assert {name: undocumented(schema) for name, (_, schema) in configs.items() if undocumented(schema)} == {}


def test_help_prints_each_knob_with_its_composed_default_and_its_text(capsys):
    """``--help`` lists every knob of the schema, its default as the chosen config group composes it, and the text
    the docs' knob reference shows."""
    from hobbit.docs_gen import command_configs

    from conftest import run_cli

    assert run_cli(["sim", "system=fiddler", "hardware=h200-pcie5", "--help"]) == 0
    out = capsys.readouterr().out
    _, schema = command_configs()["sim"]
    for k in knobs(schema):
        assert (f"{k.key}:" if k.group else f"{k.key}=") in out, k.key
        assert k.doc.split(". ")[0][:40] in " ".join(out.split()), k.key
    assert "system.placement=popular" in out and "system.cpu_misses=faster" in out  # fiddler's own values
    assert "hardware.name=h200-pcie5" in out and "$$" not in out
    assert "cache_dir=null\n" in out and "$HOBBIT_CACHE" in out
