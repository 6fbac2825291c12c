"""Command lines of the coding agents ``eau supervise`` starts, and what their output reports.

Three kinds (``--agent``):

* ``claude``: Claude Code headless, ``claude -p PROMPT --output-format json`` with the skill's tool
  permissions (``--allowedTools`` / ``--disallowedTools``), ``--permission-mode`` (default
  ``dontAsk``: anything not pre-approved is refused instead of prompting nobody), ``--max-turns``
  and, when given, ``--max-budget-usd`` (Claude Code stops the session at that spend). The JSON
  result carries ``total_cost_usd``, ``num_turns`` and ``session_id``, which are recorded.
  ``--output-format stream-json`` (one event per line) needs ``--verbose`` in print mode, which is
  added.
* ``codex``: ``codex exec --json --skip-git-repo-check -C CWD`` under the permission profile
  ``eau_supervise`` (``-c default_permissions=...`` and ``-c permissions.eau_supervise=...``, Codex
  0.138 or later): the built-in ``:workspace`` profile (writes only inside CWD, the ``--add-dir``
  folders and temporary folders) with ``eval_results/`` of CWD unreadable, enforced by Codex's own
  sandbox. ``--add-dir`` names each folder the session must write that lies outside CWD, ``-o`` the
  file for the last message, and the prompt comes last. ``-c allow_login_shell=false``: commands run
  in a plain shell with the supervisor's PATH (a login shell resets PATH from /etc/profile on many
  systems, and ``eau`` in a virtual environment is then not found). Codex has no spending cap; its
  ``turn.completed`` events report token usage, which is summed. The session is bounded by the
  wall-clock timeout. The model provider (base URL, key) comes from Codex's own configuration
  (``$CODEX_HOME/config.toml``) or ``--agent-arg -c --agent-arg KEY=VALUE``.
* any other string: a command line (split like a shell, no shell involved). It gets the prompt on
  **stdin** and the prompt file's path in ``EAU_SESSION_PROMPT_FILE`` (plus the ``EAU_*`` variables
  of :func:`session_env`). If its stdout holds a JSON object with ``total_cost_usd`` (the Claude Code
  result shape), that cost is recorded too.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from harness.skill.claude_settings import ALLOW_RULES, DENY_RULES

KINDS = ("claude", "codex", "command")
CLAUDE_OUTPUT_FORMATS = ("json", "stream-json")
# Claude Code permission modes: the choices its ``--permission-mode`` accepts (``claude --help``; checked
# against the real CLI in tests/test_supervise_clients.py). dontAsk never prompts: whatever the allow
# rules do not pre-approve is refused, which is what an unattended session needs.
CLAUDE_PERMISSION_MODES = ("default", "acceptEdits", "plan", "auto", "dontAsk", "bypassPermissions")
# Read-only built-in tools the skill needs besides its own rules (reading files, finding them).
CLAUDE_READ_TOOLS = ("Read", "Glob", "Grep")
# Shell steps of the gate protocol: copy a knob or rule file into a candidate folder first.
CLAUDE_GATE_TOOLS = ("Bash(mkdir:*)", "Bash(cp:*)")
# Codex: the permission profile a session runs under (see the module docstring). Codex's sandbox
# enforces it: writes inside the workspace roots only, and nothing under eval_results/ can be read.
CODEX_PROFILE = "eau_supervise"
CODEX_PROFILE_TOML = '{extends=":workspace", filesystem={":project_roots"={"eval_results"="none"}}}'
CODEX_CONFIG = (
    f'default_permissions="{CODEX_PROFILE}"',
    f"permissions.{CODEX_PROFILE}={CODEX_PROFILE_TOML}",
    "allow_login_shell=false",
)


@dataclass
class AgentOptions:
    """Settings of the agent command (all documented on ``eau supervise``).

    max_turns: Claude Code ``--max-turns`` (agentic turns before it stops).
    max_budget_usd: Claude Code ``--max-budget-usd`` per session; ignored (and noted) for codex and
        custom commands, which have no such flag.
    model: ``--model`` (claude) / ``-m`` (codex); None: the CLI's default.
    permission_mode: Claude Code ``--permission-mode``.
    output_format: Claude Code ``--output-format`` (json | stream-json).
    extra_args: appended to the agent's arguments before the prompt (codex) or at the end (claude,
        custom commands).
    """

    max_turns: int = 40
    max_budget_usd: float | None = None
    model: str | None = None
    permission_mode: str = "dontAsk"
    output_format: str = "json"
    extra_args: list[str] = field(default_factory=list)

    def validate(self) -> None:
        if self.max_turns < 1:
            raise ValueError(f"--max-turns must be at least 1, got {self.max_turns}")
        if self.max_budget_usd is not None and self.max_budget_usd <= 0:
            raise ValueError(f"--max-budget-usd must be positive, got {self.max_budget_usd}")
        if self.permission_mode not in CLAUDE_PERMISSION_MODES:
            raise ValueError(
                f"--permission-mode {self.permission_mode!r} is not allowed; use one of "
                f"{', '.join(CLAUDE_PERMISSION_MODES)}"
            )
        if self.output_format not in CLAUDE_OUTPUT_FORMATS:
            raise ValueError(f"--output-format {self.output_format!r} is not allowed; use json or stream-json")


@dataclass
class AgentCommand:
    """A built command: argv, whether the prompt goes to stdin, and notes for command.json."""

    kind: str
    argv: list[str]
    prompt_on_stdin: bool
    notes: list[str] = field(default_factory=list)


def agent_kind(agent: str) -> str:
    """``claude`` | ``codex`` | ``command`` for an ``--agent`` value."""
    if not agent or not agent.strip():
        raise ValueError("--agent is empty; use claude, codex or a command line such as 'python my_agent.py'")
    return agent.strip() if agent.strip() in ("claude", "codex") else "command"


def _inside(path: Path, root: Path) -> bool:
    try:
        Path(path).resolve().relative_to(Path(root).resolve())
        return True
    except ValueError:
        return False


def claude_allowed_tools(session_dir: Path) -> list[str]:
    """The skill's permission set plus reading tools, the gate's copy steps and edits of the session
    folder (scratch files such as gate candidates). ``//`` starts an absolute path in Claude Code rules."""
    scratch = f"Edit(/{Path(session_dir).resolve()}/**)"
    return [*CLAUDE_READ_TOOLS, *ALLOW_RULES, *CLAUDE_GATE_TOOLS, scratch]


