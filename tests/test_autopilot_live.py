"""Acceptance: eau autopilot on a live tiny training run with a planted fault.

The fault is planted through the knobs: ``env.max_steps`` at its minimum (3) leaves the policy no
room to answer, so every episode deadlocks. The autopilot, ticking every 3 steps next to the run,
diagnoses the deadlock, skips ``env.min_questions`` (already 0, and no answer refused), gates and applies
``env.max_steps 3 -> 5`` with ``eau knobs set --author agent``, measures it with ``eau effect`` after
the lag, reverts it unless it improved, and records a finding with ``eau finding add``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from test_trainer import FAST

from harness.io import jsonl

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def test_autopilot_intervenes_measures_and_records_on_a_planted_deadlock(tmp_path, knobs_dir):
    rdir, pool = tmp_path / "runs", tmp_path / "pool"
    env = {**os.environ, "EAU_KNOBS_DIR": str(knobs_dir), "EAU_RUNS_DIR": str(rdir), "EAU_POOL_DIR": str(pool)}
    cli = [sys.executable, "-m", "harness.cli.main"]
    with open(tmp_path / "train.log", "w") as log:
        train = subprocess.Popen(
            [
                *cli,
                "train",
                "--preset",
                "tiny",
                "--steps",
                "120",
                "--run-id",
                "ap",
                "--set",
                "checkpoint_every=0",
                *FAST,
                "--set",
                "env_knobs.max_steps=3",
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=REPO,
        )
    try:
        ap = subprocess.run(
            [
                *cli,
                "autopilot",
                "--run",
                "ap",
                "--every",
                "3",
                "--window",
                "3",
                "--lag",
                "0",
                "--effect-window",
                "2",
                "--poll",
                "0.5",
                # one change, then only its measurement: the run (120 steps, 0.5-1 s each on an idle
                # box) outlasts the autopilot's turns (six CLI calls, ~10 s each)
                "--max-interventions",
                "1",
                "--json",
            ],
            env=env,
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=1500,
        )
        assert ap.returncode == 0, ap.stderr[-3000:]
        assert train.wait(timeout=900) == 0, (tmp_path / "train.log").read_text()[-3000:]
    finally:
        if train.poll() is None:
            os.killpg(train.pid, signal.SIGKILL)
    run = rdir / "ap"
    doc = json.loads(ap.stdout)
    assert doc["stopped"] == "run finished" and doc["applied"] == 1 and doc["pending"] is None, json.dumps(doc)[:4000]
    actions = [t["action"] for t in doc["ticks"]]
    assert actions[0] == "applied" and actions.count("measured") == 1, actions
    measured_at = actions.index("measured")
    assert set(actions[:measured_at]) <= {"applied", "waiting"} and set(actions[measured_at + 1 :]) <= {"none"}
    after = [t["message"] for t in doc["ticks"][measured_at + 1 :]]
    assert all("(--max-interventions)" in m or m.startswith("run is ") for m in after), after
    first, last = doc["ticks"][0], doc["ticks"][measured_at]

    # diagnose -> finding search -> gate -> set, through the CLI, in the skill's order
    assert first["flagged"][0] == "deadlock"
    # min_questions is 0 and no answer was refused for too few questions: that entry does not apply
    [skip] = first["skipped"]
    assert (skip["detector"], skip["knob"]) == ("deadlock", "env.min_questions")
    assert skip["why"].startswith("evidence does not fit: ") or skip["why"] == (
        "env.min_questions 0 is already at its limit (integer in [0, 3])"
    )
    assert (first["knob"], first["old"], first["new"]) == ("env.max_steps", 3, 5) and first["gate"]["ok"]
    used = [c["command"][1:3] for c in first["commands"]]
    for step in (["diagnose", "--run"], ["finding", "search"], ["gate", first["gate"]["candidate"]], ["knobs", "set"]):
        assert step in used, step
    assert used.index(["finding", "search"]) < used.index(["knobs", "set"])
    assert Path(first["gate"]["candidate"]).is_file()

    # the change: applied at the next step boundary with author agent and the prediction as reason
    events = jsonl.read(run / "knob_events.jsonl")
    ev = next(e for e in events if e["knob"] == "env.max_steps" and e["author"] == "agent" and e["source"] == "cli")
    assert ev["status"] == "accepted" and ev["new"] == 5 and ev["id"] == last["event"]
    assert ev["reason"] == first["reason"] and ev["reason"].startswith("autopilot: deadlock: deadlock_rate lower")
    # step_written is the run's step when the command started; with 0.5-1 s steps the run moves on
    # while the CLI starts up and the store debounces the file, so the change lands a few steps later.
    # Exactly where it landed is checked on the trajectories below.
    assert ev["step_written"] <= ev["step_effective"] <= ev["step_written"] + 6
    # the revert (unless improved) is logged by the run when it applies it
    revert = next((e for e in events if e.get("ref") == ev["id"]), None)
    if revert is not None:  # applied even though lowering max_steps "requires" success >= 0.8: it is a revert
        assert (revert["status"], revert["author"], revert["source"], revert["new"]) == (
            "accepted",
            "agent",
            "revert",
            3,
        )
    if last["verdict"] != "improved":
        assert last["reverted"]["ok"] is True
    for step in range(ev["step_effective"] + 3):  # before the change, from it on (and any revert)
        eps = jsonl.read(run / "trajectories" / f"step_{step:06d}.jsonl")
        want = 5 if ev["step_effective"] <= step else 3
        if revert is not None and isinstance(revert.get("step_effective"), int) and step >= revert["step_effective"]:
            want = 3
        assert {e["knobs"]["env"]["max_steps"] for e in eps} == {want}, step

    # measured after the lag, decided, recorded
    assert last["verdict"] in ("improved", "harmed", "inconclusive") and "deadlock_rate" in last["measured"]
    assert (last["reverted"] is None) == (last["verdict"] == "improved")
    if last["verdict"] != "improved":
        # the run outlived the revert: it applied it; the project folder never changed (the run has its own)
        assert revert is not None and isinstance(revert["step_effective"], int)
        assert yaml.safe_load((knobs_dir / "env.yaml").read_text())["max_steps"]["default"] == 16
    show = subprocess.run(
        [*cli, "finding", "show", last["finding"], "--json"], env=env, capture_output=True, text=True, cwd=REPO
    )
    f = json.loads(show.stdout)
    assert f["verdict"] == last["verdict"] and f["knobs"] == ["env.max_steps"] and f["events"] == [ev["id"]]
    assert f["run"] == "ap" and f["author"] == "agent" and {"autopilot", "deadlock", "raise"} <= set(f["tags"])
    assert f["measured"] == last["measured"] and "3 -> 5" in f["change"]
    used = [c["command"][1:3] for c in last["commands"]]
    assert ["effect", "--event"] in used and ["finding", "add"] in used

    # its own records
    state = json.loads((run / "meta" / "autopilot_state.json").read_text())
    assert state["pending"] is None and state["interventions"] == 1
    assert state["history"][0]["outcome"]["finding"] == last["finding"]
    assert [t["action"] for t in jsonl.read(run / "meta" / "autopilot.jsonl")] == actions
