"""eau autopilot on a recorded run with a planted deadlock (built from real gym episodes): the dry run
walks the skill's path (status, diagnose, knobs get, finding search, knobs list, gate) and changes
nothing; a finding that says a change harmed blocks that change unless it is retracted."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from analysis_runs import RunSpec, build_run

from harness.supervise.autopilot import Autopilot, AutopilotConfig
from harness.supervise.interventions import load_table

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """A finished run whose min_questions 2 with max_steps 3 deadlocks most episodes."""
    root = tmp_path_factory.mktemp("autopilot")
    spec = RunSpec("deadlock", gyms=("intention",), steps=4, env={"max_steps": 3, "min_questions": 2})
    run = build_run(root / "runs", spec, root)
    return root, run, Path(json.loads((run / "status.json").read_text())["knobs_dir"])


def eau(args, root, **kw):
    env = {**os.environ, "EAU_RUNS_DIR": str(root / "runs"), "EAU_POOL_DIR": str(root / "pool")}
    env.pop("EAU_KNOBS_DIR", None)
    return subprocess.run(
        [sys.executable, "-m", "harness.cli.main", *args], env=env, capture_output=True, text=True, cwd=REPO, **kw
    )


def tree_hash(*folders: Path) -> dict[str, str]:
    out = {}
    for folder in folders:
        for p in sorted(folder.rglob("*")):
            if p.is_file():
                out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def add_finding(root, knob, change, verdict):
    out = eau(
        [
            "finding",
            "add",
            "--title",
            f"{knob} {change}: {verdict}",
            "--knob",
            knob,
            "--change",
            change,
            "--verdict",
            verdict,
            "--measured",
            "deadlock_rate +0.2 (noise 0.05)",
            "--tag",
            "deadlock",
            "--json",
        ],
        root,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["finding"]["id"]


def test_dry_run_follows_the_skill_path_skips_harmed_change_and_writes_nothing(planted):
    root, run, kdir = planted
    harmed = add_finding(root, "env.min_questions", "2 -> 1 (all gyms)", "harmed")
    add_finding(root, "env.max_steps", "3 -> 5 (all gyms)", "improved")  # does not block anything
    before = tree_hash(run, kdir, root / "pool")
    out = eau(["autopilot", "--run", "deadlock", "--once", "--dry-run", "--json", "--window", "4"], root, timeout=300)
    assert out.returncode == 0, out.stderr
    rec = json.loads(out.stdout)
    assert rec["dry_run"] is True and rec["flagged"][0] == "deadlock"
    assert rec["action"] == "would_apply" and "would not reach the run" in rec["message"]  # finished run
    assert (rec["knob"], rec["old"], rec["new"], rec["gym"]) == ("env.max_steps", 3, 5, None)
    assert rec["skipped"] == [
        {
            "detector": "deadlock",
            "knob": "env.min_questions",
            "why": f"finding(s) {harmed} record that lower env.min_questions harmed (or changed nothing on this run)",
        }
    ]
    assert rec["reason"].startswith("autopilot: deadlock: deadlock_rate lower")
    assert rec["gate"]["ok"] is True and rec["gate"]["candidate"] is None
    cmds = [" ".join(c["command"][1:3]) for c in rec["commands"]]
    assert cmds == [
        "status --run",
        "diagnose --run",
        "knobs get",
        "finding search",
        "knobs get",
        "finding search",
        "knobs list",
        "gate " + rec["commands"][-1]["command"][2],
    ]
    assert not any(c["command"][1:3] == ["knobs", "set"] for c in rec["commands"])
    assert tree_hash(run, kdir, root / "pool") == before  # nothing written anywhere
    assert not (run / "meta" / "autopilot_state.json").exists() and not (run / "meta" / "autopilot.jsonl").exists()


def test_harmful_findings_respect_direction_and_retraction(planted):
    root, run, _ = planted
    ap = Autopilot(
        AutopilotConfig(run="deadlock", runs_dir=root / "runs", pool_dir=root / "pool", cwd=REPO, dry_run=True)
    )
    table = {(e.knob, e.direction): e for e in load_table()}
    lower_mq = table[("env.min_questions", "lower")]
    blocking = ap._harmful(lower_mq)
    if not blocking:  # this test run alone: record the harmful finding here
        add_finding(root, "env.min_questions", "2 -> 1 (all gyms)", "harmed")
        blocking = ap._harmful(lower_mq)
    assert len(blocking) == 1
    raise_mq = lower_mq.__class__(**{**lower_mq.__dict__, "direction": "raise"})
    assert ap._harmful(raise_mq) == []  # harmed when lowered says nothing about raising it
    out = eau(["finding", "retract", blocking[0], "--reason", "effect was within the noise floor", "--json"], root)
    assert out.returncode == 0, out.stderr
    assert ap._harmful(lower_mq) == []  # a retracted finding no longer blocks


def test_unknown_run_and_bad_table(tmp_path):
    out = eau(["autopilot", "--run", "nope", "--once", "--json"], tmp_path)
    assert out.returncode == 5 and "no run 'nope'" in json.loads(out.stdout)["error"]
    bad = tmp_path / "t.yaml"
    bad.write_text("interventions:\n  - {detector: deadlock}\n")
    (tmp_path / "runs" / "r").mkdir(parents=True)
    (tmp_path / "runs" / "r" / "status.json").write_text('{"state": "finished"}')
    out = eau(["autopilot", "--run", "r", "--once", "--table", str(bad)], tmp_path)
    assert out.returncode == 2 and "interventions[0]: field 'knob' is required" in out.stderr
