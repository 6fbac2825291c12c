"""The code sandbox: run untrusted task code (references and agent answers) in a separate process.

Every run starts a fresh interpreter (``python -s -S -c <runner>``, see ``child.py`` for what
the child does) in a new session, with stdin from /dev/null, a minimal environment, its own
throw-away working directory, resource limits and, when the caller is root (as in our
containers), kernel isolation: new pid/net/mount/IPC/UTS namespaces, a file system built from an
allow list (the standard library, the installed packages and the shared libraries, read-only, a
few device files, a fresh /proc and the working directory; nothing else of the host exists for the
code), and a fresh unprivileged uid. ``isolation_report()`` says which layers are active on this
machine. The child dies with its caller, whatever the caller died of (``PR_SET_PDEATHSIG``; in
kernel mode with everything it started, through the pid namespace).

The caller enforces the wall-clock budgets from outside: the child reports each outcome as one
JSON line before it starts the next call; when a call overruns (or crashes the interpreter, or
floods the output), the process group is killed, that call is recorded as failed and a new child
runs the remaining calls. The working directory is removed after each run (in kernel mode it only
ever exists inside the sandbox); folders left by a caller that was killed are removed by the next
caller's first run.

Public API::

    run_calls(source, calls, limits) -> list[CallResult]   # execute source once, evaluate calls
    run_source(source, calls=(), limits) -> RunResult      # the same with module outcome, output, isolation
    pass_fraction(reference, candidate) -> float           # share of calls whose outcomes match
    isolation_report() -> dict                             # active isolation layers (cached)

Equality of values: ``harness.sandbox.values`` (Python ``==`` on plain data, float tolerance),
computed on the child's canonical encoding: comparing never raises and never converts a number.
"""

from __future__ import annotations

import json
import marshal
import os
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Sequence

from harness.io.processes import pid_alive
from harness.sandbox.values import render, values_equal, well_formed

CHILD_SCRIPT = Path(__file__).with_name("child.py")
ISOLATION_MODES = ("auto", "kernel", "process")

# Call statuses. Only "ok" and "raised" are outcomes of the code itself that can match a
# reference; the others are failures that never pass.
OK, RAISED, TIMEOUT, CRASHED = "ok", "raised", "timeout", "crashed"
UNSUPPORTED, TOO_LARGE, OUTPUT_LIMIT = "unsupported", "too_large", "output_limit"
MODULE_ERROR, NOT_RUN = "module_error", "not_run"
STATUSES = (OK, RAISED, TIMEOUT, CRASHED, UNSUPPORTED, TOO_LARGE, OUTPUT_LIMIT, MODULE_ERROR, NOT_RUN)

# Sandbox uids are drawn per child from this range, so that every sandbox has its own uid: the
# kernel then enforces RLIMIT_NPROC per sandbox and kill(-1) inside one reaches only itself.
UID_BASE, UID_SPAN = 1_500_000_000, 100_000_000
_GRACE = 0.5  # seconds the caller waits past a budget for the child's own timer to report
_MiB = 1 << 20


class SandboxError(RuntimeError):
    """The sandbox itself could not run (interpreter did not start, required isolation missing).
    Never raised for anything the sandboxed code does."""


