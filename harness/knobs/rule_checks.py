"""Checks of rule files beyond their JSON Schema (known predicate names, regexes that compile, ...).

The rooms that read the rule files define what a valid rule is, so they register the check here
(``harness.users`` for ``rules/users/<gym>.yaml``, ``harness.rewards`` for ``rules/rewards/*.yaml``)
and the knob store calls it without importing them. A store asked to check a rule kind nobody
registered fails loudly rather than accepting the file unchecked.
"""

from __future__ import annotations

from typing import Any, Callable

# kind (users | rewards) -> check(key, value): raises ValueError/KeyError/TypeError naming the problem
_CHECKS: dict[str, Callable[[str, Any], None]] = {}
PROVIDERS = {"users": "harness.users", "rewards": "harness.rewards"}


def register_rule_check(kind: str, check: Callable[[str, Any], None]) -> None:
    """Make ``check(key, value)`` the semantic check of ``rules/<kind>/<key>.yaml``."""
    _CHECKS[kind] = check


def rule_problem(kind: str, key: str, value: Any) -> str | None:
    """The registered check's message for a rule file, or None when it passes."""
    check = _CHECKS.get(kind)
    if check is None:
        raise RuntimeError(f"no check is registered for rules/{kind}: import {PROVIDERS.get(kind, kind)} before "
                           "loading a knobs folder (the eau command and the trainer do)")
    try:
        check(key, value)
    except (ValueError, KeyError, TypeError) as exc:
        return str(exc).strip("'\"")
    return None
