"""Options, folder resolution, output and exit codes shared by every ``eau`` command.

Every command takes ``--json`` (machine output on stdout, diagnostics on stderr), ``--knobs-dir``
(env ``EAU_KNOBS_DIR``) and ``--runs-dir`` (env ``EAU_RUNS_DIR``).

Input errors never end in a traceback: :class:`GuardedGroup` (the root ``eau`` group) turns any
exception a command lets through into one ``error:`` line and an exit code from the table below;
``EAU_DEBUG=1`` shows the traceback instead.
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path
from typing import Any, NoReturn

import typer
import yaml
from ruamel.yaml.error import YAMLError as RuamelError
from typer import BadParameter
from typer.core import TyperGroup
from typer.exceptions import Abort, Exit, TyperException

from harness.io.jsonl import finite
from harness.io.text import not_utf8
from harness.io.yamlio import FileProblem
from harness.knobs.folder import resolve_knobs_dir
from harness.knobs.store import KnobError, UnknownKnob

# Exit codes (documented in skill/references/formats.md; scripts rely on them).
EXIT_OK = 0
EXIT_ERROR = 1  # unexpected failure or bad input
EXIT_USAGE = 2  # typer/click usage error
EXIT_REFUSED = 3  # a knob or rule write refused by validation (file untouched)
EXIT_INVALID = 4  # a checked file or task set is invalid
EXIT_NOT_FOUND = 5  # unknown knob, run, event, finding, gym
EXIT_CODES = (EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_REFUSED, EXIT_INVALID, EXIT_NOT_FOUND)
DEBUG_ENV = "EAU_DEBUG"  # EAU_DEBUG=1: an unexpected error shows its traceback
UNEXPECTED = "unexpected"  # the word an error line carries when no command handled the error (a bug to fix)

JsonOpt = typer.Option(False, "--json", help="Print one JSON document on stdout.")
KnobsDirOpt = typer.Option(
    None,
    "--knobs-dir",
    envvar="EAU_KNOBS_DIR",
    help="Knobs folder (default: ./knobs, made from the packaged defaults when missing).",
)
# status, sample, diagnose and effect read only a run folder; they take --knobs-dir too so that one
# set of folder options (or EAU_KNOBS_DIR) works with every command, and check that it is a folder
ReadOnlyKnobsDirOpt = typer.Option(
    None,
    "--knobs-dir",
    envvar="EAU_KNOBS_DIR",
    help="Knobs folder; this command reads only the run folder, and checks that this one exists when given.",
)
RunsDirOpt = typer.Option(None, "--runs-dir", envvar="EAU_RUNS_DIR", help="Runs folder (default: ./runs).")


def knobs_dir(value: Path | None, as_json: bool = False) -> Path:
    """The knobs folder of a command (:func:`harness.knobs.folder.resolve_knobs_dir`): ``--knobs-dir`` /
    ``$EAU_KNOBS_DIR`` must exist; ``./knobs`` is created from the packaged defaults when missing."""
    try:
        return resolve_knobs_dir(value, notice=err)
    except ValueError as exc:
        fail(str(exc), EXIT_NOT_FOUND, as_json)


def check_knobs_dir(value: Path | None, as_json: bool = False) -> None:
    """A given ``--knobs-dir`` of a command that does not use it must still name a knobs folder."""
    if value is not None:
        knobs_dir(value, as_json)


def runs_dir(value: Path | None, as_json: bool = False) -> Path:
    """``--runs-dir`` / ``$EAU_RUNS_DIR`` or ./runs; a path that exists must be a folder."""
    path = Path(value) if value is not None else Path.cwd() / "runs"
    if path.exists() and not path.is_dir():
        fail(f"--runs-dir {path}: not a folder (the runs folder holds one folder per run)", EXIT_USAGE, as_json)
    return path


def json_text(obj: Any) -> str:
    """The ``--json`` document of every command: strict JSON (no NaN or Infinity token, which
    strict parsers refuse): non-finite numbers are the strings "nan", "inf", "-inf", as in the
    run's JSONL files (:func:`harness.io.jsonl.finite`); other non-JSON values as their text."""
    try:
        return json.dumps(obj, indent=2, default=str, ensure_ascii=False, allow_nan=False)
    except ValueError:  # a non-finite number somewhere: convert them (the rare path)
        return json.dumps(finite(obj), indent=2, default=str, ensure_ascii=False, allow_nan=False)


def emit_json(obj: Any) -> None:
    """Print one ``--json`` document (:func:`json_text`) on stdout."""
    sys.stdout.write(json_text(obj) + "\n")
    sys.stdout.flush()


def err(msg: str) -> None:
    sys.stderr.write(msg.rstrip() + "\n")
    sys.stderr.flush()


def fail(msg: str, code: int = EXIT_ERROR, as_json: bool = False, **extra: Any) -> NoReturn:
    """Report an error (as JSON on stdout too when ``--json``) and exit with ``code``."""
    if as_json:
        emit_json({"ok": False, "error": msg, "exit_code": code, **extra})
    err(f"error: {msg}")
    raise typer.Exit(code)


