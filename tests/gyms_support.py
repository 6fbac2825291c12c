"""Helpers shared by the ``test_gyms_*`` tests: knob snapshots with overrides, env construction."""

from __future__ import annotations

import copy
from typing import Any

from harness.envs.base import UserCentricEnv
from harness.envs.registry import make
from harness.knobs.folder import defaults_dir
from harness.knobs.snapshot import KnobSnapshot

_BASE: KnobSnapshot | None = None


def knobs(
    env: dict[str, Any] | None = None, user: dict[str, Any] | None = None, reward: dict[str, Any] | None = None
) -> KnobSnapshot:
    """The repository's knobs with some values replaced (global values, for every gym)."""
    global _BASE
    if _BASE is None:
        _BASE = KnobSnapshot.read_dir(defaults_dir())
    values = copy.deepcopy({k: dict(v) for k, v in _BASE.values.items()})
    for area, over in (("env", env), ("user", user), ("reward", reward)):
        values[area].update(over or {})
    return KnobSnapshot(values=values, user_rules=_BASE.user_rules, reward_rules=_BASE.reward_rules)


def env_of(gym: str, *, rendering: str = "tagged", split: str = "train", **areas: dict[str, Any]) -> UserCentricEnv:
    """Gym ``gym`` with the symbolic user and the repository knobs (plus overrides per area)."""
    return make(gym, knobs=knobs(**areas), rendering=rendering, split=split)


def step(env: UserCentricEnv, text: str):
    """One step; returns (observation, the turn record object, info)."""
    obs, _, _, _, info = env.step(text)
    return obs, env.state.turns[-1], info