def build_command(
    agent: str,
    prompt: str,
    *,
    cwd: Path,
    session_dir: Path,
    writable: Sequence[Path] = (),
    opts: AgentOptions | None = None,
) -> AgentCommand:
    """The command line for one session. ``writable``: folders the agent must be able to write
    (knobs, runs, experience pool); codex gets ``--add-dir`` for those outside ``cwd``."""
    opts = opts or AgentOptions()
    opts.validate()
    kind = agent_kind(agent)
    if kind == "claude":
        # The prompt sits right after -p: --allowedTools takes a variable number of values, so a
        # prompt placed after it would be read as one more tool rule.
        argv = ["claude", "-p", prompt, "--output-format", opts.output_format]
        if opts.output_format == "stream-json":
            argv.append("--verbose")
        argv += ["--permission-mode", opts.permission_mode, "--max-turns", str(opts.max_turns)]
        argv += ["--allowedTools", *claude_allowed_tools(session_dir)]
        argv += ["--disallowedTools", *DENY_RULES]
        if opts.max_budget_usd is not None:
            argv += ["--max-budget-usd", f"{opts.max_budget_usd:g}"]
        if opts.model:
            argv += ["--model", opts.model]
        return AgentCommand(kind, argv + list(opts.extra_args), prompt_on_stdin=False)
    if kind == "codex":
        argv = ["codex", "exec", "--json", "--skip-git-repo-check", "-C", str(Path(cwd).resolve())]
        for kv in CODEX_CONFIG:
            argv += ["-c", kv]
        outside = [Path(d).resolve() for d in [*writable, session_dir] if not _inside(Path(d), cwd)]
        added: list[Path] = []
        for d in outside:  # one --add-dir per folder not already inside another one
            if not any(_inside(d, a) for a in added + [o for o in outside if o != d and not _inside(o, d)]):
                added.append(d)
        for d in added:
            argv += ["--add-dir", str(d)]
        if opts.model:
            argv += ["-m", opts.model]
        argv += ["-o", str(Path(session_dir).resolve() / "last_message.txt"), *opts.extra_args, prompt]
        notes = (
            ["codex exec has no spending cap: --max-budget-usd is not passed; the timeout bounds the session"]
            if opts.max_budget_usd is not None
            else []
        )
        return AgentCommand(kind, argv, prompt_on_stdin=False, notes=notes)
    try:
        argv = shlex.split(agent)
    except ValueError as exc:
        raise ValueError(f"--agent {agent!r} is not a valid command line: {exc}") from None
    notes = ["custom command: the prompt is on stdin and in $EAU_SESSION_PROMPT_FILE"]
    if opts.max_budget_usd is not None:
        notes.append("custom command: --max-budget-usd is not passed (no known flag); the timeout bounds the session")
    return AgentCommand(kind, argv + list(opts.extra_args), prompt_on_stdin=True, notes=notes)


def session_env(
    base: dict[str, str],
    *,
    run: str,
    runs_dir: Path,
    knobs_dir: Path | None,
    pool_dir: Path | None,
    session_dir: Path,
    prompt_file: Path,
    step: int,
) -> tuple[dict[str, str], dict[str, str]]:
    """(full environment, the variables this module set). The ``EAU_*`` folders make every ``eau``
    command the agent runs use the run's folders without flags."""
    added = {
        "EAU_RUN": run,
        "EAU_RUNS_DIR": str(Path(runs_dir).resolve()),
        "EAU_SESSION_DIR": str(Path(session_dir).resolve()),
        "EAU_SESSION_PROMPT_FILE": str(Path(prompt_file).resolve()),
        "EAU_SESSION_STEP": str(step),
    }
    if knobs_dir is not None:
        added["EAU_KNOBS_DIR"] = str(Path(knobs_dir).resolve())
    if pool_dir is not None:
        added["EAU_POOL_DIR"] = str(Path(pool_dir).resolve())
    return {**base, **added}, added


