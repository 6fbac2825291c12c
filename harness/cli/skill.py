"""``eau skill``: install | catalogue | check — the skill that guides a meta-agent through a run.

``install`` puts the skill where Claude Code (``.claude/skills``) and Codex (``.agents/skills``)
find it, with pointers in AGENTS.md / CLAUDE.md, a permission set in ``.claude/settings.json`` and
Codex execpolicy rules in ``.codex/rules/eau-harness.rules``;
``catalogue`` regenerates ``skill/references/knobs.md`` from the knob schemas; ``check`` verifies
the skill's format limits and that every ``eau`` command it names exists.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Optional

import typer

from harness.cli.common import EXIT_ERROR, EXIT_INVALID, JsonOpt, KnobsDirOpt, emit_json, err, fail, knobs_dir
from harness.experience.pool import atomic_write
from harness.knobs.schema import SchemaProblem
from harness.skill.catalogue import render_catalogue
from harness.skill.claude_settings import SettingsError
from harness.skill.install import InstallError, install, repo_skill_dir
from harness.skill.lint import check_commands, check_format

app = typer.Typer(
    help="Install the meta-agent skill, regenerate its knob catalogue, check it against the CLI.", no_args_is_help=True
)

SourceOpt = typer.Option(None, "--source", help="Skill folder to use (default: the repository's skill/).")


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="skill")


def _source(source: Optional[Path]) -> Path:
    return Path(source) if source is not None else repo_skill_dir()


@app.command("install")
def install_cmd(
    target: Path = typer.Option(Path("."), "--target", help="Project folder to install into (default: .)."),
    copy: bool = typer.Option(
        False,
        "--copy/--link",
        help="Copy the skill folder instead of linking "
        "to it (default: --link; links follow edits and catalogue updates).",
    ),
    source: Optional[Path] = SourceOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Install the skill for Claude Code and Codex into a project folder (safe to re-run).

    Puts it at DIR/.claude/skills/<name> and DIR/.agents/skills/<name>, adds a pointer block to
    DIR/AGENTS.md and DIR/CLAUDE.md, merges the permission set into DIR/.claude/settings.json, and
    writes DIR/.codex/rules/eau-harness.rules (Codex: eau eval forbidden, once the project is trusted).
    """
    try:
        report = install(target, _source(source), "copy" if copy else "link")
    except (InstallError, SettingsError) as exc:
        fail(str(exc), EXIT_ERROR, as_json)
    if as_json:
        emit_json(report.to_json())
        return
    for path, what in report.paths.items():
        typer.echo(f"{what:10} {report.target / path}")
    for rule in report.settings["conflicts"]:
        err(f"note: your settings allow {rule}, which the skill denies; the deny wins")
    for rule in report.settings["skipped_allow"]:
        err(f"note: not allowing {rule}: your settings deny it")


@app.command("catalogue")
def catalogue_cmd(
    out: Optional[Path] = typer.Option(
        None, "--out", help="File to write (default: references/knobs.md of the skill folder)."
    ),
    check: bool = typer.Option(False, "--check", help="Write nothing; exit 4 when the file is out of date."),
    source: Optional[Path] = SourceOpt,
    knobs_dir_: Optional[Path] = KnobsDirOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Generate the knob catalogue (skill/references/knobs.md) from knobs/schema/*.schema.json."""
    kdir = knobs_dir(knobs_dir_)
    path = Path(out) if out is not None else _source(source) / "references" / "knobs.md"
    try:
        text = render_catalogue(kdir)
    except SchemaProblem as exc:
        fail(str(exc), EXIT_INVALID, as_json)
    old = path.read_text(encoding="utf-8") if path.is_file() else None
    current = old == text
    if check:
        if as_json:
            emit_json({"ok": current, "path": str(path), "knobs_dir": str(kdir), "current": current})
        if current:
            if not as_json:
                typer.echo(f"ok: {path} matches the schemas in {kdir}")
            return
        diff = list(
            difflib.unified_diff((old or "").splitlines(), text.splitlines(), str(path), "generated", lineterm="", n=0)
        )
        err("\n".join(diff[:40]) + ("\n..." if len(diff) > 40 else ""))
        err(f"{path} is out of date with the schemas in {kdir}; run `eau skill catalogue`")
        raise typer.Exit(EXIT_INVALID)
    if not current:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, text)
    if as_json:
        emit_json(
            {
                "ok": True,
                "path": str(path),
                "knobs_dir": str(kdir),
                "changed": not current,
                "lines": len(text.splitlines()),
            }
        )
    else:
        typer.echo(f"{'wrote' if not current else 'unchanged'} {path} ({len(text.splitlines())} lines)")


@app.command("check")
def check_cmd(ctx: typer.Context, source: Optional[Path] = SourceOpt, as_json: bool = JsonOpt) -> None:
    """Check the skill folder: limits, links, and the eau commands it names; exit 4 on problems.

    Limits: SKILL.md name and description, under 500 lines. Commands: every `eau ...` written in
    code in SKILL.md and references/ must exist in this CLI with the options written after it.
    """
    skill_dir = _source(source)

    problems = check_format(skill_dir) + check_commands(skill_dir, ctx.find_root().command)  # the whole eau CLI
    if as_json:
        emit_json({"ok": not problems, "skill": str(skill_dir), "problems": problems})
    else:
        for p in problems:
            err(p)
        if not problems:
            typer.echo(f"ok: {skill_dir} passes every check")
    if problems:
        raise typer.Exit(EXIT_INVALID)
