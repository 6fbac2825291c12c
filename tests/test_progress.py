"""What a person sees while a command works: phases with counts and an ETA, on a terminal (rich) and
off one (plain lines), in `eau train`, `eau eval` and `eau status` (harness.runs.progress)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time

import pytest

from harness.runs.progress import Progress, eta_seconds, fmt_duration


def test_durations_and_eta_by_hand():
    assert [fmt_duration(s) for s in (0, 59.4, 75, 3599, 3725)] == ["0s", "59s", "1m15s", "59m59s", "1h02m"]
    assert eta_seconds(0, 10, 5.0) is None
    assert eta_seconds(2, 10, 5.0) == pytest.approx(20.0)  # 2.5 s a unit, 8 units left
    assert eta_seconds(10, 10, 5.0) == 0.0


def test_plain_lines_off_a_terminal():
    out = io.StringIO()
    p = Progress(stream=out, terminal=False, plain_every_s=0.0)
    assert not p.on_terminal
    with p.phase("warm start", total=10, unit="updates") as ph:
        ph.set(3, "loss 0.500")
        ph.advance(1)
    p.close()
    lines = out.getvalue().splitlines()
    assert lines[0] == "[eau] warm start: 0/10 updates (0%), 0s elapsed"
    assert lines[1].startswith("[eau] warm start: 3/10 updates (30%), loss 0.500, 0s elapsed, ETA ")
    assert lines[2].startswith("[eau] warm start: 4/10 updates (40%), loss 0.500")
    assert lines[-1].startswith("[eau] warm start: 4/10 updates (40%), loss 0.500") and lines[-1].endswith(" - done")


def test_plain_lines_are_throttled():
    out = io.StringIO()
    p = Progress(stream=out, terminal=False, plain_every_s=3600)
    with p.phase("train", total=100, unit="steps") as ph:
        for i in range(100):
            ph.set(i + 1)
    assert len(out.getvalue().splitlines()) == 2  # the start and the end, nothing in between


def test_an_upper_bound_says_so():
    out = io.StringIO()
    p = Progress(stream=out, terminal=False, plain_every_s=0.0)
    ph = p.phase("evaluating", total=512, unit="turns", eta_bound=True)
    time.sleep(0.01)
    ph.set(64, "3/64 episodes done")
    assert "ETA at most " in out.getvalue().splitlines()[-1]


def test_a_live_display_on_a_terminal():
    out = io.StringIO()
    p = Progress(stream=out, terminal=True)
    assert p.on_terminal
    with p.phase("warm start", total=10, unit="updates") as ph:
        ph.set(4, "loss 0.500")
        ph.set(10, "loss 0.250")
    p.close()
    text = out.getvalue()
    assert "\x1b[" in text  # a terminal display (cursor control), not plain lines
    assert "[eau]" not in text
    assert "warm start: 10/10 updates (100%), loss 0.250" in text  # the finished phase stays on screen


def test_disabled_shows_nothing():
    out = io.StringIO()
    p = Progress(enabled=False, stream=out)
    with p.phase("x", total=3) as ph:
        ph.advance()
    p.close()
    assert out.getvalue() == ""


def eau(args, env_extra, **kw):
    env = {**os.environ, **env_extra}
    return subprocess.run(
        [sys.executable, "-m", "harness.cli.main", *args], env=env, capture_output=True, text=True, timeout=600, **kw
    )


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    from harness.knobs.folder import copy_defaults

    root = tmp_path_factory.mktemp("progress")
    env = {
        "EAU_KNOBS_DIR": str(copy_defaults(root / "knobs")),
        "EAU_RUNS_DIR": str(root / "runs"),
        "EAU_EVAL_DIR": str(root / "eval_results"),
    }
    out = eau(
        [
            "train",
            "--preset",
            "tiny",
            "--steps",
            "2",
            "--run-id",
            "p",
            "--set",
            "tasks_per_step=2",
            "--set",
            "samples_per_task=1",
            "--set",
            "env_knobs.max_steps=3",
            "--set",
            "agent_knobs.max_new_tokens_per_turn=8",
            "--set",
            "policy.tiny.num_hidden_layers=1",
            "--set",
            "evaluation={protocol: eval/protocol-cpu.yaml}",
            "--set",
            "gyms=[intention]",
        ],
        env,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return root, env, out


def test_train_off_a_terminal_shows_every_phase(finished_run):
    _, _, out = finished_run
    err = out.stderr
    for line in (
        "[eau] loading policy tiny:",
        "[eau] evaluating the starting policy: 0/",
        "[eau] evaluating the starting policy: ",
        "[eau] train: 0/2 steps",
        "[eau] train: 2/2 steps (100%)",
        "[eau] evaluating the final policy: ",
    ):
        assert line in err, line
    assert " - done" in err
    assert "step 0: reward" in err  # log.txt lines are echoed too when no live display is shown
    assert "held-out evaluation on eau-eval-cpu-v2" in out.stdout and "init (start) -> step_000001 (end)" in out.stdout


def test_status_of_a_finished_run_says_when_it_ended(finished_run):
    _, env, _ = finished_run
    out = eau(["status", "--run", "p"], env)
    assert out.returncode == 0, out.stderr
    first = out.stdout.splitlines()[0]
    assert "finished" in first and "ended " in first and "heartbeat" not in first


def test_status_shows_the_phase_of_a_live_run(finished_run):
    """A live run (status running, its pid alive) in its warm start: `eau status` names the phase."""
    root, env, _ = finished_run
    st_path = root / "runs" / "p" / "status.json"
    st = json.loads(st_path.read_text())
    st.update(
        {
            "state": "running",
            "pid": os.getpid(),
            "phase": "warm start",
            "phase_done": 24,
            "phase_total": 96,
            "phase_eta_s": 180.0,
            "heartbeat_unix": time.time(),
        }
    )
    st_path.write_text(json.dumps(st))
    out = eau(["status", "--run", "p", "--json"], env)
    doc = json.loads(out.stdout)
    assert (doc["phase"], doc["phase_done"], doc["phase_total"]) == ("warm start", 24, 96)
    text = eau(["status", "--run", "p"], env).stdout.splitlines()[0]
    assert "phase: warm start 24/96 (ETA 3.0 min)" in text


def test_eval_off_a_terminal_reports_progress(finished_run):
    _, env, _ = finished_run
    out = eau(["eval", "--run", "p", "--protocol", "eval/protocol-cpu.yaml", "--no-save"], env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "[eau] evaluating on eau-eval-cpu-v2: 0/" in out.stderr
    assert "episodes done" in out.stderr and " - done" in out.stderr
