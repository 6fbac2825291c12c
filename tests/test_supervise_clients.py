"""``eau supervise`` with the REAL agent CLIs (Claude Code, Codex) against a scripted model on loopback.

The CLIs are the npm packages ``@anthropic-ai/claude-code`` and ``@openai/codex``. They are looked
up in ``$EAU_AGENT_CLIS`` (a folder holding the ``claude`` and ``codex`` executables), else in
``.clients/node_modules/.bin`` of this checkout (``npm install --prefix .clients ...``, as .ci/run
does). A test whose CLI is absent is skipped with that reason, unless ``EAU_REQUIRE_AGENT_CLIS=1``
(set by .ci/run), which turns the skip into a failure.

The model is :mod:`tests/agents/model_server.py`: a loopback HTTP server speaking the Anthropic
Messages API (Claude Code, ``ANTHROPIC_BASE_URL``) and the OpenAI Responses API (Codex, a model
provider in ``$CODEX_HOME/config.toml``), playing a fixed list of model turns. Everything else is
real: ``eau supervise`` starts the CLI as it would for a user, the CLI runs its agent loop with its
own tools and permission system, the tools run real ``eau`` commands against a live ``eau train``
run, and the run applies the knob write at its next step boundary.

What the sessions must show (issue 24, part C): the installed skill is found; the protocol's
commands run under the skill's permission rules; a read of eval_results/ is refused by the CLI's
own permission system; the knob write lands in the live run as an event with author agent; the
session's cost (Codex: token usage), turns and result are recorded; a client that is not logged in
or gets a model error ends its session with a clear message and leaves the run untouched. And
every flag ``build_command`` passes is one the real CLI accepts (its own ``--help``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from agents.model_server import ModelServer, tool_results
from test_trainer import FAST

from harness.io import jsonl
from harness.knobs.folder import copy_defaults
from harness.supervise.agents import CLAUDE_OUTPUT_FORMATS, CLAUDE_PERMISSION_MODES, AgentOptions, build_command

REPO = Path(__file__).resolve().parents[1]
RUN = "cli"
SECRET = "EVAL-SECRET-7f3a9c"  # in eval_results/: must never reach the model
SKILL = "eau-harness"
CLAUDE_MODEL = "claude-sonnet-4-5"
CODEX_MODEL = "gpt-5.5"
KEY_VAR = "EAU_TEST_SCRIPTED_KEY"  # the Codex provider's key variable (absent: not logged in)
EAU = [sys.executable, "-m", "harness.cli.main"]


def clis_dir() -> Path:
    return Path(os.environ.get("EAU_AGENT_CLIS") or REPO / ".clients" / "node_modules" / ".bin")


def need(cli: str) -> str:
    """The CLI's path; skip (or fail under EAU_REQUIRE_AGENT_CLIS=1) when it is not installed."""
    exe = clis_dir() / cli
    if exe.is_file() and os.access(exe, os.X_OK):
        return str(exe)
    why = (
        f"{cli} CLI not found at {exe}: install it with `npm install --prefix .clients "
        f"@anthropic-ai/claude-code @openai/codex` or set EAU_AGENT_CLIS to the folder holding it"
    )
    if os.environ.get("EAU_REQUIRE_AGENT_CLIS") == "1":
        pytest.fail(why)
    pytest.skip(why)


def version(cli: str) -> str:
    out = subprocess.run([need(cli), "--version"], capture_output=True, text=True, timeout=60, env=base_env())
    return out.stdout.strip()


