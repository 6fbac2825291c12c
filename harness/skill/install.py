"""``eau skill install``: put the skill where Claude Code and Codex find it, and point at it.

For a target project folder DIR it

1. places the skill folder at ``DIR/.claude/skills/<name>/`` (Claude Code) and
   ``DIR/.agents/skills/<name>/`` (Codex and other Agent Skills readers), as symbolic links to the
   source folder (edits and a regenerated catalogue are seen at once) or as copies;
2. adds a short marked block to ``DIR/AGENTS.md`` and ``DIR/CLAUDE.md`` naming the skill and the
   one rule that must hold even without it (evaluation data is off-limits);
3. merges the permission set of :mod:`harness.skill.claude_settings` into
   ``DIR/.claude/settings.json``;
4. writes ``DIR/.codex/rules/eau-harness.rules``: Codex execpolicy rules that forbid the commands
   the Claude Code deny rules deny (``eau eval``). Codex reads a project's rules once the project
   is trusted (``trust_level = "trusted"`` in ``~/.codex/config.toml``, as its first interactive
   start asks); the file is the harness's own and rewritten on every install.

Re-running is safe: a link or copy already in place is left alone (or refreshed when the source
changed), the marked block is replaced rather than appended again, and settings entries are only
ever added.
"""

from __future__ import annotations

import filecmp
import json
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

import harness
from harness.experience.pool import atomic_write
from harness.skill.claude_settings import DENY_RULES, load_settings, merge_permissions

MODES = ("link", "copy")
BEGIN_MARK = "<!-- eau-harness skill: begin (managed by `eau skill install`; edits inside are replaced) -->"
END_MARK = "<!-- eau-harness skill: end -->"
_BLOCK_RE = re.compile(r"<!-- eau-harness skill: begin.*?-->.*?<!-- eau-harness skill: end -->\n?", re.S)


CODEX_RULES = ".codex/rules/eau-harness.rules"
_BASH_PREFIX = re.compile(r"^Bash\((.+):\*\)$")


def codex_rules() -> str:
    """Codex execpolicy rules (Starlark): each ``Bash(PREFIX:*)`` deny rule as a forbidden prefix."""
    lines = [
        "# Managed by `eau skill install` (rewritten on each install): what the meta-agent must not run.",
        "# The same commands are denied to Claude Code in .claude/settings.json.",
    ]
    for rule in DENY_RULES:
        m = _BASH_PREFIX.match(rule)
        if m:
            words = json.dumps(m.group(1).split())
            lines.append(
                f'prefix_rule(pattern={words}, decision="forbidden", '
                'justification="evaluation data is off-limits to the meta-agent: use training-side data only")'
            )
    return "\n".join(lines) + "\n"


class InstallError(ValueError):
    """The skill cannot be installed as asked (names the path and what to do)."""


def repo_skill_dir() -> Path:
    """The ``skill/`` folder of the source tree the ``harness`` package runs from."""
    return Path(harness.__file__).resolve().parent.parent / "skill"


def skill_front_matter(skill_dir: Path) -> dict[str, Any]:
    """The YAML front matter of ``skill_dir/SKILL.md``; InstallError when missing or malformed."""
    path = skill_dir / "SKILL.md"
    if not path.is_file():
        raise InstallError(f"{path}: no SKILL.md; pass --source with the skill folder")
    text = path.read_text(encoding="utf-8")
    m = re.match(r"---\n(.*?)\n---\n", text, re.S)
    if not m:
        raise InstallError(f"{path}: SKILL.md must start with YAML front matter between '---' lines")
    try:
        fm = yaml.safe_load(m.group(1))
    except yaml.YAMLError as exc:
        raise InstallError(f"{path}: front matter is not valid YAML: {exc}") from None
    if not isinstance(fm, dict) or not isinstance(fm.get("name"), str):
        raise InstallError(f"{path}: front matter needs a 'name'")
    return fm


def pointer_block(name: str, skills_dir: str) -> str:
    """The marked block added to AGENTS.md / CLAUDE.md (``skills_dir``: .claude/skills or .agents/skills)."""
    return (
        f"{BEGIN_MARK}\n"
        f"## EAU training harness\n\n"
        f"To supervise a training run (diagnose it, change knobs or rule files, record findings) use the\n"
        f"`{name}` skill: `{skills_dir}/{name}/SKILL.md`. Start with `eau status` and `eau diagnose`.\n"
        f"Never run `eau eval` or read `eval_results/`: interventions use training-side data only.\n"
        f"{END_MARK}\n"
    )


def upsert_block(text: str, block: str) -> str:
    """``text`` with the managed block replaced by ``block`` (all old copies removed), or appended."""
    if _BLOCK_RE.search(text):
        first = True

        def repl(_m: re.Match[str]) -> str:
            nonlocal first
            out, first = (block if first else ""), False
            return out

        return _BLOCK_RE.sub(repl, text)
    if not text:
        return block
    sep = "" if text.endswith("\n\n") else ("\n" if text.endswith("\n") else "\n\n")
    return text + sep + block


