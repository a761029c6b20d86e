"""Hydra glue shared by every ``hobbit`` command and by the Python API.

``hydra_command`` turns ``task(cfg: Schema)`` into a Hydra app over ``conf/<group>``:
the schema (a frozen dataclass) is registered in the ConfigStore and the YAML extends
it; the task receives a typed object, never a ``DictConfig``. Bad input (any
``InputError``) prints one line naming the file, field and fix, and exits with 2.
``compose`` gives the same typed object outside a Hydra app (notebooks, the demo).
"""

from __future__ import annotations

import atexit
import dataclasses
import gc
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

import hydra
import yaml
from hydra import initialize_config_module
from hydra._internal.hydra import Hydra
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

import hobbit.launcher  # registers hydra/launcher=hobbit, which conf/sim.yaml names
import hobbit.sweeper  # registers hydra/sweeper=hobbit, which conf/sim.yaml names
from hobbit.guard import guard
from hobbit.sim.config import ConfigError, HardwareConfig, ProfileConfig
from hobbit.traces.io import atomic_write_text
from hobbit.traces.knobs import check_knobs
from hobbit.traces.schema import InputError

EXIT_BAD_INPUT = 2
CONF = "pkg://hobbit.conf"  # conf/: model, hardware, system groups and one YAML per command
TRACES_CONF = "pkg://hobbit.conf.traces"  # conf/traces/: where model= means a checkpoint directory
T = TypeVar("T")


class _State:
    """Whether the task function was entered (config errors happen before it); whether ``quick_exit`` is set."""

    started = False
    quick_exit = False


STATE = _State()


def quick_exit() -> None:
    """At this process's exit, after the atexit handlers registered before this call, freeze what the garbage
    collector tracks: the interpreter's final collections would otherwise walk the ~170,000 objects numba, pandas
    and Hydra leave, 0.7-0.9 s of every command and of every sweep worker's exit on this VM, against 0.1 s.
    Nothing else changes: reference counts free what they free, files close, the other atexit handlers run."""
    if not STATE.quick_exit:
        atexit.register(gc.freeze)
        STATE.quick_exit = True


PIPE_CLOSED = 141  # the exit code of a process that SIGPIPE ends (128 + 13), as `cat big | head` leaves it


def pipe_closed() -> None:
    """The reader of standard output went away (``hobbit ... | head``): exit quietly, as a shell tool does. Python
    would flush the rest into the closed pipe again at exit; it goes to /dev/null instead."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    sys.exit(PIPE_CLOSED)


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def fail(message: str) -> None:
    print(f"hobbit: error: {message}", file=sys.stderr)
    sys.exit(EXIT_BAD_INPUT)


def _writable(node: Any) -> Any:
    """Frozen dataclasses become read-only nodes, at every level; YAML and overrides must extend them."""
    OmegaConf.set_readonly(node, False)
    for key in node:
        child = node._get_node(key)
        if isinstance(child, DictConfig):
            _writable(child)
    return node


_HYDRA_GET_MODE = Hydra.get_mode
OWN_SEARCH_PATH = {"hydra", "main", "schema"}  # Hydra's own configs, conf/ and the registered schemas


def _get_mode(self: Hydra, config_name: str | None, overrides: list[str]) -> Any:
    """``Hydra.get_mode`` without composing the config when nothing can set ``hydra.mode``. Hydra composes the
    whole config (0.1-0.25 s here) only to read ``hydra.mode`` before every run, then composes it again for the
    run itself. conf/ never sets it (tests/test_sim_cli.py checks), so the mode is unset (None: ``-m`` or not decides)
    unless an override names ``hydra.mode`` or ``hydra.searchpath``, or ``--config-dir`` adds a directory whose
    configs might: those go through Hydra's own."""
    if (
        any("hydra.mode" in o or "hydra.searchpath" in o for o in overrides)
        or {p.provider for p in self.config_loader.get_search_path().get_path()} - OWN_SEARCH_PATH
    ):
        return _HYDRA_GET_MODE(self, config_name, overrides)
    return None


Hydra.get_mode = _get_mode


