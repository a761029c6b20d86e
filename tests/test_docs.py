"""The README and the docs as they stand: their Python examples run, the commands they show exist and compose,
their links and the repository paths they name resolve, and the generated reference pages are current.

- Every ```python block of a page runs, the page's blocks in order in one namespace. A block may opt out only with
  a visible reason, an HTML comment on the line before it: ``<!-- not-run: needs a CUDA device -->``.
- Every ``hobbit <command> ...`` line of a ```bash block, and every inline ``hobbit <command> ...`` span, names a
  command of ``hobbit.cli.COMMANDS``, and its ``key=value`` overrides compose against that command's config (its
  schema and conf/ YAML, as the command composes them) and pass the knob checks, without running the command.
  Left out of the composition: placeholders (a value in capitals such as ``PATH`` or ``N``, or one holding ``<``,
  ``|`` or ``...``; an optional ``[...]`` part of a synopsis) and Hydra's own settings (``hydra.*``). A line that
  adds a config directory (``hydra.searchpath=``) is checked for its command only: its config groups live in a
  directory that a run creates. With ``-m`` each value of a sweep is composed.
- Every relative link resolves to a file, and its ``#anchor`` to a heading of that file; every repository path in
  inline code (``sim/decide.py``) exists.
- ``python -m hobbit.docs_gen`` would write exactly the pages committed under docs/reference/.
"""

from __future__ import annotations

import importlib
import re
import shlex
import unicodedata
from dataclasses import dataclass
from difflib import get_close_matches
from functools import cache
from pathlib import Path
from typing import Any

import hydra
import pytest
from hydra import initialize_config_module
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from hobbit import docs_gen
from hobbit.cli import COMMANDS, rewrite
from hobbit.plumbing import glue
from hobbit.plumbing.path_args import is_path
from hobbit.traces.knobs import check_knobs

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted([ROOT / "README.md", ROOT / "CHANGELOG.md", ROOT / "tests" / "README.md", *DOCS.rglob("*.md")])
SHELL = {"bash", "sh", "shell", "console"}
NOT_RUN = re.compile(r"<!--\s*not-run:\s*(.*?)\s*-->")
FENCE = re.compile(r"^ *(`{3,}|~{3,})\s*([\w+-]*)")
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)\)")
SPAN = re.compile(r"(`+)(.+?)\1")
REPO_PATH = re.compile(r"(?:traces|sim|executor|analysis|conf|tests|benchmarks|hobbit|docs)/[\w./-]*")
PLACEHOLDER = re.compile(r"[A-Z][A-Z0-9_]*|.*(<|>|\||\.\.\.).*")
COMMAND_DECORATOR = re.compile(r"@hydra_command\((\w+), \"(\w+)\", (\w+)\)\s*\ndef (\w+)")


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


@dataclass(frozen=True)
class Block:
    """A fenced code block: where it starts (1-based line of its fence), its language, its text, why it is not run."""

    page: Path
    line: int
    lang: str
    text: str
    not_run: str | None


def split(page: Path) -> tuple[list[Block], list[tuple[int, str]]]:
    """A page's fenced blocks, and its prose lines (outside the blocks) with their line numbers."""
    blocks: list[Block] = []
    prose: list[tuple[int, str]] = []
    lines = page.read_text().splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            prose.append((i + 1, lines[i]))
            i += 1
            continue
        fence, lang, start = m.group(1), m.group(2), i
        i += 1
        body: list[str] = []
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i])
            i += 1
        i += 1  # the closing fence
        before = next((lines[j] for j in range(start - 1, -1, -1) if lines[j].strip()), "")
        reason = NOT_RUN.search(before)
        blocks.append(Block(page, start + 1, lang, "\n".join(body) + "\n", reason.group(1) if reason else None))
    return blocks, prose


# --- Python blocks ---------------------------------------------------------------------------------------------


def python_pages() -> list[Path]:
    return [p for p in PAGES if any(b.lang == "python" for b in split(p)[0])]


@pytest.mark.parametrize("page", python_pages(), ids=rel)
def test_python_blocks_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # whatever an example writes lands here
    scope: dict[str, Any] = {"__name__": f"docs_{page.stem}"}
    for block in split(page)[0]:
        if block.lang != "python":
            continue
        if block.not_run is not None:
            assert block.not_run, f"{rel(page)}:{block.line}: a block left out must say why"
            continue
        exec(compile(block.text, f"{rel(page)}:{block.line}", "exec"), scope)


# --- commands ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Shown:
    """A ``hobbit ...`` command line as a page shows it."""

    page: Path
    line: int
    words: tuple[str, ...]

    def __str__(self) -> str:
        return f"{rel(self.page)}:{self.line}: hobbit {' '.join(self.words)}"