def check_text_option(value: str | None, option: str, as_json: bool = False) -> None:
    """A usage error (exit 2) naming ``option`` when its value cannot be written as UTF-8 text (a
    byte that was not UTF-8 on the command line), which would otherwise fail deep inside whatever
    renders the text."""
    problem = not_utf8(value) if value is not None else None
    if problem:
        fail(f"{option}: not valid text ({problem})", EXIT_USAGE, as_json)


def env_flag(name: str) -> bool:
    return os.environ.get(name, "").lower() in ("1", "true", "yes")


def error_line(exc: BaseException) -> tuple[str, int]:
    """One line and an exit code for an exception no command handled: the project's own error types
    and the usual input failures (missing file, not UTF-8, nested too deep, bad YAML/JSON) name what
    went wrong; anything else is an ``unexpected`` error (a bug: the command should have said more)."""
    if isinstance(exc, UnknownKnob):
        return str(exc), EXIT_NOT_FOUND
    if isinstance(exc, KnobError):
        return str(exc), EXIT_INVALID
    if isinstance(exc, FileProblem):
        return str(exc), EXIT_INVALID
    if isinstance(exc, RecursionError):
        return "input nested too deeply (a YAML/JSON value or data file beyond Python's recursion limit)", EXIT_INVALID
    if isinstance(exc, UnicodeDecodeError):
        return f"input is not UTF-8 ({exc.reason} at byte offset {exc.start})", EXIT_INVALID
    if isinstance(exc, (yaml.YAMLError, RuamelError, json.JSONDecodeError)):
        return f"malformed YAML/JSON input: {exc}", EXIT_INVALID
    if isinstance(exc, FileNotFoundError):
        return f"{exc.filename}: no such file or folder", EXIT_NOT_FOUND
    if isinstance(exc, OSError):
        where = f"{exc.filename}: " if exc.filename else ""
        return f"{where}{exc.strerror or exc}", EXIT_ERROR
    if isinstance(exc, (ValueError, LookupError)) and str(exc):
        return str(exc).strip("'\""), EXIT_ERROR
    return f"{UNEXPECTED} {type(exc).__name__}: {exc} ({DEBUG_ENV}=1 shows the traceback)", EXIT_ERROR


def one_line(msg: str, limit: int = 2000) -> str:
    text = " ".join(msg.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


# Numbers every option must satisfy, whatever its command: typer's min/max let NaN through (every
# comparison with NaN is false) and take ints of any size.
MAX_INT_OPTION = 2**63 - 1  # what fits a C long: numpy, torch and file offsets take no more
SEED_RANGE = (0, 2**32 - 1)  # numpy's seed range; every --seed option


def _finite_number(ctx: Any, param: Any, value: Any) -> Any:
    """Option callback: the value (or each value of a multiple option) is a finite number within
    the generic bounds; a usage error (exit 2) that names the option otherwise."""
    for v in value if isinstance(value, (list, tuple)) else [value]:
        if isinstance(v, float) and not math.isfinite(v):
            raise BadParameter(f"{v} is not a finite number", ctx=ctx, param=param)
        if isinstance(v, int) and not isinstance(v, bool):
            low, high = SEED_RANGE if param.name == "seed" else (-MAX_INT_OPTION, MAX_INT_OPTION)
            if not low <= v <= high:
                raise BadParameter(f"must be between {low} and {high}", ctx=ctx, param=param)
    return value


def harden_numeric_params(command: Any) -> None:
    """Chain :func:`_finite_number` after the callback of every int and float parameter of
    ``command`` and of every command under it."""
    for sub in getattr(command, "commands", {}).values():
        harden_numeric_params(sub)
    for param in getattr(command, "params", []):
        annotation = getattr(getattr(param, "type_descriptor", None), "annotation", None)
        if annotation not in (int, float) or getattr(param, "_eau_hardened", False):
            continue
        original = param.callback

        def callback(ctx: Any, p: Any, value: Any, _original: Any = original) -> Any:
            value = _finite_number(ctx, p, value)
            return _original(ctx, p, value) if _original is not None else value

        param.callback, param._eau_hardened = callback, True


class GuardedGroup(TyperGroup):
    """The root command group: an exception that escapes a command becomes one ``error:`` line (JSON
    too with ``--json``) and a documented exit code, never a traceback (``EAU_DEBUG=1``: re-raised).
    Every numeric option of every command refuses NaN, infinity and out-of-range ints."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        harden_numeric_params(self)

    def invoke(self, ctx: Any) -> Any:
        as_json = "--json" in [*ctx._protected_args, *ctx.args]
        try:
            return super().invoke(ctx)
        except (TyperException, Exit, Abort, KeyboardInterrupt):
            raise
        except Exception as exc:  # noqa: BLE001 (the last line of defence, by design)
            if env_flag(DEBUG_ENV):
                raise
            msg, code = error_line(exc)
            fail(one_line(msg), code, as_json)
