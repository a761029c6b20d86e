"""The one guard every command that reads or writes files passes before any work.

A command's config declares the role of each of its path knobs (``PATHS``, a class
variable of the schema): ``in`` (read: a file or directory that must exist), ``out`` (a
file written: it appears complete or not at all), ``outdir`` (a directory written into),
``state`` (a file read and written, such as an Optuna study), ``cache`` (a directory that
may be unusable: the command then runs without it). Every path is taken relative to the
directory the command was run from and replaced by its absolute form, which is printed
(on standard error).
Refused, naming the knob and the fix: an output that is, or resolves to, one of the
command's inputs; a directory where a file is expected (or a file where a directory is);
a parent that does not exist or is not writable; an input that does not exist. What a path
*is* decides too: a symlink loop is refused before anything opens it; an output must be a
regular file or new (not a device node, a FIFO or a socket, which a rename would replace);
an input file must be a regular file or a directory (a FIFO would block the command); an
output may not lie inside an input directory (a checkpoint's folder) or inside a run's
``.hydra`` record.
"""

from __future__ import annotations

import dataclasses
import os
import stat
import sys
from pathlib import Path
from typing import Any

from hobbit.traces.schema import InputError

ROLES = ("in", "out", "outdir", "state", "cache")


class PathError(InputError):
    """A path knob the command cannot use; names the knob, the path and the fix."""


def path_roles(cfg: Any) -> dict[str, str]:
    """knob -> role for the path knobs ``cfg``'s schema declares (none: {})."""
    roles = dict(getattr(type(cfg), "PATHS", {}))
    bad = {k: r for k, r in roles.items() if r not in ROLES}
    assert not bad, f"{type(cfg).__name__}.PATHS: unknown roles {bad}"
    return roles


SYNTHETIC = "synthetic"  # trace=synthetic names no file: routing drawn for the model (hobbit.api.trace_file)


def _absolute(knob: str, value: str, cwd: str | os.PathLike) -> str:
    try:
        return str((Path(cwd) / Path(value).expanduser()).resolve())
    except (RuntimeError, OSError) as exc:  # a symlink loop (RuntimeError before Python 3.13, OSError after)
        raise PathError(f"{knob}={value} cannot be resolved: {exc} (fix: a path without a symlink loop)") from None


def resolve(cfg: Any, cwd: str | os.PathLike) -> Any:
    """``cfg`` with every declared path knob made absolute against ``cwd`` (unset ones left as they are)."""
    new = {
        k: _absolute(k, v, cwd)
        for k in path_roles(cfg)
        if (v := getattr(cfg, k)) not in (None, "") and not (k == "trace" and v == SYNTHETIC)
    }
    return dataclasses.replace(cfg, **new) if new else cfg


def _kind(p: Path) -> str:
    """What a path that exists is, when it is no regular file or directory ("" otherwise)."""
    mode = p.stat().st_mode
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return ""


def _writable_dir(d: Path) -> bool:
    return d.is_dir() and os.access(d, os.W_OK | os.X_OK)


def _nearest_existing(p: Path) -> Path:
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def check_output(knob: str, path: Path, role: str, inputs: dict[str, Path]) -> None:
    """Refuse an output path the command could not write, or that would destroy one of its inputs."""
    for name, src in inputs.items():
        if path == src:
            raise PathError(f"{knob}={path} is also {name}=: writing it would destroy the input (fix: another {knob}=)")
        if src.is_dir() and path.is_relative_to(src):
            raise PathError(
                f"{knob}={path} lies inside {name}={src}: writing there could replace the input's own files (fix: "
                f"another {knob}= outside it)"
            )
    if ".hydra" in path.parts:
        raise PathError(f"{knob}={path} lies inside a run's .hydra record (fix: another {knob}= outside it)")
    if path.exists() and (kind := _kind(path)):
        raise PathError(f"{knob}={path} is {kind}, not a regular file (fix: {knob}= a file's path)")
    if role in ("out", "state"):
        if path.is_dir():
            raise PathError(f"{knob}={path} is a directory, not a file (fix: {knob}=DIR/NAME)")
        if not path.parent.is_dir():
            raise PathError(
                f"{knob}={path}: its directory {path.parent} does not exist (fix: create it, or another {knob}=)"
            )
        if not _writable_dir(path.parent):
            raise PathError(f"{knob}={path}: its directory {path.parent} is not writable (fix: another {knob}=)")
        if path.exists() and not os.access(path, os.W_OK) and role == "state":
            raise PathError(f"{knob}={path} is not writable (fix: another {knob}=)")
    elif role == "outdir":
        if path.exists() and not path.is_dir():
            raise PathError(f"{knob}={path} is a file, not a directory (fix: another {knob}=)")
        base = _nearest_existing(path)
        if not base.is_dir():
            raise PathError(f"{knob}={path}: {base} is a file, not a directory (fix: another {knob}=)")
        if not _writable_dir(base):
            raise PathError(f"{knob}={path}: {base} is not writable (fix: another {knob}=)")


def check_paths(cfg: Any) -> dict[str, Path]:
    """Check every declared path knob of ``cfg`` (already resolved); returns knob -> path of those set."""
    roles = path_roles(cfg)
    paths = {
        k: Path(v) for k in roles if (v := getattr(cfg, k)) not in (None, "") and not (k == "trace" and v == SYNTHETIC)
    }
    for k, role in roles.items():  # an output knob set to nothing would write to "" (the directory, a crash)
        if role == "out" and getattr(cfg, k) == "" and k not in getattr(type(cfg), "EMPTY_OUT_OK", ()):
            raise PathError(f"{k}= is empty (fix: {k}=PATH, the file to write)")
    inputs = {k: p for k, p in paths.items() if roles[k] in ("in", "state") and p.exists()}
    for k, p in paths.items():
        if roles[k] == "in" and not p.exists():
            raise PathError(f"{k}={p} does not exist (fix: the path of an existing file or directory)")
        if roles[k] == "in" and (kind := _kind(p)):  # a FIFO would block the read; a device is no input file
            raise PathError(f"{k}={p} is {kind}, not a file or directory (fix: {k}= a file's path)")
    for k, p in paths.items():
        if roles[k] in ("out", "outdir", "state"):
            check_output(k, p, roles[k], {n: q for n, q in inputs.items() if n != k})
    return paths


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)  # standard output stays the command's own (trace-info --json)


def guard(cfg: Any, cwd: str | os.PathLike, say=_stderr) -> Any:
    """Resolve ``cfg``'s path knobs against ``cwd``, check them, print what they resolved to."""
    cfg = resolve(cfg, cwd)
    paths = check_paths(cfg)
    shown = {k: p for k, p in paths.items() if path_roles(cfg)[k] != "outdir"}  # run dirs are printed at the end
    if shown:
        say("paths: " + ", ".join(f"{k}={p}" for k, p in shown.items()))
    return cfg


def output_knob(cfg: Any, path: str | os.PathLike | None) -> str | None:
    """The output knob of ``cfg`` (already resolved) that ``path`` is, or lies under (the longest such): what a user
    changes to write elsewhere. None when no declared output holds it (a run directory Hydra chose)."""
    if path is None:
        return None
    target = Path(path)
    found = [
        (len(Path(v).parts), k)
        for k, role in path_roles(cfg).items()
        if role in ("out", "outdir", "state")
        and (v := getattr(cfg, k)) not in (None, "")
        and (target == Path(v) or Path(v) in target.parents)
    ]
    return max(found)[1] if found else None
