"""``eau supervise``: start a coding agent with the skill every N steps of a live run.

The supervisor is its own process next to ``eau train``. It follows ``runs/<id>/status.json`` and
``metrics.jsonl``; each time the run completes a multiple of ``every`` steps and no session is still
running, it starts one session (:mod:`harness.supervise.session`) in ``cwd`` with a prompt from the
template (:mod:`harness.supervise.prompt`). The trainer never waits: it does not know the
supervisor exists, and knob changes the agent makes reach it through the knobs folder like any
other edit.

It stops when the run is no longer live (finished, failed, killed) and no session is running, when
``max_sessions`` sessions have ended, when ``max_failures`` sessions in a row failed (a broken
client), when recorded costs reach ``total_budget_usd``, or on SIGINT /
SIGTERM (the running session's process group is ended and recorded). A log of what it did is
appended to ``runs/<id>/meta/supervise.jsonl``.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from harness.experience.pool import DEFAULT_DIR as POOL_DEFAULT_DIR
from harness.io import jsonl
from harness.skill.install import repo_skill_dir, skill_front_matter
from harness.supervise import prompt as prompt_mod
from harness.supervise.agents import AgentOptions, build_command, session_env
from harness.supervise.runwatch import RunProgress, Schedule, ended_text, progress, wait_for_run
from harness.supervise.session import Session, allocate_dir, now_iso

DEFAULT_TIMEOUT_S = 1800.0  # a Claude Code / Codex session of a few dozen turns fits in 30 minutes
DEFAULT_MAX_SESSIONS = 10  # each session costs money: a bound unless the user raises it
# A client that fails at once (not logged in, a model error, a bad flag) fails the same way at the
# next trigger: three in a row is a broken client, not bad luck, and retrying only fills meta/.
DEFAULT_MAX_FAILURES = 3
DEFAULT_POLL_S = 2.0  # status.json is rewritten once per step (seconds to minutes apart)
DEFAULT_WAIT_S = 120.0  # eau train needs a while to create the run folder (model load)


class SuperviseError(ValueError):
    """A bad setting or a run that cannot be supervised (the CLI exits with a clear message)."""


@dataclass
class SuperviseConfig:
    """Settings of ``eau supervise`` (each is a CLI option of the same name).

    run: run id under ``runs_dir`` (or a run folder).
    every: start a session each time this many more steps have completed (at N, 2N, ...).
    agent: ``claude``, ``codex`` or a command line (see :mod:`harness.supervise.agents`).
    runs_dir: runs folder; exported to the agent as EAU_RUNS_DIR.
    knobs_dir: knobs folder exported as EAU_KNOBS_DIR; None: the one the run trains from.
    pool_dir: experience pool exported as EAU_POOL_DIR; None: not exported (the agent's
        ``cwd/experience_pool``).
    cwd: folder the agent starts in (the repository root, where knobs/ and skill/ are).
    timeout_s: wall-clock limit per session; then its process group is ended.
    max_sessions: stop after this many sessions (0: no limit).
    max_failures: stop after this many sessions in a row failed (a non-zero exit that is not a
        timeout; 0: never); the summary's ``stopped`` names the last error.
    total_budget_usd: start no new session once the costs the sessions reported add up to this.
    wait_s: how long to wait for the run folder to appear.
    poll_s: seconds between looks at the run.
    prompt_template: a template file (None: the built-in one).
    skill: the skill's name in the prompt.
    agent_opts: agent command settings (max turns, per-session budget, model, ...).
    """

    run: str
    every: int
    agent: str
    runs_dir: Path
    knobs_dir: Path | None = None
    pool_dir: Path | None = None
    cwd: Path = field(default_factory=Path.cwd)
    timeout_s: float = DEFAULT_TIMEOUT_S
    max_sessions: int = DEFAULT_MAX_SESSIONS
    max_failures: int = DEFAULT_MAX_FAILURES
    total_budget_usd: float | None = None
    wait_s: float = DEFAULT_WAIT_S
    poll_s: float = DEFAULT_POLL_S
    prompt_template: Path | None = None
    skill: str = "eau-harness"
    agent_opts: AgentOptions = field(default_factory=AgentOptions)

    def validate(self) -> None:
        if self.every < 1:
            raise SuperviseError(f"--every must be at least 1 step, got {self.every}")
        if self.timeout_s <= 0:
            raise SuperviseError(f"--timeout must be positive seconds, got {self.timeout_s}")
        if self.max_sessions < 0:
            raise SuperviseError(f"--max-sessions must be >= 0 (0: no limit), got {self.max_sessions}")
        if self.max_failures < 0:
            raise SuperviseError(f"--max-failures must be >= 0 (0: never stop for failures), got {self.max_failures}")
        if self.total_budget_usd is not None and self.total_budget_usd <= 0:
            raise SuperviseError(f"--total-budget-usd must be positive, got {self.total_budget_usd}")
        if self.poll_s <= 0:
            raise SuperviseError(f"--poll must be positive seconds, got {self.poll_s}")
        if not Path(self.cwd).is_dir():
            raise SuperviseError(f"--cwd {self.cwd}: no such folder")
        try:
            self.agent_opts.validate()
        except ValueError as exc:
            raise SuperviseError(str(exc)) from None


def skill_name(default: str = "eau-harness") -> str:
    """The skill's name from skill/SKILL.md's front matter (the default when it cannot be read)."""
    try:
        return str(skill_front_matter(repo_skill_dir())["name"])
    except Exception:  # noqa: BLE001 - the prompt still works with the documented default name
        return default


class Supervisor:
    """The supervise loop; :meth:`run` returns the summary document."""

    def __init__(self, cfg: SuperviseConfig, sleep: Callable[[float], None] = time.sleep):
        cfg.validate()
        self.cfg = cfg
        self.sleep = sleep
        self.template, self.template_source = self._template()
        self.sessions: list[Session] = []
        self.current: Session | None = None
        self.stop_signal: str | None = None
        self.run_dir: Path | None = None

    def _template(self) -> Any:
        try:
            return prompt_mod.load_template(self.cfg.prompt_template)
        except prompt_mod.TemplateError as exc:
            raise SuperviseError(str(exc)) from None

    # ------------------------------------------------------------------ helpers
    def _log(self, event: str, **data: Any) -> None:
        if self.run_dir is not None:
            jsonl.append(self.run_dir / "meta" / "supervise.jsonl", {"time": now_iso(), "event": event, **data})

    def _knobs_dir(self, prog: RunProgress) -> Path | None:
        if self.cfg.knobs_dir is not None:
            return Path(self.cfg.knobs_dir)
        return self._run_knobs_dir(prog)

    def _run_knobs_dir(self, prog: RunProgress) -> Path:
        """The run's own knobs folder, where its knob files and pending writes are, whatever folder
        is exported (a write with ``--run`` lands here even when EAU_KNOBS_DIR is the project's)."""
        assert self.run_dir is not None
        return Path(prog.knobs_dir) if prog.knobs_dir else self.run_dir / "knobs"

    def _pool_dir(self) -> Path:
        return Path(self.cfg.pool_dir) if self.cfg.pool_dir is not None else Path(self.cfg.cwd) / POOL_DEFAULT_DIR

    def _cost(self) -> float:
        return sum(float(s.result.get("cost_usd") or 0.0) for s in self.sessions if s.result)

    def check_agent(self) -> None:
        """Fail early when the agent's program is not on PATH (claude/codex are not installed everywhere)."""
        probe = build_command(
            self.cfg.agent, "probe", cwd=Path(self.cfg.cwd), session_dir=Path(self.cfg.cwd), opts=self.cfg.agent_opts
        )
        exe = probe.argv[0]
        if not (shutil.which(exe) or (Path(self.cfg.cwd) / exe).is_file() or Path(exe).is_file()):
            raise SuperviseError(f"--agent {self.cfg.agent!r}: {exe!r} is not installed or not on PATH")

    # ------------------------------------------------------------------ sessions
    def _start_session(self, prog: RunProgress) -> Session:
        assert self.run_dir is not None
        number, folder = allocate_dir(self.run_dir / "meta")
        kdir = self._knobs_dir(prog)
        fields = {
            "run": self.run_dir.name,
            "step": prog.completed,
            "total_steps": prog.total or "?",
            "session": number,
            "session_dir": str(folder.resolve()),
            "skill": self.cfg.skill,
            "runs_dir": str(Path(self.cfg.runs_dir).resolve()),
            "knobs_dir": str(kdir.resolve()) if kdir else "?",
            "timeout_min": f"{self.cfg.timeout_s / 60:.0f}",
        }
        text = prompt_mod.render(self.template, fields)
        run_kdir = self._run_knobs_dir(prog)
        writable = [Path(self.cfg.runs_dir), self._pool_dir(), run_kdir] + ([kdir] if kdir and kdir != run_kdir else [])
        command = build_command(
            self.cfg.agent,
            text,
            cwd=Path(self.cfg.cwd),
            session_dir=folder,
            writable=writable,
            opts=self.cfg.agent_opts,
        )
        env, added = session_env(
            dict(os.environ),
            run=self.run_dir.name,
            runs_dir=Path(self.cfg.runs_dir),
            knobs_dir=kdir,
            pool_dir=self.cfg.pool_dir,
            session_dir=folder,
            prompt_file=folder / "prompt.txt",
            step=prog.completed,
        )
        s = Session(
            number,
            folder,
            command,
            text,
            cwd=Path(self.cfg.cwd),
            env=env,
            env_added=added,
            timeout_s=self.cfg.timeout_s,
            run_dir=self.run_dir,
            step=prog.completed,
            knobs_dir=run_kdir,
            pool_dir=self._pool_dir(),
        )
        s.start()
        self._log("session_started", session=number, step=prog.completed, folder=folder.name, argv0=command.argv[0])
        return s

    def _end_session(self, s: Session) -> None:
        res = s.finish()
        self.sessions.append(s)
        self._log(
            "session_ended",
            session=s.number,
            exit_code=res["exit_code"],
            timed_out=res["timed_out"],
            duration_s=res["duration_s"],
            knob_events=[e.get("id") for e in res["knob_events"]],
            findings=res["findings"],
            cost_usd=res.get("cost_usd"),
            error=res.get("error"),
        )

    def _failures_in_a_row(self) -> list[Session]:
        """The latest sessions that failed, back to the last one that did not (a timeout is not a
        failure of the client: the agent was working)."""
        out: list[Session] = []
        for s in reversed(self.sessions):
            r = s.result or {}
            if r.get("exit_code") in (0, None) or r.get("timed_out") or r.get("stopped"):
                break
            out.append(s)
        return out[::-1]

    def _settle(self) -> None:
        for s in self.sessions:
            if s.unsettled and s.settle():
                self._log(
                    "session_settled",
                    session=s.number,
                    knob_events=[e.get("id") for e in (s.result or {}).get("knob_events", [])],
                )

    def _on_signal(self, signum: int, _frame: Any) -> None:
        self.stop_signal = signal.Signals(signum).name

    # ------------------------------------------------------------------ the loop
    def run(self) -> dict[str, Any]:
        cfg = self.cfg
        self.check_agent()
        self.run_dir = wait_for_run(
            Path(cfg.runs_dir), cfg.run, cfg.wait_s, poll_s=min(cfg.poll_s, 1.0), sleep=self.sleep
        )
        if self.run_dir is None:
            raise SuperviseError(
                f"no run {cfg.run!r} in {cfg.runs_dir} after waiting {cfg.wait_s:g}s "
                "(start it with eau train --run-id, or pass --runs-dir)"
            )
        old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
        for s in old:
            signal.signal(s, self._on_signal)
        schedule = Schedule(cfg.every)
        stopped = None
        self._log(
            "supervise_started",
            every=cfg.every,
            agent=cfg.agent,
            cwd=str(Path(cfg.cwd).resolve()),
            timeout_s=cfg.timeout_s,
            max_sessions=cfg.max_sessions,
            template=self.template_source,
        )
        try:
            while True:
                prog = progress(self.run_dir)
                if self.stop_signal:
                    stopped = f"signal {self.stop_signal}"
                    if self.current is not None:
                        self.current.kill(why=stopped)
                        self._end_session(self.current)
                        self.current = None
                    break
                if self.current is not None:
                    if self.current.poll():
                        self._end_session(self.current)
                        self.current = None
                    else:
                        schedule.pass_busy(prog.completed)
                self._settle()
                if self.current is None:
                    if cfg.max_sessions and len(self.sessions) >= cfg.max_sessions:
                        stopped = "max sessions"
                        break
                    failed = self._failures_in_a_row()
                    if cfg.max_failures and len(failed) >= cfg.max_failures:
                        last = failed[-1].result or {}
                        why = last.get("error") or f"exit {last.get('exit_code')}"
                        stopped = f"{len(failed)} sessions in a row failed (last: {why})"[:500]
                        break
                    if cfg.total_budget_usd is not None and self._cost() >= cfg.total_budget_usd:
                        stopped = "budget"
                        break
                    if not prog.live:
                        stopped = ended_text(prog)
                        break
                    if schedule.due(prog.completed):
                        self.current = self._start_session(prog)
                self.sleep(cfg.poll_s)
        finally:
            for s, h in old.items():
                signal.signal(s, h)
        self._settle()
        doc = self.summary(stopped or "stopped", schedule)
        self._log("supervise_stopped", reason=doc["stopped"], sessions=len(self.sessions))
        return doc

    def summary(self, stopped: str, schedule: Schedule) -> dict[str, Any]:
        """The ``--json`` document: why it stopped, the schedule, and every session's result."""
        assert self.run_dir is not None
        results = [s.result for s in self.sessions if s.result]
        costs = [r["cost_usd"] for r in results if isinstance(r.get("cost_usd"), (int, float))]
        return {
            "ok": True,
            "run": self.run_dir.name,
            "stopped": stopped,
            "agent": self.cfg.agent,
            "every": self.cfg.every,
            "sessions": results,
            "sessions_run": len(results),
            "schedule": schedule.to_json(),
            "total_cost_usd": round(sum(costs), 6) if costs else None,
            "meta_dir": str((self.run_dir / "meta").resolve()),
            "final_progress": dataclasses.asdict(progress(self.run_dir)),
        }
