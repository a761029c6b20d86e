"""The layering docs/design.md promises, read from the source: who may import whom, package by package, no cycles,
project imports at module top (but for the few modules that load the simulator on first use, LAZY, whose inner
imports the cycle check still follows).

The library, bottom up (an arrow: "may import"): traces -> (nothing of the project); sim -> traces; executor -> sim,
traces; analysis -> traces. Above it, in hobbit/: the catalogue (data and its loaders) -> sim, traces; the plumbing
(Hydra apps, guards, run files) -> the catalogue and the library; the API (``hobbit.api`` and the package's own
names) -> the plumbing and below; the planner and the studies -> the API and below, never each other; the commands
-> everything below them; the console script (``hobbit.cli``) -> the plumbing only (it imports a command by its
name, to run it); the docs tooling (``hobbit.docs_gen``) reads everything. ``sim.policies`` imports no simpy,
torch or I/O. Every import of the project is written ``hobbit.<part>`` (a bare ``sim`` or ``traces`` would be a
second copy).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
PARTS = {"traces": "traces", "sim": "sim", "executor": "executor", "analysis": "analysis", "conf": "conf"}
LIBRARY = {"traces", "sim", "executor", "analysis", "conf"}
ROOMS = ("catalogue", "plumbing", "planner", "studies", "commands")  # hobbit/<room>/: a package each
MAY_IMPORT = {
    "traces": set(),
    "sim": {"traces"},
    "executor": {"sim", "traces"},
    "analysis": {"traces"},
    "conf": set(),
    "catalogue": {"sim", "traces", "conf"},
    "plumbing": {"catalogue", *LIBRARY},
    "api": {"plumbing", "catalogue", *LIBRARY},
    "planner": {"api", "plumbing", "catalogue", *LIBRARY},
    "studies": {"api", "plumbing", "catalogue", *LIBRARY},
    "commands": {"planner", "studies", "api", "plumbing", "catalogue", *LIBRARY},
    "cli": {"plumbing"},
    "tools": {"commands", "planner", "studies", "api", "plumbing", "catalogue", "cli", *LIBRARY},
}
APP_MODULES = {
    "hobbit": "api",
    "hobbit.api": "api",
    "hobbit.cli": "cli",
    "hobbit.__main__": "cli",
    "hobbit.docs_gen": "tools",
}

# modules whose project imports may sit inside functions, and why; typing-only imports
# (``if TYPE_CHECKING:`` at module top) count as top-level everywhere
LAZY = {
    "hobbit": "the API's names load on first use, so the command line starts without numba or pandas",
    "hobbit.commands.sim": "a sweep's launching process composes and launches; its workers load the simulator",
    "hobbit.cli": "a command's module is imported by its name, only to run it",
}


def _part_of(module: str) -> str | None:
    """The part a ``hobbit.*`` module belongs to (None: not the project's, or in no part)."""
    bits = module.split(".")
    if bits[0] != "hobbit":
        return None
    if len(bits) > 1 and (bits[1] in PARTS or bits[1] in ROOMS):
        return bits[1]
    for name, part in APP_MODULES.items():  # hobbit.api.simulate -> hobbit.api; hobbit.simulate -> hobbit
        if module == name or module.startswith(name + ".") and name != "hobbit":
            return part
    return "api" if len(bits) <= 2 else None  # a name the package exports lazily (hobbit.simulate)


def _module(path: Path) -> tuple[str, str]:
    """(dotted module name under ``hobbit``, its part)."""
    rel = path.relative_to(ROOT)
    parts = list(rel.with_suffix("").parts)
    if rel.parts[0] not in PARTS:
        parts = parts[1:]  # hobbit/cli.py -> hobbit.cli
    if parts and parts[-1] == "__init__":
        parts = parts[:-1]
    name = ".".join(["hobbit", *parts])
    part = _part_of(name)
    assert part is not None, f"{path}: in no part of the layering (a new room of hobbit/ needs its rule in ROOMS)"
    return name, part


def _sources() -> dict[str, tuple[str, Path]]:
    files = [
        p
        for d in [*PARTS, "hobbit"]
        for p in (ROOT / d).rglob("*.py")
        if "__pycache__" not in p.relative_to(ROOT).parts  # written at run time (sim.fast.special's copies)
    ]
    return {name: (part, p) for p in files for name, part in [_module(p)]}


SOURCES = _sources()


def _imports(path: Path) -> list[tuple[str, int, bool]]:
    """(module imported, line, at module top?) for every import in ``path``."""
    tree = ast.parse(path.read_text(), str(path))
    top = {id(n) for n in tree.body}
    for n in tree.body:  # if TYPE_CHECKING: imports for annotations only
        if isinstance(n, ast.If) and isinstance(n.test, ast.Name) and n.test.id == "TYPE_CHECKING":
            top |= {id(b) for b in n.body}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno, id(node) in top) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out += [
                (
                    f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in SOURCES else node.module,
                    node.lineno,
                    id(node) in top,
                )
                for a in node.names
            ]
    return out