def _without_optional(text: str) -> str:
    """A synopsis without its optional parts: a ``[`` that starts a word opens one, up to its matching ``]``
    (``systems=[A,B]`` is a value, not an optional part)."""
    out, depth = [], 0
    for i, c in enumerate(text):
        if c == "[" and (depth or i == 0 or text[i - 1].isspace()):
            depth += 1
        elif c == "]" and depth:
            depth -= 1
        elif not depth:
            out.append(c)
    return "".join(out)


def _words(text: str) -> list[str] | None:
    """A command line's words up to a shell pipe, or None where the shell could not split it."""
    try:
        words = shlex.split(_without_optional(text.replace("\\|", "|")), comments=True)
    except ValueError:
        return None
    return words[: words.index("|")] if "|" in words else words


def shown_commands(page: Path) -> list[Shown]:
    blocks, prose = split(page)
    found: list[Shown] = []
    for block in blocks:
        if block.lang not in SHELL:
            continue
        text = block.text.replace("\\\n", " ")  # continued lines
        for n, line in enumerate(text.splitlines()):
            line = line.strip().removeprefix("$ ")
            words = _words(line) if line.startswith("hobbit ") else None
            if words:
                found.append(Shown(page, block.line + 1 + n, tuple(words[1:])))
    for n, line in prose:
        for m in SPAN.finditer(line):
            span = m.group(2).strip()
            words = _words(span) if span.startswith("hobbit ") else None
            # a span of prose is a command where its second word is one, or nearly one (a misspelling)
            if words and len(words) > 1 and (words[1] == "--help" or get_close_matches(words[1], COMMANDS, cutoff=0.8)):
                found.append(Shown(page, n, tuple(words[1:])))
    return found


ALL_SHOWN = [s for p in PAGES for s in shown_commands(p)]
UNIQUE_SHOWN = list({s.words: s for s in reversed(ALL_SHOWN)}.values())[::-1]  # each line once, where first shown


def test_the_docs_show_commands() -> None:
    assert len(ALL_SHOWN) > 50 and {s.words[0] for s in ALL_SHOWN} >= {"sim", "compare", "calibrate", "validate"}


def command_config(command: str) -> tuple[str, str, type]:
    """(config module, config name, schema) of a command, read from its ``@hydra_command`` line."""
    module_name, func, _ = COMMANDS[command]
    module = importlib.import_module(module_name)
    source = Path(module.__file__ or "").read_text()
    for path_name, config_name, schema_name, defined in COMMAND_DECORATOR.findall(source):
        if defined == func:
            path = getattr(glue, path_name)
            return path.removeprefix("pkg://"), config_name, getattr(module, schema_name)
    raise AssertionError(f"{module_name}.{func} is not a @hydra_command")


def _unresolvable(module: str, config_name: str) -> list[str]:
    """Knobs whose YAML value reads Hydra's run-time state (``${hydra:runtime.output_dir}``), which a composition
    outside a running command cannot resolve: set to a plain value."""
    conf = Path(importlib.import_module(module).__file__ or "").parent / f"{config_name}.yaml"
    data = OmegaConf.to_container(OmegaConf.load(conf), resolve=False)
    assert isinstance(data, dict)
    return [str(k) for k, v in data.items() if isinstance(v, str) and "${hydra:" in v]


@cache
def compose(command: str, given: tuple[str, ...]) -> Any:
    """The command's typed config for the overrides ``given``, as the command composes it, knobs checked."""
    module, config_name, schema = command_config(command)
    keys = {o.split("=", 1)[0].lstrip("+~") for o in given}
    overrides = [*(f"{k}=x" for k in _unresolvable(module, config_name) if k not in keys), *given]
    if module == "hobbit.conf":
        cfg = glue.compose(config_name, schema, overrides)
    else:
        glue.register_schema(config_name, schema)
        if GlobalHydra.instance().is_initialized():
            GlobalHydra.instance().clear()
        with initialize_config_module(config_module=module, version_base="1.3"):
            cfg = OmegaConf.to_object(hydra.compose(config_name, overrides=overrides))
    check_knobs(cfg)
    return cfg


