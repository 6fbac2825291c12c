"""Checks of rule files beyond their JSON Schema (known predicate names, regexes that compile, ...).

The rooms that read the rule files define what a valid rule is, so they register the check here
(``harness.users`` for ``rules/users/<gym>.yaml``, ``harness.rewards`` for ``rules/rewards/*.yaml``)
and the knob store calls it without importing them. A store asked to check a rule kind nobody
registered fails loudly rather than accepting the file unchecked.

A check raises ValueError/KeyError/TypeError naming the problem; an exception with a ``path``
attribute (keys and indexes into the file, e.g. ``("rules", 2, "name")``) lets the store name the
line. A *set* check sees the other files of the kind in force too (reward rule names are unique
across files), so a clash is refused at the gate rather than at the next reset.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

# kind (users | rewards) -> check(key, value)
_CHECKS: dict[str, Callable[[str, Any], None]] = {}
# kind -> check(key, value, {other key: value in force})
_SET_CHECKS: dict[str, Callable[[str, Any, Mapping[str, Any]], None]] = {}
PROVIDERS = {"users": "harness.users", "rewards": "harness.rewards"}


def register_rule_check(
    kind: str, check: Callable[[str, Any], None], set_check: Callable[[str, Any, Mapping[str, Any]], None] | None = None
) -> None:
    """Make ``check(key, value)`` the semantic check of ``rules/<kind>/<key>.yaml``, and
    ``set_check(key, value, others)`` its check against the kind's other files."""
    _CHECKS[kind] = check
    if set_check is not None:
        _SET_CHECKS[kind] = set_check


def rule_problem(
    kind: str, key: str, value: Any, others: Mapping[str, Any] | None = None
) -> tuple[str, tuple[Any, ...]] | None:
    """The registered checks' message for a rule file and the path of the offending node (``()``:
    the file as a whole), or None when it passes. ``others``: the kind's other files in force."""
    check = _CHECKS.get(kind)
    if check is None:
        raise RuntimeError(
            f"no check is registered for rules/{kind}: import {PROVIDERS.get(kind, kind)} before "
            "loading a knobs folder (the eau command and the trainer do)"
        )
    try:
        check(key, value)
        set_check = _SET_CHECKS.get(kind)
        if set_check is not None and others:
            set_check(key, value, others)
    except (ValueError, KeyError, TypeError) as exc:
        return str(exc).strip("'\""), tuple(getattr(exc, "path", ()) or ())
    return None
