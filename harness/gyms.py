"""The gyms the harness knows by name: the built-in ones (name -> module, imported on demand by
``harness.envs.registry``) and any a program registers. Kept at the bottom of the package so that
the rooms below the gyms (rewards, users) can check a gym name without importing a gym."""

from __future__ import annotations

BUILTIN_GYMS = {
    "travel": "harness.envs.travel",
    "function": "harness.envs.function",
    "telepathy": "harness.envs.telepathy",
    "intention": "harness.envs.intention",
    "persuade": "harness.envs.persuade",
    "colbench": "harness.envs.colbench",
    "turtle": "harness.envs.turtle",
    "tau": "harness.envs.tau",
    "tau2_airline": "harness.envs.tau2",
    "tau2_retail": "harness.envs.tau2",
    "tau2_telecom": "harness.envs.tau2",
}

_registered: set[str] = set()


def add_gym_name(name: str) -> None:
    """Record a gym registered at run time (``harness.envs.registry.register`` calls this)."""
    _registered.add(name)


def gym_names() -> list[str]:
    """Every gym name: built in and registered, sorted."""
    return sorted(set(BUILTIN_GYMS) | _registered)