@dataclass(frozen=True)
class Limits:
    """Limits of one sandbox run. Every field is checked on construction.

    call_time: wall seconds one call may take (including encoding its value).
    module_time: wall seconds executing the source once as a module may take.
    total_time: wall seconds for the whole run, restarts after killed calls included; calls not
        reached are recorded as ``not_run``.
    startup_time: wall seconds the interpreter may take to start and isolate itself (not charged
        to the code; exceeding it raises SandboxError).
    cpu_time: CPU seconds per child process (RLIMIT_CPU soft limit; SIGKILL one second later).
    memory_bytes: address-space limit per process (RLIMIT_AS); large enough to import numpy.
    max_processes: processes and threads of the sandbox uid (RLIMIT_NPROC; kernel mode only,
        because the limit counts per uid and is not enforced for root).
    file_size_bytes: largest file the code may write (RLIMIT_FSIZE; a larger write raises OSError).
    workdir_bytes: size of the working directory's tmpfs in kernel mode (all files together).
    open_files: open file descriptors per process (RLIMIT_NOFILE).
    output_bytes: stdout+stderr bytes the caller reads; beyond, the child is killed and the
        running call fails with ``output_limit``.
    keep_output_bytes: how much of that output is kept on ``RunResult.output`` for diagnostics.
    result_bytes: bytes of result records the caller reads in one child (kill beyond).
    value_bytes: largest encoded value of one call (``too_large`` beyond).
    recursion_limit: ``sys.setrecursionlimit`` in the child; deep enough for recursive answers.
    seed: base of the per-call seeds of ``random`` (and numpy's global RNG when imported); the same
        for reference and candidate, so random-using code is deterministic.
    isolation: "auto" (kernel isolation when available, else process), "kernel" (require it;
        SandboxError when unavailable) or "process" (limits, session and Python guards only).
    python_guards: install the child's audit hook (process creation, signals, sockets, ctypes,
        writes outside the working directory). Off only to test the kernel layer on its own.
    allow_paths: extra folders the code may read in kernel mode (read-only; e.g. packages outside
        site-packages that tasks import). Everything not allowed is absent; see ``isolation_report``.
    tmp_root: where working directories are created (None: the system temp folder).
    """

    call_time: float = 2.0
    module_time: float = 5.0
    total_time: float = 60.0
    startup_time: float = 15.0
    cpu_time: int = 30
    memory_bytes: int = 2048 * _MiB
    max_processes: int = 16
    file_size_bytes: int = 16 * _MiB
    workdir_bytes: int = 64 * _MiB
    open_files: int = 64
    output_bytes: int = 1 * _MiB
    keep_output_bytes: int = 8192
    result_bytes: int = 8 * _MiB
    value_bytes: int = 512 * 1024
    recursion_limit: int = 20_000
    seed: int = 0
    isolation: str = "auto"
    python_guards: bool = True
    allow_paths: tuple[str, ...] = ()
    tmp_root: str | None = None

    def __post_init__(self) -> None:
        positive = {
            "call_time",
            "module_time",
            "total_time",
            "startup_time",
            "cpu_time",
            "memory_bytes",
            "max_processes",
            "file_size_bytes",
            "workdir_bytes",
            "open_files",
            "output_bytes",
            "result_bytes",
            "value_bytes",
            "recursion_limit",
        }
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name in positive:
                if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
                    raise ValueError(f"sandbox Limits.{f.name} must be a positive number, got {v!r}")
        for name in (
            "cpu_time",
            "memory_bytes",
            "max_processes",
            "file_size_bytes",
            "workdir_bytes",
            "open_files",
            "output_bytes",
            "result_bytes",
            "value_bytes",
            "recursion_limit",
        ):
            if not isinstance(getattr(self, name), int):
                raise ValueError(f"sandbox Limits.{name} must be an integer, got {getattr(self, name)!r}")
        if not isinstance(self.keep_output_bytes, int) or self.keep_output_bytes < 0:
            raise ValueError(
                f"sandbox Limits.keep_output_bytes must be an integer >= 0, got {self.keep_output_bytes!r}"
            )
        if self.isolation not in ISOLATION_MODES:
            raise ValueError(
                f"sandbox Limits.isolation must be one of {', '.join(ISOLATION_MODES)}, got {self.isolation!r}"
            )
        if not isinstance(self.allow_paths, tuple) or not all(
            isinstance(p, str) and os.path.isabs(p) for p in self.allow_paths
        ):
            raise ValueError(
                f"sandbox Limits.allow_paths must be a tuple of absolute folder paths, got {self.allow_paths!r}"
            )

    def child_limits(self) -> dict[str, Any]:
        """The limits the child applies itself."""
        keys = (
            "call_time",
            "module_time",
            "cpu_time",
            "memory_bytes",
            "max_processes",
            "file_size_bytes",
            "workdir_bytes",
            "open_files",
            "value_bytes",
            "recursion_limit",
            "seed",
        )
        return {k: getattr(self, k) for k in keys}


@dataclass
class CallResult:
    """Outcome of one call.

    status: one of ``STATUSES``. value: the canonical encoding (``ok`` only). error: exception type
    name for ``raised`` (``ZeroDivisionError``; non-builtin types are module-qualified), else a
    short failure kind. message: detail text (exception message, limit hit). seconds: wall time.
    """

    call: str
    status: str
    value: Any = None
    error: str | None = None
    message: str = ""
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == OK

    def matches(self, reference: CallResult) -> bool:
        """Whether this outcome counts as passing against ``reference``'s outcome of the same call:
        equal values, or the same exception type raised by both. Never raises."""
        if self.status == OK and reference.status == OK:
            return values_equal(self.value, reference.value)
        if self.status == RAISED and reference.status == RAISED:
            return self.error == reference.error
        return False

    def describe(self) -> str:
        """One line for logs and reports."""
        if self.status == OK:
            return f"{self.call} -> {render(self.value)}"
        detail = f"{self.error}: {self.message}" if self.message else (self.error or "")
        return f"{self.call} -> {self.status} ({detail})"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class RunResult:
    """Everything about one sandbox run.

    module_status/module_error/module_message: outcome of executing the source once (``ok`` or a
    failure status as for calls). calls: one CallResult per requested call, in order. output: the
    first ``keep_output_bytes`` of stdout+stderr (all children). output_bytes: total seen.
    processes: children started (1 + restarts). isolation: what the child reported
    (see ``isolation_report``). wall_seconds: the whole run.
    """

    module_status: str
    module_error: str | None
    module_message: str
    calls: list[CallResult]
    output: str = ""
    output_bytes: int = 0
    processes: int = 0
    isolation: dict[str, Any] = field(default_factory=dict)
    wall_seconds: float = 0.0

    @property
    def module_ok(self) -> bool:
        return self.module_status == OK


# --------------------------------------------------------------------------- child launch
_RUNNER_SOURCE: str | None = None
_RUNNER_LOCK = threading.Lock()


def _runner_source() -> str:
    # The runner is passed with -c so that no folder of this package lands on the child's
    # sys.path (a module of the package, such as harness/types.py, could shadow a standard-library one).
    # Interpreter flags: -s (no user site), -S (no site processing; see _site_dirs).
    global _RUNNER_SOURCE
    with _RUNNER_LOCK:
        if _RUNNER_SOURCE is None:
            _RUNNER_SOURCE = CHILD_SCRIPT.read_text()
        return _RUNNER_SOURCE


def _site_dirs() -> list[str]:
    """The interpreter's site-packages folders. The child runs with -S (processing .pth files,
    editable-install finders and the like costs ~0.1 s per start) and adds these folders itself:
    installed packages (numpy) import, this project's editable install does not."""
    import site

    dirs = [d for d in site.getsitepackages() if os.path.isdir(d)]
    return dirs


def _child_env(workdir: str) -> dict[str, str]:
    # Built from scratch: nothing of the caller's environment (tokens, keys) reaches the code.
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": workdir,
        "TMPDIR": workdir,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONHASHSEED": "0",  # set and dict-of-str iteration order identical in every run
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
        "PYTHONIOENCODING": "utf-8",
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }


# This project's top-level package: never importable by sandboxed code (the procedural tasks'
# references are generated by it), even when installed into a site folder the sandbox sees.
PROJECT_PACKAGES = ("harness",)
WORKDIR_PREFIX = "eau-sbx-"
_CLEANED_ROOTS: set[str] = set()
_CLEAN_LOCK = threading.Lock()


def _workdir_root(limits: Limits) -> str:
    return os.path.realpath(limits.tmp_root or tempfile.gettempdir())


def remove_stale_workdirs(root: str) -> list[str]:
    """Remove working folders (``eau-sbx-<pid>-...``) whose caller process is gone: a caller that
    was SIGKILLed mid-run (process mode keeps files there) cannot clean up after itself."""
    removed = []
    try:
        entries = list(os.scandir(root))
    except OSError:
        return removed
    for entry in entries:
        if not entry.name.startswith(WORKDIR_PREFIX):
            continue
        pid_text = entry.name[len(WORKDIR_PREFIX) :].split("-", 1)[0]
        if pid_text.isdigit() and not pid_alive(int(pid_text)):
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(entry.path)
    return removed


def _clean_once(root: str) -> None:
    with _CLEAN_LOCK:
        if root in _CLEANED_ROOTS:
            return
        _CLEANED_ROOTS.add(root)
    remove_stale_workdirs(root)


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "did not exit"
    sig = -code if code < 0 else (code - 128 if code > 128 else 0)
    if sig:
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        hint = {
            "SIGKILL": " (CPU limit, memory or a kill)",
            "SIGXCPU": " (CPU limit)",
            "SIGSEGV": " (crash, e.g. C stack overflow)",
        }.get(name, "")
        return f"killed by {name}{hint}"
    return f"exited with code {code}"


class _Fds:
    """Pipe ends of one attempt, each closed exactly once (a double close could hit a descriptor
    number another thread has reused)."""

    def __init__(self, job_r: int, job_w: int, res_r: int, res_w: int):
        self.job_r, self.job_w, self.res_r, self.res_w = job_r, job_w, res_r, res_w
        self._open = {"job_r", "job_w", "res_r", "res_w"}

    def close(self, name: str) -> None:
        if name in self._open:
            self._open.discard(name)
            os.close(getattr(self, name))

    def close_all(self) -> None:
        for name in sorted(self._open):
            self.close(name)


class _Attempt:
    """One child process running the source and calls ``start..``; the caller reads outcomes."""

    def __init__(
        self, source: str, calls: Sequence[str], start: int, limits: Limits, total_deadline: float, output_budget: int
    ):
        self.source, self.calls, self.start, self.limits = source, list(calls), start, limits
        self.total_deadline = total_deadline
        self.output_budget = output_budget
        self.hello: dict[str, Any] | None = None
        self.module: dict[str, Any] | None = None
        self.records: dict[int, dict[str, Any]] = {}
        self.failure: tuple[str, str, str] | None = None  # (status, error, message) of the item in flight
        self.output = bytearray()
        self.output_seen = 0
        self.fatal: str | None = None

    def in_flight(self) -> str | int | None:
        """What the child was doing when it stopped: "startup", "module", a call index, or None."""
        if self.hello is None:
            return "startup"
        if self.module is None:
            return "module"
        nxt = self.start + len(self.records)
        return nxt if nxt < len(self.calls) else None

    def run(self) -> None:
        lim = self.limits
        root = _workdir_root(lim)
        _clean_once(root)
        # The caller's pid in the name: a later caller removes it if this one is killed (see above).
        workdir = tempfile.mkdtemp(prefix=f"{WORKDIR_PREFIX}{os.getpid()}-", dir=root)
        os.chmod(workdir, 0o700)
        job = {
            "source": self.source,
            "calls": self.calls,
            "start": self.start,
            "limits": lim.child_limits(),
            "workdir": os.path.realpath(workdir),
            "uid": UID_BASE + secrets.randbelow(UID_SPAN),
            "isolation": lim.isolation,
            "python_guards": lim.python_guards,
            "allow_paths": [os.path.realpath(p) for p in lim.allow_paths],
            "site_dirs": _site_dirs(),
            "project_packages": list(PROJECT_PACKAGES),
        }
        job_bytes = marshal.dumps(job)  # caller -> child only; results come back as JSON
        fds = _Fds(*os.pipe(), *os.pipe())  # job_r, job_w, res_r, res_w
        proc = None
        try:
            proc = subprocess.Popen(
                [sys.executable, "-s", "-S", "-c", _runner_source(), str(fds.job_r), str(fds.res_w), str(os.getpid())],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                pass_fds=(fds.job_r, fds.res_w),
                cwd="/",
                env=_child_env(job["workdir"]),
                start_new_session=True,
                close_fds=True,
            )
            # The child holds its own copies; ours must go so that EOF means the child is done.
            fds.close("job_r")
            fds.close("res_w")
            self._talk(proc, fds, job_bytes)
        finally:
            fds.close_all()
            if proc is not None:
                self._kill(proc)
                if proc.stdout:
                    proc.stdout.close()
            shutil.rmtree(workdir, ignore_errors=True)

    @staticmethod
    def _kill(proc: subprocess.Popen) -> None:
        # The whole session's process group (in kernel mode that includes pid 1 of the sandbox's
        # pid namespace, whose death takes everything in the namespace with it), then the child.
        for kill in (lambda: os.killpg(proc.pid, signal.SIGKILL), proc.kill):
            try:
                kill()
            except (ProcessLookupError, PermissionError, OSError):
                pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def _deadline(self, phase_started: float) -> float:
        lim = self.limits
        flight = self.in_flight()
        if flight == "startup":
            budget = lim.startup_time
        elif flight == "module":
            budget = lim.module_time + _GRACE
        elif flight is None:
            budget = 2.0  # all reported; the child only has to exit
        else:
            budget = lim.call_time + _GRACE
        end = phase_started + budget
        return end if flight == "startup" else min(end, self.total_deadline)

    def _talk(self, proc: subprocess.Popen, fds: _Fds, job_bytes: bytes) -> None:
        out_fd, job_w, res_r = proc.stdout.fileno(), fds.job_w, fds.res_r
        os.set_blocking(job_w, False)
        sel = selectors.DefaultSelector()
        sel.register(job_w, selectors.EVENT_WRITE, "job")
        sel.register(res_r, selectors.EVENT_READ, "res")
        sel.register(out_fd, selectors.EVENT_READ, "out")
        pending = memoryview(job_bytes)
        buf = bytearray()
        res_seen = 0
        open_reads = 2
        phase_started = time.monotonic()
        try:
            while open_reads:
                deadline = self._deadline(phase_started)
                now = time.monotonic()
                if now >= deadline:
                    self._stop(TIMEOUT)
                    return
                for key, _ in sel.select(deadline - now):
                    if key.data == "job":
                        try:
                            n = os.write(job_w, pending)
                        except (BrokenPipeError, OSError):
                            n = len(pending)
                        pending = pending[n:]
                        if not pending:
                            sel.unregister(job_w)
                            fds.close("job_w")
                        continue
                    data = os.read(key.fd, 1 << 16)
                    if not data:
                        sel.unregister(key.fd)
                        open_reads -= 1
                        continue
                    if key.data == "out":
                        self.output_seen += len(data)
                        room = self.limits.keep_output_bytes - len(self.output)
                        if room > 0:
                            self.output += data[:room]
                        if self.output_seen > self.output_budget:
                            self._stop(OUTPUT_LIMIT, f"printed more than {self.limits.output_bytes} bytes")
                            return
                        continue
                    res_seen += len(data)
                    if res_seen > self.limits.result_bytes:
                        self._stop(OUTPUT_LIMIT, f"results exceeded {self.limits.result_bytes} bytes")
                        return
                    buf += data
                    while b"\n" in buf:
                        line, _, rest = bytes(buf).partition(b"\n")
                        buf = bytearray(rest)
                        if not self._accept(line):
                            return
                        phase_started = time.monotonic()
        finally:
            sel.close()
        # Both pipes closed: the child is gone (or closed them). Anything still in flight crashed.
        try:
            proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            pass
        if self.in_flight() is not None and self.failure is None and self.fatal is None:
            if self.in_flight() == "startup":
                self.fatal = f"sandbox child {_describe_exit(proc.poll())} before starting"
            else:
                self.failure = (CRASHED, "Crashed", _describe_exit(proc.poll()))

    def _stop(self, status: str, message: str = "") -> None:
        flight = self.in_flight()
        if flight == "startup":
            self.fatal = (
                f"sandbox child did not start within {self.limits.startup_time}s"
                if status == TIMEOUT
                else f"sandbox child failed while starting ({status})"
            )
            return
        if status == TIMEOUT and not message:
            budget = self.limits.module_time if flight == "module" else self.limits.call_time
            message = f"exceeded {budget}s (killed)"
            if time.monotonic() >= self.total_deadline:
                message = f"run exceeded total_time {self.limits.total_time}s (killed)"
        self.failure = (status, {TIMEOUT: "Timeout", OUTPUT_LIMIT: "OutputLimit"}.get(status, status), message)

    def _accept(self, line: bytes) -> bool:
        """Record one result line; False (and a crash of the item in flight) when it is malformed."""
        try:
            rec = json.loads(line)
            kind = rec["kind"]
        except (ValueError, KeyError, TypeError, RecursionError):
            rec, kind = None, None
        flight = self.in_flight()
        if kind == "hello" and flight == "startup" and isinstance(rec, dict):
            self.hello = rec
            if "fatal" in rec:
                self.fatal = f"required kernel isolation is unavailable: {rec['fatal']}"
                return False
            return True
        if kind == "module" and flight == "module" and isinstance(rec.get("ok"), bool):
            # Forgeable by code at module level: only well-typed, short fields are kept.
            status = rec.get("status", RAISED)
            self.module = {
                "ok": rec["ok"],
                "status": status if status in STATUSES else RAISED,
                "error": None if rec.get("error") is None else str(rec["error"])[:200],
                "message": str(rec.get("message", ""))[:1000],
            }
            return True
        if (
            kind == "call"
            and isinstance(flight, int)
            and rec.get("index") == flight
            and rec.get("status") in STATUSES
            and (rec["status"] != OK or well_formed(rec.get("value")))
        ):
            # Text fields are only displayed; keep them short and of the right type.
            rec["error"] = None if rec.get("error") is None else str(rec["error"])[:200]
            rec["message"] = str(rec.get("message", ""))[:1000]
            rec["seconds"] = rec["seconds"] if isinstance(rec.get("seconds"), (int, float)) else 0.0
            self.records[flight] = rec
            return True
        if flight == "startup":
            self.fatal = "sandbox child sent a malformed first record"
        else:
            self.failure = (CRASHED, "ProtocolError", "malformed result record from the sandbox")
        return False


