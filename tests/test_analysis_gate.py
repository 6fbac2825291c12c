"""``eau gate``: validation through the knob store's checks against a run, and replays of its
recorded episodes through candidate reward and user rules; the knobs folder is never touched."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import yaml
from analysis_runs import HEALTHY, cached_run
from typer.testing import CliRunner

from harness.analysis.gate import GateUsageError, gate, identify
from harness.analysis.run_data import load_run_dir
from harness.cli.common import EXIT_NOT_FOUND, EXIT_REFUSED, EXIT_USAGE
from harness.cli.main import app
from harness.knobs.folder import defaults_dir
from harness.stores import open_store


def _digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _area(name: str, **changes) -> dict:
    doc = yaml.safe_load((defaults_dir() / f"{name}.yaml").read_text())
    doc.update(changes)
    return doc


def _write(path: Path, doc) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def healthy():
    run = load_run_dir(cached_run(HEALTHY))
    return run, Path(run.status["knobs_dir"])


def _gate(run, kdir, files, **kw):
    store = open_store(kdir, events_path=None, run_gyms=run.gyms if run else None)
    return gate(run, store, [str(f) for f in files], **kw)


def test_unchanged_rules_reproduce_the_recorded_rewards(healthy, tmp_path):
    run, kdir = healthy
    same = _write(
        tmp_path / "rules" / "rewards" / "default.yaml",
        yaml.safe_load((kdir / "rules" / "rewards" / "default.yaml").read_text()),
    )
    doc = _gate(run, kdir, [same])
    assert doc["ok"]
    rep = doc["replays"][0]
    assert rep["kind"] == "rewards" and rep["complete"] and rep["replayed"] == 5 * 24
    assert rep["reward_mean"]["delta"] == pytest.approx(0.0, abs=1e-9)
    assert all(m["delta"] == pytest.approx(0.0, abs=1e-9) for m in rep["most_moved"])


def test_reward_rule_candidate_shifts_rewards(healthy, tmp_path):
    run, kdir = healthy
    cand = _write(
        tmp_path / "rules" / "rewards" / "bonus.yaml",
        {"rules": [{"name": "ask_bonus", "predicate": "question_asked", "value": 0.2}]},
    )
    doc = _gate(run, kdir, [cand])
    rep = doc["replays"][0]
    asks = sum(
        1
        for s in run.trajectory_steps()[-5:]
        for e in run.episodes_of_step(s)
        for t in e["turns"]
        if t["action"]["choice"] == "ask"
    )
    assert rep["rules"]["ask_bonus"] == {"old_total": 0.0, "new_total": pytest.approx(0.2 * asks, rel=1e-6)}
    assert rep["reward_mean"]["delta"] > 0.3
    assert doc["candidates"][0]["changes"][0]["new"] == {"ask_bonus": 0.2}


def test_user_candidates_replay_disclosures(healthy, tmp_path):
    run, kdir = healthy
    # identical user knobs and rules: the replayed episodes disclose exactly what was recorded
    same = _write(tmp_path / "same" / "user.yaml", yaml.safe_load((kdir / "user.yaml").read_text()))
    doc = _gate(run, kdir, [same])
    rep = doc["replays"][0]
    assert rep["kind"] == "episodes" and rep["replayed"] == 120 and rep["skipped"] == {}
    m = rep["mean_per_episode"]
    assert m["disclosures"]["old"] == m["disclosures"]["new"] and m["reward"]["old"] == pytest.approx(
        m["reward"]["new"]
    )
    assert rep["episodes_changed"] == 0
    # a travel user answering every question with the next preference too (a "tell everything" rule)
    rules = yaml.safe_load((kdir / "rules" / "users" / "travel.yaml").read_text())
    for intent in rules["intents"]:
        if intent["disclosure"] == "matched":
            intent["disclosure"] = "matched_or_next"
    leaky = _write(tmp_path / "rules" / "users" / "travel.yaml", rules)
    more = _write(tmp_path / "more" / "user.yaml", _area("user", facts_per_reply=2, max_reveals=12))
    doc = _gate(run, kdir, [leaky, more])
    assert doc["ok"], doc["candidates"]
    rep = doc["replays"][0]
    assert rep["mean_per_episode"]["disclosures"]["new"] > rep["mean_per_episode"]["disclosures"]["old"]
    assert rep["episodes_changed"] > 0 and any(
        c["facts_gained"] or c["reward"][0] != c["reward"][1] for c in rep["most_changed"]
    )


@pytest.mark.parametrize(
    "doc, rule",
    [
        (_area("env", max_steps=100), "range"),
        (_area("user", facts_per_reply=3), "max delta"),  # the method's 1 -> 3 leak: one write may move it by 1
        (_area("env", min_questions=1), "requires"),  # harder gyms need recent success >= 0.8 (the run has ~0.7)
        (_area("env", colour=3), "unknown knob"),
        ({k: v for k, v in _area("env").items() if k != "max_steps"}, "missing"),
        ("max_steps: [\n", "syntax"),
    ],
)
def test_refusals_name_the_rule(healthy, tmp_path, doc, rule):
    run, kdir = healthy
    name = "user.yaml" if isinstance(doc, dict) and "facts_per_reply" in doc else "env.yaml"
    cand = _write(tmp_path / name, doc)
    out = _gate(run, kdir, [cand])
    assert not out["ok"]
    refusal = out["candidates"][0]["refusals"][0]
    assert refusal["rule"] == rule, refusal
    assert out["replays"] == []  # nothing refused is replayed


def test_invalid_rule_files_are_refused(healthy, tmp_path):
    run, kdir = healthy
    bad_pred = _write(
        tmp_path / "a" / "rules" / "rewards" / "x.yaml",
        {"rules": [{"name": "x", "predicate": "no_such_predicate", "value": 0.1}]},
    )
    out = _gate(run, kdir, [bad_pred])
    assert not out["ok"] and "no_such_predicate" in out["candidates"][0]["refusals"][0]["message"]
    # valid alone, but its rule name clashes with the default file: caught when the set is compiled
    clash = _write(
        tmp_path / "b" / "rules" / "rewards" / "x.yaml",
        {"rules": [{"name": "format_error", "predicate": "format_error", "value": -0.5}]},
    )
    out = _gate(run, kdir, [clash])
    assert not out["ok"] and "already defined" in out["candidates"][0]["refusals"][-1]["message"]
    users = _write(tmp_path / "c" / "rules" / "users" / "travel.yaml", {"gym": "travel", "intents": []})
    out = _gate(run, kdir, [users])
    assert not out["ok"] and out["candidates"][0]["target"] == "rules/users/travel.yaml"


def test_targets_from_paths_and_explicit_targets(tmp_path):
    f = _write(tmp_path / "cand.yaml", {"rules": []})
    assert identify(f"{f}=rules/rewards/extra.yaml").target == "rules/rewards/extra.yaml"
    assert identify(str(_write(tmp_path / "x" / "reward.yaml", {}))).target == "reward.yaml"
    with pytest.raises(GateUsageError, match="cannot tell"):
        identify(str(f))
    with pytest.raises(FileNotFoundError):
        identify(str(tmp_path / "nope" / "env.yaml"))


def test_time_budget_bounds_the_replay(healthy, tmp_path):
    run, kdir = healthy
    cand = _write(tmp_path / "user.yaml", _area("user", facts_per_reply=2))
    doc = _gate(run, kdir, [cand], time_budget_s=0.0)
    assert doc["replays"][0]["replayed"] == 0 and doc["replays"][0]["complete"] is False


def test_cli_exit_codes_and_knobs_untouched(healthy, tmp_path):
    run, kdir = healthy
    before = _digest(kdir)
    runner = CliRunner()
    base = ["gate", "--runs-dir", str(run.dir.parent), "--run", run.run_id]
    ok = _write(tmp_path / "ok" / "user.yaml", _area("user", facts_per_reply=2))
    res = runner.invoke(app, base + [str(ok)])
    assert res.exit_code == 0, res.output
    assert "episode replay" in res.output and "all candidates pass" in res.output
    bad = _write(tmp_path / "bad" / "env.yaml", _area("env", max_steps=100))
    res = runner.invoke(app, base + [str(bad), "--json"])
    assert res.exit_code == EXIT_REFUSED and '"ok": false' in res.output
    assert runner.invoke(app, base + [str(tmp_path / "x.yaml")]).exit_code == EXIT_USAGE
    assert runner.invoke(app, base + [str(tmp_path / "none" / "env.yaml")]).exit_code == EXIT_NOT_FOUND
    assert _digest(kdir) == before


def test_reward_knob_candidate_rescales_recorded_rewards(healthy, tmp_path):
    run, kdir = healthy
    # per-gym form: only travel's rewards are halved (clip [-1, 2] never binds on these turns)
    cand = _write(tmp_path / "reward.yaml", _area("reward", per_gym_scale={"default": 1.0, "travel": 0.5}))
    doc = _gate(run, kdir, [cand])
    assert doc["ok"] and doc["candidates"][0]["changes"] == [
        {"knob": "reward.per_gym_scale", "gym": "travel", "old": 1.0, "new": 0.5, "applies": "live"}
    ]
    rep = doc["replays"][0]
    for m in rep["most_moved"]:
        assert m["gym"] == "travel" and m["new"] == pytest.approx(m["old"] / 2, abs=1e-6)
