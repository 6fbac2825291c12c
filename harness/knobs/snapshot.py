"""An immutable view of the knob values in force, as the gyms, users and rewards read them.

The knob store (``harness.knobs.store``) validates files and produces snapshots; everything that
consumes knobs takes a snapshot, so a change can only reach an episode at reset and the trainer
only between steps.

A knob value is either global (``max_steps: 10``) or per gym (``max_steps: {default: 10, travel: 16}``):
a mapping value is always the per-gym form (no knob has a mapping as its scalar value).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from harness.io import yamlio

AREAS = ("env", "user", "reward", "agent")
DEFAULT_KEY = "default"


def resolve(value: Any, gym: str | None) -> Any:
    """The value of a knob for ``gym`` (or its global/default value when ``gym`` is None).

    >>> resolve({"default": 10, "travel": 16}, "travel"), resolve({"default": 10}, "colbench"), resolve(3, "x")
    (16, 10, 3)
    """
    if not isinstance(value, Mapping):  # a global value
        return value
    if gym is not None and gym in value:
        return value[gym]
    return value.get(DEFAULT_KEY)


def cells(value: Any) -> dict[str | None, Any]:
    """The per-gym cells of a value: ``{None: scalar}`` or ``{None: default, gym: v, ...}``."""
    if isinstance(value, Mapping):
        return {(None if k == DEFAULT_KEY else k): v for k, v in value.items()}
    return {None: value}


def changed_cells(old_raw: Any, new_raw: Any) -> list[tuple[str | None, Any, Any]]:
    """The cells (``None`` = the global/default value, else a gym) whose effective value differs
    between two raw values of a knob: ``[(gym, old, new), ...]``, the default first."""
    old_cells, new_cells = cells(old_raw), cells(new_raw)
    out = []
    for g in sorted(set(old_cells) | set(new_cells), key=lambda x: (x is not None, x or "")):
        old_v = resolve(old_raw, g) if g is not None else old_cells.get(None)
        new_v = resolve(new_raw, g) if g is not None else new_cells.get(None)
        if old_v != new_v:
            out.append((g, old_v, new_v))
    return out


@dataclass(frozen=True)
class KnobSnapshot:
    """Knob values and rule files in force.

    values: ``{area: {knob: raw value (global or per-gym form)}}``.
    user_rules: ``{gym: parsed knobs/rules/users/<gym>.yaml}``.
    reward_rules: ``{file stem: parsed knobs/rules/rewards/<stem>.yaml}``.
    version: increases every time the store applies a change (cheap change detection).
    plugins: override point -> the plug-in in force for it (``{"plugin", "sha", "file", "source"}``,
    harness.plugins); empty: every point runs its default.
    """

    values: Mapping[str, Mapping[str, Any]]
    user_rules: Mapping[str, Any] = field(default_factory=dict)
    reward_rules: Mapping[str, Any] = field(default_factory=dict)
    version: int = 0
    plugins: Mapping[str, Any] = field(default_factory=dict)

    def get(self, area: str, name: str, gym: str | None = None) -> Any:
        """Resolved value of ``<area>.<name>`` for ``gym``; KeyError names the knob when unknown."""
        try:
            raw = self.values[area][name]
        except KeyError:
            raise KeyError(f"unknown knob {area}.{name}") from None
        return copy.deepcopy(resolve(raw, gym))

    def area(self, area: str, gym: str | None = None) -> dict[str, Any]:
        """All knobs of an area resolved for ``gym`` as a plain dict."""
        return {name: copy.deepcopy(resolve(raw, gym)) for name, raw in self.values.get(area, {}).items()}

    def user_rules_for(self, gym: str) -> Any:
        """Parsed symbolic-user rule file of ``gym`` (None when the gym has none)."""
        return copy.deepcopy(self.user_rules.get(gym))

    def reward_rule_files(self) -> dict[str, Any]:
        """Parsed reward rule files by file stem, in name order."""
        return {k: copy.deepcopy(self.reward_rules[k]) for k in sorted(self.reward_rules)}

    @classmethod
    def read_dir(cls, knobs_dir: str | Path) -> KnobSnapshot:
        """Read a knobs folder without validation (tests, tools; bounded YAML 1.2 reads, as the store's).
        Training uses the validating store."""
        root = Path(knobs_dir)
        values = {}
        for area in AREAS:
            path = root / f"{area}.yaml"
            values[area] = (yamlio.load_plain(path) or {}) if path.exists() else {}
        users = {p.stem: yamlio.load_plain(p) for p in sorted((root / "rules" / "users").glob("*.yaml"))}
        rewards = {p.stem: yamlio.load_plain(p) for p in sorted((root / "rules" / "rewards").glob("*.yaml"))}
        return cls(values=values, user_rules=users, reward_rules=rewards)
