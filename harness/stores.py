"""Knob stores as the program opens them: with the rule-file checks of the rooms that read the rule
files (``harness.users`` for ``rules/users/<gym>.yaml``, ``harness.rewards`` for ``rules/rewards/*``).

The knob store sits below those rooms, so it cannot know their checks; this module, above both, is
where they are handed in. Every command, the trainer, the benchmarks and the tests open stores here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness import rewards, users
from harness.knobs.checks import RuleCheck
from harness.knobs.store import KnobError, KnobStore

RULE_CHECKS = {
    "users": RuleCheck(lambda gym, value: users.validate_rule_file(value, gym=gym)),
    "rewards": RuleCheck(lambda _stem, value: rewards.validate_rule_file(value), rewards.check_unique_names),
}


def open_store(knobs_dir: str | Path, **kw: Any) -> KnobStore:
    """A :class:`KnobStore` on ``knobs_dir`` with the program's rule-file checks (``kw``: its options)."""
    return KnobStore(knobs_dir, rule_checks=RULE_CHECKS, **kw)


def validate_folder(knobs_dir: str | Path) -> list[dict[str, Any]]:
    """Every problem of a knobs folder (empty when valid); never raises for file contents."""
    try:
        open_store(knobs_dir, events_path=None)
    except KnobError as exc:
        return exc.problems
    return []
