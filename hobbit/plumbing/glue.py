"""Hydra glue shared by every ``hobbit`` command and by the Python API.

``hydra_command`` turns ``task(cfg: Schema)`` into a Hydra app over ``conf/<group>``:
the schema (a frozen dataclass) is registered in the ConfigStore and the YAML extends
it; the task receives a typed object, never a ``DictConfig``. Bad input (any
``InputError``) prints one line naming the file, field and fix, and exits with 2.
``compose`` gives the same typed object outside a Hydra app (notebooks, the demo).

Overrides are checked against the command's schema before Hydra composes anything
(``check_command_line``, over ``hobbit.plumbing.overrides``): a knob the schema lacks is named, with the nearest one it has
("did you mean system.precision.t1?"), and exits 2; a typed config takes no ``+key``.

Importing this module changes nothing outside it. What a process running commands sets once
(``configure_runtime``: pyarrow's memory pool, Hydra's mode shortcut ``patch_hydra``) is set
by the command line's entry point, by each Hydra command as it starts, and by ``compose``.
"""

from __future__ import annotations

import atexit
import dataclasses
import gc
import os
import re
import signal
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

import hydra
import hydra.core.utils
import yaml
from hydra import initialize_config_module
from hydra._internal.hydra import Hydra
from hydra._internal.utils import get_args_parser
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

import hobbit.plumbing.launcher  # hydra/launcher=hobbit, which conf/sim.yaml names (registered as a command starts)
import hobbit.plumbing.sweeper  # hydra/sweeper=hobbit, which conf/sim.yaml names (registered as a command starts)
from hobbit.plumbing import path_args
from hobbit.plumbing.guard import guard, output_knob
from hobbit.plumbing.knob_docs import knobs, render_help
from hobbit.plumbing.overrides import overrides_problem
from hobbit.sim.config import ConfigError, HardwareConfig, ProfileConfig
from hobbit.traces.inputs import reading
from hobbit.traces.io import atomic_write_text, os_error_message, raise_interrupt
from hobbit.traces.knobs import KnobError, check_knobs
from hobbit.traces.schema import InputError, use_jemalloc_pool

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
    and Hydra leave, which costs every command, and every sweep worker, most of a second at exit for no gain: the
    process is ending. Nothing else changes: reference counts free what they free, files close, the other atexit
    handlers run."""
    if not STATE.quick_exit:
        atexit.register(gc.freeze)
        STATE.quick_exit = True


PIPE_CLOSED = 141  # the exit code of a process that SIGPIPE ends (128 + 13), as `cat big | head` leaves it


def pipe_closed() -> None:
    """The reader of standard output went away (``hobbit ... | head``): exit quietly, as a shell tool does. Python
    would flush the rest into the closed pipe again at exit; it goes to /dev/null instead."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    sys.exit(PIPE_CLOSED)


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
    whole config only to read ``hydra.mode`` before every run, then composes it again for the run itself: a
    composition too many at the start of every command and sweep job. conf/ never sets it (tests/test_sim_cli.py
    checks), so the mode is unset (None: ``-m`` or not decides) unless an override names ``hydra.mode`` or
    ``hydra.searchpath``, or ``--config-dir`` adds a directory whose configs might: those go through Hydra's own."""
    if (
        any("hydra.mode" in o or "hydra.searchpath" in o for o in overrides)
        or {p.provider for p in self.config_loader.get_search_path().get_path()} - OWN_SEARCH_PATH
    ):
        return _HYDRA_GET_MODE(self, config_name, overrides)
    return None


def patch_hydra() -> None:
    """Install ``_get_mode`` as ``Hydra.get_mode`` (a private method of Hydra 1.3) for this process, once. Called
    where a Hydra app is about to run or compose (``hydra_command``'s entry, ``compose``, ``configure_runtime``),
    never at import, so importing ``hobbit`` leaves Hydra as it is for an application of the user's own."""
    if Hydra.get_mode is not _get_mode:
        Hydra.get_mode = _get_mode
    hydra.core.utils._save_config = _save_config  # run_job calls it by its module-level name


