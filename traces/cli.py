"""Hydra glue shared by every ``hobbit`` command, and the trace commands themselves.

``hydra_command`` turns ``task(cfg: Schema)`` into a Hydra app over ``conf/<group>``:
the schema (a frozen dataclass) is registered in the ConfigStore and the YAML extends
it; the task receives a typed object, never a ``DictConfig``. Bad input (any
``InputError``) prints one line naming the file, field and fix, and exits with 2.
"""

from __future__ import annotations

import json
import signal
import sys
from dataclasses import dataclass
from types import FrameType
from typing import Any, Callable

from traces.capture import CaptureConfig
from traces.convert import ConvertConfig
from traces.schema import InputError

EXIT_BAD_INPUT = 2


class _State:
    """Whether the task function was entered (config errors happen before it)."""

    started = False


STATE = _State()


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def fail(message: str) -> None:
    print(f"hobbit: error: {message}", file=sys.stderr)
    sys.exit(EXIT_BAD_INPUT)


def _writable(node: Any) -> Any:
    """Frozen dataclasses become read-only nodes, at every level; YAML and overrides must extend them."""
    from omegaconf import DictConfig, OmegaConf

    OmegaConf.set_readonly(node, False)
    for key in node:
        child = node._get_node(key)
        if isinstance(child, DictConfig):
            _writable(child)
    return node


def hydra_command(config_path: str, config_name: str, schema: type) -> Callable:
    """Decorator making ``task(cfg: schema)`` a Hydra main over ``config_path`` (a ``pkg://`` path)."""

    def deco(task: Callable[[Any], Any]) -> Callable[[], None]:
        import hydra
        from hydra.core.config_store import ConfigStore
        from omegaconf import DictConfig, OmegaConf
        from omegaconf.errors import OmegaConfBaseException

        ConfigStore.instance().store(name=f"{config_name}_schema", node=_writable(OmegaConf.structured(schema)))

        @hydra.main(version_base="1.3", config_path=config_path, config_name=config_name)
        def main(cfg: DictConfig) -> None:
            STATE.started = True
            signal.signal(signal.SIGTERM, _raise_interrupt)  # so writers clean up on `kill`
            try:
                obj = OmegaConf.to_object(cfg)
            except OmegaConfBaseException as exc:
                fail(f"{config_name}: {exc}".replace("\n", " "))
            try:
                task(obj)
            except InputError as exc:
                fail(str(exc))

        main.__doc__ = task.__doc__
        return main

    return deco


# ---------------------------------------------------------------- trace commands

TRACES_CONF = "pkg://conf.traces"


@hydra_command(TRACES_CONF, "capture", CaptureConfig)
def capture_main(cfg: CaptureConfig) -> None:
    """Record routing traces from a Hugging Face MoE model (default: the bundled tiny model)."""
    from traces.capture import capture
    from traces.io import read_trace
    from traces.stats import render, summarize

    res = capture(cfg)
    print(render(summarize(read_trace(res.path)), max_layer_rows=0))
    print(f"wrote {res.path}")


@hydra_command(TRACES_CONF, "convert", ConvertConfig)
def convert_main(cfg: ConvertConfig) -> None:
    """Convert published routing logs (flame | vllm | jsonl) into a schema-v1 trace."""
    from traces.convert import convert
    from traces.io import read_trace

    path = convert(cfg)
    tr = read_trace(path)
    m = tr.meta.model
    print(f"wrote {path}: {m.name}, {tr.num_tokens} tokens x {len(tr.meta.layers)} layers, "
          f"{m.num_experts} experts, top-{m.top_k}")


@dataclass(frozen=True)
class TraceInfoConfig:
    """Knobs of ``hobbit trace-info PATH [--json]``."""

    path: str = ""
    json: bool = False
    max_layer_rows: int = 40


@hydra_command(TRACES_CONF, "trace_info", TraceInfoConfig)
def trace_info_main(cfg: TraceInfoConfig) -> None:
    """Print a trace's model, requests, tokens, expert load, reuse and lookahead accuracy."""
    from traces.io import read_trace
    from traces.stats import render, summarize

    if not cfg.path:
        fail("trace-info needs a trace: hobbit trace-info PATH [--json]")
    s = summarize(read_trace(cfg.path))
    print(json.dumps(s, indent=1) if cfg.json else render(s, cfg.max_layer_rows))