def base_env(home: Path | None = None) -> dict[str, str]:
    """The test's environment for a CLI: no credentials of whoever runs the tests, a clean HOME,
    the CLIs and this interpreter's ``eau`` first on PATH, no update checks or telemetry."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ANTHROPIC_", "CLAUDE_", "OPENAI_", "CODEX_")) and k != KEY_VAR
    }
    env["PATH"] = os.pathsep.join([str(clis_dir()), str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(REPO), env.get("PYTHONPATH", "")] if p)
    env.update({"DISABLE_AUTOUPDATER": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "NO_COLOR": "1"})
    if home is not None:
        env["HOME"] = str(home)
    return env


# ------------------------------------------------------------------------------------ the live run
@dataclass
class Live:
    proj: Path  # the project folder the agent works in (skill installed, knobs/, runs/, eval_results/)
    knobs: Path
    runs: Path
    train: subprocess.Popen
    log: Path

    @property
    def run_dir(self) -> Path:
        return self.runs / RUN

    def completed(self) -> int:
        last = jsonl.tail(self.run_dir / "metrics.jsonl", 1)
        return last[0]["step"] + 1 if last else 0

    def state(self) -> str:
        try:
            return json.loads((self.run_dir / "status.json").read_text())["state"]
        except (OSError, ValueError, KeyError):
            return "?"

    def agent_events(self) -> list[dict]:
        return [e for e in jsonl.read(self.run_dir / "knob_events.jsonl") if e.get("author") == "agent"]

    def knobs_digest(self) -> str:
        """A hash of every file of the knobs folder (pending writes included)."""
        h = hashlib.sha256()
        for p in sorted(self.knobs.rglob("*")):
            if p.is_file():
                h.update(str(p.relative_to(self.knobs)).encode() + b"\0" + p.read_bytes())
        return h.hexdigest()


@pytest.fixture(scope="module")
def live(tmp_path_factory) -> Live:
    """A tiny training run with far more steps than the tests need, ended when the module is done."""
    if not any((clis_dir() / c).is_file() for c in ("claude", "codex")):
        need("claude")  # skip (or fail) with the reason before starting a run nobody uses
    proj = tmp_path_factory.mktemp("clients") / "proj"
    proj.mkdir()
    out = subprocess.run(
        [*EAU, "skill", "install", "--target", str(proj), "--json"], capture_output=True, text=True, env=base_env()
    )
    assert out.returncode == 0, out.stderr
    knobs = copy_defaults(proj / "knobs")
    runs = proj / "runs"
    (proj / "eval_results" / RUN).mkdir(parents=True)
    (proj / "eval_results" / RUN / "result.json").write_text(json.dumps({"success": 0.5, "note": SECRET}))
    env = {**base_env(), "EAU_KNOBS_DIR": str(knobs), "EAU_RUNS_DIR": str(runs)}
    log = proj.parent / "train.log"
    with open(log, "w") as f:
        train = subprocess.Popen(
            [*EAU, "train", "--preset", "tiny", "--steps", "100000", "--run-id", RUN]
            + ["--set", "checkpoint_every=0", *FAST],
            cwd=proj,
            env=env,
            stdout=f,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    lv = Live(proj, knobs, runs, train, log)
    try:
        t0 = time.monotonic()
        while lv.completed() < 1:
            assert train.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() - t0 < 300, "the run completed no step in 300 s"
            time.sleep(0.5)
        yield lv
    finally:
        if train.poll() is None:
            os.killpg(train.pid, signal.SIGTERM)
            try:
                train.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(train.pid, signal.SIGKILL)
                train.wait()


def supervise(lv: Live, agent: str, env: dict[str, str], *extra: str, timeout_s: float = 180) -> dict:
    """One ``eau supervise`` of one session on the live run; returns its --json document."""
    out = subprocess.run(
        [*EAU, "supervise", "--run", RUN, "--every", "1", "--agent", agent, "--max-sessions", "1"]
        + ["--timeout", str(int(timeout_s)), "--poll", "0.2", "--cwd", str(lv.proj)]
        + ["--runs-dir", str(lv.runs), "--pool-dir", str(lv.proj / "experience_pool"), "--json", *extra],
        cwd=lv.proj,
        env={**env, "EAU_KNOBS_DIR": str(lv.knobs)},  # the folder the run trains from, as for a user
        capture_output=True,
        text=True,
        timeout=timeout_s + 120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    doc = json.loads(out.stdout)
    assert doc["sessions_run"] == 1 and doc["stopped"] == "max sessions", doc
    return doc


def session_folder(lv: Live, res: dict) -> Path:
    return lv.run_dir / "meta" / f"session_{res['session']:03d}"


def wait_for_event(lv: Live, reason: str, limit_s: float = 120) -> dict:
    """The run's knob event with this reason (the run applies a write at its next step boundary)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit_s:
        evs = [e for e in lv.agent_events() if e.get("reason") == reason]
        if evs:
            return evs[-1]
        assert lv.train.poll() is None, lv.log.read_text()[-3000:]
        time.sleep(0.3)
    raise AssertionError(f"no knob event with reason {reason!r} in {limit_s:g}s")


