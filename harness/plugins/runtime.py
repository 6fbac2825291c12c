"""Calling plug-in code from the run: one worker process, time limits, errors that name the line.

A plug-in never runs in the trainer's process. :class:`Worker` holds one worker process
(``harness/plugins/worker.py``) and enforces the limits from outside: a load (the module's import)
that takes longer than :func:`import_limit_s`, or a call longer than :func:`call_limit_s`, kills the
worker's process group and raises :class:`PluginTimeout`; the next call starts a fresh worker. So a
plug-in that loops forever or waits costs its caller the limit, never the run.

Inside an episode such an error (or any exception of the plug-in) propagates out of the gym's
``step``, and the rollout engine ends that episode with an error record; the run goes on.

Limits: ``EAU_PLUGIN_IMPORT_S`` (default 10 s), ``EAU_PLUGIN_CALL_S`` (default 2 s), and for the
gate's calls all together ``EAU_PLUGIN_GATE_S`` (default 30 s).
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Mapping

WORKER_SCRIPT = Path(__file__).with_name("worker.py")
DEFAULT_IMPORT_S = 10.0
DEFAULT_CALL_S = 2.0
DEFAULT_GATE_S = 30.0


def _limit(var: str, default: float) -> float:
    try:
        value = float(os.environ.get(var, default))
    except ValueError:
        return default
    return value if value > 0 else default


def import_limit_s() -> float:
    """Wall seconds a plug-in's import may take (``EAU_PLUGIN_IMPORT_S``)."""
    return _limit("EAU_PLUGIN_IMPORT_S", DEFAULT_IMPORT_S)


def call_limit_s() -> float:
    """Wall seconds one call of a plug-in function may take (``EAU_PLUGIN_CALL_S``)."""
    return _limit("EAU_PLUGIN_CALL_S", DEFAULT_CALL_S)


def gate_budget_s() -> float:
    """Wall seconds all of a gate's calls may take together (``EAU_PLUGIN_GATE_S``)."""
    return _limit("EAU_PLUGIN_GATE_S", DEFAULT_GATE_S)


class PluginError(RuntimeError):
    """A plug-in failed: its import or a call raised, returned the wrong kind of value, or the worker
    died. ``file`` and ``line`` name the plug-in's line where known."""

    def __init__(self, message: str, file: str | None = None, line: int | None = None):
        where = f"{file}:{line}: " if file and line else (f"{file}: " if file else "")
        super().__init__(where + message)
        self.file, self.line, self.bare = file, line, message


class PluginTimeout(PluginError):
    """A plug-in's import or call ran past its time limit (the worker was killed)."""


class Worker:
    """One worker process serving requests within time limits (restarted after a kill or a crash)."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.loaded: set[str] = set()
        self._buf = b""
        self._lock = threading.Lock()

    def _start(self) -> subprocess.Popen[bytes]:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = subprocess.Popen(
                [sys.executable, "-s", str(WORKER_SCRIPT), str(os.getpid())],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                close_fds=True,
                cwd="/",
            )
            self.loaded, self._buf = set(), b""
        return self.proc

    def close(self) -> None:
        """Kill the worker (its whole process group) and forget what it had loaded."""
        proc, self.proc = self.proc, None
        self.loaded, self._buf = set(), b""
        if proc is None:
            return
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        for f in (proc.stdin, proc.stdout):
            try:
                f.close()  # type: ignore[union-attr]
            except OSError:
                pass

    def request(self, msg: Mapping[str, Any], limit_s: float, what: str, file: str | None = None) -> dict[str, Any]:
        """Send one request and wait at most ``limit_s`` for its reply; a timeout or a dead worker
        kills it and raises (PluginTimeout / PluginError)."""
        with self._lock:
            proc = self._start()
            assert proc.stdin is not None and proc.stdout is not None
            try:
                proc.stdin.write((json.dumps(msg) + "\n").encode())
                proc.stdin.flush()
            except (BrokenPipeError, OSError):
                self.close()
                raise PluginError(f"{what}: the plug-in worker died", file) from None
            fd = proc.stdout.fileno()
            deadline = time.monotonic() + limit_s
            while b"\n" not in self._buf:
                left = deadline - time.monotonic()
                ready = select.select([fd], [], [], max(0.0, left))[0] if left > 0 else []
                if not ready:
                    self.close()
                    raise PluginTimeout(
                        f"{what} did not finish within {limit_s:g} s (an endless loop or a wait?); stopped", file
                    )
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    code = proc.poll()
                    self.close()
                    raise PluginError(f"{what}: the plug-in worker exited (code {code})", file)
                self._buf += chunk
            line, _, self._buf = self._buf.partition(b"\n")
        return json.loads(line)

    def load(self, sha: str, file: str, source: str, limit_s: float | None = None) -> dict[str, Any]:
        """Import a plug-in in the worker (once per worker and code hash); raises PluginError with the line."""
        reply = self.request(
            {"op": "load", "sha": sha, "file": file, "source": source},
            import_limit_s() if limit_s is None else limit_s,
            "importing the plug-in",
            file,
        )
        if not reply.get("ok"):
            raise PluginError(str(reply.get("error")), file, reply.get("line"))
        self.loaded.add(sha)
        return reply

    def call(self, sha: str, file: str, kind: str, name: str, args: list[Any], limit_s: float | None = None) -> Any:
        reply = self.request(
            {"op": "call", "sha": sha, "kind": kind, "name": name, "args": args},
            call_limit_s() if limit_s is None else limit_s,
            f"{name}{tuple(args)!r}"[:200],
            file,
        )
        if not reply.get("ok"):
            raise PluginError(f"{name}: {reply.get('error')}", file, reply.get("line"))
        return reply.get("value")


_WORKER: Worker | None = None


def shared_worker() -> Worker:
    """This process's worker for plug-ins in force (started at the first call)."""
    global _WORKER
    if _WORKER is None:
        _WORKER = Worker()
    return _WORKER


def call_entry(entry: Mapping[str, Any], kind: str, name: str, args: list[Any]) -> Any:
    """Call ``name`` of the plug-in ``entry`` (``{"plugin", "sha", "file", "source"}``, as a knob
    snapshot carries it) in the shared worker, loading the plug-in there first if needed."""
    w = shared_worker()
    sha, file = entry["sha"], entry.get("file") or f"plugins/{entry['plugin']}.py"
    if sha not in w.loaded or w.proc is None:
        w.load(sha, file, entry["source"])
    return w.call(sha, file, kind, name, args)