def _save_config(cfg: Any, filename: str, output_dir: Path) -> None:
    """Hydra's ``_save_config`` (the run's ``.hydra/*.yaml`` record, written before the task starts) made atomic,
    with a full disk or an unwritable run directory named on one line instead of Hydra's traceback."""
    try:
        atomic_write_text(Path(output_dir) / filename, OmegaConf.to_yaml(cfg))
    except OSError as exc:
        fail(os_error_message(exc, _sweep_dir_knob(exc.filename) or "hydra.run.dir"))


def _sweep_dir_knob(path: str | None) -> str | None:
    """``hydra.sweep.dir`` where ``path`` lies in a running multirun's directory (a sweep point's files): the knob
    that moves them. A single run's outputs have a knob of their own (``out_dir``, ``out``)."""
    hc = HydraConfig.get() if HydraConfig.initialized() else None
    if path is None or hc is None or hc.mode != RunMode.MULTIRUN:
        return None
    return "hydra.sweep.dir" if Path(hc.sweep.dir).resolve() in Path(path).parents else None


def configure_runtime() -> None:
    """The process-wide settings the command line makes at its entry point: pyarrow's memory pool
    (``hobbit.traces.schema.use_jemalloc_pool``; ``ARROW_DEFAULT_MEMORY_POOL`` still wins) and Hydra's mode
    shortcut (``patch_hydra``). Idempotent; ``hobbit.configure_runtime`` for library users."""
    use_jemalloc_pool()
    patch_hydra()


def register_plugins() -> None:
    """``hydra/launcher=hobbit`` and ``hydra/sweeper=hobbit`` known to Hydra: before each command and composition,
    as Hydra builds its plugin registry anew after a run."""
    hobbit.plumbing.sweeper.register()
    hobbit.plumbing.launcher.register()


def register_schema(config_name: str, schema: type) -> None:
    """``<config_name>_schema`` in the ConfigStore: what conf/<config_name>.yaml extends."""
    ConfigStore.instance().store(name=f"{config_name}_schema", node=_writable(OmegaConf.structured(schema)))
    HELP_SCHEMAS[config_name] = schema


HELP_SCHEMAS: dict[str, type] = {}  # config name -> schema, for its --help (knobs_help)
COMMAND_CONFIGS: dict[str, tuple[str, type]] = {}  # config name -> (config path, schema) of each command built


def knobs_help(config_name: str, *, _root_: DictConfig) -> str:
    """``${hobbit_knobs:NAME}`` in a command's help template (conf/NAME.yaml): every knob with its default as
    composed (config groups and overrides applied, interpolations as written) and its text from the schema's
    attribute docstrings (hobbit.plumbing.knob_docs), the same text as the docs' knob reference."""
    values = OmegaConf.to_container(_root_, resolve=False)
    assert isinstance(values, dict)
    values.pop("hydra", None)
    return render_help(knobs(HELP_SCHEMAS[config_name], values)).replace("$", "$$")  # Hydra's string.Template next


