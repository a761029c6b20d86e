"""The models of the catalogue: published ``config.json`` files (``hobbit/catalogue/data/hf-configs/``, each cited in
its ``SOURCES.md``: the repository, commit and path it was copied from), by the names users type: the file's name
(``deepseek-r1``), the Hugging Face id (``deepseek-ai/DeepSeek-R1``) or its last part (``DeepSeek-R1``), case and
punctuation ignored. ``model=`` takes them where no preset of conf/model/ has the name (``plumbing.path_args``); a
family ``catalogue.model_files`` cannot count yet is refused naming its file and family."""

from __future__ import annotations

import functools
import re
from importlib import resources
from pathlib import Path
from typing import NamedTuple

FOLDER = "hf-configs"  # under hobbit/catalogue/data/


class CatalogueModel(NamedTuple):
    """A config.json of the catalogue: its file, the Hugging Face ids it was published under, where it was read."""

    path: Path
    hf_ids: tuple[str, ...]
    read_from: str


def _key(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def folder() -> Path:
    """The catalogue's folder of config.json copies (package data)."""
    return Path(str(resources.files("hobbit.catalogue") / "data" / FOLDER))


@functools.cache
def catalogue() -> dict[str, CatalogueModel]:
    """Each config of the catalogue by its file's stem, as its SOURCES.md table gives it (``| file | Hugging Face
    repo id | read from | notes |``; several ids are separated by `` / ``)."""
    out: dict[str, CatalogueModel] = {}
    for line in (folder() / "SOURCES.md").read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].endswith(".json"):
            continue
        ids = tuple(re.sub(r"\s*\(.*?\)\s*", "", i).strip() for i in cells[1].split(" / "))
        out[cells[0].removesuffix(".json")] = CatalogueModel(folder() / cells[0], ids, cells[2])
    return out


@functools.cache
def _spellings() -> dict[str, str]:
    out: dict[str, str] = {}
    for name, m in catalogue().items():
        for text in (name, *m.hf_ids, *(i.rsplit("/", 1)[-1] for i in m.hf_ids)):
            out.setdefault(_key(text), name)
    return out


def find(value: str) -> CatalogueModel | None:
    """The catalogue's config that ``value`` names (its file's name, a Hugging Face id or its last part), or None."""
    name = _spellings().get(_key(value))
    return catalogue()[name] if name is not None else None