def assert_run_uses(lv: Live, ev: dict, value: float) -> None:
    """The event took effect: status accepted, and the metrics of its step onwards carry the value."""
    assert ev["status"] == "accepted" and ev["author"] == "agent" and ev["new"] == value, ev
    t0 = time.monotonic()
    while lv.completed() <= ev["step_effective"] + 1:
        assert time.monotonic() - t0 < 120
        time.sleep(0.3)
    after = [m for m in jsonl.read(lv.run_dir / "metrics.jsonl") if m["step"] >= ev["step_effective"]]
    assert after and after[0]["entropy_coeff"] == value


def codex_output(result_text: str) -> str:
    """The command output inside a Codex exec_command result (after its 'Output:' line)."""
    return result_text.split("Output:\n", 1)[1] if "Output:\n" in result_text else result_text


# ------------------------------------------------------------------------------- flags vs --help
def _help_flags(text: str) -> set[str]:
    return set(re.findall(r"(?<![\w-])(-{1,2}[A-Za-z][\w-]*)", text))


def _choices(help_text: str, flag: str) -> list[str]:
    m = re.search(re.escape(flag) + r"[^\n]*(?:\n(?!\s*-)[^\n]*)*?\(choices: ([^)]*)\)", help_text)
    assert m, f"{flag}: no choices in the help text"
    return re.findall(r'"([^"]+)"', m.group(1))


def _argv_flags(argv: list[str], skip_values_of: set[str]) -> list[str]:
    return [a for a in argv[1:] if a.startswith("-") and a not in skip_values_of]


def test_claude_flags_are_in_its_own_help(tmp_path):
    exe = need("claude")
    help_text = subprocess.run(
        [exe, "--help"], capture_output=True, text=True, timeout=60, env=base_env(tmp_path)
    ).stdout.replace("\n" + " " * 40, " ")
    assert "--permission-mode" in help_text, help_text[:500]
    flags = _help_flags(help_text)
    for mode in CLAUDE_PERMISSION_MODES:  # every mode eau supervise accepts, the CLI accepts too
        assert mode in _choices(help_text, "--permission-mode"), f"claude {version('claude')} rejects {mode}"
    assert set(CLAUDE_OUTPUT_FORMATS) <= set(_choices(help_text, "--output-format"))
    for fmt in CLAUDE_OUTPUT_FORMATS:
        opts = AgentOptions(max_budget_usd=1.5, model=CLAUDE_MODEL, output_format=fmt)
        cmd = build_command("claude", "--prompt-like text", cwd=tmp_path, session_dir=tmp_path, opts=opts)
        used = _argv_flags(cmd.argv, {"--prompt-like text"})
        # --max-turns is accepted but not listed in --help (a hidden option): the live sessions below
        # run with it, and an unknown option would end them with "error: unknown option".
        missing = [f for f in used if f not in flags and f != "--max-turns"]
        assert missing == [], f"claude {version('claude')} --help does not list {missing}"


def test_claude_rejects_what_eau_supervise_refuses(tmp_path):
    """The real CLI refuses --permission-mode manual; so does eau supervise, before starting it."""
    exe = need("claude")
    out = subprocess.run(
        [exe, "-p", "x", "--permission-mode", "manual"],
        capture_output=True,
        text=True,
        timeout=60,
        env=base_env(tmp_path),
    )
    assert out.returncode != 0 and "'manual' is invalid" in out.stderr
    out = subprocess.run(
        [*EAU, "supervise", "--run", "r", "--every", "1", "--agent", "claude", "--permission-mode", "manual"]
        + ["--runs-dir", str(tmp_path), "--wait", "0"],
        capture_output=True,
        text=True,
        env=base_env(tmp_path),
    )
    assert out.returncode == 2 and "--permission-mode 'manual' is not allowed" in out.stderr


