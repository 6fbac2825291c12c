"""Gym registry: ``make("travel", knobs=..., ...)`` builds a gym by name.

Built-in gyms register themselves when their module is imported; ``harness.gyms.BUILTIN_GYMS`` lists
the modules so that ``make`` works without importing them first. A new gym: subclass
``harness.envs.base.UserCentricEnv``, decorate it with ``@register``, and add its module to
``BUILTIN_GYMS`` (or import it before calling ``make``).
"""

from __future__ import annotations

import importlib
from typing import Any

from harness.envs.base import UserCentricEnv
from harness.gyms import BUILTIN_GYMS, add_gym_name, gym_names

_REGISTRY: dict[str, type[UserCentricEnv]] = {}


def register(cls: type[UserCentricEnv]) -> type[UserCentricEnv]:
    """Class decorator: register a gym under ``cls.name``."""
    if not cls.name:
        raise ValueError(f"{cls.__qualname__} has no name")
    _REGISTRY[cls.name] = cls
    add_gym_name(cls.name)
    return cls


def gym_class(name: str) -> type[UserCentricEnv]:
    if name not in _REGISTRY and name in BUILTIN_GYMS:
        importlib.import_module(BUILTIN_GYMS[name])
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown gym {name!r}; known gyms: {', '.join(names())}") from None


def make(name: str, **kwargs: Any) -> UserCentricEnv:
    """Build gym ``name``; keyword arguments go to its constructor."""
    return gym_class(name)(**kwargs)


def names() -> list[str]:
    return gym_names()
