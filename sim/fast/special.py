"""One compiled walk per eviction policy, or per policy and run's settings: a copy of ``sim.fast.walk`` with its
``POLICY`` set (and its ``Variant``'s settings).

``walk.py`` is a template: every function of it that depends on the eviction policy reads the module global
``POLICY`` (and the flags ``FLAGS``), or calls the hooks a policy's own file gives (``HOOKS``: its compiled part,
``policies.compiled``, compiled here with every kernel of its modules, ``hooks``). Numba reads a global as a
constant and prunes the branches a constant decides before it types them, so a copy of the module with ``POLICY``
set compiles its own policy's code and never types, compiles or caches another's: a run compiles the walk of the
policy it needs, not of all of them. A copy defines anew only the functions that depend on the policy
(``dependent``) and takes every other from the template, so the helpers no policy changes compile once, in the
template, for every policy's walk.

A policy has a general copy, which reads the run's other settings from its inputs, and a copy per ``Variant``: the
settings that decide most of the walk's code besides the policy (the prefetcher, cpu_misses, the history fallback,
the bound's CPU split), fixed, so that a run that names one system compiles that system's walk alone (about a fifth
less code than the general copy's). Which a run uses is ``fast.policy_walk``'s choice; both decide alike.

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
import inspect
import os
import re
import sys
import tempfile
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any, NamedTuple

from hobbit.sim.fast import walk as template
from hobbit.sim.fast.jit import in_place, is_kernel, jit
from hobbit.sim.fast.records import CPU_MISSES
from hobbit.sim.policies.compiled import Compiled, CompiledPrefetch
from hobbit.sim.policies.registry import EVICTION, PREFETCH, eviction_class, prefetcher_class

# the template's globals a copy sets anew: the policy, its hooks' flags and the variant's settings, then those made of
# them (evaluated again)
FLAGS = (
    "POLICY",
    "OWN_HIT",
    "OWN_MISS",
    "OWN_INSERT",
    "OWN_UNPIN",
    "OWN_RENEW",
    "OWN_RECORDS",
    "OWN_BEGIN",
    "FUTURE",
    "PREFETCHER",
    "MISSES",
    "HISTORY",
    "BOUND_CPU",
    "PICKS_VICTIM",
)
SET = FLAGS[:13]
# the names a copy binds to the compiled part of a policy whose file gives one (``policies.compiled.Compiled``)
HOOKS = ("_p_evict", "_p_hit", "_p_insert", "_p_miss", "_p_overflow", "_p_unpin", "_p_renew", "_p_records", "_p_begin")
PARTS = ("evict", "hit", "insert", "miss", "overflow", "unpin", "renew", "records", "begin")  # fields of ``Compiled``
# the template's functions a copy defines anew to call the prefetchers' compiled parts (``CompiledPrefetch``)
PF_HOOKS = ("_f_propose", "_f_begin")


def prefetch_part(name: str) -> CompiledPrefetch | None:
    """The compiled part prefetcher ``name``'s file gives (its class's ``compiled``); None for any other."""
    if name not in PREFETCH:
        return None
    part = getattr(prefetcher_class(name), "compiled", None)
    return part if isinstance(part, CompiledPrefetch) else None


def prefetchers() -> tuple[str, ...]:
    """The registered prefetchers whose files give their compiled part, in the registry's order: a prefetcher's
    number in the compiled walk (``walk.Prefetch.kind``, ``PREFETCHER``) is its place here."""
    return tuple(n for n in PREFETCH if prefetch_part(n) is not None)


class Variant(NamedTuple):
    """The settings a specialised copy fixes besides the policy (the template's ``PREFETCHER``, ``MISSES``,
    ``HISTORY`` and ``BOUND_CPU``), read off a walk's inputs (``of``)."""

    prefetcher: str  # system.prefetch.kind (one of ``prefetchers``)
    cpu_misses: str  # system.cpu_misses (CPU_MISSES)
    history: bool  # prefetch.fallback == history
    bound_cpu: bool  # the bound may put a step's experts on the CPU

    @classmethod
    def of(cls, inputs: Any) -> Variant:
        """The variant of ``inputs`` (``walk.Inputs``, as ``fast.inputs.walk_inputs`` builds them)."""
        return cls(
            prefetchers()[inputs.prefetch.kind],
            CPU_MISSES[inputs.cpu.misses],
            bool(inputs.prefetch.history),
            bool(inputs.bound.uses_cpu),
        )

    @property
    def tag(self) -> str:
        """The variant in a copy's file and module name."""
        return f"{self.prefetcher}_{self.cpu_misses}_h{int(self.history)}_b{int(self.bound_cpu)}"

    def values(self) -> tuple[int, int, int, int]:
        """The template's ``PREFETCHER``, ``MISSES``, ``HISTORY`` and ``BOUND_CPU`` in this variant's copy."""
        return (
            prefetchers().index(self.prefetcher),
            CPU_MISSES.index(self.cpu_misses),
            int(self.history),
            int(self.bound_cpu),
        )