def hydra_command(config_path: str, config_name: str, schema: type) -> Callable:
    """Decorator making ``task(cfg: schema)`` a Hydra main over ``config_path`` (a ``pkg://`` path). Its overrides
    are checked against ``schema`` before Hydra composes (``check_command_line``)."""

    def deco(task: Callable[[Any], Any]) -> Callable[[], None]:
        COMMAND_CONFIGS[config_name] = (config_path, schema)
        register_schema(config_name, schema)
        register_plugins()

        @hydra.main(version_base="1.3", config_path=config_path, config_name=config_name)
        def main(cfg: DictConfig) -> None:
            STATE.started = True
            quick_exit()  # here, so that a launcher's worker processes exit quickly too
            use_jemalloc_pool()  # here too: a launcher's workers started afresh (joblib, Ray) read traces as well
            signal.signal(signal.SIGTERM, raise_interrupt)  # so writers clean up on `kill`
            try:
                obj = OmegaConf.to_object(cfg)
            except (OmegaConfBaseException, dataclasses.FrozenInstanceError) as exc:
                fail(f"{config_name}: {exc}".replace("\n", " "))
            guarded = None
            try:
                check_knobs(obj)
                guarded = guard(obj, HydraConfig.get().runtime.cwd)
                task(guarded)
            except InputError as exc:
                fail(str(exc))
            except BrokenPipeError:
                pipe_closed()
            except OSError as exc:  # the file system refused (full, gone, permissions): name the path
                knob = output_knob(guarded, exc.filename) if guarded is not None else None
                fail(os_error_message(exc, knob or _sweep_dir_knob(exc.filename)))

        def entry() -> None:
            patch_hydra()
            OmegaConf.register_new_resolver("hobbit_knobs", knobs_help, replace=True)
            register_plugins()  # Hydra builds its plugin registry anew after a run: the sweeper and launcher join it again
            if config_path == CONF:  # model=path/to/model.gguf: read into a conf/model option of its own
                try:
                    sys.argv[1:] = path_args.rewrite(sys.argv[1:])
                except InputError as exc:
                    fail(str(exc))
            check_command_line(config_path, config_name, schema, sys.argv[1:])
            main()

        entry.__doc__ = task.__doc__
        return entry

    return deco


def check_command_line(config_path: str, config_name: str, schema: type, argv: list[str]) -> None:
    """Before Hydra composes anything (or makes a run directory): each override of ``argv`` checked against
    ``schema`` (``override_problem``); bad input is named on one line, exit code 2. Flags as Hydra reads them; a
    command line Hydra cannot read is left to Hydra to explain."""
    try:
        args, rest = get_args_parser().parse_known_args(argv)
    except (SystemExit, Exception):  # noqa: BLE001 - Hydra parses the same line again and says what is wrong
        return
    if args.config_name not in (None, config_name) or args.config_path is not None:
        return  # another config than the command's: its schema is not this one
    overrides = [*(args.overrides or []), *(a for a in rest if not a.startswith("-"))]
    extended = args.config_dir is not None or any(o.lstrip("+~").startswith("hydra.searchpath") for o in overrides)
    multirun = bool(args.multirun) or any(o.lstrip("+~").startswith("hydra.mode") for o in overrides)
    problem = overrides_problem(config_path, config_name, schema, overrides, extended, multirun=multirun)
    if problem is not None:
        fail(problem)


def hydra_quote(value: str) -> str:
    """``value`` as Hydra's override grammar takes it: as is where it is plain, else quoted."""
    if value and all(c.isalnum() or c in "/._-:~+" for c in value):
        return value
    # in a quoted value a quote is escaped, and so is each backslash of a run that ends at a quote or at the end
    return "'" + re.sub(r"(\\*)('|$)", lambda m: m[1] * 2 + ("\\'" if m[2] else ""), value) + "'"


def searchpath(*entries: str | Path) -> str:
    """The override that adds ``entries`` to Hydra's search path (their config groups join conf/'s), for a printed
    command line: a directory (``hydra.searchpath=[file:///abs/dir]``) or a search path entry as Hydra writes one
    (``file://...``, ``pkg://...``)."""
    items = [e if isinstance(e, str) else "file://" + str(e.resolve()) for e in entries]
    return f"hydra.searchpath=[{','.join(hydra_quote(i) for i in items)}]"