def test_codex_flags_are_in_its_own_help(tmp_path):
    exe = need("codex")
    help_text = subprocess.run(
        [exe, "exec", "--help"], capture_output=True, text=True, timeout=60, env=base_env(tmp_path)
    ).stdout
    assert "--skip-git-repo-check" in help_text, help_text[:500]
    flags = _help_flags(help_text)
    outside = tmp_path / "elsewhere"
    opts = AgentOptions(model=CODEX_MODEL, extra_args=["-c", "model_reasoning_effort=low"])
    cmd = build_command(
        "codex", "prompt", cwd=tmp_path / "proj", session_dir=outside / "s", writable=[outside], opts=opts
    )
    values = {a for i, a in enumerate(cmd.argv) if i and cmd.argv[i - 1] in ("-c", "-C", "--add-dir", "-m", "-o")}
    missing = [f for f in _argv_flags(cmd.argv, values) if f not in flags]
    assert missing == [], f"codex exec ({version('codex')}) --help does not list {missing}"
    assert "--sandbox" not in cmd.argv  # a --sandbox flag would switch the eau_supervise profile off


# ----------------------------------------------------------------------------------- Claude Code
REASON_CLAUDE = "scripted claude: entropy falling; predict entropy higher after lag 1, success_rate not lower"
FINAL_CLAUDE = "Diagnosis: entropy falling. Intervention: agent.entropy_coeff 0.001 -> 0.003. No finding yet."


def bash(command: str) -> dict:
    return {"tool_calls": [{"name": "Bash", "input": {"command": command, "description": command[:40]}}]}


def claude_env(lv: Live, srv: ModelServer | None, home: Path, logged_in: bool = True) -> dict[str, str]:
    env = {**base_env(home), "CLAUDE_CODE_MAX_RETRIES": "0"}
    if srv is not None:
        env["ANTHROPIC_BASE_URL"] = srv.url
    if logged_in:
        env["ANTHROPIC_API_KEY"] = "sk-ant-scripted-test"
    return env


