"""``eau supervise`` (a coding agent with the skill every N steps) and ``eau autopilot`` (the rule-based
meta-agent). Both run next to ``eau train`` as their own process; the trainer never waits on them.

Exit codes: 0 ok, 1 error, 2 bad option, 5 run not found.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from harness.cli.common import (
    EXIT_ERROR,
    EXIT_NOT_FOUND,
    EXIT_USAGE,
    JsonOpt,
    KnobsDirOpt,
    RunsDirOpt,
    emit_json,
    err,
    fail,
    runs_dir,
)
from harness.runs.names import check_run_id
from harness.supervise.agents import AgentOptions
from harness.supervise.autopilot import Autopilot, AutopilotConfig, run_loop
from harness.supervise.interventions import TableError
from harness.supervise.runwatch import wait_for_run
from harness.supervise.supervisor import SuperviseConfig, SuperviseError, Supervisor, skill_name

PoolDirOpt = typer.Option(
    None, "--pool-dir", envvar="EAU_POOL_DIR", help="Experience pool the agent writes (default: <cwd>/experience_pool)."
)
CwdOpt = typer.Option(
    Path("."),
    "--cwd",
    help="Folder the agent (or the autopilot's commands) runs in: the "
    "repository root, where knobs/, skill/ and experience_pool/ are.",
)


def register(app: typer.Typer) -> None:
    app.command("supervise")(supervise_cmd)
    app.command("autopilot")(autopilot_cmd)


def _check_run(run: str, as_json: bool) -> None:
    """--run names a run under --runs-dir (it may not exist yet): a plain name, never a path."""
    try:
        check_run_id(run, "--run")
    except ValueError as exc:
        fail(str(exc), EXIT_USAGE, as_json)


def supervise_cmd(
    run: str = typer.Option(..., "--run", help="Run id (under --runs-dir) to supervise; it may still be starting."),
    every: int = typer.Option(..., "--every", help="Start a session each time this many more steps completed."),
    agent: str = typer.Option(
        ...,
        "--agent",
        help="claude | codex | a command line, e.g. "
        "'python my_agent.py' (gets the prompt on stdin and in $EAU_SESSION_PROMPT_FILE).",
    ),
    timeout: float = typer.Option(
        1800.0, "--timeout", help="Wall-clock seconds per session; then its process group is ended."
    ),
    max_sessions: int = typer.Option(10, "--max-sessions", help="Stop after this many sessions (0: no limit)."),
    max_failures: int = typer.Option(
        3,
        "--max-failures",
        min=0,
        help="Stop after this many sessions in a row failed (non-zero exit, not a timeout; 0: never).",
    ),
    max_budget_usd: Optional[float] = typer.Option(
        None,
        "--max-budget-usd",
        help="Per-session spending cap, passed to Claude Code (--max-budget-usd); codex and commands have none.",
    ),
    total_budget_usd: Optional[float] = typer.Option(
        None, "--total-budget-usd", help="Start no session once the costs the sessions reported reach this."
    ),
    max_turns: int = typer.Option(40, "--max-turns", help="Claude Code --max-turns per session."),
    model: Optional[str] = typer.Option(None, "--model", help="Model for claude (--model) or codex (-m)."),
    permission_mode: str = typer.Option(
        "dontAsk",
        "--permission-mode",
        help="Claude Code --permission-mode (dontAsk: refuse whatever the skill's rules do not allow).",
    ),
    output_format: str = typer.Option("json", "--output-format", help="Claude Code output: json | stream-json."),
    agent_arg: list[str] = typer.Option([], "--agent-arg", help="Extra argument for the agent command (repeatable)."),
    prompt_template: Optional[Path] = typer.Option(
        None,
        "--prompt-template",
        help="Prompt template file ($run, $step, $skill, ...; see harness/supervise/prompt.py).",
    ),
    cwd: Path = CwdOpt,
    wait: float = typer.Option(
        120.0, "--wait", min=0.0, max=86_400.0, help="Seconds to wait for the run folder to appear (at most a day)."
    ),
    poll: float = typer.Option(2.0, "--poll", min=0.05, max=3_600.0, help="Seconds between looks at the run."),
    pool_dir: Optional[Path] = PoolDirOpt,
    as_json: bool = JsonOpt,
    knobs_dir_: Optional[Path] = KnobsDirOpt,
    runs_dir_: Optional[Path] = RunsDirOpt,
) -> None:
    """Start a coding agent with the skill every N steps of a live run, within time and budget bounds.

    Each session's prompt, command, transcript and result go to runs/<id>/meta/session_NNN/. Stops
    when the run ends, after --max-sessions or --max-failures failed sessions in a row, at
    --total-budget-usd, or on Ctrl-C (the running
    session is ended and recorded). --json prints a summary of every session at the end.
    """
    _check_run(run, as_json)

    cfg = SuperviseConfig(
        run=run,
        every=every,
        agent=agent,
        runs_dir=runs_dir(runs_dir_),
        knobs_dir=knobs_dir_,
        pool_dir=pool_dir,
        cwd=cwd,
        timeout_s=timeout,
        max_sessions=max_sessions,
        max_failures=max_failures,
        total_budget_usd=total_budget_usd,
        wait_s=wait,
        poll_s=poll,
        prompt_template=prompt_template,
        skill=skill_name(),
        agent_opts=AgentOptions(
            max_turns=max_turns,
            max_budget_usd=max_budget_usd,
            model=model,
            permission_mode=permission_mode,
            output_format=output_format,
            extra_args=list(agent_arg),
        ),
    )
    try:
        sup = Supervisor(cfg)
        if not as_json:
            err(f"supervising run {run} every {every} steps with {agent!r}; Ctrl-C stops")
        doc = sup.run()
    except SuperviseError as exc:
        code = EXIT_NOT_FOUND if str(exc).startswith("no run ") else EXIT_USAGE
        fail(str(exc), code, as_json)
    if as_json:
        emit_json(doc)
        return
    for r in doc["sessions"]:
        evs = (
            ", ".join(f"{e.get('id')} {e.get('knob')} {e.get('status')}" for e in r["knob_events"]) or "no knob events"
        )
        typer.echo(
            f"session {r['session']}: steps {r['step_at_start']}..{r['step_at_end']}, exit {r['exit_code']}"
            f"{' (timed out)' if r['timed_out'] else ''}, {r['duration_s']:.0f}s; {evs}; "
            f"findings: {', '.join(r['findings']) or 'none'}"
            + (f"; cost ${r['cost_usd']:.4f}" if r.get("cost_usd") is not None else "")
            + (f"; error: {r['error']}" if r.get("error") else "")
        )
    typer.echo(
        f"stopped: {doc['stopped']}; {doc['sessions_run']} session(s); skipped triggers "
        f"{doc['schedule']['skipped'] or 'none'}; folders under {doc['meta_dir']}"
    )


def autopilot_cmd(
    run: str = typer.Option(..., "--run", help="Run id (under --runs-dir)."),
    every: int = typer.Option(5, "--every", help="Take a turn each time this many more steps completed."),
    once: bool = typer.Option(False, "--once", help="Take one turn now and exit."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Report what it would do; write nothing."),
    window: int = typer.Option(10, "--window", help="Steps eau diagnose looks at."),
    threshold: list[str] = typer.Option(
        [], "--threshold", help="eau diagnose threshold override NAME.KEY=VALUE (repeatable)."
    ),
    lag: Optional[int] = typer.Option(
        None, "--lag", help="Steps after a change before it is measured (default: the table entry's)."
    ),
    effect_window: Optional[int] = typer.Option(
        None, "--effect-window", help="Steps per side of the effect comparison (default: the table entry's)."
    ),
    gate_steps: int = typer.Option(3, "--gate-steps", help="Recent steps eau gate replays."),
    max_interventions: int = typer.Option(
        0, "--max-interventions", help="Make no new change after this many (0: no limit)."
    ),
    table: Optional[Path] = typer.Option(
        None, "--table", help="Intervention table (default: harness/supervise/interventions.yaml)."
    ),
    cwd: Path = CwdOpt,
    wait: float = typer.Option(
        120.0,
        "--wait",
        min=0.0,
        max=86_400.0,
        help="Seconds to wait for the run folder to appear (not with --once) (at most a day).",
    ),
    poll: float = typer.Option(2.0, "--poll", min=0.05, max=3_600.0, help="Seconds between looks at the run."),
    pool_dir: Optional[Path] = PoolDirOpt,
    as_json: bool = JsonOpt,
    knobs_dir_: Optional[Path] = KnobsDirOpt,
    runs_dir_: Optional[Path] = RunsDirOpt,
) -> None:
    """The rule-based meta-agent: diagnose -> finding search -> gate -> knobs set -> effect -> finding add.

    It runs the same eau commands an agent runs (one subprocess each). State: runs/<id>/meta/
    autopilot_state.json; every turn: runs/<id>/meta/autopilot.jsonl.
    """
    _check_run(run, as_json)

    if every < 1:
        fail(f"--every must be at least 1 step, got {every}", EXIT_USAGE, as_json)
    cfg = AutopilotConfig(
        run=run,
        runs_dir=runs_dir(runs_dir_),
        knobs_dir=knobs_dir_,
        pool_dir=pool_dir,
        cwd=cwd,
        table=table,
        window=window,
        thresholds=list(threshold),
        lag=lag,
        effect_window=effect_window,
        gate_steps=gate_steps,
        max_interventions=max_interventions,
        dry_run=dry_run,
    )
    if not once:  # next to a starting `eau train`: its folder appears after the model loads
        wait_for_run(cfg.runs_dir, run, wait, poll_s=min(poll, 1.0))
    try:
        ap = Autopilot(cfg)
    except FileNotFoundError as exc:
        fail(str(exc), EXIT_NOT_FOUND, as_json)
    except (TableError, ValueError) as exc:
        fail(str(exc), EXIT_USAGE, as_json)
    if once:
        rec = ap.tick()
        if as_json:
            emit_json(rec)
        else:
            _print_tick(rec)
        if rec["action"] == "error":
            raise typer.Exit(EXIT_ERROR)
        return
    doc = run_loop(ap, every, poll_s=poll)
    if as_json:
        emit_json(doc)
        return
    for rec in doc["ticks"]:
        _print_tick(rec)
    typer.echo(
        f"stopped: {doc['stopped']}; {doc['applied']} change(s) applied; findings: "
        f"{', '.join(doc['findings']) or 'none'}"
    )


def _print_tick(rec: dict) -> None:
    what = rec["action"]
    head = f"tick {rec['tick']} at step {rec.get('step')}: {what}"
    if rec.get("knob"):
        head += f" {rec['knob']}{'[' + rec['gym'] + ']' if rec.get('gym') else ''} {rec.get('old')} -> {rec.get('new')}"
    if rec.get("detector"):
        head += f" for {rec['detector']}"
    typer.echo(head + (" (dry run)" if rec.get("dry_run") else ""))
    for key in ("message", "verdict", "measured", "finding"):
        if rec.get(key):
            typer.echo(f"  {key}: {rec[key]}")
    for s in rec.get("skipped", []):
        typer.echo(f"  skipped {s.get('knob') or s['detector']}: {s['why']}")
