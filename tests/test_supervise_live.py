"""Acceptance: a live tiny training run supervised by a scripted agent through the skill's path.

The agent (tests/agents/scripted_agent.py, started by ``eau supervise`` with the prompt on stdin)
sets a knob with ``eau knobs set --author agent --reason ...`` in its first session and stays busy
while the run completes two more steps; the run applies the change at its next step boundary and
never waits. In a later session the agent measures it with ``eau effect`` and records a finding
with ``eau finding add``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest
from test_trainer import FAST

from harness.io import jsonl

REPO = Path(__file__).resolve().parents[1]
# long enough for two sessions however fast the steps are: a session (a process start and several
# CLI calls, ~15 s) spanned all of an 8-step run's remaining steps (0.5-2 s each) on an idle box
STEPS = 40
REASON = "scripted agent: entropy falling; predict entropy higher after lag 1, success_rate not lower"
pytestmark = pytest.mark.slow


def _unix(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def test_scripted_agent_supervises_a_live_run(tmp_path, knobs_dir):
    rdir, pool = tmp_path / "runs", tmp_path / "pool"
    env = {
        **os.environ,
        "EAU_KNOBS_DIR": str(knobs_dir),
        "EAU_RUNS_DIR": str(rdir),
        "EAU_POOL_DIR": str(pool),
        "SCRIPTED_AGENT_WAIT_STEPS": "2",
        "SCRIPTED_AGENT_WINDOW": "2",
        "SCRIPTED_AGENT_LAG": "0",
        # the agent command says `python`, as a user types it: the tests' own environment's
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    cli = [sys.executable, "-m", "harness.cli.main"]
    with open(tmp_path / "train.log", "w") as log:
        train = subprocess.Popen(
            [
                *cli,
                "train",
                "--preset",
                "tiny",
                "--steps",
                str(STEPS),
                "--run-id",
                "sup",
                "--set",
                "checkpoint_every=0",
                *FAST,
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=REPO,
        )
    try:
        sup = subprocess.run(
            [
                *cli,
                "supervise",
                "--run",
                "sup",
                "--every",
                "2",
                "--agent",
                "python tests/agents/scripted_agent.py",
                "--max-sessions",
                "2",
                "--timeout",
                "400",
                "--poll",
                "0.5",
                "--json",
            ],
            env=env,
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=1500,
        )
        assert sup.returncode == 0, sup.stderr[-3000:]
        assert train.wait(timeout=900) == 0, (tmp_path / "train.log").read_text()[-3000:]
    finally:
        if train.poll() is None:
            os.killpg(train.pid, signal.SIGKILL)
    run = rdir / "sup"
    doc = json.loads(sup.stdout)
    assert doc["stopped"] == "max sessions" and doc["sessions_run"] == 2, json.dumps(
        {k: doc[k] for k in ("stopped", "sessions_run", "schedule")}
        | {"s": [{k: s.get(k) for k in ("step_at_start", "step_at_end", "started", "ended")} for s in doc["sessions"]]}
    )
    s1, s2 = doc["sessions"]
    for s in (s1, s2):
        folder = run / "meta" / f"session_{s['session']:03d}"
        assert s["exit_code"] == 0 and not s["timed_out"], (folder / "transcript.stderr").read_text()
        assert "`sup`" in (folder / "prompt.txt").read_text()
        assert json.loads((folder / "result.json").read_text()) == s
        assert json.loads((folder / "command.json").read_text())["argv"] == ["python", "tests/agents/scripted_agent.py"]
        assert s["cost_usd"] == 0.0  # the agent reports its cost the way Claude Code does

    # 1. the agent's edit: applied at the next step boundary, author agent, with its reason
    assert s1["step_at_start"] in (2, 3) and s1["pending_writes"] == []  # the first trigger, step 2
    (ev,) = s1["knob_events"]
    assert (ev["knob"], ev["author"], ev["reason"], ev["status"], ev["new"]) == (
        "agent.entropy_coeff",
        "agent",
        REASON,
        "accepted",
        0.003,
    )
    # step_written is the run's step when the agent's command started; with 0.5-2 s steps the run moves
    # on while the CLI starts and the store debounces the file. Where it landed is checked per step below.
    assert ev["step_written"] <= ev["step_effective"] <= ev["step_written"] + 6
    assert s1["step_at_start"] < ev["step_effective"] <= s1["step_at_end"] + 1  # written within the session
    metrics = jsonl.read(run / "metrics.jsonl")
    assert [m["step"] for m in metrics] == list(range(STEPS))
    for m in metrics:
        assert m["entropy_coeff"] == (0.003 if m["step"] >= ev["step_effective"] else 0.001)

    # 2. training never waited: steps completed while the slow session ran; a trigger passed meanwhile was skipped
    assert s1["step_at_end"] >= s1["step_at_start"] + 2
    during = [m for m in metrics if _unix(s1["started"]) <= _unix(m["time"]) <= _unix(s1["ended"])]
    assert len(during) >= 2
    assert 4 in doc["schedule"]["skipped"] and s2["step_at_start"] >= 6

    # 3. after the lag, eau effect reports on the event, and the agent wrote a finding through eau finding add
    assert s2["knob_events"] == [] and len(s2["findings"]) == 1
    stderr2 = (run / "meta" / f"session_{s2['session']:03d}" / "transcript.stderr").read_text()
    assert f"$ eau effect --event {ev['id']}" in stderr2 and "$ eau finding add" in stderr2
    eff = subprocess.run(
        [*cli, "effect", "--event", ev["id"], "--run", "sup", "--window", "2", "--json"],
        env=env,
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert eff.returncode == 0, eff.stderr
    eff_doc = json.loads(eff.stdout)
    assert eff_doc["state"] == "ok" and eff_doc["verdict"] in ("improved", "harmed", "inconclusive")
    assert eff_doc["event"]["author"] == "agent" and eff_doc["event"]["reason"] == REASON
    shown = subprocess.run(
        [*cli, "finding", "show", s2["findings"][0], "--json"], env=env, capture_output=True, text=True, cwd=REPO
    )
    finding = json.loads(shown.stdout)
    assert finding["events"] == [ev["id"]] and finding["knobs"] == ["agent.entropy_coeff"] and finding["run"] == "sup"
    assert finding["verdict"] == eff_doc["verdict"] and finding["author"] == "agent"
    log = [e["event"] for e in jsonl.read(run / "meta" / "supervise.jsonl")]
    assert log[0] == "supervise_started" and log[-1] == "supervise_stopped" and log.count("session_started") == 2