def test_claude_supervises_the_live_run(live, tmp_path):
    need("claude")
    eval_file = live.proj / "eval_results" / RUN / "result.json"
    script = [
        {"text": "Loading the skill first.", "tool_calls": [{"name": "Skill", "input": {"skill": SKILL}}]},
        bash(f"eau status --run {RUN} --no-detectors --json"),
        {"tool_calls": [{"name": "Read", "input": {"file_path": str(eval_file)}}]},
        bash(f"cat eval_results/{RUN}/result.json"),
        bash("python3 -c 'print(42)'"),
        bash(f"eau eval --run {RUN}"),
        bash(f"eau knobs set agent.entropy_coeff 0.003 --author agent --reason '{REASON_CLAUDE}' --run {RUN} --json"),
        {"text": FINAL_CLAUDE},
    ]
    with ModelServer(script) as srv:
        doc = supervise(live, "claude", claude_env(live, srv, tmp_path), "--model", CLAUDE_MODEL)
    (res,) = doc["sessions"]
    folder = session_folder(live, res)
    transcript = json.loads((folder / "transcript.stdout").read_text())
    stderr = (folder / "transcript.stderr").read_text()
    main = srv.main_requests()
    assert [r["turn"] for r in main] == list(range(len(script))), (stderr[-2000:], [r["turn"] for r in main])
    assert not any(r.get("exhausted") for r in main) and all(r["auth"] for r in main)
    results = tool_results(main[-1]["body"])
    assert len(results) == len(script) - 1
    skill, status, read, cat, other, ev_cmd, knob = results

    # the installed skill is found: the Skill tool loads it from .claude/skills/
    assert skill["content"] == f"Launching skill: {SKILL}" and not skill["is_error"]
    loaded = json.dumps(main[1]["body"]["messages"])
    assert f"Base directory for this skill: {live.proj}/.claude/skills/{SKILL}" in loaded
    assert "# Supervising an EAU training run" in loaded  # SKILL.md's body reached the model

    # the protocol's commands run under the skill's rules: eau status and eau knobs set are allowed
    assert not status["is_error"] and json.loads(status["content"])["run"] == RUN
    assert not knob["is_error"] and json.loads(knob["content"])["ok"] is True, knob
    # ... a command the rules do not allow is refused by Claude Code itself (dontAsk: no prompt), and
    # so is the denied eau eval
    assert other["is_error"] and "don't ask mode" in other["content"]
    assert ev_cmd["is_error"] and f"Bash with command eau eval --run {RUN} has been denied" in ev_cmd["content"]
    # eval_results/ is refused by the deny rules, to the Read tool and to a shell read alike, and its
    # content never reached the model
    assert read["is_error"] and "denied by your permission settings" in read["content"]
    assert cat["is_error"] and f"Bash with command cat eval_results/{RUN}/result.json has been denied" in cat["content"]
    assert not any(SECRET in json.dumps(r.get("body")) for r in srv.requests)
    denied = [d["tool_input"].get("command") for d in transcript["permission_denials"]]
    assert f"cat eval_results/{RUN}/result.json" in denied and f"eau eval --run {RUN}" in denied

    # the knob write lands in the live run as an event with author agent
    ev = wait_for_event(live, REASON_CLAUDE)
    assert_run_uses(live, ev, 0.003)
    assert ev["id"] in [e["id"] for e in res["knob_events"]] or [w["reason"] for w in res["pending_writes"]] == [
        REASON_CLAUDE
    ]

    # the session's cost, turns and result are recorded as Claude Code reported them
    assert res["exit_code"] == 0 and res["error"] is None and res["is_error"] is False, stderr[-2000:]
    assert res["cost_usd"] == transcript["total_cost_usd"] > 0
    assert res["num_turns"] == transcript["num_turns"] >= len(script) - 1
    assert res["result"] == FINAL_CLAUDE and res["agent_session_id"] == transcript["session_id"]
    assert doc["total_cost_usd"] == pytest.approx(res["cost_usd"])
    assert json.loads((folder / "result.json").read_text())["cost_usd"] == res["cost_usd"]
    argv = json.loads((folder / "command.json").read_text())["argv"]
    assert argv[:2] == ["claude", "-p"] and argv[argv.index("--permission-mode") + 1] == "dontAsk"


def test_claude_stream_json_session_is_recorded_from_its_result_event(live, tmp_path):
    """--output-format stream-json (one event per line; --verbose added): the result event's cost,
    turns and text are recorded."""
    need("claude")
    script = [bash(f"eau knobs history --run {RUN} --limit 3 --json"), {"text": "No intervention: measuring."}]
    with ModelServer(script) as srv:
        env = claude_env(live, srv, tmp_path)
        doc = supervise(live, "claude", env, "--output-format", "stream-json", "--model", CLAUDE_MODEL)
    (res,) = doc["sessions"]
    folder = session_folder(live, res)
    argv = json.loads((folder / "command.json").read_text())["argv"]
    assert argv[argv.index("--output-format") + 1] == "stream-json" and "--verbose" in argv
    events = [json.loads(line) for line in (folder / "transcript.stdout").read_text().splitlines() if line.strip()]
    assert len(events) > 3 and events[-1]["type"] == "result", [e.get("type") for e in events]
    (history,) = tool_results(srv.main_requests()[-1]["body"])
    assert not history["is_error"] and "events" in json.loads(history["content"])
    assert res["exit_code"] == 0 and res["error"] is None
    assert res["cost_usd"] == events[-1]["total_cost_usd"] > 0 and res["num_turns"] == events[-1]["num_turns"]
    assert res["result"] == "No intervention: measuring." and res["knob_events"] == []


# ----------------------------------------------------------------------------------------- Codex
REASON_CODEX = "scripted codex: entropy falling; predict entropy higher after lag 1, success_rate not lower"
FINAL_CODEX = "Diagnosis: entropy falling. Intervention: agent.entropy_coeff -> 0.002. No finding yet."