def register_schema(config_name: str, schema: type) -> None:
    """``<config_name>_schema`` in the ConfigStore: what conf/<config_name>.yaml extends."""
    ConfigStore.instance().store(name=f"{config_name}_schema", node=_writable(OmegaConf.structured(schema)))


def hydra_command(config_path: str, config_name: str, schema: type) -> Callable:
    """Decorator making ``task(cfg: schema)`` a Hydra main over ``config_path`` (a ``pkg://`` path)."""

    def deco(task: Callable[[Any], Any]) -> Callable[[], None]:
        register_schema(config_name, schema)

        @hydra.main(version_base="1.3", config_path=config_path, config_name=config_name)
        def main(cfg: DictConfig) -> None:
            STATE.started = True
            quick_exit()  # here, so that a launcher's worker processes exit quickly too
            signal.signal(signal.SIGTERM, _raise_interrupt)  # so writers clean up on `kill`
            try:
                obj = OmegaConf.to_object(cfg)
            except OmegaConfBaseException as exc:
                fail(f"{config_name}: {exc}".replace("\n", " "))
            try:
                check_knobs(obj)
                task(guard(obj, HydraConfig.get().runtime.cwd))
            except InputError as exc:
                fail(str(exc))
            except BrokenPipeError:
                pipe_closed()
            except OSError as exc:  # the file system refused (full, gone, permissions): name the path
                fail(f"{exc.filename or ''}: {exc.strerror or exc}".lstrip(": "))

        def entry() -> None:
            hobbit.sweeper.register()  # Hydra builds its plugin registry anew after a run: the sweeper joins it again
            hobbit.launcher.register()  # and so does the launcher
            main()

        entry.__doc__ = task.__doc__
        return entry

    return deco


def compose(config_name: str, schema: type[T], overrides: list[str]) -> T:
    """The typed config Hydra composes from conf/<config_name>.yaml and ``overrides``, inside a
    running Hydra app or outside one; a bad override raises ``ConfigError`` naming it."""
    register_schema(config_name, schema)
    hobbit.sweeper.register()
    hobbit.launcher.register()
    try:
        if GlobalHydra.instance().is_initialized():
            return OmegaConf.to_object(hydra.compose(config_name, overrides=overrides))
        with initialize_config_module(config_module="hobbit.conf", version_base="1.3"):
            return OmegaConf.to_object(hydra.compose(config_name, overrides=overrides))
    except (OmegaConfBaseException, HydraException) as exc:
        raise ConfigError(f"{config_name} {' '.join(overrides)}: {exc}".replace("\n", " ")) from exc


def load_typed(schema: type[T], data: Any) -> T:
    """``data`` (a mapping) checked against a frozen dataclass ``schema``."""
    return OmegaConf.to_object(OmegaConf.merge(_writable(OmegaConf.structured(schema)), data))


def set_values(config: T, overrides: list[str]) -> T:
    """``with_overrides`` without OmegaConf where every override sets a knob that holds a bool, an int, a
    float or a string, or a path knob that may be unset (``str | None``: ``trace=``, ``cache_dir=``), to a value of
    that type (what a sweep's points do; ~100x faster); else ``with_overrides``."""
    fast: list[tuple[list[str], Any]] = []
    for o in overrides:
        path, sep, text = o.partition("=")
        node, keys = config, path.split(".")
        for k in keys[:-1]:
            node = getattr(node, k, None)
        field = (
            next((f for f in dataclasses.fields(node) if f.name == keys[-1]), None)
            if (dataclasses.is_dataclass(node))
            else None
        )
        value = _typed(text, getattr(node, keys[-1]), _optional_str(field.type)) if sep and field else _NOT_PLAIN
        if value is _NOT_PLAIN:
            return with_overrides(config, overrides)
        fast.append((keys, value))
    for keys, value in fast:
        config = _replace_path(config, keys, value)
    return config


_NOT_PLAIN = object()  # _typed: a value that OmegaConf must read


def _optional_str(hint: Any) -> bool:
    """Whether a field's annotation (a string under ``from __future__ import annotations``) is ``str | None``."""
    return hint in ("str | None", "None | str", "Optional[str]") or hint == (str | None)


