"""The Claude Code permission set the skill installs into ``.claude/settings.json``.

Claude Code reads ``permissions.allow`` / ``permissions.deny`` lists of rules such as
``Bash(eau status:*)`` (a command prefix), ``Edit(./knobs/**)`` and ``Read(./eval_results/**)``
(gitignore-style paths; ``./`` is the folder Claude Code runs in). Deny rules win over allow rules
wherever they are written. ``Edit`` rules cover every built-in tool that changes files (Write
included), so no separate ``Write(...)`` rule is needed.

The set lets a meta-agent run the harness's read, analysis and knob commands and edit knob, rule
and finding files without a prompt, and keeps evaluation results out of its reach: ``eau eval`` is
denied and so is reading or writing anything under ``eval_results/`` (the interventions must use
training-side data only). Merging never drops an entry the user already has.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The harness commands a meta-agent session may run without asking. Not listed on purpose:
# `eau eval` (denied below), `eau supervise` / `eau autopilot` (they launch meta-agents themselves),
# `eau skill` (installation is a human's decision), `eau play`.
ALLOWED_COMMANDS = (
    "status",
    "diagnose",
    "sample",
    "effect",
    "gate",
    "knobs",
    "finding",
    "runs",
    "plot",
    "train",
    "tasks",
)

ALLOW_RULES: tuple[str, ...] = (
    *(f"Bash(eau {cmd}:*)" for cmd in ALLOWED_COMMANDS),
    "Edit(./knobs/**)",
    "Edit(./experience_pool/**)",
)

DENY_RULES: tuple[str, ...] = (
    "Bash(eau eval:*)",
    "Read(./eval_results/**)",
    "Read(**/eval_results/**)",
    "Edit(./eval_results/**)",
)


class SettingsError(ValueError):
    """An existing settings file that cannot be merged into (names the file and the problem)."""


@dataclass
class MergeResult:
    """What merging the permission set into a settings document did."""

    settings: dict[str, Any]
    added_allow: list[str] = field(default_factory=list)
    added_deny: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # allow rules not added because the user denies them
    conflicts: list[str] = field(default_factory=list)  # user allow rules that our deny rules override

    @property
    def changed(self) -> bool:
        return bool(self.added_allow or self.added_deny)


def _rule_list(perms: dict[str, Any], key: str, where: str) -> list[Any]:
    value = perms.setdefault(key, [])
    if not isinstance(value, list):
        raise SettingsError(
            f"{where}: permissions.{key} must be a list of rule strings, "
            f"got {type(value).__name__}; fix it by hand and re-run `eau skill install`"
        )
    return value


def merge_permissions(settings: dict[str, Any], where: str = ".claude/settings.json") -> MergeResult:
    """Add the skill's allow and deny rules to ``settings`` (in place), keeping every existing entry.

    An allow rule the user already denies is not added (their deny stands); a user allow rule that
    one of our deny rules overrides is kept and reported as a conflict.
    """
    if not isinstance(settings, dict):
        raise SettingsError(f"{where}: the settings file must hold a JSON object")
    perms = settings.setdefault("permissions", {})
    if not isinstance(perms, dict):
        raise SettingsError(f"{where}: 'permissions' must be an object with allow/deny lists")
    allow = _rule_list(perms, "allow", where)
    deny = _rule_list(perms, "deny", where)
    res = MergeResult(settings)
    for rule in DENY_RULES:
        if rule not in deny:
            deny.append(rule)
            res.added_deny.append(rule)
        if rule in allow:
            res.conflicts.append(rule)
    for rule in ALLOW_RULES:
        if rule in deny:
            res.skipped.append(rule)
        elif rule not in allow:
            allow.append(rule)
            res.added_allow.append(rule)
    return res


def load_settings(path: Path) -> dict[str, Any]:
    """The settings document at ``path`` ({} when absent); SettingsError when it is not valid JSON."""
    if not path.exists():
        return {}
    try:
        doc = json.loads(path.read_text(encoding="utf-8") or "{}")
    except json.JSONDecodeError as exc:
        raise SettingsError(
            f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); "
            f"fix it by hand and re-run `eau skill install` (the file was not changed)"
        ) from None
    if not isinstance(doc, dict):
        raise SettingsError(f"{path}: the settings file must hold a JSON object")
    return doc