def compose(config_name: str, schema: type[T], overrides: list[str]) -> T:
    """The typed config Hydra composes from conf/<config_name>.yaml and ``overrides``, inside a
    running Hydra app or outside one; a bad override raises ``ConfigError`` naming it."""
    patch_hydra()
    register_schema(config_name, schema)
    register_plugins()
    overrides = path_args.rewrite(overrides)
    extended = any(o.lstrip("+~").startswith("hydra.searchpath") for o in overrides)
    problem = overrides_problem(CONF, config_name, schema, overrides, extended, f"hobbit {config_name}")
    if problem is not None:
        raise ConfigError(problem)
    try:
        if GlobalHydra.instance().is_initialized():
            return cast(T, OmegaConf.to_object(hydra.compose(config_name, overrides=overrides)))
        with initialize_config_module(config_module="hobbit.conf", version_base="1.3"):
            return cast(T, OmegaConf.to_object(hydra.compose(config_name, overrides=overrides)))
    except (OmegaConfBaseException, HydraException, dataclasses.FrozenInstanceError) as exc:
        raise ConfigError(f"{config_name} {' '.join(overrides)}: {exc}".replace("\n", " ")) from exc


def load_typed(schema: type[T], data: Any) -> T:
    """``data`` (a mapping) checked against a frozen dataclass ``schema``."""
    return cast(T, OmegaConf.to_object(OmegaConf.merge(_writable(OmegaConf.structured(schema)), data)))


def set_values(config: T, overrides: list[str]) -> T:
    """``with_overrides`` without OmegaConf where every override sets a knob that holds a bool, an int, a
    float or a string, or a path knob that may be unset (``str | None``: ``trace=``, ``cache_dir=``), to a value of
    that type (what a sweep's points do: OmegaConf's merge and typed conversion cost more than many a point's
    simulation); else ``with_overrides``."""
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
    return cast(T, OmegaConf.to_object(node))


YAML_ERRORS = (OmegaConfBaseException, yaml.YAMLError, ValueError)  # ValueError: not text (UnicodeDecodeError)


MACHINE_KEYS = ("device_memory_bytes", "device_mem_gbps", "device_tflops", "link_gbps")  # what makes a machine


def load_hardware(path: str) -> HardwareConfig:
    """A hardware YAML (e.g. written by ``hobbit calibrate``) as a typed config."""
    if not Path(path).is_file():
        raise ConfigError(f"profile={path} does not exist (fix: the hardware YAML hobbit calibrate wrote)")
    try:
        with reading(path, "profile=, a hardware YAML,", "the YAML hobbit calibrate or hobbit hardware wrote"):
            data = OmegaConf.load(path)
        if not isinstance(data, DictConfig) or not data:  # empty: every knob the default machine's, silently
            raise ConfigError(
                f"profile={path} is {'empty' if isinstance(data, DictConfig) else 'not a mapping of hardware knobs'}"
                " (fix: the YAML hobbit calibrate wrote)"
            )
        profile = data.pop("profile", None)
        missing = [k for k in MACHINE_KEYS if k not in data]
        if missing:  # the schema's defaults are one machine's (an RTX 4090's): say so rather than run on them quietly
            default = HardwareConfig()
            warnings.warn(
                f"profile={path} sets no {', '.join(missing)}: taken as "
                + ", ".join(f"{k}={getattr(default, k)}" for k in missing)
                + " (the schema's defaults; fix: add them to the file)",
                stacklevel=2,
            )
        hw = load_typed(HardwareConfig, data)
        hw = dataclasses.replace(hw, profile=None if profile is None else load_typed(ProfileConfig, profile))
        try:
            check_knobs(hw, "hardware.")
        except KnobError as exc:  # the value is the profile file's: name it, not a knob the user did not write
            raise ConfigError(f"profile={path}: {exc} (fix: that field of the file, or calibrate again)") from None
        return hw
    except InputError:  # the input helper's refusal names the file already
        raise
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
    return cast(T, OmegaConf.to_object(OmegaConf.merge(_writable(OmegaConf.structured(config)), node)))


def write_yaml(node: Any, path: Path) -> Path:
    """A typed config as YAML, written atomically."""
    return atomic_write_text(path, OmegaConf.to_yaml(OmegaConf.structured(node)))