def _typed(text: str, old: Any, optional_str: bool = False) -> Any:
    """``text`` as the type of ``old`` (bool, int, float, str; ``optional_str``: a ``str | None`` field, unset or
    not), or ``_NOT_PLAIN`` where that is not plain. A string is plain where OmegaConf's YAML reads it as that very
    string (not ``null``, ``1e3``, ``true`` or ``a #b``) and it holds no interpolation, list or quote."""
    low = text.strip().lower()
    if isinstance(old, bool):
        return {"true": True, "false": False}.get(low, _NOT_PLAIN)
    if isinstance(old, int):
        return int(text) if text.strip().lstrip("+-").isdigit() else _NOT_PLAIN
    if isinstance(old, float):
        try:
            v = float(text)
        except ValueError:
            return _NOT_PLAIN
        return v if low not in ("nan", "inf", "-inf", "+inf") else _NOT_PLAIN
    if (
        (isinstance(old, str) or (optional_str and old is None))
        and text
        and not any(c in text for c in "${}[]'\",")
        and low not in ("null", "none")
        and _yaml_text(text)
    ):
        return text
    return _NOT_PLAIN


def _yaml_text(text: str) -> bool:
    """Whether OmegaConf's YAML loader (what ``OmegaConf.from_dotlist`` reads a value with) reads ``text`` as itself."""
    from omegaconf._utils import get_yaml_loader

    try:
        return yaml.load(text, Loader=get_yaml_loader()) == text
    except yaml.YAMLError:
        return False


def _replace_path(node: Any, keys: list[str], value: Any) -> Any:
    if len(keys) == 1:
        return dataclasses.replace(node, **{keys[0]: value})
    return dataclasses.replace(node, **{keys[0]: _replace_path(getattr(node, keys[0]), keys[1:], value)})


def with_overrides(config: T, overrides: list[str]) -> T:
    """A typed config with dotted ``key=value`` overrides applied, checked against its type."""
    node = OmegaConf.merge(_writable(OmegaConf.structured(config)), OmegaConf.from_dotlist(overrides))
    return OmegaConf.to_object(node)


YAML_ERRORS = (OmegaConfBaseException, yaml.YAMLError, ValueError)  # ValueError: not text (UnicodeDecodeError)


def load_hardware(path: str) -> HardwareConfig:
    """A hardware YAML (e.g. written by ``hobbit calibrate``) as a typed config."""
    if not Path(path).is_file():
        raise ConfigError(f"profile={path} does not exist (fix: the hardware YAML hobbit calibrate wrote)")
    try:
        data = OmegaConf.load(path)
        profile = data.pop("profile", None)
        hw = load_typed(HardwareConfig, data)
        return dataclasses.replace(hw, profile=None if profile is None else load_typed(ProfileConfig, profile))
    except YAML_ERRORS as exc:
        raise ConfigError(f"profile={path}: {exc}".replace("\n", " ")) from exc


def load_tuned(path: str, base: Any) -> Any:
    """The system ``hobbit tune`` found: its run directory (``experiment/tuned.yaml`` in it) or that
    experiment file, merged over ``base`` (the experiment overrides conf/system/hobbit)."""
    p = Path(path)
    if p.is_dir():
        p = p / "experiment" / "tuned.yaml"
    if not p.is_file():
        raise ConfigError(f"tuned={path}: no {p} (fix: a hobbit tune run directory or its experiment/tuned.yaml)")
    try:
        data = OmegaConf.load(p)
        if not isinstance(data, DictConfig) or "system" not in data:
            raise ConfigError(f"tuned={path}: {p} has no system: node (fix: the experiment file hobbit tune wrote)")
        return with_node(base, data.system)
    except YAML_ERRORS as exc:
        raise ConfigError(f"tuned={path}: {exc}".replace("\n", " ")) from exc


def with_node(config: T, node: Any) -> T:
    """A typed config with a mapping merged over it, checked against its type."""
    return OmegaConf.to_object(OmegaConf.merge(_writable(OmegaConf.structured(config)), node))


def write_yaml(node: Any, path: Path) -> Path:
    """A typed config as YAML, written atomically."""
    return atomic_write_text(path, OmegaConf.to_yaml(OmegaConf.structured(node)))