def codex_home(tmp_path: Path, srv: ModelServer, proj: Path) -> Path:
    """A CODEX_HOME whose config points Codex at the scripted model (the provider's key: KEY_VAR) and
    trusts the project (so Codex reads the rules `eau skill install` wrote to .codex/rules/)."""
    home = tmp_path / "codex_home"
    home.mkdir(exist_ok=True)
    (home / "config.toml").write_text(
        f'model = "{CODEX_MODEL}"\n'
        'model_provider = "scripted"\n'
        "check_for_update_on_startup = false\n\n"
        "[model_providers.scripted]\n"
        'name = "scripted model"\n'
        f'base_url = "{srv.url}/v1"\n'
        'wire_api = "responses"\n'
        f'env_key = "{KEY_VAR}"\n'
        "request_max_retries = 0\n"
        "stream_max_retries = 0\n\n"
        f'[projects."{proj}"]\n'
        'trust_level = "trusted"\n'
    )
    return home


def codex_env(lv: Live, tmp_path: Path, srv: ModelServer, logged_in: bool = True) -> dict[str, str]:
    env = {**base_env(tmp_path / "home"), "CODEX_HOME": str(codex_home(tmp_path, srv, lv.proj))}
    (tmp_path / "home").mkdir(exist_ok=True)
    if logged_in:
        env[KEY_VAR] = "sk-scripted-test"
    return env


def outside_probe() -> Path:
    """A file path we may write but Codex's :workspace profile may not: outside the project, /tmp and
    $TMPDIR (/var/tmp, else this checkout, else the home folder)."""
    tmp_roots = {Path("/tmp").resolve(), Path(tempfile.gettempdir()).resolve()}
    for d in (Path("/var/tmp"), REPO, Path.home()):
        d = d.resolve()
        if d.is_dir() and os.access(d, os.W_OK) and not any(t == d or t in d.parents for t in tmp_roots):
            return d / f".eau_codex_sandbox_probe_{os.getpid()}"
    pytest.skip("no writable folder outside /tmp and $TMPDIR to probe Codex's sandbox with")


def shell(cmd: str) -> dict:
    # Codex hands back what a command printed after yield_time_ms (10 s by default) and leaves it
    # running; an `eau` command on a loaded machine can take longer, so the script waits for the end
    return {"tool_calls": [{"name": "exec_command", "input": {"cmd": cmd, "yield_time_ms": 120000}}]}


def test_codex_supervises_the_live_run(live, tmp_path):
    need("codex")
    probe = outside_probe()  # outside every writable root of the session
    script = [
        shell(f"head -4 .agents/skills/{SKILL}/SKILL.md"),
        shell(f"eau status --run {RUN} --no-detectors --json"),
        shell(f"cat eval_results/{RUN}/result.json"),
        shell(f"touch {probe}"),
        shell(f"eau eval --run {RUN}"),
        shell(f"eau knobs set agent.entropy_coeff 0.002 --author agent --reason '{REASON_CODEX}' --run {RUN} --json"),
        {"text": FINAL_CODEX},
    ]
    try:
        with ModelServer(script) as srv:
            doc = supervise(live, "codex", codex_env(live, tmp_path, srv))
        assert not probe.exists(), "Codex's sandbox let a command write outside the workspace"
    finally:
        probe.unlink(missing_ok=True)
    (res,) = doc["sessions"]
    folder = session_folder(live, res)
    stderr = (folder / "transcript.stderr").read_text()
    main = srv.main_requests()
    assert [r["turn"] for r in main] == list(range(len(script))), (stderr[-2000:], [r["turn"] for r in main])
    assert not any(r.get("exhausted") for r in main)
    results = [codex_output(t["content"]) for t in tool_results(main[-1]["body"])]
    assert len(results) == len(script) - 1, results
    skill_head, status, read, touch, ev_cmd, knob = results

    # the installed skill is found: Codex lists it from .agents/skills/, and its file is readable
    listed = json.dumps(main[0]["body"])
    assert f"- {SKILL}: Supervise a live EAU training run" in listed
    assert f"name: {SKILL}" in skill_head

    # the protocol's commands run (in a plain shell: eau is on the supervisor's PATH) ...
    assert json.loads(status)["run"] == RUN
    assert json.loads(knob)["ok"] is True, knob
    # ... under the eau_supervise profile, enforced by Codex's sandbox: eval_results/ is unreadable,
    # nothing outside the workspace is writable
    assert "Permission denied" in read and SECRET not in read
    assert not any(SECRET in json.dumps(r.get("body")) for r in srv.requests)
    assert "Read-only file system" in touch
    # ... and eau eval is forbidden by the execpolicy rule `eau skill install` wrote (.codex/rules/)
    assert "rejected: evaluation data is off-limits to the meta-agent" in ev_cmd, ev_cmd

    # the knob write lands in the live run as an event with author agent
    ev = wait_for_event(live, REASON_CODEX)
    assert_run_uses(live, ev, 0.002)

    # recorded: Codex reports no cost and no turn count; its token usage, commands and result are kept
    assert res["exit_code"] == 0 and res["error"] is None and "is_error" not in res, stderr[-2000:]
    assert res["usage"]["input_tokens"] == srv.usage["input_tokens"] * len(main)
    assert res["usage"]["output_tokens"] == srv.usage["output_tokens"] * len(main)
    assert res["commands"] >= 3 and res["result"] == FINAL_CODEX and res["agent_session_id"]
    assert "cost_usd" not in res and doc["total_cost_usd"] is None
    assert (folder / "last_message.txt").read_text().strip() == FINAL_CODEX