def compositions(shown: Shown) -> list[list[str]] | None:
    """The override lists a shown command composes to (several for a sweep); None: the command name only."""
    words = list(shown.words[1:])
    sweep = "-m" in words or "--multirun" in words
    args: list[str] = []
    skip_next = False
    for w in words:
        if skip_next or w.startswith("-"):
            skip_next = w in ("--cfg", "--config-dir", "-cd", "--config-name", "-cn")
            continue
        if w != "...":
            args.append(w)
    overrides = []
    for arg in rewrite(shown.words[0], args):
        key, sep, value = arg.partition("=")
        assert sep, f"{shown}: '{arg}' is no key=value override"
        if key.lstrip("+~").startswith(("hydra.searchpath", "hydra/searchpath")):
            return None
        if key.lstrip("+~").startswith(("hydra.", "hydra/")) or PLACEHOLDER.fullmatch(value.strip("'\"")):
            continue
        if key in ("model", "hardware") and is_path(key, value.strip("'\"")):
            continue  # a file the reader turns into an option when the command runs (hobbit.plumbing.path_args)
        overrides.append(arg)
    if not sweep:
        return [overrides]
    parsed = OverridesParser.create().parse_overrides(overrides)
    choices = [list(o.sweep_string_iterator()) if o.is_sweep_override() else [None] for o in parsed]
    points = []
    for i in range(max((len(c) for c in choices), default=1)):
        point = []
        for o, text, c in zip(parsed, overrides, choices, strict=True):
            point.append(text if c == [None] else f"{o.get_key_element()}={c[i % len(c)]}")
        points.append(point)
    return points


@pytest.mark.parametrize("shown", UNIQUE_SHOWN, ids=str)
def test_shown_commands_compose(shown: Shown) -> None:
    if shown.words in (("--help",), ("-h",)):
        return  # the list of commands
    assert shown.words[0] in COMMANDS, f"{shown}: no command '{shown.words[0]}' (hobbit --help lists them)"
    for overrides in compositions(shown) or []:
        try:
            compose(shown.words[0], tuple(overrides))
        except Exception as exc:  # noqa: BLE001 - any failure names the page and line
            pytest.fail(f"{shown}: {' '.join(overrides)}: {exc}")


# --- links and paths ---------------------------------------------------------------------------------------------


def slugify(heading: str) -> str:
    """A heading's anchor as Python-Markdown's toc makes it (mkdocs' default)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out: set[str] = set()
    for _, line in split(page)[1]:
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        slug = slugify(m.group(1))
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}_{n}")
    return out


def _prose_without_spans(page: Path) -> list[tuple[int, str]]:
    return [(n, SPAN.sub("", line)) for n, line in split(page)[1]]


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_links_resolve(page: Path) -> None:
    bad = []
    for n, line in _prose_without_spans(page):
        for target in LINK.findall(line):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
                continue
            path_part, _, anchor = target.partition("#")
            dest = (page.parent / path_part).resolve() if path_part else page
            if not dest.exists():
                bad.append(f"{rel(page)}:{n}: {target}: no such file")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                bad.append(f"{rel(page)}:{n}: {target}: no heading #{anchor} in {dest.name}")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_paths_named_exist(page: Path) -> None:
    bad = []
    for n, line in split(page)[1]:
        for m in SPAN.finditer(line):
            span = m.group(2).strip()
            if REPO_PATH.fullmatch(span) and "..." not in span and not (ROOT / span).exists():
                bad.append(f"{rel(page)}:{n}: {span}")
    assert not bad, "no such path:\n" + "\n".join(bad)


def test_every_docs_page_is_in_the_nav() -> None:
    nav = (ROOT / "mkdocs.yml").read_text()
    for page in DOCS.rglob("*.md"):
        assert str(page.relative_to(DOCS)) in nav, f"{rel(page)} is not in mkdocs.yml's nav"


def test_the_readme_is_a_front_page() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 210
    assert text.index("make demo") < text.index("make test") < text.index("## ")
    assert "### From Python" in text


# --- generated pages ---------------------------------------------------------------------------------------------


SLOW_PAGES = {"commands.md"}  # a fresh process per command's --help: 10-50 s on two cores


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=[pytest.mark.slow] if n in SLOW_PAGES else []) for n in sorted(docs_gen.PAGES)]
)
def test_generated_pages_are_current(name: str) -> None:
    committed = DOCS / "reference" / name
    assert committed.exists(), f"run: python -m hobbit.docs_gen docs/reference (and commit {rel(committed)})"
    assert committed.read_text() == docs_gen.PAGES[name](), (
        f"{rel(committed)} is stale: run python -m hobbit.docs_gen docs/reference and commit it"
    )


def test_systems_catalogue_covers_every_preset_and_its_comments() -> None:
    page = docs_gen.systems_page()
    for path in sorted((ROOT / "conf" / "system").glob("*.yaml")):
        preset = docs_gen.read_preset(path)
        assert f"\n## {path.stem}\n" in page and preset.about
        for note in preset.notes.values():
            assert note.replace("|", "\\|") in page or note in page
