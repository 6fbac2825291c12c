"""Checks of rule files beyond their JSON Schema (known predicate names, regexes that compile, ...).

The rooms that read the rule files define what a valid rule is (``harness.users`` for
``rules/users/<gym>.yaml``, ``harness.rewards`` for ``rules/rewards/*.yaml``); whoever assembles the
program hands their checks to the knob store (``harness.stores``), so the store never depends on an
import having happened. A check raises ValueError/KeyError/TypeError naming the problem; an exception
with a ``path`` attribute (keys and indexes into the file, e.g. ``("rules", 2, "name")``) lets the
store name the line. A *set* check sees the other files of the kind in force too (reward rule names
are unique across files), so a clash is refused at the gate rather than at the next reset.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping


@dataclass(frozen=True)
class RuleCheck:
    """The checks of one kind of rule file: ``check(key, value)`` and, optionally,
    ``set_check(key, value, {other key: value in force})``."""

    check: Callable[[str, Any], None]
    set_check: Callable[[str, Any, Mapping[str, Any]], None] | None = None


RuleChecks = Mapping[str, RuleCheck]  # rule kind (users | rewards) -> its checks


def rule_problem(
    check: RuleCheck, key: str, value: Any, others: Mapping[str, Any] | None = None
) -> tuple[str, tuple[Any, ...]] | None:
    """The check's message for a rule file and the path of the offending node (``()``: the file as a
    whole), or None when it passes. ``others``: the kind's other files in force."""
    try:
        check.check(key, value)
        if check.set_check is not None and others:
            check.set_check(key, value, others)
    except (ValueError, KeyError, TypeError) as exc:
        return str(exc).strip("'\""), tuple(getattr(exc, "path", ()) or ())
    return None
