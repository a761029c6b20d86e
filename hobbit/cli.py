"""``hobbit <command> [hydra overrides]``: the one console script, dispatching to Hydra apps.

Each command is a Hydra app over ``conf/`` (``-m`` sweeps, ``--help`` lists its knobs,
``--cfg job`` prints the composed config). Exit codes: 0 ok, 2 bad input, 1 a bug.

``main`` makes the process-wide settings a command runs with (``hobbit.plumbing.glue.configure_runtime``:
pyarrow's memory pool, Hydra's mode shortcut) before anything else; the library, imported,
changes neither.
"""

from __future__ import annotations

import difflib
import importlib
import re
import sys
import warnings
from pathlib import Path

from hydra._internal.utils import get_args_parser

from hobbit.plumbing.glue import STATE, configure_runtime, fail, pipe_closed, quick_exit
from hobbit.plumbing.guard import PathError, check_output

# name -> (module, function, one-line description). A command's module is imported only to run
# it (as pip does with its commands), so `hobbit sim` never loads torch and --help is quick.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "capture": (
        "hobbit.commands.trace",
        "capture_main",
        "record routing traces from a Hugging Face MoE model's live inference",
    ),
    "convert": (
        "hobbit.commands.trace",
        "convert_main",
        "convert FLAME-MoE / vLLM / JSONL / llama.cpp moe-trace CSV / TEC routing logs into a trace",
    ),
    "export": (
        "hobbit.commands.trace",
        "export_main",
        "write a trace as generic JSONL, llama.cpp moe-trace CSV or a TEC router trace",
    ),
    "trace-info": (
        "hobbit.commands.trace",
        "trace_info_main",
        "statistics of a trace: load, reuse, lookahead accuracy (--json)",
    ),
    "hardware": (
        "hobbit.commands.hardware",
        "hardware_main",
        "a machine's hardware config from what you know of it (gpu=, pcie=, ram=, ssd=): derived, cited, written",
    ),
    "sim": ("hobbit.commands.sim", "sim_main", "simulate a system replaying a trace on modelled hardware (-m sweeps)"),
    "tune": (
        "hobbit.commands.tune",
        "tune_main",
        "search T1/T2, cache split and cache weights with Optuna (resumable)",
    ),
    "quality": (
        "hobbit.commands.executor",
        "quality_main",
        "perplexity, top-1 agreement and KL of mixed precision vs full",
    ),
    "calibrate": (
        "hobbit.commands.executor",
        "calibrate_main",
        "measure this machine through the executor; write a hardware profile",
    ),
    "validate": (
        "hobbit.commands.executor",
        "validate_main",
        "simulate and replay the same decisions; report the per-token error",
    ),
    "compare": (
        "hobbit.commands.compare",
        "compare_main",
        "every system and HOBBIT tuned for it on your trace and machine, ranked (compare.md/.json/.png)",
    ),
    "plan": (
        "hobbit.commands.plan",
        "plan_main",
        "each runtime's best flags for a model on your machine, and its predicted prefill and decode tok/s, ranked",
    ),
    "reproduce": (
        "hobbit.commands.reproduce",
        "reproduce_main",
        "HOBBIT's Table 2 grid on the bundled models' workloads, beside the paper's numbers",
    ),
    "report": (
        "hobbit.commands.report",
        "report_main",
        "aggregate a run or multirun dir into runs.parquet, plots and report.md",
    ),
    "demo": (
        "hobbit.commands.demo",
        "demo_main",
        "the main job on the bundled defaults; prints where results and plots went",
    ),
}

EXIT_INTERRUPTED = 130  # 128 + SIGINT: what a shell reports for a command stopped by Ctrl-C
PATH_KEYS = ("in", "input", "out", "model", "prompts", "path", "dir", "trace")
_PLAIN = re.compile(r"[A-Za-z0-9_./:~+-]*")


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: hobbit <command> [key=value ...] [-m] [--help]", "", "commands:"]
    lines += [f"  {name:<{width}}  {desc}" for name, (_, _, desc) in COMMANDS.items()]
    lines += [
        "",
        "Each command is a Hydra app: `hobbit <command> --help` lists its knobs and defaults.",
        "Exit codes: 0 success, 2 bad input (the message names the file, field and fix), 141 output pipe closed.",
    ]
    return "\n".join(lines)


def _quote(arg: str) -> str:
    """Quote path values Hydra's override grammar would not take as they are."""
    key, sep, value = arg.partition("=")
    if not sep or key.lstrip("+~") not in PATH_KEYS or _PLAIN.fullmatch(value) or value[:1] in "'\"":
        return arg
    return f"{key}='" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _flag_values(args: list[str]) -> set[int]:
    """The places in ``args`` of the words Hydra's flags take as their values (``--cfg job``, ``-cn NAME``)."""
    actions = {o: a for a in get_args_parser()._actions for o in a.option_strings}
    out = set()
    for i, arg in enumerate(args[:-1]):
        name, eq, _ = arg.partition("=")
        action = actions.get(name) if arg.startswith("-") and not eq else None
        if action is not None and (
            action.nargs is None or (action.nargs == "?" and args[i + 1] in (action.choices or ()))
        ):
            out.add(i + 1)
    return out


