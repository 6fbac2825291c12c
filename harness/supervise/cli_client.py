"""Calling ``eau`` commands the way a coding agent does: a subprocess per command, ``--json`` output.

The autopilot uses nothing else to read or change a run, so it exercises exactly the path the
skill teaches (and any defect of that path shows up for it as it would for an agent).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

# The same CLI as the ``eau`` console script, started with this interpreter: an ``eau`` found on
# PATH may belong to another environment.
DEFAULT_EAU = (sys.executable, "-m", "harness.cli.main")
DEFAULT_TIMEOUT_S = 300.0  # the slowest command (eau gate with replays) stays within its own 30 s budget


class CommandFailed(RuntimeError):
    """An ``eau`` command that exited with an unexpected code; the message has its argv and stderr."""

    def __init__(self, call: Call):
        self.call = call
        super().__init__(
            f"`{' '.join(call.argv[len(call.base) :])}` exited {call.rc}: "
            f"{(call.error or call.stderr.strip() or '(no output)')[:800]}"
        )


@dataclass
class Call:
    """One command run: argv, exit code, parsed JSON (None when stdout was not JSON), timing."""

    base: tuple[str, ...]
    argv: list[str]
    rc: int
    doc: Any
    stdout: str
    stderr: str
    elapsed_s: float

    @property
    def error(self) -> str | None:
        """The ``error`` field of a failure document (``fail(..., as_json=True)``)."""
        return self.doc.get("error") if isinstance(self.doc, dict) and self.doc.get("ok") is False else None

    def brief(self) -> dict[str, Any]:
        """The call as a log record (the command as typed after ``eau``)."""
        return {"command": ["eau", *self.argv[len(self.base) :]], "rc": self.rc, "elapsed_s": round(self.elapsed_s, 3)}


class EauCLI:
    """Runs ``eau ARGS --json`` with the given folders in the environment; keeps a log of calls."""

    def __init__(
        self,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
        base: Sequence[str] = DEFAULT_EAU,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ):
        self.env = {**os.environ, **(env or {})}
        self.cwd = Path(cwd) if cwd is not None else Path.cwd()
        self.base = tuple(base)
        self.timeout_s = timeout_s
        self.calls: list[Call] = []

    def run(self, *args: str, ok: Sequence[int] = (0,), stdin: str | None = None) -> Call:
        """Run one command with ``--json``; raise :class:`CommandFailed` unless its exit code is in ``ok``."""
        argv = [*self.base, *args, "--json"]
        t0 = time.monotonic()
        try:
            p = subprocess.run(
                argv, cwd=self.cwd, env=self.env, input=stdin, capture_output=True, text=True, timeout=self.timeout_s
            )
            rc, out, err = p.returncode, p.stdout, p.stderr
        except subprocess.TimeoutExpired as exc:
            rc, out, err = 124, exc.stdout or "", f"timed out after {self.timeout_s:g}s"
            out = out.decode() if isinstance(out, bytes) else out
        try:
            doc = json.loads(out) if out.strip() else None
        except json.JSONDecodeError:
            doc = None
        call = Call(self.base, argv, rc, doc, out, err, time.monotonic() - t0)
        self.calls.append(call)
        if rc not in ok:
            raise CommandFailed(call)
        return call

    def take_log(self) -> list[dict[str, Any]]:
        """The calls made since the last take, as log records."""
        out = [c.brief() for c in self.calls]
        self.calls = []
        return out
