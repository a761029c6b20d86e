"""``model=path/to/model.gguf`` (or a config.json, or the folder holding one, or a Hugging Face id of the catalogue's
configs, ``catalogue.models``) and ``hardware=path/to/my.yaml`` on a command line.

Hydra's ``model=`` and ``hardware=`` pick a config of the groups conf/model/ and conf/hardware/. A path is not one:
before Hydra composes, the file is read into a typed config (a model by ``sim.model_files``; a machine as a hardware
YAML, or as the description ``hobbit hardware`` takes, worked out by ``sim.machine``), written as YAML to a folder of
this process's own, and the override becomes ``model=<its name>`` with that folder on Hydra's search path. Everything
after (sweeps, the saved config of a run) then sees an ordinary config group option.
"""

from __future__ import annotations

import atexit
import difflib
import re
import shutil
import tempfile
from importlib import resources
from pathlib import Path

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from hobbit.catalogue.machine import KEYS, hardware_config
from hobbit.catalogue.model_files import load_model
from hobbit.catalogue.models import FOLDER, CatalogueModel, catalogue, find
from hobbit.sim.config import ConfigError, HardwareConfig, ModelConfig
from hobbit.traces.io import atomic_write_text

MODEL_SUFFIXES = (".gguf", ".json")
HARDWARE_SUFFIXES = (".yaml", ".yml")
_FOLDER: list[Path] = []  # this process's folder of models read from files (made on first use)


def is_path(group: str, value: str) -> bool:
    """Whether a ``model=`` or ``hardware=`` value names a file or folder rather than an option of the group."""
    suffixes = MODEL_SUFFIXES if group == "model" else HARDWARE_SUFFIXES
    return value.endswith(suffixes) or "/" in value or value.startswith("~")


def load_hardware_file(path: Path) -> HardwareConfig:
    """A hardware YAML (the fields of ``HardwareConfig``, as ``hobbit hardware out=`` or ``hobbit calibrate`` write
    them), or a machine's description in ``hobbit hardware``'s keys (gpu:, pcie:, ram:, ...)."""
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError, ValueError) as exc:
        raise ConfigError(f"hardware={path}: not a readable YAML file ({exc}) (fix: a hardware YAML)") from None
    if not isinstance(data, dict):
        raise ConfigError(f"hardware={path}: not a mapping of hardware knobs (fix: hobbit hardware ... out={path})")
    if data and set(data) <= set(KEYS):
        return hardware_config(**{str(k): v for k, v in data.items()})
    try:
        node = OmegaConf.merge(OmegaConf.structured(HardwareConfig), data)
        return OmegaConf.to_object(node)  # pyright: ignore[reportReturnType] - a structured node gives the dataclass
    except OmegaConfBaseException as exc:
        raise ConfigError(f"hardware={path}: {exc}".replace("\n", " ")) from None


def _folder() -> Path:
    if not _FOLDER:
        root = Path(tempfile.mkdtemp(prefix="hobbit-models-"))
        atexit.register(shutil.rmtree, root, ignore_errors=True)
        (root / "model").mkdir()
        (root / "hardware").mkdir()
        _FOLDER.append(root)
    return _FOLDER[0]


def _option_name(path: Path) -> str:
    """A conf/model option name for ``path``: its stem (a folder's name for a config.json), in plain characters."""
    stem = path.parent.name if path.name == "config.json" else path.name
    for suffix in (*MODEL_SUFFIXES, *HARDWARE_SUFFIXES):
        stem = stem.removesuffix(suffix)
    return re.sub(r"[^A-Za-z0-9._-]+", "-", stem).strip("-.") or "model"


def _catalogue_model(value: str) -> CatalogueModel | None:
    """The catalogue's config ``model=value`` names (a Hugging Face id as users write it), where no preset of
    conf/model/ and no file of that name is there to take it."""
    if (resources.files("hobbit.conf") / "model" / f"{value}.yaml").is_file() or Path(value).expanduser().exists():
        return None
    return find(value)


def _catalogue_load(value: str, listed: CatalogueModel) -> ModelConfig:
    """``load_model`` of a catalogue config, a family it cannot count yet refused naming the model and the file."""
    try:
        return load_model(listed.path)
    except ConfigError as exc:
        raise ConfigError(
            f"model={value}: {listed.hf_ids[0]}'s config.json is in the catalogue (hobbit/catalogue/data/"
            f"{FOLDER}/{listed.path.name}, read from {listed.read_from}), but {exc}"
        ) from None


def _no_model(value: str) -> str:
    """Why ``model=value`` names nothing: no such file, no Hugging Face id of the catalogue (the nearest said)."""
    ids = {i: name for name, m in catalogue().items() for i in m.hf_ids}
    near = difflib.get_close_matches(value, list(ids), n=1, cutoff=0.6)
    hint = f" (did you mean model={near[0]}?)" if near else ""
    return (
        f"model={value}: {Path(value).expanduser()} does not exist, nor is it the Hugging Face id of a model of the "
        f"catalogue{hint} (fix: a .gguf or config.json file, a folder holding one, or an id of "
        f"hobbit/catalogue/data/{FOLDER}/SOURCES.md)"
    )


def rewrite(overrides: list[str]) -> list[str]:
    """``overrides`` with each ``model=PATH`` and ``hardware=PATH`` replaced by the option written for it, and the
    search path added (merged into a ``hydra.searchpath=[...]`` already given). A file that cannot be read raises
    ``ConfigError`` naming it."""
    out: list[str] = []
    added = False
    for o in overrides:
        key, eq, value = o.partition("=")
        value = value.strip("'\"")
        listed = _catalogue_model(value) if key == "model" and eq and "," not in value else None
        if listed or (key in ("model", "hardware") and eq and is_path(key, value) and "," not in value):
            path = listed.path if listed else Path(value).expanduser()
            if key == "model" and not listed and not path.exists():
                raise ConfigError(_no_model(value))
            if key == "hardware" and not path.is_file():
                raise ConfigError(f"hardware={value}: no such file (fix: hobbit hardware ... out={value})")
            if listed:
                config: ModelConfig | HardwareConfig = _catalogue_load(value, listed)
            elif key == "model":
                config = load_model(path)
            else:
                config = load_hardware_file(path)
            name = _option_name(path)
            if (resources.files("hobbit.conf") / key / f"{name}.yaml").is_file():  # conf/'s own would win
                name += "-" + (path.suffix.lstrip(".") or "file")
            text = OmegaConf.to_yaml(OmegaConf.structured(config))
            atomic_write_text(_folder() / key / f"{name}.yaml", text)
            out.append(f"{key}={name}")
            added = True
        else:
            out.append(o)
    if not added:
        return out
    entry = "file://" + str(_folder())
    for i, o in enumerate(out):
        if o.startswith("hydra.searchpath=[") and o.endswith("]"):
            out[i] = o[:-1] + ("" if o.endswith("[]") else ",") + entry + "]"
            return out
    return [*out, f"hydra.searchpath=[{entry}]"]