def rewrite(command: str, args: list[str]) -> list[str]:
    """Command-specific sugar: ``trace-info PATH --json``, ``convert in=PATH``. A word a Hydra flag takes
    (``--cfg job``) is that flag's, not a path."""
    out = []
    values = _flag_values(args) if command == "trace-info" else set()
    bare = [i for i, a in enumerate(args) if command == "trace-info" and "=" not in a and not a.startswith("-")]
    paths = [args[i] for i in bare if i not in values]
    if len(paths) > 1:  # Hydra would keep the last and report it alone
        fail(f"trace-info {' '.join(paths)}: one trace at a time (fix: hobbit trace-info {paths[0]}, then the next)")
    for i, a in enumerate(args):
        if command == "trace-info" and a == "--json":
            a = "json=true"
        elif command == "trace-info" and "=" not in a and not a.startswith("-") and i not in values:
            a = f"path={a}"
        elif command == "convert" and a.startswith("in="):
            a = "input=" + a[3:]
        out.append(_quote(a))
    return out


def flags_first(command: str, args: list[str]) -> list[str]:
    """``args`` with Hydra's flags (and their values) before the overrides: its parser takes the overrides as one run
    of words, so a flag between two (`t1=0.3,0.6 -m trace=x`, `--cfg job` mid-line) ended in its 20-line usage text.
    A word that starts with '-' and is no flag of Hydra's is refused here, in one line."""
    actions = {o: a for a in get_args_parser()._actions for o in a.option_strings}
    values = _flag_values(args)
    flags: list[str] = []
    overrides: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("-"):
            overrides.append(arg)
            i += 1
            continue
        name = arg.partition("=")[0]
        action = actions.get(name)
        if action is None:
            fail(
                f"{arg}: not a flag of hobbit {command} (fix: key=value for a knob; the flags: -m, --help, --cfg job, "
                "--info; `hobbit " + command + " --help` lists the knobs)"
            )
            return []
        flags.append(arg)
        if i + 1 in values:
            flags.append(args[i + 1])
            i += 1
        i += 1
    modes = sorted({a for a in flags if getattr(actions.get(a.partition("=")[0]), "dest", "") in ONE_MODE})
    if len(modes) > 1:
        fail(f"{' and '.join(modes)}: Hydra takes one of -m, --run, --cfg, --info (fix: drop all but one)")
    return [*flags, *overrides]


ONE_MODE = {"run", "multirun", "cfg", "info", "shell_completion"}  # Hydra refuses two of these with a traceback


_FORMAT_WARNING = warnings.formatwarning
_PACKAGE = str(Path(__file__).parent)  # as modules are imported (hobbit/sim/... also where sim/ is linked in)


def _one_line(message, category, filename, lineno, line=None) -> str:
    """hobbit's own warnings as the command line's one line (``hobbit: warning: ...``); a library's as Python
    writes them."""
    if issubclass(category, UserWarning) and str(filename).startswith(_PACKAGE):
        return f"hobbit: warning: {message}\n"
    return _FORMAT_WARNING(message, category, filename, lineno, line)


def main(argv: list[str] | None = None) -> None:
    configure_runtime()  # before any trace is read, and before a sweep forks its workers (they inherit it)
    warnings.formatwarning = _one_line  # the command line's only: a library user's warnings stay Python's
    try:
        _main(sys.argv[1:] if argv is None else argv)
    except BrokenPipeError:  # `hobbit sim --help | head`: Hydra prints the help outside the task
        pipe_closed()
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM (hobbit.plumbing.glue): the writers have cleaned up on the way out
        print("hobbit: interrupted", file=sys.stderr)
        sys.exit(EXIT_INTERRUPTED)


def _main(argv: list[str]) -> None:
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        if not argv:
            fail("no command given (fix: hobbit COMMAND [key=value ...], a command of those above)")
        sys.exit(0)
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        near = difflib.get_close_matches(command, list(COMMANDS), n=1, cutoff=0.5)
        hint = f"did you mean {near[0]}? " if near else ""
        fail(f"unknown command '{command}' ({hint}`hobbit --help` lists the commands: {', '.join(COMMANDS)})")
    module, func, _ = COMMANDS[command]
    for arg in rest:  # Hydra makes its run directory before the command's own guard runs
        key, sep, value = arg.partition("=")
        if sep and key.lstrip("+") in ("hydra.run.dir", "hydra.sweep.dir") and "${" not in value:
            if not value.strip("'\""):  # Hydra would write the run's record and results into the current directory
                fail(f"{key}= is empty (fix: {key}=DIR, the directory the run writes)")
            try:
                check_output(key.lstrip("+"), Path(value.strip("'\"")).expanduser().resolve(), "outdir", {})
            except PathError as exc:
                fail(str(exc))
    sys.argv = [f"hobbit-{command}", *flags_first(command, rewrite(command, rest))]
    quick_exit()
    try:
        getattr(importlib.import_module(module), func)()
    except SystemExit as exc:
        # Hydra exits 1 on config errors (bad override, unknown key) before the task starts
        if exc.code == 1 and not STATE.started:
            sys.exit(2)
        raise


if __name__ == "__main__":
    main()
