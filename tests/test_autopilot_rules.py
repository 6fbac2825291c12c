"""The autopilot's rule-file actions and the command they write through.

``eau knobs set-rules`` replaces a whole rule file through the store's validation path, attributed
like ``eau knobs set``. The autopilot uses it for faults no knob governs: a user rule file that
answers what was not asked (``restore_user_rules``: back to the packaged default) and a reward rule
earning most of the reward in failed episodes (``disable_dominant_rule``: its value to 0). Both are
checked here by dry runs on recorded runs built from real gym episodes (tests/analysis_runs.py);
benchmarks/bench_coevolution.py runs them live.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from analysis_runs import RunSpec, build_run, farming_rules, learner, question_farmer, render

from harness.io import jsonl, yamlio
from harness.knobs.folder import defaults_dir

REPO = Path(__file__).resolve().parents[1]


def eau(args, env_extra=None, **kw):
    env = {**os.environ, **(env_extra or {})}
    return subprocess.run(
        [sys.executable, "-m", "harness.cli.main", *args], env=env, capture_output=True, text=True, cwd=REPO, **kw
    )


def leaky_intention_rules() -> dict:
    doc = yaml.safe_load((defaults_dir() / "rules" / "users" / "intention.yaml").read_text())
    for intent in doc["intents"]:
        if intent["name"] == "question":
            intent["disclosure"] = "next"
    return doc


def vague_asker(share: float = 0.6):
    """The learner that on a share of turns asks about something no task detail is about (what a
    policy learns once any question collects a detail)."""
    inner = learner()

    def act(env, rng, progress):
        if "ask" in env.allowed_choices and rng.random() < share:
            return render(env, "ask", "What should I know about the weather on that day?")
        return inner(env, rng, progress)

    return act


def tree_hash(*folders: Path) -> dict[str, str]:
    return {
        str(p): hashlib.sha256(p.read_bytes()).hexdigest()
        for folder in folders
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


# ------------------------------------------------------------------------------------ eau knobs set-rules
def test_set_rules_writes_a_valid_file_attributed_and_refuses_bad_ones(tmp_path):
    kdir, rdir = tmp_path / "knobs", tmp_path / "runs"
    assert eau(["knobs", "init", str(kdir)]).returncode == 0
    env = {"EAU_KNOBS_DIR": str(kdir), "EAU_RUNS_DIR": str(rdir)}
    # the packaged rules hold regex patterns with quotes and backslashes: the written file must parse
    # back to the same document (a flow-style dump once wrapped them into YAML that did not parse)
    cand = tmp_path / "intention.yaml"
    cand.write_text(yaml.safe_dump(leaky_intention_rules(), sort_keys=False))
    out = eau(
        ["knobs", "set-rules", "users/intention", str(cand), "--author", "agent", "--reason", "r1", "--json"], env
    )
    assert out.returncode == 0, out.stderr
    ev = json.loads(out.stdout)["event"]
    assert (ev["knob"], ev["author"], ev["reason"], ev["status"]) == (
        "rules.users.intention",
        "agent",
        "r1",
        "accepted",
    )
    written = yamlio.plain(yamlio.read_yaml(kdir / "rules" / "users" / "intention.yaml")[0])
    assert written == leaky_intention_rules()
    assert eau(["knobs", "validate"], env).returncode == 0
    [hist] = [e for e in jsonl.read(kdir / ".history" / "knob_events.jsonl") if e["knob"] == "rules.users.intention"]
    assert hist["id"] == ev["id"]

    # invalid rule file: refused (exit 3), the file in the folder untouched, the refusal logged
    before = (kdir / "rules" / "users" / "intention.yaml").read_bytes()
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**leaky_intention_rules(), "intents": [{"name": "x"}]}))
    out = eau(["knobs", "set-rules", "users/intention", str(bad), "--reason", "r2", "--json"], env)
    assert out.returncode == 3, out.stderr
    doc = json.loads(out.stdout)
    assert doc["ok"] is False and doc["event"]["status"] == "rejected" and doc["event"]["rule"] == "schema"
    assert (kdir / "rules" / "users" / "intention.yaml").read_bytes() == before
    # a target that is no rule file, an unreadable candidate, an unknown author
    out = eau(["knobs", "set-rules", "plugins/x", str(cand), "--reason", "r"], env)
    assert out.returncode == 2 and "expected users/<gym> or rewards/<name>" in out.stderr
    out = eau(["knobs", "set-rules", "rewards/farm", str(tmp_path / "missing.yaml"), "--reason", "r"], env)
    assert out.returncode == 3 and "missing.yaml" in out.stderr
    out = eau(["knobs", "set-rules", "rewards/farm", str(cand), "--reason", "r", "--author", "bot"], env)
    assert out.returncode == 2 and "author must be one of" in out.stderr
    # a new reward rule file is created through the same path
    farm = tmp_path / "farm.yaml"
    farm.write_text(yaml.safe_dump(farming_rules(0.5)))
    out = eau(["knobs", "set-rules", "rewards/farm", str(farm), "--reason", "r3", "--json"], env)
    assert out.returncode == 0, out.stderr
    assert yaml.safe_load((kdir / "rules" / "rewards" / "farm.yaml").read_text()) == farming_rules(0.5)


# ------------------------------------------------------------------------------------ autopilot, dry runs
@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """Two finished intention runs: one whose user rule answers every question with the next hidden
    detail, one with a rule paying for every question and a policy farming it."""
    root = tmp_path_factory.mktemp("autopilot-rules")
    leak = build_run(
        root / "runs",
        RunSpec(
            "leak", gyms=("intention",), steps=4, user_rules={"intention": leaky_intention_rules()}, agent=vague_asker()
        ),
        root,
    )
    farm = build_run(
        root / "runs",
        RunSpec(
            "farm",
            gyms=("intention",),
            steps=6,
            reward_rules={"farm": farming_rules(0.6)},
            agent=question_farmer(0.4, 0.9),
        ),
        root,
    )
    return root, leak, farm


def dry_tick(root: Path, run: str) -> dict:
    # no EAU_KNOBS_DIR: the autopilot works on the folder the run trains from (its status.json)
    env = {k: v for k, v in os.environ.items() if k != "EAU_KNOBS_DIR"}
    env.update({"EAU_RUNS_DIR": str(root / "runs"), "EAU_POOL_DIR": str(root / "pool")})
    out = subprocess.run(
        [sys.executable, "-m", "harness.cli.main", "autopilot", "--run", run, "--once", "--dry-run", "--json"]
        + ["--window", "4"],
        env=env,
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_leaky_user_rules_are_diagnosed_and_the_file_restored(recorded):
    root, run, _ = recorded
    kdir = Path(json.loads((run / "status.json").read_text())["knobs_dir"])
    diag = eau(["diagnose", "--run", "leak", "--runs-dir", str(root / "runs"), "--json", "--detector", "user_leakage"])
    leak = json.loads(diag.stdout)["findings"][0]
    m = leak["evidence"]["metrics"]
    assert leak["flagged"] and m["unasked_rate"] >= 0.3 and m["overdisclosure_rate"] == 0.0
    assert "did not ask about" in leak["summary"]
    # the trainer's metrics see the same leak step by step (the guard's leak_flag_rate cannot), and
    # the packaged rules never disclose what was not asked
    leak_rows = jsonl.read(run / "metrics.jsonl")
    assert min(r["unasked_rate"] for r in leak_rows) >= 0.3, [r["unasked_rate"] for r in leak_rows]
    assert all(r["leak_flag_rate"] == 0.0 for r in leak_rows)
    _, _, farm = recorded
    assert all(r["unasked_rate"] == 0.0 for r in jsonl.read(farm / "metrics.jsonl"))

    before = tree_hash(run, kdir)
    rec = dry_tick(root, "leak")
    assert rec["flagged"][0] == "user_leakage" and rec["action"] == "would_apply", json.dumps(
        {k: rec.get(k) for k in ("skipped", "message", "gate")}
    )
    assert (
        rec["knob"] == "rules.users.intention"
        and rec["new"] == "rules/users/intention.yaml back to the packaged default"
    )
    assert rec["reason"].startswith("autopilot: user_leakage: rules/users/intention.yaml back to the packaged default")
    assert rec["gate"]["ok"] is True
    gate = next(c for c in rec["commands"] if c["command"][1] == "gate")
    assert gate["command"][2].endswith("rules/users/intention.yaml")
    assert tree_hash(run, kdir) == before  # a dry run writes nothing


def test_a_healthy_user_rule_file_is_left_alone(recorded, tmp_path):
    """The same action on a folder whose rules are the packaged ones: nothing to restore."""
    from harness.supervise.autopilot import Autopilot, AutopilotConfig
    from harness.supervise.interventions import load_table

    root, run, _ = recorded
    ap = Autopilot(AutopilotConfig(run="farm", runs_dir=root / "runs", cwd=REPO, dry_run=True))
    restore = next(e for e in load_table() if e.action == "restore_user_rules")
    cands, why = ap._rule_candidates(restore, {"gyms": ["intention"]}, {})
    assert cands == [] and why == ["rules/users/intention.yaml is the packaged default"]


def test_the_run_own_rule_files_are_read_whatever_folder_is_exported(recorded, tmp_path):
    """A user who exports EAU_KNOBS_DIR (a project folder with the packaged rules) still gets the run's
    leaky rule file restored: the autopilot writes with --run, so it reads the run's own folder."""
    from harness.supervise.autopilot import Autopilot, AutopilotConfig
    from harness.supervise.interventions import load_table

    root, _, _ = recorded
    project = tmp_path / "knobs"
    assert eau(["knobs", "init", str(project)]).returncode == 0
    ap = Autopilot(AutopilotConfig(run="leak", runs_dir=root / "runs", knobs_dir=project, cwd=REPO, dry_run=True))
    restore = next(e for e in load_table() if e.action == "restore_user_rules")
    cands, _ = ap._rule_candidates(restore, {"gyms": ["intention"]}, {})
    assert [c[3] for c in cands] == ["rules/users/intention.yaml back to the packaged default"]


