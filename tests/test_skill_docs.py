"""The skill folder against its limits and against the CLI.

* SKILL.md: Agent Skills front matter (name, description <= 1,024 characters), under 500 lines,
  references one level deep, every link resolving.
* references/knobs.md is exactly what the knob schemas generate (``eau skill catalogue --check``).
* Every ``eau <command> [<sub>]`` written in code in SKILL.md and the references exists and answers
  ``--help``, and every ``--option`` written after it is one of its options. A command that another
  part of the project has not built yet fails here on purpose, until it lands.
* The checks themselves catch planted problems (so they can fail).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from harness.cli.main import app
from harness.knobs.folder import defaults_dir
from harness.knobs.schema import load_schemas
from harness.skill.catalogue import render_catalogue
from harness.skill.lint import (
    DESCRIPTION_MAX,
    NAME_RE,
    SKILL_MAX_LINES,
    check_commands,
    check_format,
    check_mention,
    mentions_in,
    parse_front_matter,
    resolve,
    skill_mentions,
)

REPO = Path(__file__).resolve().parents[1]
SKILL = REPO / "skill"
runner = CliRunner()

MENTIONS = skill_mentions(SKILL)
ROOT = typer.main.get_command(app)


def _command_paths() -> list[tuple[str, ...]]:
    """Distinct command paths the skill names: ('status',), ('knobs', 'set'), ..."""
    paths: dict[tuple[str, ...], None] = {}
    for m in MENTIONS:
        words = [w for w in m.words if not w.startswith("-")][:2]
        if not words:
            continue
        res = resolve(ROOT, m.words)
        paths[tuple(res.path) if res.command is not None else tuple(words[:1])] = None
    return [p for p in paths if p]


# --------------------------------------------------------------------------- SKILL.md format
def test_front_matter_name_and_description():
    fm = parse_front_matter((SKILL / "SKILL.md").read_text(encoding="utf-8"))
    assert fm is not None and set(fm) == {"name", "description"}
    assert fm["name"] == "eau-harness" and NAME_RE.match(fm["name"])
    desc = fm["description"]
    assert 200 < len(desc) <= DESCRIPTION_MAX, len(desc)
    assert "Use when" in desc  # says when to use it, not only what it does
    assert "evaluation" in desc


def test_skill_md_is_short_and_links_every_reference():
    text = (SKILL / "SKILL.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) < SKILL_MAX_LINES
    for ref in ("references/playbook.md", "references/protocol.md", "references/knobs.md", "references/formats.md"):
        assert f"]({ref})" in text, ref
    assert check_format(SKILL, installed_name="eau-harness") == []


def test_skill_states_the_evaluation_rule_and_the_paper_pitfalls():
    text = (SKILL / "SKILL.md").read_text(encoding="utf-8")
    assert "Never read, never run `eau eval`".lower() in text.lower()
    for needle in (
        "max_reveals",
        "reveal_kinds",
        "arm/llm/",
        "lag longer than the window",
        "eau knobs revert",
        "min_questions",
        "Wrong:",
        "Right:",
    ):
        assert needle in text, needle


# --------------------------------------------------------------------------- the generated knob catalogue
def test_catalogue_is_current():
    committed = (SKILL / "references" / "knobs.md").read_text(encoding="utf-8")
    assert committed == render_catalogue(defaults_dir()), (
        "skill/references/knobs.md is stale; run `eau skill catalogue`"
    )
    res = runner.invoke(app, ["skill", "catalogue", "--check", "--knobs-dir", str(defaults_dir())])
    assert res.exit_code == 0, res.output


def test_catalogue_covers_every_knob_and_its_limits():
    text = render_catalogue(defaults_dir())
    for area in load_schemas(defaults_dir()).values():
        for spec in area.knobs.values():
            section = text.split(f"### `{spec.full_name}`\n", 1)[1].split("\n### ", 1)[0]
            assert spec.description in section
            assert f"- gyms: {'all' if '*' in spec.gyms else ', '.join(spec.gyms)}" in section
            if spec.max_delta is not None:
                assert f"±{spec.max_delta:g}" in section
            if spec.max_factor is not None:
                assert f"×{spec.max_factor:g}" in section
            assert section.count("- requires:") == len(spec.requires)
    assert "`questions_over` | `limit` (int)" in text  # reward predicates from the registry
    assert "`intents[].disclosure`" in text  # rule-file fields


def test_catalogue_check_detects_a_schema_change(knobs_dir, tmp_path):
    out = tmp_path / "knobs.md"
    assert runner.invoke(app, ["skill", "catalogue", "--knobs-dir", str(knobs_dir), "--out", str(out)]).exit_code == 0
    check = ["skill", "catalogue", "--check", "--knobs-dir", str(knobs_dir), "--out", str(out), "--json"]
    assert runner.invoke(app, check).exit_code == 0
    schema_path = knobs_dir / "schema" / "user.schema.json"
    schema = json.loads(schema_path.read_text())
    schema["properties"]["max_reveals"]["x-max-delta"] = 3
    schema_path.write_text(json.dumps(schema))
    res = runner.invoke(app, check)
    assert res.exit_code == 4 and json.loads(res.stdout)["current"] is False
    assert "-- per write: ±5" in res.stderr and "+- per write: ±3" in res.stderr
    assert out.read_text().count("±5") > 0  # --check writes nothing
    assert runner.invoke(app, check[:-1]).exit_code == 4  # text mode too
    runner.invoke(app, ["skill", "catalogue", "--knobs-dir", str(knobs_dir), "--out", str(out)])
    assert runner.invoke(app, check).exit_code == 0


def test_catalogue_of_an_invalid_schema_names_file_and_knob(knobs_dir, tmp_path):
    schema_path = knobs_dir / "schema" / "env.schema.json"
    schema = json.loads(schema_path.read_text())
    del schema["properties"]["max_steps"]["description"]
    schema_path.write_text(json.dumps(schema))
    res = runner.invoke(app, ["skill", "catalogue", "--knobs-dir", str(knobs_dir), "--out", str(tmp_path / "k.md")])
    assert res.exit_code == 4 and "env.schema.json: knob env.max_steps: needs a description" in res.stderr


# --------------------------------------------------------------------------- commands named by the skill
def test_the_skill_names_the_commands_it_relies_on():
    paths = set(_command_paths())
    for p in [
        ("status",),
        ("diagnose",),
        ("sample",),
        ("effect",),
        ("gate",),
        ("knobs", "set"),
        ("knobs", "revert"),
        ("knobs", "history"),
        ("finding", "add"),
        ("finding", "search"),
        ("finding", "list"),
        ("finding", "retract"),
        ("train",),
        ("runs", "list"),
        ("runs", "compare"),
        ("plot",),
        ("supervise",),
        ("autopilot",),
        ("eval",),
    ]:
        assert p in paths, p


@pytest.mark.parametrize("path", _command_paths(), ids=lambda p: "eau " + " ".join(p))
def test_every_named_command_exists_and_answers_help(path):
    res = resolve(ROOT, list(path))
    assert res.command is not None, (
        f"the skill names `eau {' '.join(path)}`, which the CLI does not have: {res.problem}"
    )
    out = runner.invoke(app, [*path, "--help"])
    assert out.exit_code == 0, out.output
    assert "Usage:" in out.output


@pytest.mark.parametrize("mention", [m for m in MENTIONS if m.options], ids=lambda m: f"{m.where} {m.text[:60]}")
def test_every_option_the_skill_writes_exists(mention):
    problems = check_mention(ROOT, mention)
    assert problems == []


def test_console_script_answers_help():
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli.main", "skill", "install", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0 and "--target" in proc.stdout and "--copy" in proc.stdout


# --------------------------------------------------------------------------- the checks can fail
def test_mention_parsing():
    text = """Run `eau status --json` then `EAU_RUNS_DIR=/r eau knobs set a.b 1 --reason "x; y" && eau finding list`.

```bash
eau finding add --title t \\
  --change c --verdict n/a   # eau not-a-command in a comment
cat x | eau skill check
```
Prose eau frob is not code.
"""
    got = [(m.line, m.words[:2], m.options) for m in mentions_in(text, "T.md")]
    assert got == [
        (1, ["status", "--json"], ["--json"]),
        (1, ["knobs", "set"], ["--reason"]),
        (1, ["finding", "list"], []),
        (4, ["finding", "add"], ["--title", "--change", "--verdict"]),
        (6, ["skill", "check"], []),
    ]


def _bad_skill(tmp_path: Path) -> Path:
    d = tmp_path / "skill"
    (d / "references").mkdir(parents=True)
    body = "\n".join(["line"] * SKILL_MAX_LINES)
    (d / "SKILL.md").write_text(
        "---\nname: EAU_Harness\ndescription: " + "x" * (DESCRIPTION_MAX + 1) + "\n---\n"
        "Use `eau frobnicate --now` and `eau knobs set a.b 1 --nope` and `eau knobs frob`.\n"
        "See [missing](references/missing.md).\n" + body + "\n"
    )
    (d / "references" / "orphan.md").write_text("Nobody links here. `eau finding add --colour red`\n")
    return d


def test_checks_catch_planted_problems(tmp_path):
    d = _bad_skill(tmp_path)
    fmt = "\n".join(check_format(d))
    assert "name 'EAU_Harness' must be lowercase" in fmt
    assert f"description has {DESCRIPTION_MAX + 1} characters" in fmt
    assert f"keep it under {SKILL_MAX_LINES}" in fmt
    assert "link 'references/missing.md' does not resolve" in fmt
    assert "references/orphan.md: not linked from SKILL.md" in fmt
    cmds = "\n".join(check_commands(d, ROOT))
    assert "`eau frobnicate`: no such command" in cmds
    assert "`eau knobs set` has no option --nope" in cmds
    assert "`eau knobs frob`: no such command (known:" in cmds and "set" in cmds
    assert "references/orphan.md:1: `eau finding add` has no option --colour" in cmds


def test_skill_check_command_exit_codes(tmp_path):
    res = runner.invoke(app, ["skill", "check", "--source", str(_bad_skill(tmp_path)), "--json"])
    assert res.exit_code == 4 and json.loads(res.stdout)["ok"] is False
    good = tmp_path / "good"
    good.mkdir()
    (good / "SKILL.md").write_text(
        "---\nname: good\ndescription: Does a thing. Use when asked.\n---\nRun `eau finding list --tag x`.\n"
    )
    res = runner.invoke(app, ["skill", "check", "--source", str(good)])
    assert res.exit_code == 0, res.output


def test_installed_folder_name_must_match(tmp_path):
    d = tmp_path / "other-name"
    shutil.copytree(SKILL, d)
    assert any("differs from its folder name 'other-name'" in p for p in check_format(d, installed_name=d.name))


def test_readme_and_the_skill_catalogue_list_every_gym():
    """A gym the README or the skill's knob catalogue leaves out is one a supervisor cannot find:
    every built-in gym is named in the README's gym list and governed by env.max_steps there."""
    from harness.gyms import BUILTIN_GYMS

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    catalogue = (SKILL / "references" / "knobs.md").read_text(encoding="utf-8")
    row = next(line for line in catalogue.splitlines() if line.startswith("| [`env.max_steps`]"))
    for gym in BUILTIN_GYMS:
        assert f"`{gym}`" in readme, gym
        assert gym in row.split("|")[4], gym