GENERAL = "general"  # a general copy's tag


def _tag(variant: Variant | None) -> str:
    return GENERAL if variant is None else variant.tag


def own_part(policy: str) -> Compiled | None:
    """The compiled part ``policy``'s file gives (its class's ``compiled``), for a registered policy; None for any
    other."""
    if policy not in EVICTION:
        return None
    part = eviction_class(policy).compiled
    return part if isinstance(part, Compiled) else None


def compiled(policy: str) -> bool:
    """Whether ``policy``'s decisions are compiled: its file gives its compiled part."""
    return own_part(policy) is not None


def _kernel_modules(module: ModuleType, seen: dict[str, ModuleType]) -> None:
    """``module`` and every module whose kernels it uses (a kernel it imported, or a module of kernels it holds),
    into ``seen`` by name."""
    if module.__name__ in seen:
        return
    seen[module.__name__] = module
    for v in list(vars(module).values()):
        fn = getattr(v, "py_func", v)
        if is_kernel(fn) and fn.__module__ in sys.modules:
            _kernel_modules(sys.modules[fn.__module__], seen)
        elif isinstance(v, ModuleType) and any(is_kernel(getattr(x, "py_func", x)) for x in vars(v).values()):
            _kernel_modules(v, seen)


def _part_modules(part: tuple[Any, ...] | None) -> tuple[ModuleType, ...]:
    """The modules of a compiled part: its functions' and those whose kernels they call (their text is part of a
    copy's digest: its compiled walk holds their code)."""
    seen: dict[str, ModuleType] = {}
    for fn in part or ():
        fn = getattr(fn, "py_func", fn)
        if inspect.isfunction(fn) and fn.__module__ in sys.modules:
            _kernel_modules(sys.modules[fn.__module__], seen)
    return tuple(seen[k] for k in sorted(seen))


@cache
def kernel_modules(policy: str) -> tuple[ModuleType, ...]:
    """The modules of ``policy``'s compiled part (``_part_modules``)."""
    return _part_modules(own_part(policy))


@cache
def prefetch_modules(name: str) -> tuple[ModuleType, ...]:
    """The modules of prefetcher ``name``'s compiled part (``_part_modules``)."""
    return _part_modules(prefetch_part(name))


@cache
def hooks(policy: str) -> tuple[Any, ...]:
    """``policy``'s hooks as its copy binds them (``HOOKS``' order): its compiled part's functions, compiled, and the
    template's (which do nothing) for those it has not. Every kernel of its modules is compiled in place first, so
    that its hooks call compiled functions by their own names."""
    part = own_part(policy)
    if part is None:
        raise ValueError(f"eviction policy {policy!r} gives no compiled part of its own")
    for mod in kernel_modules(policy):
        in_place(mod)
    return tuple(
        jit(getattr(part, f)) if getattr(part, f) is not None else getattr(template, h) for f, h in zip(PARTS, HOOKS)
    )


@cache
def prefetch_hooks(name: str) -> tuple[Any, Any]:
    """Prefetcher ``name``'s ``propose`` and ``begin`` (None where it has none), compiled, as a copy calls them (its
    modules' kernels compiled in place first, as ``hooks``)."""
    part = prefetch_part(name)
    if part is None:
        raise ValueError(f"prefetcher {name!r} gives no compiled part")
    for mod in prefetch_modules(name):
        in_place(mod)
    return jit(part.propose), (jit(part.begin) if part.begin is not None else None)


def _calls(variant: Variant | None) -> list[str]:
    """The text of a copy's ``_f_propose`` and ``_f_begin`` (the template's ``PF_HOOKS``): calls of the prefetchers'
    compiled parts, bound by name, each with its state (``State.pf``'s item at its place): in a variant's copy its
    prefetcher's alone, in a general copy each, chosen by ``kind``."""
    names = prefetchers()
    chosen = range(len(names)) if variant is None else [names.index(variant.prefetcher)]
    out: list[str] = []
    for k in chosen:
        out.append(f"_pf{k}_propose, _pf{k}_begin = _prefetch_hooks({names[k]!r})")
    propose = ["", "", '@njit(cache=True, inline="always")', "def _f_propose(pfs, fs, layer, a, b, kind):"]
    begin = ["", "", '@njit(cache=True, inline="always")', "def _f_begin(pfs, kind):"]
    for k in chosen:
        if variant is None:
            propose += [f"    if kind == {k}:", f"        return _pf{k}_propose(pfs[{k}], fs, layer, a, b)"]
        else:
            propose += [f"    return _pf{k}_propose(pfs[{k}], fs, layer, a, b)"]
        if (part := prefetch_part(names[k])) is not None and part.begin is not None:
            call = f"_pf{k}_begin(pfs[{k}])"
            begin += [f"    if kind == {k}:", f"        {call}"] if variant is None else [f"    {call}"]
    propose += ["    return 0"] if variant is None else []
    begin += ["    return None"]
    return out + propose + begin


@cache
@cache
def _template() -> tuple[str, ast.Module]:
    """The template's text and tree, read and parsed once per process (each copy's text and digest take them)."""
    src = Path(template.__file__).read_text(encoding="utf-8")
    return src, ast.parse(src)


@cache
def template_text() -> str:
    """The text of the template and of every module of the simulator whose functions or records it takes (``steps``,
    ``records``, ``borrow``, ``policies.compiled``, and theirs in turn): a copy's compiled walk holds their code, and
    numba checks a cached function against its own file alone, so each copy's name carries a digest of them all."""
    mods: dict[str, ModuleType] = {}
    todo = [template]
    while todo:  # and those they take from, in turn (``steps`` calls ``order``'s kernels)
        mod = todo.pop()
        if mod.__name__ in mods:
            continue
        mods[mod.__name__] = mod
        for v in vars(mod).values():
            name = v.__name__ if isinstance(v, ModuleType) else getattr(getattr(v, "py_func", v), "__module__", None)
            if isinstance(name, str) and name.startswith("hobbit.sim.") and name in sys.modules:
                todo.append(sys.modules[name])
    return "".join(Path(mods[k].__file__ or "").read_text(encoding="utf-8") for k in sorted(mods))


@cache
def _template_lines() -> tuple[str, ...]:
    """The template's lines with their ends, as ``ast.get_source_segment`` splits a source (at \\r\\n, \\r or \\n)."""
    src = _template()[0]
    return tuple(m.group() for m in re.finditer(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$", src))


def _segment(node: ast.stmt) -> str:
    """``ast.get_source_segment(template's text, node)`` over its lines split once: ``ast``'s splits the whole text
    again at every call, in Python, which was most of the time a run took to write its walk's text."""
    lines, end_lineno, end_col = _template_lines(), node.end_lineno, node.end_col_offset
    if end_lineno is None or end_col is None:
        return ""
    first, last = node.lineno - 1, end_lineno - 1
    if first == last:
        return lines[first].encode()[node.col_offset : end_col].decode()
    head = lines[first].encode()[node.col_offset :].decode()
    tail = lines[last].encode()[:end_col].decode()
    return "".join((head, *lines[first + 1 : last], tail))


@cache
def dependent() -> tuple[str, ...]:
    """The template's functions that depend on the policy, in the template's order: those that read one of ``FLAGS``
    and those that call one of them (each copy defines these anew; it takes the rest, compiled once for every
    policy, from the template)."""
    _, tree = _template()
    funcs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    names = {f.name: {x.id for x in ast.walk(f) if isinstance(x, ast.Name)} for f in funcs}
    dep = {f for f, used in names.items() if used & (set(FLAGS) | set(HOOKS) | set(PF_HOOKS))}
    grew = True
    while grew:
        more = {f for f, used in names.items() if f not in dep and used & dep}
        dep |= more
        grew = bool(more)
    return tuple(f.name for f in funcs if f.name in dep)


def text(policy: str, variant: Variant | None = None) -> str:
    """The source of ``policy``'s walk: ``POLICY`` set to the policy's number, its own hooks bound (``HOOKS``) and
    their flags set, ``variant``'s settings set (None: the general copy, which reads them at run time), the flags made
    of them evaluated again, the template's policy-dependent functions
    (``dependent``) defined again, and every other name of the template taken from it: its constants, and its other
    functions, which numba compiles and caches once, in the template, for all the policies."""
    part = own_part(policy)
    if part is None:
        raise ValueError(
            f"the compiled walk has no eviction policy {policy!r}: a registered policy whose class gives its compiled "
            f"part (compiled = policies.compiled.Compiled(...)) runs compiled"
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
    taken = dep | set(FLAGS) | set(PF_HOOKS) | set(HOOKS)
    own = [f"{', '.join(HOOKS)} = _hooks({policy!r})  # the policy's own compiled part"]
    given = [getattr(part, f) is not None for f in ("hit", "miss", "insert", "unpin", "renew", "records", "begin")]
    given.append("future_uses" in eviction_class(policy).needs)  # FUTURE
    settings = variant.values() if variant is not None else (-1, -1, -1, -1)
    out = [
        f'"""The compiled walk for eviction policy {policy} ({_tag(variant)}): written by sim.fast.special from walk.py (the template;',
        "edit that one), whose functions this copy defines anew where they depend on the policy and takes from it",
        'otherwise."""',
        "",
        *[_segment(n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))],
        "from hobbit.sim.fast import walk as _template",
        "from hobbit.sim.fast.special import prefetch_hooks as _prefetch_hooks",
        "from hobbit.sim.fast.special import hooks as _hooks",
        "",
        f"globals().update((k, v) for k, v in vars(_template).items() if not k.startswith('__') and k not in {sorted(taken)!r})",
        *own,
        f"POLICY = {template.OWN}  # {policy}",
        *[f"{name} = {value}" for name, value in zip(SET[1:], (*given, *settings))],
        *[_segment(n) for n in flags[len(SET) :]],
        *_calls(variant),
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


def source(policy: str, variant: Variant | None = None) -> Path:
    """The file of ``policy``'s walk for ``variant`` (``text``), written if it is not there. Written to a temporary
    name and linked to its own, so that a process never reads a half-written copy and two processes writing at once
    leave the first's file (and numba's cache of it) as it was; copies of the same policy and variant from other
    versions of the template are removed (another variant's stays until that variant is written again)."""
    body = text(policy, variant)
    # of the whole template and the modules it takes from (``template_text``), not of the copy alone: the copy's
    # compiled code holds the functions it calls, and of the files of the policy's own compiled part, whose code it
    # holds too (numba checks a cache against its own file only)
    names = prefetchers() if variant is None else (variant.prefetcher,)
    mods = {m.__name__: m for m in (*kernel_modules(policy), *(m for n in names for m in prefetch_modules(n)))}
    own = "".join(Path(mods[k].__file__ or "").read_text(encoding="utf-8") for k in sorted(mods))
    digest = hashlib.sha256((template_text() + body + own).encode()).hexdigest()[:16]
    d = home()
    stem = f"walk_{policy}_{_tag(variant)}"
    path = d / f"{stem}_{digest}.py"
    if path.exists():
        return path
    fd, tmp = tempfile.mkstemp(dir=d, prefix=f".{stem}_", suffix=".tmp")
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
    # an older template's copy of the same policy and variant (and, for a general copy, one named as before copies
    # had variants, ``walk_<policy>_<digest>``): its compiled cache goes with it
    names = [rf"{re.escape(stem)}_[0-9a-f]{{16}}\.py"]
    if variant is None:
        names.append(rf"walk_{re.escape(policy)}_[0-9a-f]{{16}}\.py")
    for old in d.glob(f"walk_{policy}_*.py"):
        if old != path and any(re.fullmatch(n, old.name) for n in names):
            for f in (old, *(d / "__pycache__").glob(f"{old.stem}.*")):
                with contextlib.suppress(OSError):
                    f.unlink()
    return path


def core(policy: str, variant: Variant | None = None) -> ModuleType:
    """The module of ``policy``'s walk for ``variant`` (None: its general copy), imported once per process as
    ``hobbit.sim.fast.walk_<policy>_<tag>``: its ``walk`` compiles for that policy (and variant) alone
    (``walk_state``, which takes the policy as an argument, is the template's). Imported again where the compiled
    prefetchers changed since (a prefetcher registered at run time): a general copy calls each of them."""
    return _core(policy, variant, prefetchers())


@cache
def _core(policy: str, variant: Variant | None, names: tuple[str, ...]) -> ModuleType:
    path = source(policy, variant)
    name = f"{__package__}.walk_{policy}_{_tag(variant)}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod
