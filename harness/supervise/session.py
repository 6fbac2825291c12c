"""One meta-agent session: its folder, its process, its bounds and its record.

Folder ``runs/<id>/meta/session_NNN/``:

    prompt.txt            the prompt the agent got
    command.json          argv, cwd, the EAU_* variables set, every environment key passed (names
                          only), the agent kind, timeout, notes
    transcript.stdout     the agent's stdout (Claude Code / Codex JSON output)
    transcript.stderr     the agent's stderr
    result.json           written when the session ends (fields on :meth:`Session.result`)

The agent runs in its own process group (``start_new_session``) with stdout/stderr going straight to
the transcript files, so nothing here blocks on it. When the wall-clock timeout passes, the whole
group gets SIGTERM and, after a grace period, SIGKILL; processes the agent leaves behind when it
exits are ended the same way, so no session outlives its record.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from harness.experience.finding import FILE_RE
from harness.experience.pool import atomic_write
from harness.io import jsonl
from harness.supervise.agents import AgentCommand, failure_message, parse_output

KILL_GRACE_S = 5.0  # seconds between SIGTERM and SIGKILL: enough for an agent CLI to flush its output
MAX_SESSIONS_DIR = 999  # session_NNN: three digits


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def allocate_dir(meta_dir: Path) -> tuple[int, Path]:
    """The next free ``session_NNN`` folder, created atomically (two supervisors never share one)."""
    meta_dir.mkdir(parents=True, exist_ok=True)
    taken = [int(p.name[8:]) for p in meta_dir.glob("session_*") if p.name[8:].isdigit()]
    n = max(taken, default=0) + 1
    while n <= MAX_SESSIONS_DIR:
        path = meta_dir / f"session_{n:03d}"
        try:
            path.mkdir()
            return n, path
        except FileExistsError:
            n += 1
    raise RuntimeError(f"{meta_dir}: all {MAX_SESSIONS_DIR} session folders are taken")


def _finding_files(pool_dir: Path) -> set[str]:
    return {p.name for p in Path(pool_dir).glob("F-*.md")} if Path(pool_dir).is_dir() else set()


def _pending_writes(knobs_dir: Path | None, since_unix: float) -> list[dict[str, Any]]:
    """Agent writes the live run has not applied yet (``knobs/.pending`` attributions since ``since_unix``)."""
    if knobs_dir is None:
        return []
    out = []
    for p in sorted((Path(knobs_dir) / ".pending").glob("*.json")):
        try:
            rec = json.loads(p.read_text())
        except (OSError, json.JSONDecodeError):
            continue  # applied and removed meanwhile, or being written
        if isinstance(rec, dict) and rec.get("author") == "agent" and float(rec.get("time", 0)) >= since_unix:
            out.append({k: rec.get(k) for k in ("knob", "gym", "new", "reason", "step_written", "source")})
    return out


def _same_write(event: dict[str, Any], write: dict[str, Any]) -> bool:
    return all(event.get(k) == write.get(k) for k in ("knob", "gym", "new", "reason"))


class Session:
    """A started agent session. ``poll()`` until it returns True, then ``finish()``."""

    def __init__(
        self,
        number: int,
        folder: Path,
        command: AgentCommand,
        prompt: str,
        *,
        cwd: Path,
        env: dict[str, str],
        env_added: dict[str, str],
        timeout_s: float,
        run_dir: Path,
        step: int,
        knobs_dir: Path | None,
        pool_dir: Path,
        kill_grace_s: float = KILL_GRACE_S,
    ):
        self.number, self.dir, self.command, self.prompt = number, Path(folder), command, prompt
        self.cwd, self.env, self.env_added = Path(cwd), env, env_added
        self.timeout_s, self.run_dir, self.step = float(timeout_s), Path(run_dir), step
        self.knobs_dir, self.pool_dir, self.kill_grace_s = knobs_dir, Path(pool_dir), kill_grace_s
        self.proc: subprocess.Popen[bytes] | None = None
        self.timed_out = False
        self.stopped: str | None = None  # why the supervisor stopped it early (signal), if it did
        self.error: str | None = None
        self._result: dict[str, Any] | None = None

    # ------------------------------------------------------------------ files
    @property
    def prompt_file(self) -> Path:
        return self.dir / "prompt.txt"

    @property
    def result_file(self) -> Path:
        return self.dir / "result.json"

    def _events_path(self) -> Path:
        return self.run_dir / "knob_events.jsonl"

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Write prompt.txt and command.json, then start the agent (never waits for it)."""
        self.prompt_file.write_text(self.prompt, encoding="utf-8")
        self.started_iso, self.started_unix, self._t0 = now_iso(), time.time(), time.monotonic()
        self._events_offset = len(jsonl.read(self._events_path()))
        self._findings_before = _finding_files(self.pool_dir)
        cmd_doc = {
            "session": self.number,
            "kind": self.command.kind,
            "argv": self.command.argv,
            "cwd": str(self.cwd.resolve()),
            "prompt_on_stdin": self.command.prompt_on_stdin,
            "env_set": self.env_added,
            "env_keys": sorted(self.env),
            "timeout_s": self.timeout_s,
            "notes": self.command.notes,
            "started": self.started_iso,
            "step": self.step,
        }
        atomic_write(self.dir / "command.json", json.dumps(cmd_doc, indent=2) + "\n")
        stdin = open(self.prompt_file, "rb") if self.command.prompt_on_stdin else subprocess.DEVNULL
        out = open(self.dir / "transcript.stdout", "wb")
        err = open(self.dir / "transcript.stderr", "wb")
        try:
            self.proc = subprocess.Popen(
                self.command.argv,
                cwd=self.cwd,
                env=self.env,
                stdin=stdin,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
        except OSError as exc:  # not found, not executable: recorded as a failed session
            self.error = f"could not start {self.command.argv[0]!r}: {exc.strerror or exc}"
        finally:
            for f in (out, err) + ((stdin,) if stdin is not subprocess.DEVNULL else ()):
                f.close()

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self._t0

    def poll(self) -> bool:
        """True once the agent has exited (or could not start); enforces the timeout."""
        if self.proc is None:
            return True
        if self.proc.poll() is not None:
            return True
        if self.elapsed_s > self.timeout_s:
            self.timed_out = True
            self.kill()
            return True
        return False

    def _signal_group(self, sig: int) -> bool:
        try:
            os.killpg(self.proc.pid, sig)  # the group id is the leader's pid (start_new_session)
            return True
        except (ProcessLookupError, PermissionError):
            return False

    def _group_alive(self) -> bool:
        return self._signal_group(0)

    def kill(self, why: str | None = None) -> None:
        """End the agent's whole process group: SIGTERM, then SIGKILL after the grace period."""
        if self.proc is None:
            return
        if why:
            self.stopped = why
        self._signal_group(signal.SIGTERM)
        t_end = time.monotonic() + self.kill_grace_s
        while time.monotonic() < t_end:
            if self.proc.poll() is not None and not self._group_alive():
                break
            time.sleep(0.05)
        self._signal_group(signal.SIGKILL)
        self.proc.wait()

    def finish(self) -> dict[str, Any]:
        """End leftovers of the group, read the transcript and the run's logs, write result.json."""
        if self.proc is not None:
            if self.proc.poll() is None:
                self.kill()
            elif self._group_alive():  # the agent exited but left processes behind
                self.kill()
        self.ended_iso, self.duration_s = now_iso(), round(self.elapsed_s, 3)
        self.step_at_end = self._completed_steps()
        found = sorted(_finding_files(self.pool_dir) - self._findings_before)
        stdout = (self.dir / "transcript.stdout").read_text(encoding="utf-8", errors="replace")
        res: dict[str, Any] = {
            "session": self.number,
            "kind": self.command.kind,
            "run": self.run_dir.name,
            "step_at_start": self.step,
            "step_at_end": self.step_at_end,
            "started": self.started_iso,
            "ended": self.ended_iso,
            "duration_s": self.duration_s,
            "exit_code": self.proc.returncode if self.proc is not None else None,
            "timed_out": self.timed_out,
            "stopped": self.stopped,
            "error": self.error,
            "knob_events": [],
            "pending_writes": [],
            "findings": [m.group(1) for n in found if (m := FILE_RE.match(n))],
            "transcript": {"stdout": "transcript.stdout", "stderr": "transcript.stderr"},
        }
        res.update(parse_output(self.command.kind, stdout))
        if res["error"] is None and not self.timed_out and not self.stopped and self.proc is not None:
            stderr = (self.dir / "transcript.stderr").read_text(encoding="utf-8", errors="replace")
            res["error"] = failure_message(self.command.kind, self.command.argv[0], self.proc.returncode, res, stderr)
        self._result = res
        self._collect_events(initial=True)
        return res

    def _completed_steps(self) -> int:
        last = jsonl.tail(self.run_dir / "metrics.jsonl", 1)
        return last[0]["step"] + 1 if last and isinstance(last[0].get("step"), int) else 0

    # ------------------------------------------------------------------ knob events of the session
    def _collect_events(self, initial: bool = False) -> bool:
        """Put the agent's knob events into the result: events the run logged since the session
        started (author agent), and writes still waiting for the run's next step boundary. Returns
        True when the result changed (and rewrites result.json)."""
        res = self._result
        assert res is not None
        if initial:  # read before the log: a write applied in between then shows up in the log
            res["pending_writes"] = _pending_writes(self.knobs_dir, self.started_unix)
        events = [e for e in jsonl.read(self._events_path())[self._events_offset :] if e.get("author") == "agent"]
        known = {e.get("id") for e in res["knob_events"]}
        changed = initial
        for e in events:
            if e.get("id") in known:
                continue
            # initially: everything logged since the session started; later: only what the run
            # applied from the session's own pending writes
            matches = [w for w in res["pending_writes"] if _same_write(e, w)]
            if matches or initial:
                res["knob_events"].append(e)
                for w in matches:
                    res["pending_writes"].remove(w)
                changed = True
        if changed:
            atomic_write(self.result_file, json.dumps(res, indent=2, default=str) + "\n")
        return changed

    def settle(self) -> bool:
        """Called after the session ended, while the run goes on: move writes the run has applied
        since from ``pending_writes`` to ``knob_events``. True when something moved."""
        if self._result is None or not self._result["pending_writes"]:
            return False
        return self._collect_events()

    @property
    def unsettled(self) -> bool:
        return bool(self._result and self._result["pending_writes"])

    @property
    def result(self) -> dict[str, Any] | None:
        """result.json's content: session, kind, run, step_at_start/end, started, ended, duration_s,
        exit_code, timed_out, stopped, error (could not start, or why it failed: the agent's own
        message, e.g. "claude failed (exit 1): Not logged in · Please run /login"), knob_events (the run's events authored by the agent
        during the session, then those it applied from the session's writes), pending_writes
        (writes not applied yet), findings (ids added to the pool), transcript, and what the
        output reported: cost_usd, num_turns, usage, agent_session_id, is_error, result, errors, commands."""
        return self._result
