"""Options, folder resolution, output and exit codes shared by every ``eau`` command.

Every command takes ``--json`` (machine output on stdout, diagnostics on stderr), ``--knobs-dir``
(env ``EAU_KNOBS_DIR``) and ``--runs-dir`` (env ``EAU_RUNS_DIR``).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, NoReturn

import typer

# Exit codes (documented in skill/references/formats.md; scripts rely on them).
EXIT_OK = 0
EXIT_ERROR = 1  # unexpected failure or bad input
EXIT_USAGE = 2  # typer/click usage error
EXIT_REFUSED = 3  # a knob or rule write refused by validation (file untouched)
EXIT_INVALID = 4  # a checked file or task set is invalid
EXIT_NOT_FOUND = 5  # unknown knob, run, event, finding, gym

JsonOpt = typer.Option(False, "--json", help="Print one JSON document on stdout.")
KnobsDirOpt = typer.Option(None, "--knobs-dir", envvar="EAU_KNOBS_DIR",
                           help="Knobs folder (default: ./knobs, made from the packaged defaults when missing).")
RunsDirOpt = typer.Option(None, "--runs-dir", envvar="EAU_RUNS_DIR", help="Runs folder (default: ./runs).")


def knobs_dir(value: Path | None, as_json: bool = False) -> Path:
    """The knobs folder of a command (:func:`harness.knobs.folder.resolve_knobs_dir`): ``--knobs-dir`` /
    ``$EAU_KNOBS_DIR`` must exist; ``./knobs`` is created from the packaged defaults when missing."""
    from harness.knobs.folder import resolve_knobs_dir

    try:
        return resolve_knobs_dir(value, notice=err)
    except ValueError as exc:
        fail(str(exc), EXIT_NOT_FOUND, as_json)


def runs_dir(value: Path | None) -> Path:
    return Path(value) if value is not None else Path.cwd() / "runs"


def emit_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, default=str, ensure_ascii=False) + "\n")
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


def env_flag(name: str) -> bool:
    return os.environ.get(name, "").lower() in ("1", "true", "yes")
