"""Following a live run from outside: its progress, and when the next meta-agent turn is due.

Both ``eau supervise`` and ``eau autopilot`` are separate processes next to ``eau train``. They only
read the run folder (``status.json``, ``metrics.jsonl``); the trainer never reads anything they write,
so it never waits on them.

Progress is counted in *completed steps*: a step is complete once its ``metrics.jsonl`` line exists
(the trainer writes it at the end of the step, then moves on to the next one at once).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from harness.io import jsonl
from harness.runs import reader


@dataclass(frozen=True)
class RunProgress:
    """What a supervisor needs to know about a run at one moment.

    completed: steps with a metrics line (the last metrics step + 1; 0 before the first step ends).
    total: the run's planned steps (``status.json`` ``total_steps``), None when unknown.
    state: ``status.json`` state (running | finished | failed | interrupted), None without a status.
    live: state is running and the trainer's process exists on this host.
    knobs_dir: the knobs folder the run trains from (its ``status.json`` ``knobs_dir``).
    """

    completed: int
    total: int | None
    state: str | None
    live: bool
    knobs_dir: str | None


def ended_text(prog: RunProgress) -> str:
    """Why a run is not live, in a few words (``run finished``, ``run failed``, ...)."""
    if prog.state == "running":  # its status says running, but the trainer process is gone
        return "run not live (its trainer process is gone)"
    return f"run {prog.state or 'has no status'}"


def progress(run_dir: Path) -> RunProgress:
    """Read the run's progress now (tolerates a missing or half-written folder)."""
    st = reader.status(run_dir) or {}
    last = jsonl.tail(Path(run_dir) / "metrics.jsonl", 1)
    step = last[0].get("step") if last else None
    completed = step + 1 if isinstance(step, int) else 0
    total = st.get("total_steps") if isinstance(st.get("total_steps"), int) else None
    return RunProgress(
        completed=completed, total=total, state=st.get("state"), live=reader.is_live(st), knobs_dir=st.get("knobs_dir")
    )


def wait_for_run(
    runs_dir: Path, run: str, timeout_s: float, poll_s: float = 1.0, sleep: Callable[[float], None] = time.sleep
) -> Path | None:
    """The run folder once it exists with a ``status.json`` (the trainer may still be starting); None
    after ``timeout_s`` seconds."""
    t_end = time.monotonic() + max(0.0, timeout_s)
    while True:
        path = reader.find_run(runs_dir, run)
        if path is not None and (path / "status.json").exists():
            return path
        if time.monotonic() >= t_end:
            return None
        sleep(poll_s)


@dataclass
class Schedule:
    """Turns due every ``every`` completed steps (at N, 2N, 3N, ...), never queued.

    A multiple passed while a turn is still running is *skipped* (counted in ``skipped``), not
    queued: a meta-agent that falls behind looks at the newest state, not at every missed one.
    """

    every: int
    next_due: int = 0
    skipped: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.every < 1:
            raise ValueError(f"--every must be at least 1 step, got {self.every}")
        if self.next_due <= 0:
            self.next_due = self.every

    def _advance(self, completed: int) -> None:
        self.next_due = (completed // self.every + 1) * self.every

    def due(self, completed: int) -> bool:
        """True when ``completed`` reached the next multiple; the schedule then moves past it."""
        if completed < self.next_due:
            return False
        self._advance(completed)
        return True

    def pass_busy(self, completed: int) -> None:
        """Called while a turn is running: record the multiples passed meanwhile as skipped."""
        while completed >= self.next_due:
            self.skipped.append(self.next_due)
            self.next_due += self.every

    def to_json(self) -> dict[str, Any]:
        return {"every": self.every, "next_due": self.next_due, "skipped": list(self.skipped)}
