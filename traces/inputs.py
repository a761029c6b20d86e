"""Reading a user's input file: the one helper that turns its decode and format errors into a refusal naming it.

``with reading(path, "the prompts file"): ...`` runs a reader; a file that is not what it should be (not UTF-8
text, not JSON or YAML, a truncated or foreign safetensors or torch file, a file cut short) becomes one
``InputError``: ``PATH: the prompts file cannot be read: not UTF-8 text (byte 0: invalid start byte) (fix: ...)``,
exit 2, no traceback. Errors that are not about the file (a bug) pass through. ``read_text`` reads text this way.
"""

from __future__ import annotations

import json
import pickle
import struct
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml

from hobbit.traces.schema import InputError

# a torch.load of a file that is no torch archive, in torch's own words
_TORCH_FORMAT = ("PytorchStreamReader", "invalid load key", "failed finding central directory", "Unpickler")


def _format_errors() -> tuple[type[BaseException], ...]:
    errors: list[type[BaseException]] = [
        json.JSONDecodeError,
        yaml.YAMLError,
        struct.error,
        pickle.UnpicklingError,
        EOFError,
        zipfile.BadZipFile,
    ]
    try:  # a truncated or foreign .safetensors (transformers and safetensors raise it as it is)
        from safetensors import SafetensorError

        errors.append(SafetensorError)
    except ImportError:  # pragma: no cover - safetensors comes with transformers
        pass
    return tuple(errors)


FORMAT_ERRORS = _format_errors()


@contextmanager
def reading(path: str | Path, what: str, fix: str = "") -> Iterator[None]:
    """Run the reader of ``path`` (``what`` it should be); its decode and format errors as one ``InputError``."""
    fix = fix or f"{what}, whole, as its writer made it"
    try:
        yield
    except InputError:
        raise
    except UnicodeDecodeError as exc:
        raise InputError(
            f"{path}: {what} cannot be read: not UTF-8 text (byte {exc.start}: {exc.reason}) (fix: {fix})"
        ) from None
    except FORMAT_ERRORS as exc:
        raise InputError(f"{path}: {what} cannot be read: {_said(exc)} (fix: {fix})") from None
    except RuntimeError as exc:
        if not any(s in str(exc) for s in _TORCH_FORMAT):
            raise
        raise InputError(f"{path}: {what} cannot be read: not a torch file ({_said(exc)}) (fix: {fix})") from None


def _said(exc: BaseException) -> str:
    """An error's first line, with its type where the line alone says little."""
    name = type(exc).__name__
    name = f"{type(exc).__module__}.{name}" if name == "error" else name  # struct.error, not "error"
    line = (str(exc).strip().splitlines() or [""])[0][:200]
    return f"{name}: {line}" if line else name


def read_text(path: str | Path, what: str, fix: str = "") -> str:
    """``path``'s text (UTF-8), or ``InputError`` naming it."""
    with reading(path, what, fix):
        return Path(path).read_text(encoding="utf-8-sig")  # UTF-8, a leading BOM (a Windows editor's) dropped
