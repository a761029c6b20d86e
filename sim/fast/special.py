"""One compiled walk per eviction policy: a copy of ``sim.fast.walk`` with its ``POLICY`` set.

``walk.py`` is a template: every function of it that depends on the eviction policy reads the module global
``POLICY`` (and the flags made of it, ``LISTED``, ``PICKS_VICTIM``, ``INSERT_HOOK``). Numba reads a global as a
constant and prunes the branches a constant decides before it types them, so a copy of the module with ``POLICY``
set compiles its own policy's code and never types, compiles or caches another's: a run compiles the walk of the
policy it needs, not of all of them. A copy defines anew only the functions that depend on the policy
(``dependent``) and takes every other from the template, so the helpers no policy changes compile once, in the
template, for every policy's walk.

A copy is a file, written once (``source``): numba keys its on-disk cache by source file and function, so two
policies' walks need two files. Its name carries the policy and a digest of the template's text, so an edited
template makes new copies and numba never reads the compiled code of an old one for a new one; an existing copy is never
rewritten (numba checks a cached function against its file's time stamp). Copies live beside the template's
compiled cache (``__pycache__/walks``), or, where that cannot be written (a read-only install), under
``$HOBBIT_CACHE`` or ``~/.cache/hobbit``.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import importlib.util
import os
import re
import sys
import tempfile
from functools import cache
from pathlib import Path
from types import ModuleType

from hobbit.sim.fast import walk as template
from hobbit.sim.policies.registry import EVICTION, eviction_class

FLAGS = ("POLICY", "LISTED", "PICKS_VICTIM", "INSERT_HOOK")  # the template's globals a copy sets anew
PLAIN_HOOK = "_plain_evict"  # what a ``Plain`` policy's copy binds to the compiled function its file gives


def plain_hook(policy: str) -> tuple[str, str] | None:
    """(module, function) of ``policy``'s compiled victim, for a registered policy the template does not hold whose
    class names one in its own module (``compiled_evict``); None for any other."""
    if policy in template.POLICIES or policy not in EVICTION:
        return None
    cls = eviction_class(policy)
    name = getattr(cls, "compiled_evict", None)
    return (cls.__module__, name) if isinstance(name, str) else None


def plain_lines(module: str, name: str) -> list[str]:
    """The lines of a copy that bind a ``Plain`` policy's victim, ``module.name``, as ``PLAIN_HOOK``: the function
    itself when its file compiled it (a numba dispatcher), else compiled here (its file then needs no numba, and its
    import stays as quick as a policy's)."""
    fn = getattr(sys.modules[module], name)
    if hasattr(fn, "py_func"):
        return [f"from {module} import {name} as {PLAIN_HOOK}  # the policy's own compiled victim"]
    return [f"from {module} import {name} as _plain_py", f"{PLAIN_HOOK} = njit(cache=True)(_plain_py)"]


def compiled(policy: str) -> bool:
    """Whether ``policy``'s decisions are compiled: the template holds it, or its file gives its victim compiled."""
    return policy in template.POLICIES or plain_hook(policy) is not None


def number(policy: str) -> int:
    """``policy``'s ``POLICY`` in its copy: its place in the template's ``POLICIES``, or ``PLAIN``."""
    return template.POLICIES.index(policy) if policy in template.POLICIES else template.PLAIN


@cache
def _template() -> tuple[str, ast.Module]:
    src = Path(template.__file__).read_text(encoding="utf-8")
    return src, ast.parse(src)


@cache
def dependent() -> tuple[str, ...]:
    """The template's functions that depend on the policy, in the template's order: those that read one of ``FLAGS``
    and those that call one of them (each copy defines these anew; it takes the rest, compiled once for every
    policy, from the template)."""
    _, tree = _template()
    funcs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    names = {f.name: {x.id for x in ast.walk(f) if isinstance(x, ast.Name)} for f in funcs}
    dep = {f for f, used in names.items() if used & set(FLAGS)}
    grew = True
    while grew:
        more = {f for f, used in names.items() if f not in dep and used & dep}
        dep |= more
        grew = bool(more)
    return tuple(f.name for f in funcs if f.name in dep)


def text(policy: str) -> str:
    """The source of ``policy``'s walk: ``POLICY`` set to the policy's number, the flags made of it evaluated again,
    the template's policy-dependent functions (``dependent``) defined again, and every other name of the template
    taken from it: its constants, and its other functions, which numba compiles and caches once, in the template,
    for all the policies."""
    hook = plain_hook(policy)
    if policy not in template.POLICIES and hook is None:
        raise ValueError(
            f"the compiled walk has no eviction policy {policy!r}: one of {', '.join(template.POLICIES)}, or a "
            f"registered Plain policy whose class names its compiled victim (compiled_evict)"
        )
    src, tree = _template()
    dep = set(dependent())
    flags = [
        n
        for n in tree.body
        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id in FLAGS for t in n.targets)
    ]
    if [t.id for n in flags for t in n.targets if isinstance(t, ast.Name)] != list(FLAGS):
        raise RuntimeError(f"{template.__file__} must assign {', '.join(FLAGS)} once each, in that order")
    taken = dep | set(FLAGS) | ({PLAIN_HOOK} if hook else set())
    out = [
        f'"""The compiled walk for eviction policy {policy}: written by sim.fast.special from walk.py (the template;',
        "edit that one), whose functions this copy defines anew where they depend on the policy and takes from it",
        'otherwise."""',
        "",
        *[ast.get_source_segment(src, n) or "" for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))],
        "from hobbit.sim.fast import walk as _template",
        "",
        f"globals().update((k, v) for k, v in vars(_template).items() if not k.startswith('__') and k not in {sorted(taken)!r})",
        *(plain_lines(*hook) if hook else []),
        f"POLICY = {number(policy)}  # {policy}",
        *[ast.get_source_segment(src, n) or "" for n in flags[1:]],
    ]
    lines = src.splitlines()
    for f in tree.body:
        if isinstance(f, ast.FunctionDef) and f.name in dep:
            first = min([f.lineno, *(d.lineno for d in f.decorator_list)])
            out += ["", "", *lines[first - 1 : f.end_lineno]]
    return "\n".join(out) + "\n"