# ------------------------------------------------------------------------------ failing clients
@pytest.mark.parametrize(
    "client, failure, expected",
    [
        ("claude", "not_logged_in", "claude failed (exit 1): Not logged in · Please run /login"),
        ("claude", "model_error", "claude failed (exit 1): API Error: 400 scripted model error: overloaded script"),
        ("codex", "not_logged_in", f"codex failed (exit 1): Missing environment variable: `{KEY_VAR}`."),
        ("codex", "model_error", "codex failed (exit 1): scripted model error: overloaded script"),
    ],
    ids=["claude-not-logged-in", "claude-model-error", "codex-not-logged-in", "codex-model-error"],
)
def test_failing_client_ends_the_session_and_leaves_the_run_alone(live, tmp_path, client, failure, expected):
    need(client)
    script = [
        {
            "error": {
                "status": 400,
                "type": "invalid_request_error",
                "message": "scripted model error: overloaded script",
            }
        }
    ]
    events_before, knobs_before = len(jsonl.read(live.run_dir / "knob_events.jsonl")), live.knobs_digest()
    with ModelServer(script) as srv:
        if client == "claude":
            env = claude_env(live, srv, tmp_path, logged_in=failure != "not_logged_in")
        else:
            env = codex_env(live, tmp_path, srv, logged_in=failure != "not_logged_in")
        t0 = time.monotonic()
        doc = supervise(live, client, env, timeout_s=120)
        elapsed = time.monotonic() - t0
    (res,) = doc["sessions"]
    assert res["error"] == expected, (res, (session_folder(live, res) / "transcript.stderr").read_text()[-2000:])
    assert res["exit_code"] == 1 and not res["timed_out"] and res["is_error"] is True
    assert elapsed < 60  # ends at once: no retries, no waiting for the timeout
    if failure == "not_logged_in":
        assert srv.main_requests() == []  # it never reached the model
    else:
        assert len(srv.main_requests()) == 1
    # the run is untouched: no knob event, the knobs folder byte for byte, still training
    assert res["knob_events"] == [] and res["pending_writes"] == []
    assert len(jsonl.read(live.run_dir / "knob_events.jsonl")) == events_before
    assert live.knobs_digest() == knobs_before
    step = live.completed()
    t1 = time.monotonic()
    while live.completed() <= step:
        assert time.monotonic() - t1 < 60 and live.state() == "running", live.log.read_text()[-2000:]
        time.sleep(0.2)
    log = [e for e in jsonl.read(live.run_dir / "meta" / "supervise.jsonl") if e["event"] == "session_ended"]
    assert log[-1]["error"] == expected
