"""Regenerating the task of a recorded episode (for its hidden answer and for replays).

A trajectory records ``task.facts`` but not ``task.secret`` (the hidden answer must not sit next to
transcripts a meta-agent reads). Tasks are deterministic functions of ``(gym, split, index)`` and,
for some gyms, env knobs (travel's option counts), so the analysis rebuilds the task from the gym
registry with the index and the episode's recorded env knobs, and accepts it only when the rebuilt
``task_id`` equals the recorded one. The index comes from the record's ``task_index`` field or its
``group`` (``<gym>/<split>/<index>``, the trainer's grouping key).
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from harness.envs.registry import make
from harness.knobs.snapshot import KnobSnapshot
from harness.types import Task

_CACHE: dict[str, tuple[Task | None, str | None]] = {}
_CACHE_MAX = 4096  # tasks kept across calls (a window holds a few hundred distinct tasks)


def task_index(record: Mapping[str, Any]) -> tuple[str, int] | None:
    """``(split, index)`` of a recorded episode's task, or None when the record does not say."""
    task = record.get("task") or {}
    idx = record.get("task_index")
    if isinstance(idx, int) and not isinstance(idx, bool):
        return str(task.get("split") or "train"), idx
    group = record.get("group")
    if isinstance(group, str):
        parts = group.split("/")
        if len(parts) == 3 and parts[2].lstrip("-").isdigit():
            return parts[1], int(parts[2])
    return None


def record_snapshot(
    record: Mapping[str, Any],
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
    user_rules: Mapping[str, Any] | None = None,
    reward_rules: Mapping[str, Any] | None = None,
) -> KnobSnapshot:
    """A knob snapshot holding the episode's recorded (resolved) knobs, with ``overrides`` per area."""
    rec = record.get("knobs") or {}
    values = {area: dict(rec.get(area) or {}) for area in ("env", "user", "reward", "agent")}
    for area, over in (overrides or {}).items():
        values.setdefault(area, {}).update(over)
    return KnobSnapshot(values=values, user_rules=dict(user_rules or {}), reward_rules=dict(reward_rules or {}))


def regenerate(record: Mapping[str, Any]) -> tuple[Task | None, str | None]:
    """The recorded episode's task rebuilt from the gym registry, or ``(None, why not)``."""
    gym = record.get("gym")
    task = record.get("task") or {}
    where = task_index(record)
    if not gym or where is None:
        return None, "the record has no task index (no task_index field and no <gym>/<split>/<index> group)"
    env_knobs = (record.get("knobs") or {}).get("env") or {}
    key = json.dumps([gym, where, env_knobs], sort_keys=True, default=str)
    if key in _CACHE:
        got, why = _CACHE[key]
    else:
        try:
            env = make(str(gym), knobs=record_snapshot(record))
            env.env_knobs = dict(env_knobs)  # generate_task of some gyms reads env knobs (set at reset)
            got, why = env.generate_task(where[0], where[1]), None
        except (KeyError, ValueError, TypeError) as exc:
            got, why = None, f"cannot rebuild the task: {exc}"
        if len(_CACHE) >= _CACHE_MAX:
            _CACHE.clear()
        _CACHE[key] = (got, why)
    if got is not None and task.get("task_id") and got.task_id != task.get("task_id"):
        return None, f"the rebuilt task id {got.task_id} differs from the recorded {task.get('task_id')}"
    return got, why