# ------------------------------------------------------------------------------------------ output
def _json_objects(text: str) -> list[dict[str, Any]]:
    """Every JSON object in ``text``: the whole text as one document, else one per line."""
    text = text.strip()
    if not text:
        return []
    try:
        doc = json.loads(text)
        return (
            [doc] if isinstance(doc, dict) else [d for d in doc if isinstance(d, dict)] if isinstance(doc, list) else []
        )
    except json.JSONDecodeError:
        pass
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(obj, dict):
                out.append(obj)
    return out


def parse_output(kind: str, stdout: str) -> dict[str, Any]:
    """Cost, usage and ids the agent's stdout reports (keys absent when not reported).

    claude (json or stream-json) and custom commands: the last object carrying ``total_cost_usd``
    (older Claude Code: ``cost_usd``) gives ``cost_usd``, ``num_turns``, ``agent_session_id``,
    ``is_error`` and ``result`` (clipped). codex (no cost, no turn count in its events): ``usage``
    sums ``turn.completed`` token counts; ``agent_session_id`` is the ``thread.started`` thread id;
    ``commands`` counts the shell commands it ran; ``result`` is its last agent message; ``errors``
    lists error events (the API's message when the error is a JSON document); a failed turn sets
    ``is_error``.
    """
    objs = _json_objects(stdout)
    out: dict[str, Any] = {}
    if kind == "codex":
        usage: dict[str, int] = {}
        errors: list[str] = []
        failed = False
        commands = 0
        for o in objs:
            t = o.get("type")
            item = o.get("item") if isinstance(o.get("item"), dict) else {}
            if t == "thread.started" and o.get("thread_id"):
                out["agent_session_id"] = o["thread_id"]
            elif t == "turn.completed" and isinstance(o.get("usage"), dict):
                for k, v in o["usage"].items():
                    if isinstance(v, (int, float)):
                        usage[k] = usage.get(k, 0) + int(v)
            elif t == "item.completed" and item.get("type") == "agent_message" and isinstance(item.get("text"), str):
                out["result"] = item["text"][:2000]
            elif t == "item.completed" and item.get("type") == "command_execution":
                commands += 1
            elif t in ("turn.failed", "error"):
                failed = failed or t == "turn.failed"  # a lone error event may be a retry notice
                err = o.get("error") if isinstance(o.get("error"), dict) else o
                msg = _api_message(str(err.get("message", "")))[:500]
                if msg not in errors:  # codex reports a failed turn twice (error, then turn.failed)
                    errors.append(msg)
        if usage:
            out["usage"] = usage
        if commands:
            out["commands"] = commands
        if errors:
            out["errors"] = errors
        if failed:
            out["is_error"] = True
        return out
    results = [o for o in objs if "total_cost_usd" in o or "cost_usd" in o]
    if results:
        r = results[-1]
        cost = r.get("total_cost_usd", r.get("cost_usd"))
        if isinstance(cost, (int, float)):
            out["cost_usd"] = float(cost)
        for src, dst in (
            ("num_turns", "num_turns"),
            ("session_id", "agent_session_id"),
            ("is_error", "is_error"),
            ("usage", "usage"),
        ):
            if src in r:
                out[dst] = r[src]
        if isinstance(r.get("result"), str):
            out["result"] = r["result"][:2000]
    return out


def _api_message(text: str) -> str:
    """The ``message`` of an API error document (``{"error": {"message": ...}}``), else ``text``."""
    try:
        doc = json.loads(text)
    except (json.JSONDecodeError, ValueError):
        return text
    err = doc.get("error") if isinstance(doc, dict) else None
    if isinstance(err, dict) and isinstance(err.get("message"), str):
        return err["message"]
    return text


def failure_message(kind: str, argv0: str, exit_code: int | None, parsed: dict[str, Any], stderr: str) -> str | None:
    """Why a session that ran failed, in one line, or None when it did not fail.

    A session failed when the agent exited non-zero or reported an error (Claude Code's ``is_error``,
    Codex's failed turns): "claude failed (exit 1): Not logged in · Please run /login". The text is
    the agent's own result or error message, else the last line of its stderr.
    """
    if not exit_code and not parsed.get("is_error"):
        return None
    why = ""
    if kind == "codex" and parsed.get("errors"):
        why = parsed["errors"][-1]
    elif parsed.get("is_error") and isinstance(parsed.get("result"), str):
        why = parsed["result"]
    if not why.strip():
        lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
        why = lines[-1] if lines else "no message on stdout or stderr"
    name = kind if kind in ("claude", "codex") else argv0
    return f"{name} failed (exit {exit_code}): {why.strip()[:500]}"