def _same_tree(a: Path, b: Path) -> bool:
    """True when folders ``a`` and ``b`` hold the same files with the same bytes."""
    cmp = filecmp.dircmp(a, b, ignore=["__pycache__"])
    if cmp.left_only or cmp.right_only or cmp.funny_files:
        return False
    _, mismatch, errors = filecmp.cmpfiles(a, b, cmp.common_files, shallow=False)
    if mismatch or errors:
        return False
    return all(_same_tree(a / d, b / d) for d in cmp.common_dirs)


def _place(source: Path, dest: Path, mode: str, name: str) -> str:
    """Put the skill at ``dest``; returns created | updated | unchanged."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    existed = dest.exists() or dest.is_symlink()
    if dest.is_symlink():
        if mode == "link" and dest.resolve() == source.resolve():
            return "unchanged"
        dest.unlink()
    elif dest.is_dir():
        theirs = skill_front_matter(dest).get("name") if (dest / "SKILL.md").is_file() else None
        if theirs != name:
            raise InstallError(f"{dest} exists and is not a copy of the {name!r} skill; move it away and re-run")
        if mode == "copy" and _same_tree(source, dest):
            return "unchanged"
        shutil.rmtree(dest)
    elif existed:
        raise InstallError(f"{dest} exists and is not a folder; move it away and re-run")
    if mode == "link":
        # Relative when the skill lives inside the target project (the link survives moving it),
        # absolute otherwise.
        try:
            source.resolve().relative_to(dest.parent.parent.parent.resolve())
            link_to = os.path.relpath(source.resolve(), dest.parent.resolve())
        except ValueError:
            link_to = str(source.resolve())
        os.symlink(link_to, dest, target_is_directory=True)
    else:
        shutil.copytree(source, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return "updated" if existed else "created"


def _write_if_changed(path: Path, text: str) -> str:
    old = path.read_text(encoding="utf-8") if path.exists() else None
    if old == text:
        return "unchanged"
    atomic_write(path, text)
    return "created" if old is None else "updated"


@dataclass
class InstallReport:
    """What ``install`` did: each path with created | updated | unchanged, plus settings details."""

    name: str
    target: Path
    mode: str
    paths: dict[str, str] = field(default_factory=dict)
    settings: dict[str, list[str]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": True,
            "name": self.name,
            "target": str(self.target),
            "mode": self.mode,
            "paths": self.paths,
            "settings": self.settings,
        }


def install(target: str | Path, source: str | Path | None = None, mode: str = "link") -> InstallReport:
    """Install the skill from ``source`` (default: the repository's ``skill/``) into project ``target``."""
    if mode not in MODES:
        raise InstallError(f"mode {mode!r} is not allowed; use one of {', '.join(MODES)}")
    target = Path(target)
    if not target.is_dir():
        raise InstallError(f"target {target} is not a folder")
    source = Path(source) if source is not None else repo_skill_dir()
    name = skill_front_matter(source)["name"]
    report = InstallReport(name=name, target=target.resolve(), mode=mode)
    settings_path = target / ".claude" / "settings.json"
    settings = load_settings(settings_path)  # fail before touching anything when it is malformed
    for skills_dir in (".claude/skills", ".agents/skills"):
        dest = target / skills_dir / name
        try:
            report.paths[f"{skills_dir}/{name}"] = _place(source, dest, mode, name)
        except OSError as exc:
            if mode != "link":
                raise
            # No symlinks here (some file systems, Windows without privilege): copy instead.
            report.paths[f"{skills_dir}/{name}"] = (
                _place(source, dest, "copy", name) + " (copied: " + exc.strerror + ")"
            )
    for fname, skills_dir in (("AGENTS.md", ".agents/skills"), ("CLAUDE.md", ".claude/skills")):
        path = target / fname
        old = path.read_text(encoding="utf-8") if path.exists() else ""
        report.paths[fname] = _write_if_changed(path, upsert_block(old, pointer_block(name, skills_dir)))
    rules_path = target / CODEX_RULES
    rules_path.parent.mkdir(parents=True, exist_ok=True)
    report.paths[CODEX_RULES] = _write_if_changed(rules_path, codex_rules())
    merged = merge_permissions(settings, str(settings_path))
    if merged.changed or not settings_path.exists():
        settings_path.parent.mkdir(parents=True, exist_ok=True)
        report.paths[".claude/settings.json"] = _write_if_changed(
            settings_path, json.dumps(merged.settings, indent=2, ensure_ascii=False) + "\n"
        )
    else:  # nothing to add: leave the user's file byte for byte as it is
        report.paths[".claude/settings.json"] = "unchanged"
    report.settings = {
        "added_allow": merged.added_allow,
        "added_deny": merged.added_deny,
        "skipped_allow": merged.skipped,
        "conflicts": merged.conflicts,
    }
    return report