def _writable(d: Path) -> bool:
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return os.access(d, os.W_OK | os.X_OK)


def home() -> Path:
    """Where the copies are written: beside the template's compiled cache, else the user's cache, else a temporary
    directory."""
    env = os.environ.get("HOBBIT_CACHE")
    for d in (
        Path(template.__file__).parent / "__pycache__" / "walks",
        (Path(env).expanduser() if env else Path.home() / ".cache" / "hobbit") / "walks",
    ):
        if _writable(d):
            return d
    d = Path(tempfile.gettempdir()) / f"hobbit-walks-{os.getuid() if hasattr(os, 'getuid') else 'user'}"
    d.mkdir(parents=True, exist_ok=True)
    return d


def _umask() -> int:
    """The process's umask, read without setting it (``os.umask`` sets it, for a moment, for every thread)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o022


def source(policy: str) -> Path:
    """The file of ``policy``'s walk (``text``), written if it is not there. Written to a temporary name and linked to
    its own, so that a process never reads a half-written copy and two processes writing at once leave the first's file (and
    numba's cache of it) as it was; copies of the policy from other versions of the template are removed."""
    body = text(policy)
    # of the whole template, not of the copy alone: the copy's compiled code holds the template's functions it calls,
    # and of a Plain policy's file, whose compiled victim it holds too (numba checks a cache against its own file only)
    hook = plain_hook(policy)
    own = Path(sys.modules[hook[0]].__file__ or "").read_text(encoding="utf-8") if hook else ""
    digest = hashlib.sha256((_template()[0] + body + own).encode()).hexdigest()[:16]
    d = home()
    path = d / f"walk_{policy}_{digest}.py"
    if path.exists():
        return path
    fd, tmp = tempfile.mkstemp(dir=d, prefix=f".walk_{policy}_", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(body)
        os.chmod(tmp, 0o666 & ~_umask())  # as a file written by open() (mkstemp's are the owner's alone)
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
        except OSError:  # a file system without hard links: a rename (the same text, whoever writes it)
            if not path.exists():
                os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    for old in d.glob(f"walk_{policy}_*.py"):  # an older template's copy: its compiled cache goes with it
        if old != path and re.fullmatch(rf"walk_{re.escape(policy)}_[0-9a-f]{{16}}\.py", old.name):
            for f in (old, *(d / "__pycache__").glob(f"{old.stem}.*")):
                with contextlib.suppress(OSError):
                    f.unlink()
    return path


@cache
def core(policy: str) -> ModuleType:
    """The module of ``policy``'s walk, imported once per process as ``hobbit.sim.fast.walk_<policy>``: its ``walk``
    compiles for that policy alone (``walk_state``, which takes the policy as an argument, is the template's)."""
    path = source(policy)
    name = f"{__package__}.walk_{policy}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod
