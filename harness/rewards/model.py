"""Per-turn reward: task reward + rule rewards + weighted built-in predicates, scaled and clipped.

For one turn of gym ``g`` (reward knobs already resolved for ``g``)::

    raw    = task_reward + sum(rule.value for rules of g whose predicate holds)
             + predicate_weight * sum(builtin values)
    scale  = default_scale * per_gym_scale
    total  = clip(raw * scale, turn_reward_clip[0], turn_reward_clip[1])

The breakdown returned by :meth:`RewardModel.score_turn` is stored on the turn, so the trajectory
shows which rule paid what.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Mapping

from harness.rewards.rules import RewardRule, RewardRuleError, compile_rule_files
from harness.types import EpisodeState, TurnRecord


def _number(knobs: Mapping[str, Any], name: str, default: float | None = None) -> float:
    v = knobs.get(name, default)
    if v is None:
        raise RewardRuleError(f"reward knob {name!r} is missing (knobs/reward.yaml)")
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise RewardRuleError(f"reward knob {name}={v!r} must be a number")
    return float(v)


def _clip_bounds(knobs: Mapping[str, Any]) -> tuple[float, float]:
    clip = knobs.get("turn_reward_clip")
    if (
        not isinstance(clip, (list, tuple))
        or len(clip) != 2
        or not all(isinstance(c, (int, float)) and not isinstance(c, bool) for c in clip)
        or clip[0] >= clip[1]
    ):
        raise RewardRuleError(f"reward knob turn_reward_clip={clip!r} must be [low, high] with low < high")
    return float(clip[0]), float(clip[1])


class RewardModel:
    """Scores turns with the reward rules in force (see the module docstring for the formula)."""

    def __init__(self) -> None:
        self.rules: tuple[RewardRule, ...] = ()
        self._key: str | None = None
        self._cache: dict[str, tuple[RewardRule, ...]] = {}

    def set_rules(self, rule_files: Mapping[str, Any]) -> None:
        """Install ``{file stem: parsed yaml}`` (the snapshot's reward rule files). Called at every
        reset: compiled rules are cached by content, so unchanged files cost one hash."""
        key = hashlib.sha256(json.dumps(rule_files, sort_keys=True, default=str).encode()).hexdigest()
        if key == self._key:
            return
        rules = self._cache.get(key)
        if rules is None:
            rules = compile_rule_files(rule_files)
            if len(self._cache) > 64:
                self._cache.clear()
            self._cache[key] = rules
        self.rules, self._key = rules, key

    def score_turn(
        self,
        gym: str,
        record: TurnRecord,
        state: EpisodeState,
        task_reward: float,
        knobs: Mapping[str, Any],
        builtin: Mapping[str, float] | None = None,
    ) -> dict[str, Any]:
        """The reward of one turn and its breakdown.

        Returns ``{"total", "raw", "task", "rules": {rule: value}, "builtin": {name: weighted value},
        "scale", "clipped", "clip"}``; only rules whose predicate held appear in ``rules``."""
        fired = {r.name: r.value for r in self.rules if r.applies_to(gym) and r.predicate(record, state, r.params)}
        weight = _number(knobs, "predicate_weight", 0.0)
        weighted = {k: weight * float(v) for k, v in (builtin or {}).items()}
        raw = float(task_reward) + sum(fired.values()) + sum(weighted.values())
        scale = _number(knobs, "default_scale") * _number(knobs, "per_gym_scale", 1.0)
        lo, hi = _clip_bounds(knobs)
        scaled = raw * scale
        total = min(hi, max(lo, scaled))
        return {
            "total": total,
            "raw": raw,
            "task": float(task_reward),
            "rules": fired,
            "builtin": weighted,
            "scale": scale,
            "clipped": total != scaled,
            "clip": [lo, hi],
        }
