"""``eau skill install``: links and copies, pointer blocks, the Claude Code permission set, idempotence,
and refusals that leave user files untouched. Everything runs against real temp folders."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.cli.main import app
from harness.skill.claude_settings import ALLOW_RULES, DENY_RULES, merge_permissions
from harness.skill.install import BEGIN_MARK, END_MARK, install, repo_skill_dir, upsert_block

REPO = Path(__file__).resolve().parents[1]
runner = CliRunner()
NAME = "eau-harness"


def _snapshot(root: Path) -> dict[str, bytes]:
    """Every file under root (following the skill links) with its bytes."""
    out = {}
    for dirpath, _dirs, files in os.walk(root, followlinks=True):
        for f in files:
            p = Path(dirpath) / f
            out[str(p.relative_to(root))] = p.read_bytes()
    return out


def test_link_install_layout_pointers_and_permissions(tmp_path):
    rep = install(tmp_path, mode="link")
    assert rep.name == NAME
    for skills in (".claude/skills", ".agents/skills"):
        dest = tmp_path / skills / NAME
        assert dest.is_symlink() and dest.resolve() == repo_skill_dir().resolve()
        assert (dest / "SKILL.md").read_text().startswith(f"---\nname: {NAME}\n")
        assert (dest / "references" / "knobs.md").is_file()
        assert rep.paths[f"{skills}/{NAME}"] == "created"
    claude, agents = (tmp_path / "CLAUDE.md").read_text(), (tmp_path / "AGENTS.md").read_text()
    assert f".claude/skills/{NAME}/SKILL.md" in claude and f".agents/skills/{NAME}/SKILL.md" in agents
    for text in (claude, agents):
        assert text.count(BEGIN_MARK) == 1 and text.count(END_MARK) == 1 and "eau eval" in text
    settings = json.loads((tmp_path / ".claude" / "settings.json").read_text())
    allow, deny = settings["permissions"]["allow"], settings["permissions"]["deny"]
    assert "Bash(eau status:*)" in allow and "Bash(eau knobs:*)" in allow and "Bash(eau finding:*)" in allow
    assert "Edit(./knobs/**)" in allow and "Edit(./experience_pool/**)" in allow
    assert "Bash(eau eval:*)" in deny and "Read(./eval_results/**)" in deny
    assert not any("eval" in r for r in allow)  # nothing allowed touches evaluation
    # Codex: the same command forbidden by an execpolicy rule (enforced by the real CLI in
    # tests/test_supervise_clients.py)
    rules = (tmp_path / ".codex" / "rules" / "eau-harness.rules").read_text()
    assert 'prefix_rule(pattern=["eau", "eval"], decision="forbidden"' in rules
    assert rules.count("prefix_rule(") == 1 and rep.paths[".codex/rules/eau-harness.rules"] == "created"


def test_rerun_is_idempotent(tmp_path):
    install(tmp_path, mode="link")
    before = _snapshot(tmp_path)
    mtimes = {p: os.stat(tmp_path / p).st_mtime_ns for p in ("AGENTS.md", "CLAUDE.md", ".claude/settings.json")}
    rep = install(tmp_path, mode="link")
    assert set(rep.paths.values()) == {"unchanged"}
    assert _snapshot(tmp_path) == before
    assert {p: os.stat(tmp_path / p).st_mtime_ns for p in mtimes} == mtimes  # not even rewritten


def test_copy_mode_then_switch_to_link(tmp_path):
    rep = install(tmp_path, mode="copy")
    dest = tmp_path / ".claude" / "skills" / NAME
    assert dest.is_dir() and not dest.is_symlink() and rep.paths[f".claude/skills/{NAME}"] == "created"
    assert (dest / "SKILL.md").read_bytes() == (repo_skill_dir() / "SKILL.md").read_bytes()
    assert install(tmp_path, mode="copy").paths[f".claude/skills/{NAME}"] == "unchanged"
    (dest / "SKILL.md").write_text("---\nname: eau-harness\ndescription: stale\n---\n")  # an old copy
    assert install(tmp_path, mode="copy").paths[f".claude/skills/{NAME}"] == "updated"
    assert (dest / "SKILL.md").read_bytes() == (repo_skill_dir() / "SKILL.md").read_bytes()
    assert install(tmp_path, mode="link").paths[f".claude/skills/{NAME}"] == "updated"
    assert dest.is_symlink()


def test_existing_user_files_are_kept(tmp_path):
    (tmp_path / ".claude").mkdir()
    user_settings = {
        "model": "opus",
        "permissions": {
            "allow": ["Bash(git status:*)", "Read(./eval_results/**)"],
            "deny": ["Bash(eau train:*)"],
            "defaultMode": "default",
        },
        "env": {"X": "1"},
    }
    (tmp_path / ".claude" / "settings.json").write_text(json.dumps(user_settings))
    (tmp_path / "AGENTS.md").write_text("# My project\n\nBuild with make.\n")
    rep = install(tmp_path)
    s = json.loads((tmp_path / ".claude" / "settings.json").read_text())
    assert s["model"] == "opus" and s["env"] == {"X": "1"} and s["permissions"]["defaultMode"] == "default"
    assert s["permissions"]["allow"][:2] == ["Bash(git status:*)", "Read(./eval_results/**)"]
    assert "Bash(eau train:*)" in s["permissions"]["deny"]
    assert "Bash(eau train:*)" not in s["permissions"]["allow"]  # the user's deny is respected
    assert rep.settings["skipped_allow"] == ["Bash(eau train:*)"]
    assert rep.settings["conflicts"] == ["Read(./eval_results/**)"]  # ours denies it; deny wins in Claude Code
    agents = (tmp_path / "AGENTS.md").read_text()
    assert agents.startswith("# My project\n\nBuild with make.\n\n" + BEGIN_MARK)
    # every rule once, even after a second run
    install(tmp_path)
    s = json.loads((tmp_path / ".claude" / "settings.json").read_text())
    for key in ("allow", "deny"):
        assert len(s["permissions"][key]) == len(set(s["permissions"][key]))


def test_outdated_or_duplicated_block_is_replaced_once():
    old = f"intro\n\n{BEGIN_MARK}\nold pointer\n{END_MARK}\nmiddle\n{BEGIN_MARK}\ncopy\n{END_MARK}\nend\n"
    new_block = f"{BEGIN_MARK}\nnew pointer\n{END_MARK}\n"
    out = upsert_block(old, new_block)
    assert out == f"intro\n\n{new_block}middle\nend\n"
    assert upsert_block(out, new_block) == out
    assert upsert_block("", new_block) == new_block
    assert upsert_block("no newline", new_block) == "no newline\n\n" + new_block


def test_merge_permissions_rules_and_errors():
    res = merge_permissions({})
    assert res.added_allow == list(ALLOW_RULES) and res.added_deny == list(DENY_RULES)
    assert not merge_permissions(res.settings).changed
    with pytest.raises(ValueError, match="permissions.allow must be a list"):
        merge_permissions({"permissions": {"allow": "Bash"}}, "s.json")
    with pytest.raises(ValueError, match="'permissions' must be an object"):
        merge_permissions({"permissions": []}, "s.json")


def test_malformed_settings_refused_and_nothing_written(tmp_path):
    (tmp_path / ".claude").mkdir()
    bad = '{"permissions": {"allow": [}'
    (tmp_path / ".claude" / "settings.json").write_text(bad)
    res = runner.invoke(app, ["skill", "install", "--target", str(tmp_path), "--json"])
    assert res.exit_code == 1
    assert "settings.json: not valid JSON (line 1" in res.stderr and "the file was not changed" in res.stderr
    assert (tmp_path / ".claude" / "settings.json").read_text() == bad
    assert not (tmp_path / "AGENTS.md").exists() and not (tmp_path / ".claude" / "skills").exists()


def test_foreign_folder_in_the_way_is_refused(tmp_path):
    other = tmp_path / ".agents" / "skills" / NAME
    other.mkdir(parents=True)
    (other / "notes.txt").write_text("mine")
    res = runner.invoke(app, ["skill", "install", "--target", str(tmp_path)])
    assert res.exit_code == 1 and "is not a copy of the 'eau-harness' skill" in res.stderr
    assert (other / "notes.txt").read_text() == "mine"


def test_bad_target_and_source(tmp_path):
    res = runner.invoke(app, ["skill", "install", "--target", str(tmp_path / "missing")])
    assert res.exit_code == 1 and "is not a folder" in res.stderr
    res = runner.invoke(app, ["skill", "install", "--target", str(tmp_path), "--source", str(tmp_path)])
    assert res.exit_code == 1 and "no SKILL.md" in res.stderr


def test_console_script_install_copy_json(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli.main", "skill", "install", "--target", str(tmp_path), "--copy", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["ok"] and doc["mode"] == "copy" and doc["name"] == NAME
    assert doc["paths"] == {
        f".claude/skills/{NAME}": "created",
        f".agents/skills/{NAME}": "created",
        "AGENTS.md": "created",
        "CLAUDE.md": "created",
        ".claude/settings.json": "created",
        ".codex/rules/eau-harness.rules": "created",
    }
    assert not (tmp_path / ".agents" / "skills" / NAME).is_symlink()