# --------------------------------------------------------------------------- public API
def run_source(source: str, calls: Sequence[str] = (), limits: Limits | None = None) -> RunResult:
    """Execute ``source`` once as a module, then evaluate each call expression in its namespace.

    Every call has its own ``limits.call_time`` budget, enforced from outside; a call that had to be
    killed is recorded (timeout, crash, output limit) and the remaining calls run in a new child.
    Raises SandboxError only when the sandbox itself cannot run; ValueError on bad arguments.
    """
    if not isinstance(source, str):
        raise ValueError(f"sandbox source must be a str, got {type(source).__name__}")
    calls = list(calls)
    for i, c in enumerate(calls):
        if not isinstance(c, str) or not c.strip():
            raise ValueError(f"sandbox call #{i} must be a non-empty expression string, got {c!r}")
    limits = limits or Limits()
    t0 = time.monotonic()
    total_deadline = t0 + limits.total_time
    results: list[CallResult | None] = [None] * len(calls)
    module_status, module_error, module_message = NOT_RUN, None, ""
    output, output_seen, processes = bytearray(), 0, 0
    isolation: dict[str, Any] = {}
    start = 0
    while True:
        att = _Attempt(source, calls, start, limits, total_deadline, limits.output_bytes - output_seen)
        att.run()
        processes += 1
        output += att.output[: max(0, limits.keep_output_bytes - len(output))]
        output_seen += att.output_seen
        if att.fatal:
            raise SandboxError(f"{att.fatal}; output: {bytes(att.output[:2000]).decode(errors='replace')}")
        isolation = dict(att.hello.get("isolation", {})) if att.hello else isolation
        if start > 0 and att.module is None and time.monotonic() >= total_deadline:
            # The rerun's module load was cut by total_time, not failed: the calls were never reached.
            for i in range(start, len(calls)):
                results[i] = CallResult(calls[i], NOT_RUN, error="NotRun", message="total_time exhausted")
            break
        if att.module is None or not att.module["ok"]:
            if att.module is not None:
                status, err, msg = (
                    att.module.get("status", RAISED),
                    att.module.get("error"),
                    att.module.get("message", ""),
                )
            else:
                status, err, msg = att.failure or (CRASHED, "Crashed", "stopped without a reason")
            if start == 0:
                module_status, module_error, module_message = status, err, msg
            # Every call not done fails with the module's outcome (on a rerun after a killed call,
            # the module failed this time: a nondeterministic module or a limit).
            where = "module" if start == 0 else "module (rerun)"
            for i in range(start, len(calls)):
                results[i] = CallResult(calls[i], MODULE_ERROR, error=err, message=f"{where} {status}: {msg}")
            break
        module_status = OK
        for i, rec in att.records.items():
            results[i] = CallResult(
                calls[i],
                rec["status"],
                rec.get("value"),
                rec.get("error"),
                rec.get("message", ""),
                float(rec.get("seconds", 0.0)),
            )
        flight = att.in_flight()
        if flight is None:
            break
        status, err, msg = att.failure or (CRASHED, "Crashed", "stopped without a reason")
        results[flight] = CallResult(
            calls[flight], status, error=err, message=msg, seconds=limits.call_time if status == TIMEOUT else 0.0
        )
        start = flight + 1
        if start >= len(calls):
            break
        if time.monotonic() >= total_deadline or output_seen > limits.output_bytes:
            why = "total_time exhausted" if time.monotonic() >= total_deadline else "output limit reached"
            for i in range(start, len(calls)):
                results[i] = CallResult(calls[i], NOT_RUN, error="NotRun", message=why)
            break
    return RunResult(
        module_status,
        module_error,
        module_message,
        [r if r is not None else CallResult(calls[i], NOT_RUN, error="NotRun") for i, r in enumerate(results)],
        output=bytes(output).decode("utf-8", errors="replace"),
        output_bytes=output_seen,
        processes=processes,
        isolation=isolation,
        wall_seconds=time.monotonic() - t0,
    )


