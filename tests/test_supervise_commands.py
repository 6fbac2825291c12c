"""eau supervise, without processes: agent command lines, output parsing, prompt templates, the schedule."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.skill.claude_settings import ALLOW_RULES, DENY_RULES
from harness.supervise import prompt as prompt_mod
from harness.supervise.agents import (
    AgentOptions,
    agent_kind,
    build_command,
    failure_message,
    parse_output,
    session_env,
)
from harness.supervise.runwatch import Schedule

PROMPT = "Supervise run r1.\nLine two with 'quotes' and $dollar."


def _flag_values(argv: list[str], flag: str) -> list[str]:
    """Values after ``flag`` up to the next option (how a variadic option parser reads them)."""
    i = argv.index(flag) + 1
    out = []
    while i < len(argv) and not argv[i].startswith("--"):
        out.append(argv[i])
        i += 1
    return out


def test_claude_command_line(tmp_path):
    sess = tmp_path / "runs" / "r1" / "meta" / "session_001"
    cmd = build_command(
        "claude",
        PROMPT,
        cwd=tmp_path,
        session_dir=sess,
        opts=AgentOptions(max_turns=7, max_budget_usd=0.5, model="sonnet"),
    )
    a = cmd.argv
    assert a[:3] == ["claude", "-p", PROMPT] and a.count(PROMPT) == 1 and not cmd.prompt_on_stdin
    assert a[a.index("--output-format") + 1] == "json" and "--verbose" not in a
    assert a[a.index("--permission-mode") + 1] == "dontAsk"
    assert a[a.index("--max-turns") + 1] == "7"
    assert a[a.index("--max-budget-usd") + 1] == "0.5"
    assert a[a.index("--model") + 1] == "sonnet"
    allowed = _flag_values(a, "--allowedTools")
    assert set(ALLOW_RULES) <= set(allowed) and {"Read", "Glob", "Grep"} <= set(allowed)
    assert "Bash(eau knobs:*)" in allowed and "Bash(eau finding:*)" in allowed
    assert f"Edit(/{sess.resolve()}/**)" in allowed  # scratch files of the session only (// = absolute)
    assert not any("eval" in r for r in allowed)
    assert _flag_values(a, "--disallowedTools") == list(DENY_RULES)
    assert "Bash(eau eval:*)" in DENY_RULES


def test_claude_stream_json_adds_verbose_and_no_budget_flag_by_default(tmp_path):
    a = build_command(
        "claude", PROMPT, cwd=tmp_path, session_dir=tmp_path, opts=AgentOptions(output_format="stream-json")
    ).argv
    assert a[a.index("--output-format") + 1] == "stream-json" and "--verbose" in a
    assert "--max-budget-usd" not in a and "--model" not in a


def test_codex_command_line(tmp_path):
    repo = tmp_path / "repo"
    (repo / "knobs").mkdir(parents=True)
    outside = tmp_path / "elsewhere" / "runs"
    sess = outside / "r1" / "meta" / "session_002"
    cmd = build_command(
        "codex",
        PROMPT,
        cwd=repo,
        session_dir=sess,
        writable=[repo / "knobs", outside],
        opts=AgentOptions(model="gpt-5-codex", max_budget_usd=2.0),
    )
    a = cmd.argv
    assert a[:4] == ["codex", "exec", "--json", "--skip-git-repo-check"] and "--sandbox" not in a
    configs = [a[i + 1] for i, x in enumerate(a) if x == "-c"]  # the eau_supervise permission profile
    assert configs == [
        'default_permissions="eau_supervise"',
        'permissions.eau_supervise={extends=":workspace", filesystem={":project_roots"={"eval_results"="none"}}}',
        "allow_login_shell=false",
    ]
    assert a[a.index("-C") + 1] == str(repo.resolve())
    add = [a[i + 1] for i, x in enumerate(a) if x == "--add-dir"]
    assert add == [str(outside.resolve())]  # knobs/ is inside the workspace; the session is under runs/
    assert a[a.index("-m") + 1] == "gpt-5-codex"
    assert a[a.index("-o") + 1] == str(sess.resolve() / "last_message.txt")
    assert a[-1] == PROMPT and a.count(PROMPT) == 1
    assert "--max-budget-usd" not in a and any("no spending cap" in n for n in cmd.notes)


def test_custom_command_gets_prompt_on_stdin(tmp_path):
    cmd = build_command(
        "python tests/agents/scripted_agent.py --x 'a b'",
        PROMPT,
        cwd=tmp_path,
        session_dir=tmp_path,
        opts=AgentOptions(extra_args=["--flag"]),
    )
    assert cmd.kind == "command" and cmd.prompt_on_stdin
    assert cmd.argv == ["python", "tests/agents/scripted_agent.py", "--x", "a b", "--flag"]
    assert agent_kind(" claude ") == "claude" and agent_kind("codex") == "codex"
    with pytest.raises(ValueError, match="not a valid command line"):
        build_command("python 'unclosed", PROMPT, cwd=tmp_path, session_dir=tmp_path)
    with pytest.raises(ValueError, match="--agent is empty"):
        build_command("  ", PROMPT, cwd=tmp_path, session_dir=tmp_path)


@pytest.mark.parametrize(
    "bad, msg",
    [
        (AgentOptions(permission_mode="yolo"), "--permission-mode 'yolo' is not allowed"),
        (AgentOptions(output_format="xml"), "--output-format 'xml'"),
        (AgentOptions(max_turns=0), "--max-turns must be at least 1"),
        (AgentOptions(max_budget_usd=-1.0), "--max-budget-usd must be positive"),
    ],
)
def test_bad_agent_options_are_named(tmp_path, bad, msg):
    with pytest.raises(ValueError, match=msg):
        build_command("claude", PROMPT, cwd=tmp_path, session_dir=tmp_path, opts=bad)


def test_session_env_points_eau_at_the_run(tmp_path):
    env, added = session_env(
        {"PATH": "/bin"},
        run="r1",
        runs_dir=tmp_path / "runs",
        knobs_dir=tmp_path / "k",
        pool_dir=None,
        session_dir=tmp_path / "s",
        prompt_file=tmp_path / "s" / "prompt.txt",
        step=4,
    )
    assert env["PATH"] == "/bin" and env["EAU_RUN"] == "r1" and env["EAU_SESSION_STEP"] == "4"
    assert env["EAU_RUNS_DIR"] == str((tmp_path / "runs").resolve()) and "EAU_POOL_DIR" not in env
    assert set(added) == {k for k in env if k.startswith("EAU_")}


# ------------------------------------------------------------------------------------------ output
CLAUDE_JSON = json.dumps(
    {
        "type": "result",
        "subtype": "success",
        "is_error": False,
        "duration_ms": 81234,
        "num_turns": 12,
        "result": "No intervention: nothing flagged.",
        "session_id": "abc-123",
        "total_cost_usd": 0.4213,
        "usage": {"input_tokens": 5120, "output_tokens": 900},
    }
)
CLAUDE_STREAM = "\n".join(
    [
        json.dumps({"type": "system", "subtype": "init", "session_id": "s-9", "tools": ["Bash", "Read"]}),
        json.dumps({"type": "assistant", "message": {"content": [{"type": "text", "text": "Looking at the run."}]}}),
        json.dumps(
            {
                "type": "result",
                "subtype": "error_max_turns",
                "is_error": True,
                "num_turns": 40,
                "session_id": "s-9",
                "total_cost_usd": 1.25,
            }
        ),
    ]
)
CODEX_JSONL = "\n".join(
    [
        json.dumps({"type": "thread.started", "thread_id": "th_42"}),
        json.dumps({"type": "turn.started"}),
        json.dumps(
            {
                "type": "item.completed",
                "item": {"id": "i0", "type": "command_execution", "command": "eau status --json", "exit_code": 0},
            }
        ),
        json.dumps(
            {"type": "turn.completed", "usage": {"input_tokens": 1000, "cached_input_tokens": 200, "output_tokens": 50}}
        ),
        json.dumps(
            {"type": "turn.completed", "usage": {"input_tokens": 500, "cached_input_tokens": 0, "output_tokens": 25}}
        ),
        json.dumps({"type": "item.completed", "item": {"id": "i1", "type": "agent_message", "text": "No change."}}),
        json.dumps({"type": "error", "message": '{"error": {"type": "x", "message": "stream disconnected"}}'}),
        json.dumps({"type": "turn.failed", "error": {"message": "stream disconnected"}}),
    ]
)


def test_parse_claude_json_and_stream_json():
    r = parse_output("claude", CLAUDE_JSON)
    assert r["cost_usd"] == pytest.approx(0.4213) and r["num_turns"] == 12 and r["agent_session_id"] == "abc-123"
    assert r["is_error"] is False and r["result"].startswith("No intervention")
    s = parse_output("claude", CLAUDE_STREAM)
    assert s["cost_usd"] == 1.25 and s["is_error"] is True and s["num_turns"] == 40


def test_parse_codex_usage_and_failures():
    r = parse_output("codex", CODEX_JSONL)
    assert r["agent_session_id"] == "th_42"
    assert r["usage"] == {"input_tokens": 1500, "cached_input_tokens": 200, "output_tokens": 75}
    assert r["errors"] == ["stream disconnected"] and "cost_usd" not in r  # the API's message, once
    assert r["is_error"] is True and r["commands"] == 1 and r["result"] == "No change."
    retry_only = parse_output("codex", json.dumps({"type": "error", "message": "Reconnecting... 1/5"}))
    assert retry_only == {"errors": ["Reconnecting... 1/5"]}  # an error event alone is no failed turn


def test_failure_message_names_the_agents_own_reason():
    assert failure_message("claude", "claude", 0, {"is_error": False, "result": "done"}, "") is None
    assert (
        failure_message("claude", "claude", 1, {"is_error": True, "result": "Not logged in · Please run /login"}, "")
        == "claude failed (exit 1): Not logged in · Please run /login"
    )
    codex = parse_output("codex", CODEX_JSONL)
    assert failure_message("codex", "codex", 1, codex, "") == "codex failed (exit 1): stream disconnected"
    assert (
        failure_message("command", "python", 3, {}, "warn\nboom: bad input\n\n")
        == "python failed (exit 3): boom: bad input"
    )
    assert failure_message("command", "python", 2, {}, "") == "python failed (exit 2): no message on stdout or stderr"


def test_parse_output_without_reports():
    assert parse_output("command", "plain text\nno json here\n") == {}
    assert parse_output("claude", "") == {}
    assert (
        parse_output("command", "log line\n" + json.dumps({"total_cost_usd": 0.0, "num_turns": 2}))["cost_usd"] == 0.0
    )


# ------------------------------------------------------------------------------------------ prompt
FIELDS = {
    "run": "r1",
    "step": 6,
    "total_steps": 20,
    "session": 2,
    "session_dir": "/x/runs/r1/meta/session_002",
    "skill": "eau-harness",
    "runs_dir": "/x/runs",
    "knobs_dir": "/x/knobs",
    "timeout_min": "30",
}


def test_default_prompt_names_run_rules_and_expected_output():
    tpl, where = prompt_mod.load_template(None)
    text = prompt_mod.render(tpl, FIELDS)
    assert where == "built-in" and "$" not in text.replace("$$", "")
    for needle in (
        "`r1`",
        "completed 6 of 20",
        "eau-harness",
        "eau eval",
        "eval_results/",
        "--author agent",
        "--reason",
        "eau finding add",
        "eau effect --event",
        "at most ONE intervention",
        "/x/runs/r1/meta/session_002",
        "30 minutes",
    ):
        assert needle in text, needle


def test_custom_template_and_its_errors(tmp_path):
    good = tmp_path / "t.md"
    good.write_text("Run $run at step ${step}; costs $$5.")
    tpl, where = prompt_mod.load_template(good)
    assert prompt_mod.render(tpl, FIELDS) == "Run r1 at step 6; costs $5." and where == str(good)
    bad = tmp_path / "bad.md"
    bad.write_text("Run $run, model $model, gpu $gpu")
    with pytest.raises(prompt_mod.TemplateError) as e:
        prompt_mod.load_template(bad)
    assert str(bad) in str(e.value) and "$gpu, $model" in str(e.value) and "allowed: $run" in str(e.value)
    broken = tmp_path / "broken.md"
    broken.write_text("costs $5")
    with pytest.raises(prompt_mod.TemplateError, match="invalid placeholder syntax"):
        prompt_mod.load_template(broken)
    with pytest.raises(prompt_mod.TemplateError, match="no such file"):
        prompt_mod.load_template(tmp_path / "missing.md")
    (tmp_path / "empty.md").write_text("  \n")
    with pytest.raises(prompt_mod.TemplateError, match="empty"):
        prompt_mod.load_template(tmp_path / "empty.md")


# ------------------------------------------------------------------------------------------ schedule
def test_schedule_every_n_skips_what_passes_while_busy():
    s = Schedule(3)
    assert [c for c in range(0, 7) if s.due(c)] == [3, 6]  # at N, 2N
    s = Schedule(2)
    assert not s.due(1) and s.due(2)
    s.pass_busy(3)
    assert s.skipped == [] and s.next_due == 4
    s.pass_busy(7)  # 4 and 6 passed while a session ran: skipped, not queued
    assert s.skipped == [4, 6] and s.next_due == 8
    assert not s.due(7) and s.due(9) and s.next_due == 10
    late = Schedule(5)  # joining a run already at step 12: one turn now, the next at 15
    assert late.due(12) and late.next_due == 15
    with pytest.raises(ValueError, match="--every must be at least 1"):
        Schedule(0)


def test_default_prompt_template_is_valid_for_every_placeholder():
    assert set(prompt_mod.PLACEHOLDERS) == set(FIELDS)
    with pytest.raises(prompt_mod.TemplateError, match="missing: timeout_min"):
        prompt_mod.render(prompt_mod.load_template(None)[0], {k: v for k, v in FIELDS.items() if k != "timeout_min"})
    assert Path(prompt_mod.__file__).exists()
