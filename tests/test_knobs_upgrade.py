"""``eau knobs upgrade``: a knobs folder made from older packaged defaults brought up to date, no edit lost."""

from __future__ import annotations

import hashlib
import json

import pytest
from typer.testing import CliRunner

from harness.cli.main import app
from harness.io import yamlio
from harness.knobs.folder import MADE_FROM, defaults_dir, made_from, packaged_files, stale_files
from harness.knobs.store import KnobError
from harness.stores import open_store

runner = CliRunner()
# an older default of function.yaml's demand_answer: a lookahead, which the RE2 engine refuses
OLD_PATTERN = r"'\b(show|give)\s+me\s+the\s+(formula|function)\b(?!\s+(at|for|of))'"


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.fixture
def old_folder(knobs_dir):
    """``knobs_dir`` dressed as a folder made from older defaults: turtle's rule file did not exist,
    function.yaml held a lookahead nobody edited, env.yaml was edited and lacks the newer
    ``stance_threshold`` knob."""
    rec = made_from(knobs_dir)
    assert rec == packaged_files()  # a folder made from the defaults records them
    (knobs_dir / "rules/users/turtle.yaml").unlink()
    del rec["rules/users/turtle.yaml"]
    func = knobs_dir / "rules/users/function.yaml"
    old = func.read_text().replace("patterns:\n", f"patterns:\n      - {OLD_PATTERN}\n", 1)
    func.write_text(old)
    rec["rules/users/function.yaml"] = _sha(old)
    env = knobs_dir / "env.yaml"
    doc, _ = yamlio.read_yaml(env)
    del doc["stance_threshold"]
    rec["env.yaml"] = _sha(yamlio.dump(doc))  # what the older default held ...
    doc["max_steps"] = {"default": 14, "colbench": 10}  # ... and a person's edit since
    env.write_text(yamlio.dump(doc))
    (knobs_dir / MADE_FROM).write_text(json.dumps({"files": rec}))
    return knobs_dir


def test_an_invalid_older_default_names_the_upgrade(old_folder):
    with pytest.raises(KnobError) as exc:
        open_store(old_folder, events_path=None)
    msg = str(exc.value)
    assert "function.yaml" in msg and "eau knobs upgrade" in msg
    assert "rules/users/turtle.yaml" in stale_files(old_folder)


def test_upgrade_adds_new_files_updates_unedited_ones_and_keeps_edits(old_folder):
    base = ["knobs", "upgrade", "--json", "--knobs-dir", str(old_folder)]
    dry = runner.invoke(app, [*base, "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert not (old_folder / "rules/users/turtle.yaml").exists()  # a dry run writes nothing
    res = runner.invoke(app, base)
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert json.loads(dry.stdout) | {"dry_run": False} == out
    assert out["added"] == ["rules/users/turtle.yaml"]
    assert out["updated"] == ["rules/users/function.yaml"]
    assert [k["file"] for k in out["kept"]] == ["env.yaml"] and out["knobs_added"] == ["env.stance_threshold"]
    func = old_folder / "rules/users/function.yaml"
    assert func.read_bytes() == (defaults_dir() / "rules/users/function.yaml").read_bytes()
    env = yamlio.plain(yamlio.read_yaml(old_folder / "env.yaml")[0])
    assert env["max_steps"] == {"default": 14, "colbench": 10}  # the edit is kept
    assert "stance_threshold" in env
    store = open_store(old_folder, events_path=None)  # the folder is valid again
    assert store.snapshot().get("env", "max_steps") == 14
    assert made_from(old_folder) == packaged_files()
    hist = [json.loads(x) for x in (old_folder / ".history" / "knob_events.jsonl").read_text().splitlines()]
    assert {(e["knob"], e["source"]) for e in hist if e["reason"] == "eau knobs upgrade"} == {
        ("rules.users.turtle", "upgrade"),
        ("rules.users.function", "upgrade"),
        ("env.stance_threshold", "upgrade"),
    }
    again = json.loads(runner.invoke(app, base).stdout)  # safe to re-run: nothing left to do
    assert again["added"] == again["updated"] == again["knobs_added"] == []


def test_a_folder_without_a_record_keeps_every_differing_file(knobs_dir):
    (knobs_dir / MADE_FROM).unlink()
    (knobs_dir / "rules/users/persuade.yaml").unlink()
    user = knobs_dir / "user.yaml"
    user.write_text(user.read_text() + "\n# my note\n")
    res = runner.invoke(app, ["knobs", "upgrade", "--json", "--knobs-dir", str(knobs_dir)])
    out = json.loads(res.stdout)
    assert out["added"] == ["rules/users/persuade.yaml"] and out["updated"] == []
    assert [k["file"] for k in out["kept"]] == ["user.yaml"]
    assert "# my note" in user.read_text()
    assert made_from(knobs_dir) == packaged_files()
