"""eau supervise with real processes: sessions (stdin prompt, env, transcripts, timeout kills the
process group), the loop on a run folder written by the real RunWriter, and the CLI's errors."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

from harness.io import jsonl
from harness.runs.writer import RunWriter
from harness.supervise.agents import AgentOptions, build_command, session_env
from harness.supervise.session import Session, allocate_dir

REPO = Path(__file__).resolve().parents[1]


def eau(args, tmp_path, **kw):
    env = {**os.environ, "EAU_RUNS_DIR": str(tmp_path / "runs"), "EAU_POOL_DIR": str(tmp_path / "pool")}
    return subprocess.run(
        [sys.executable, "-m", "harness.cli.main", *args], env=env, capture_output=True, text=True, cwd=REPO, **kw
    )


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers kill(0); it is dead for our purpose
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def make_session(tmp_path, agent_cmd: str, timeout_s: float, run_dir: Path, knobs_dir: Path | None = None) -> Session:
    number, folder = allocate_dir(run_dir / "meta")
    cmd = build_command(
        agent_cmd, "PROMPT for run r1: never run eau eval", cwd=tmp_path, session_dir=folder, opts=AgentOptions()
    )
    env, added = session_env(
        dict(os.environ),
        run="r1",
        runs_dir=run_dir.parent,
        knobs_dir=knobs_dir,
        pool_dir=None,
        session_dir=folder,
        prompt_file=folder / "prompt.txt",
        step=3,
    )
    return Session(
        number,
        folder,
        cmd,
        "PROMPT for run r1: never run eau eval",
        cwd=tmp_path,
        env=env,
        env_added=added,
        timeout_s=timeout_s,
        run_dir=run_dir,
        step=3,
        knobs_dir=knobs_dir,
        pool_dir=tmp_path / "pool",
        kill_grace_s=0.5,
    )


def run_to_end(s: Session, limit: float = 30.0) -> dict:
    s.start()
    t0 = time.monotonic()
    while not s.poll():
        assert time.monotonic() - t0 < limit
        time.sleep(0.05)
    return s.finish()


def test_custom_command_session_records_everything(tmp_path):
    run_dir = tmp_path / "runs" / "r1"
    run_dir.mkdir(parents=True)
    script = tmp_path / "agent.py"
    script.write_text(
        textwrap.dedent("""
        import json, os, sys
        prompt = sys.stdin.read()
        same = open(os.environ["EAU_SESSION_PROMPT_FILE"]).read() == prompt
        print("prompt:", prompt)
        print("file matches stdin:", same, "run:", os.environ["EAU_RUN"], "step:", os.environ["EAU_SESSION_STEP"])
        print("to stderr", file=sys.stderr)
        print(json.dumps({"type": "result", "total_cost_usd": 0.125, "num_turns": 3, "session_id": "x1"}))
        sys.exit(4)
    """)
    )
    res = run_to_end(make_session(tmp_path, f"{sys.executable} {script}", 30, run_dir))
    folder = run_dir / "meta" / "session_001"
    out = (folder / "transcript.stdout").read_text()
    assert "prompt: PROMPT for run r1" in out and "file matches stdin: True run: r1 step: 3" in out
    assert (folder / "transcript.stderr").read_text().strip() == "to stderr"
    assert (folder / "prompt.txt").read_text() == "PROMPT for run r1: never run eau eval"
    cmd = json.loads((folder / "command.json").read_text())
    assert cmd["argv"] == [sys.executable, str(script)] and cmd["prompt_on_stdin"] is True
    assert cmd["env_set"]["EAU_RUN"] == "r1" and "PATH" in cmd["env_keys"] and "PATH" not in cmd["env_set"]
    on_disk = json.loads((folder / "result.json").read_text())
    assert on_disk == json.loads(json.dumps(res))
    assert res["exit_code"] == 4 and res["timed_out"] is False
    assert res["error"] == f"{sys.executable} failed (exit 4): to stderr"  # non-zero exit: its last stderr line
    assert res["cost_usd"] == 0.125 and res["num_turns"] == 3 and res["agent_session_id"] == "x1"
    assert res["knob_events"] == [] and res["findings"] == [] and res["duration_s"] < 30


def test_timeout_kills_the_whole_process_group(tmp_path):
    run_dir = tmp_path / "runs" / "r1"
    run_dir.mkdir(parents=True)
    pidfile = tmp_path / "child.pid"
    script = tmp_path / "slow.py"
    # the agent starts a grandchild that ignores SIGTERM, then both sleep far past the timeout
    script.write_text(
        textwrap.dedent(f"""
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"])
        open({str(pidfile)!r}, "w").write(str(child.pid))
        print("started", flush=True)
        time.sleep(600)
    """)
    )
    s = make_session(tmp_path, f"{sys.executable} {script}", 2.0, run_dir)
    t0 = time.monotonic()
    res = run_to_end(s)
    assert res["timed_out"] is True and res["exit_code"] == -signal.SIGTERM
    assert 2.0 <= res["duration_s"] < 15 and time.monotonic() - t0 < 20
    grandchild = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while pid_alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_alive(grandchild), "the grandchild survived the session"
    assert (run_dir / "meta" / "session_001" / "transcript.stdout").read_text().strip() == "started"


def test_missing_program_is_a_recorded_failure_and_folders_are_numbered(tmp_path):
    run_dir = tmp_path / "runs" / "r1"
    run_dir.mkdir(parents=True)
    (run_dir / "meta" / "session_007").mkdir(parents=True)
    res = run_to_end(make_session(tmp_path, "/nonexistent/agent-binary --x", 5, run_dir))
    assert res["session"] == 8 and res["exit_code"] is None and "could not start" in res["error"]
    assert (run_dir / "meta" / "session_008" / "result.json").exists()


def test_session_attributes_agent_knob_events_and_findings(tmp_path, knobs_dir):
    """Knob events the run logs during the session (author agent) and pending writes, later settled."""
    run_dir = tmp_path / "runs" / "r1"
    run_dir.mkdir(parents=True)
    events = run_dir / "knob_events.jsonl"
    jsonl.append(events, {"id": "k-old", "knob": "agent.lr", "author": "agent", "status": "accepted"})
    pool = tmp_path / "pool"
    pool.mkdir()
    script = tmp_path / "agent.py"
    script.write_text(
        textwrap.dedent(f"""
        import json, time
        from harness.io import jsonl
        # a refusal the CLI logs at once, a human write, and a write waiting for the step boundary
        jsonl.append({str(events)!r}, {{"id": "k-ref", "knob": "env.max_steps", "author": "agent",
                                        "status": "rejected", "rule": "requires"}})
        jsonl.append({str(events)!r}, {{"id": "k-hum", "knob": "agent.lr", "author": "human", "status": "accepted"}})
        rec = {{"knob": "agent.temperature", "gym": None, "new": 1.1, "author": "agent", "reason": "why",
                "step_written": 3, "source": "cli", "ref": None, "time": time.time()}}
        open({str(knobs_dir / ".pending" / "a.json")!r}, "w").write(json.dumps(rec))
        open({str(pool / "F-0003-temperature-helps.md")!r}, "w").write("x")
    """)
    )
    (knobs_dir / ".pending").mkdir(exist_ok=True)
    s = make_session(tmp_path, f"{sys.executable} {script}", 30, run_dir, knobs_dir=knobs_dir)
    s.pool_dir = pool
    res = run_to_end(s)
    assert res["exit_code"] == 0, (run_dir / "meta" / "session_001" / "transcript.stderr").read_text()
    assert [e["id"] for e in res["knob_events"]] == ["k-ref"] and res["findings"] == ["F-0003"]
    assert res["pending_writes"] == [
        {"knob": "agent.temperature", "gym": None, "new": 1.1, "reason": "why", "step_written": 3, "source": "cli"}
    ]
    assert s.unsettled and not s.settle()  # nothing applied yet
    # the run applies the write at its next step boundary: an accepted event with the same attribution
    jsonl.append(
        events,
        {
            "id": "k-app",
            "knob": "agent.temperature",
            "gym": None,
            "new": 1.1,
            "reason": "why",
            "author": "agent",
            "status": "accepted",
            "step_effective": 4,
        },
    )
    assert s.settle() and not s.unsettled
    on_disk = json.loads((run_dir / "meta" / "session_001" / "result.json").read_text())
    assert [e["id"] for e in on_disk["knob_events"]] == ["k-ref", "k-app"] and on_disk["pending_writes"] == []


# ------------------------------------------------------------------------------------------ the loop
class FakeSteps:
    """Steps of a run folder written by the real RunWriter from this process (pid alive = live run)."""

    def __init__(self, runs_dir: Path, knobs_dir: Path, every_s: float, total: int):
        self.w = RunWriter.create(runs_dir / "loop", {"preset": "test"}, knobs_dir, ["intention"], total)
        self.every_s, self.total = every_s, total
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._go, daemon=True)

    def _go(self) -> None:
        for step in range(self.total):
            if self.stop.wait(self.every_s):
                return
            self.w.metrics({"step": step, "time": time.time(), "success_rate": 0.0})
            self.w.write_status(step=step + 1)
        self.w.finish("finished")


def test_loop_skips_busy_triggers_and_sigterm_ends_the_session(tmp_path, knobs_dir):
    steps = FakeSteps(tmp_path / "runs", knobs_dir, 0.4, 200)
    steps.thread.start()
    agent = f"{sys.executable} -c \"import time; print('working', flush=True); time.sleep(120)\""
    env = {**os.environ, "EAU_RUNS_DIR": str(tmp_path / "runs")}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "harness.cli.main",
            "supervise",
            "--run",
            "loop",
            "--every",
            "2",
            "--agent",
            agent,
            "--timeout",
            "100",
            "--poll",
            "0.2",
            "--json",
            "--cwd",
            str(tmp_path),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        session = tmp_path / "runs" / "loop" / "meta" / "session_001"
        t0 = time.monotonic()
        while (
            not (session / "transcript.stdout").exists() or "working" not in (session / "transcript.stdout").read_text()
        ):
            assert time.monotonic() - t0 < 60, proc.stderr.read() if proc.poll() is not None else "no session"
            time.sleep(0.1)
        started_at = json.loads((session / "command.json").read_text())["step"]
        while len(jsonl.read(tmp_path / "runs" / "loop" / "metrics.jsonl")) < started_at + 5:  # run goes on
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        out, errs = proc.communicate(timeout=30)
    finally:
        steps.stop.set()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, errs
    doc = json.loads(out)
    assert doc["stopped"] == "signal SIGTERM" and doc["sessions_run"] == 1
    r = doc["sessions"][0]
    assert r["stopped"] == "signal SIGTERM" and r["exit_code"] == -signal.SIGTERM and r["timed_out"] is False
    assert r["step_at_start"] == started_at >= 2 and r["step_at_end"] >= started_at + 5
    assert len(doc["schedule"]["skipped"]) >= 2  # multiples passed while the session ran were not queued
    log = [e["event"] for e in jsonl.read(tmp_path / "runs" / "loop" / "meta" / "supervise.jsonl")]
    assert log == ["supervise_started", "session_started", "session_ended", "supervise_stopped"]


def test_a_client_failing_again_and_again_stops_the_supervisor(tmp_path, knobs_dir):
    """A client that fails at once (not logged in) would fail at every trigger: after --max-failures
    in a row the supervisor stops and says why; the run goes on untouched."""
    steps = FakeSteps(tmp_path / "runs", knobs_dir, 0.3, 200)
    steps.thread.start()
    agent = f"{sys.executable} -c \"import sys; print('Not logged in', file=sys.stderr); sys.exit(1)\""
    env = {**os.environ, "EAU_RUNS_DIR": str(tmp_path / "runs")}
    try:
        out = subprocess.run(
            [sys.executable, "-m", "harness.cli.main", "supervise", "--run", "loop", "--every", "1"]
            + ["--agent", agent, "--max-failures", "2", "--poll", "0.1", "--json", "--cwd", str(tmp_path)],
            env=env,
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=120,
        )
        live_after = json.loads((tmp_path / "runs" / "loop" / "status.json").read_text())["state"]
    finally:
        steps.stop.set()
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["sessions_run"] == 2 and [r["exit_code"] for r in doc["sessions"]] == [1, 1]
    assert doc["stopped"].startswith("2 sessions in a row failed (last: ") and "Not logged in" in doc["stopped"]
    assert live_after == "running"  # the supervisor stopped, not the run


def test_a_write_to_the_run_waits_in_its_own_folder_whatever_folder_is_exported(tmp_path, knobs_dir):
    """The agent writes with --run while EAU_KNOBS_DIR names the project folder (a user's usual
    environment): the write waits in the run's own knobs folder, and the session reports it there as
    pending (the run here never reaches a step boundary that would apply it)."""
    project = tmp_path / "project_knobs"
    shutil.copytree(knobs_dir, project)
    steps = FakeSteps(tmp_path / "runs", knobs_dir, 0.3, 200)
    steps.thread.start()
    write = [sys.executable, "-m", "harness.cli.main", "knobs", "set", "agent.entropy_coeff", "0.003"]
    write += ["--author", "agent", "--reason", "r-own", "--run", "loop", "--json"]
    agent = f'{sys.executable} -c "import subprocess, sys; sys.exit(subprocess.run({write!r}).returncode)"'
    env = {**os.environ, "EAU_RUNS_DIR": str(tmp_path / "runs"), "EAU_KNOBS_DIR": str(project)}
    try:
        out = subprocess.run(
            [sys.executable, "-m", "harness.cli.main", "supervise", "--run", "loop", "--every", "1"]
            + ["--agent", agent, "--max-sessions", "1", "--poll", "0.1", "--json", "--cwd", str(REPO)],
            env=env,
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=120,
        )
    finally:
        steps.stop.set()
    assert out.returncode == 0, out.stderr
    (res,) = json.loads(out.stdout)["sessions"]
    assert res["exit_code"] == 0, res
    assert [(w["knob"], w["new"], w["reason"]) for w in res["pending_writes"]] == [
        ("agent.entropy_coeff", 0.003, "r-own")
    ]
    assert list((knobs_dir / ".pending").glob("*.json")) and not (project / ".pending").exists()


def test_cli_errors(tmp_path, knobs_dir):
    out = eau(["supervise", "--run", "nope", "--every", "2", "--agent", "python -V", "--wait", "0", "--json"], tmp_path)
    assert out.returncode == 5 and "no run 'nope'" in json.loads(out.stdout)["error"]
    out = eau(
        ["supervise", "--run", "nope", "--every", "2", "--agent", "claude-not-installed-x", "--wait", "0"], tmp_path
    )
    assert out.returncode == 2 and "'claude-not-installed-x' is not installed or not on PATH" in out.stderr
    out = eau(["supervise", "--run", "nope", "--every", "0", "--agent", "python -V"], tmp_path)
    assert out.returncode == 2 and "--every must be at least 1" in out.stderr
    w = RunWriter.create(tmp_path / "runs" / "done", {"preset": "test"}, knobs_dir, ["intention"], 3)
    w.finish("finished")
    out = eau(["supervise", "--run", "done", "--every", "1", "--agent", "python -V", "--json"], tmp_path)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["stopped"] == "run finished" and doc["sessions"] == [] and doc["sessions_run"] == 0
    # a trainer killed without writing an end state: the status says running, its process is gone
    w = RunWriter.create(tmp_path / "runs" / "killed", {"preset": "test"}, knobs_dir, ["intention"], 3)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    w.write_status(pid=gone.pid)
    out = eau(["supervise", "--run", "killed", "--every", "1", "--agent", "python -V", "--json"], tmp_path)
    assert json.loads(out.stdout)["stopped"] == "run not live (its trainer process is gone)"