def run_calls(source: str, calls: Sequence[str], limits: Limits | None = None) -> list[CallResult]:
    """Outcomes of ``calls`` after executing ``source`` once (see :func:`run_source`)."""
    return run_source(source, calls, limits).calls


def pass_fraction(reference: Sequence[CallResult], candidate: Sequence[CallResult]) -> float:
    """Share of calls whose candidate outcome matches the reference outcome (0.0 for no calls)."""
    if len(reference) != len(candidate):
        raise ValueError(f"reference has {len(reference)} outcomes, candidate {len(candidate)}")
    if not reference:
        return 0.0
    return sum(c.matches(r) for r, c in zip(reference, candidate)) / len(reference)


_ISOLATION_CACHE: dict[tuple[str, bool], dict[str, Any]] = {}


def isolation_report(limits: Limits | None = None) -> dict[str, Any]:
    """The isolation layers a child actually got on this machine, as the child reported them (cached):

    mode: "kernel" or "process"; filesystem: "allow_list" (kernel mode: ``visible`` lists the host
    paths that exist for the code, ``covered`` this project's package found inside one of them) or
    "host" (process mode: the code can read whatever the caller's uid can); pid_namespace: whether
    the code runs in its own pid namespace (it cannot see or signal other processes, and its
    processes die with it); network: "none" or "host"; uid: the sandbox's own uid (kernel mode);
    guards: the Python audit hook; dies_with_caller: PR_SET_PDEATHSIG armed; kernel_error: why
    kernel isolation is not active, when it was tried.
    """
    limits = limits or Limits()
    key = (limits.isolation, limits.python_guards)
    if key not in _ISOLATION_CACHE:
        _ISOLATION_CACHE[key] = run_source("", (), limits).isolation
    return dict(_ISOLATION_CACHE[key])