def test_a_dominant_reward_rule_is_zeroed_in_its_file(recorded):
    from harness.supervise.autopilot import Autopilot, AutopilotConfig
    from harness.supervise.interventions import load_table

    root, _, run = recorded
    diag = eau(["diagnose", "--run", "farm", "--runs-dir", str(root / "runs"), "--json", "--window", "4"])
    hack = next(f for f in json.loads(diag.stdout)["findings"] if f["name"] == "reward_hacking")
    assert hack["flagged"] and hack["evidence"]["metrics"]["dominant_rules"][0] == "ask_bonus"

    ap = Autopilot(AutopilotConfig(run="farm", runs_dir=root / "runs", cwd=REPO, dry_run=True))
    disable = next(e for e in load_table() if e.action == "disable_dominant_rule")
    [(kind, key, doc, what)], _ = ap._rule_candidates(disable, {"gyms": ["intention"]}, hack["evidence"]["metrics"])
    assert (kind, key, what) == ("rewards", "farm", "rule ask_bonus in farm.yaml to 0")
    assert doc["rules"] == [{**farming_rules(0.6)["rules"][0], "value": 0.0}]
    # a finding naming no dominant rule, or a rule no file holds, gives nothing to write
    assert ap._rule_candidates(disable, {"gyms": ["intention"]}, {})[0] == []
    assert ap._rule_candidates(disable, {}, {"dominant_rules": ["nope"]})[1] == [
        "no reward rule file holds rule 'nope'"
    ]

    # deadlock is flagged too (the farming policy asks to the turn limit): the cause takes the turn,
    # not the symptom's knob (more turns would only pay the farm more)
    rec = dry_tick(root, "farm")
    assert {"reward_hacking", "deadlock"} <= set(rec["flagged"]) and rec["flagged"][0] == "deadlock"
    assert rec["action"] == "would_apply" and rec["knob"] == "rules.rewards.farm" and rec["gate"]["ok"]
    assert rec["new"] == "rule ask_bonus in farm.yaml to 0" and rec["skipped"] == []