def _breaks_layering(part: str, module: str) -> bool:
    """Whether a module of ``part`` importing ``module`` breaks the layering."""
    target = _part_of(module)
    return target is not None and target != part and target not in MAY_IMPORT[part]


def test_sources_found():
    assert {
        "hobbit",
        "hobbit.cli",
        "hobbit.sim.run",
        "hobbit.traces.io",
        "hobbit.executor.replay",
        "hobbit.analysis.report",
        "hobbit.sim.policies.registry",
        "hobbit.planner.search",
        "hobbit.commands.plan",
        "hobbit.plumbing.glue",
        "hobbit.catalogue.machine",
        "hobbit.studies.compare",
    } <= set(SOURCES)
    assert {part for part, _ in SOURCES.values()} == set(MAY_IMPORT)


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_imports_respect_the_layers(name):
    part, path = SOURCES[name]
    for mod, line, _ in _imports(path):
        root = mod.split(".")[0]
        assert root not in PARTS, f"{path}:{line} imports '{mod}': write it hobbit.{mod}"
        assert not _breaks_layering(part, mod), f"{path}:{line}: {part} may not import {mod} ({_part_of(mod)})"
        if name.startswith("hobbit.sim.policies"):
            assert root not in ("simpy", "torch", "pyarrow", "pandas"), f"{path}:{line}: policies stay pure ({mod})"


@pytest.mark.parametrize("name", sorted(set(SOURCES) - set(LAZY)))
def test_project_imports_sit_at_module_top(name):
    _, path = SOURCES[name]
    inner = [(mod, line) for mod, line, at_top in _imports(path) if _part_of(mod) is not None and not at_top]
    assert not inner, f"{path}: project imports inside functions (hidden cycles): {inner}"


def test_the_command_line_and_a_sweeps_launcher_start_without_the_simulator():
    """What ``hobbit sim -m`` loads before its workers start: no numba, pandas or simpy (LAZY)."""
    code = (
        "import sys, hobbit, hobbit.cli, hobbit.commands.sim, hobbit.plumbing.results_io, hobbit.plumbing.sweeper; "
        "print(sorted(m for m in ('numba', 'pandas', 'simpy', 'torch', 'hobbit.api') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert out.stdout.strip() == "[]"
    assert callable(__import__("hobbit").simulate)  # the API's names still resolve, on first use


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for name, (_, path) in SOURCES.items():
        deps = set()
        for mod, _, _ in _imports(path):
            while mod and mod not in SOURCES:  # hobbit.sim.run.simulate -> hobbit.sim.run
                mod = mod.rpartition(".")[0]
            if mod and mod != name:
                deps.add(mod)
        graph[name] = deps
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle of ``graph`` (module -> modules it imports), or [] when there is none."""
    state: dict[str, str] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str]:
        state[n] = "open"
        stack.append(n)
        for d in sorted(graph.get(n, ())):
            if state.get(d) == "open":
                return stack[stack.index(d) :] + [d]
            if d not in state and (found := visit(d)):
                return found
        stack.pop()
        state[n] = "done"
        return []

    for n in sorted(graph):
        if n not in state and (found := visit(n)):
            return found
    return []


def test_no_import_cycles():
    cycle = find_cycle(_graph())
    assert not cycle, "import cycle: " + " -> ".join(cycle)


def test_the_checks_catch_what_they_forbid(tmp_path):
    """The rules above fail on the cases they exist for (a guard that cannot fail guards nothing)."""
    bad = tmp_path / "bad.py"
    bad.write_text("import os\nfrom hobbit.executor.replay import Replayer\n\ndef f():\n    import hobbit.sim.run\n")
    mods = _imports(bad)
    assert ("hobbit.executor.replay", 2, True) in mods and ("hobbit.sim.run", 5, False) in mods
    assert _part_of("hobbit.executor.replay") not in MAY_IMPORT["sim"]
    assert _part_of("hobbit.sim.run") not in MAY_IMPORT["traces"]
    # a planted back-import in each room of hobbit/, and the imports the same rooms may make
    for part, upward in (
        ("plumbing", "hobbit.planner.search"),
        ("plumbing", "hobbit.api"),
        ("catalogue", "hobbit.plumbing.glue"),
        ("api", "hobbit.studies.compare"),
        ("planner", "hobbit.studies.compare"),
        ("studies", "hobbit.planner.search"),
        ("planner", "hobbit.commands.plan"),
        ("cli", "hobbit.planner.search"),
        ("sim", "hobbit.catalogue.machine"),
    ):
        assert _breaks_layering(part, upward), (part, upward)
    for part, downward in (("commands", "hobbit.planner.search"), ("planner", "hobbit.api"), ("api", "hobbit.sim.run")):
        assert not _breaks_layering(part, downward), (part, downward)
    planted = tmp_path / "hobbit" / "plumbing" / "planted.py"
    planted.parent.mkdir(parents=True)
    planted.write_text("from hobbit.planner.search import plan\n")
    [(mod, _, _)] = _imports(planted)
    assert mod == "hobbit.planner.search" and _breaks_layering("plumbing", mod)
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) == []
