"""``eau tasks check turtle``: the shipped stories are playable and their scoring is sound.

Per story: it loads (every field checked: ``data.parse_story``); a story with a broken surface is
listed as excluded, with the reason, and never drawn; for every playable story the bottom itself,
proposed as the answer, must score at least ``ORACLE_MIN`` (the solution solves its puzzle), the
surface alone must score 0 (restating the puzzle is no solution), and scoring the same text twice
gives the same score. Criteria that share no word with the story are scored on the bottom's most
specific words instead (``judge.FALLBACK_ANCHORS``); they are counted, not failed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness.envs.turtle import score_story, story_index
from harness.envs.turtle.data import load_turtle

ORACLE_MIN = 0.95


@dataclass
class TurtleCheck:
    """The result of checking every shipped story."""

    total: int = 0
    playable: int = 0
    passed: int = 0
    excluded: dict[str, str] = field(default_factory=dict)  # story id -> why it is not drawn
    failures: list[dict[str, Any]] = field(default_factory=list)  # {story, split, reason}
    fallback_criteria: int = 0
    splits: dict[str, int] = field(default_factory=dict)  # gym split -> playable stories

    def to_dict(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "playable": self.playable,
            "passed": self.passed,
            "failed": len(self.failures),
            "failures": self.failures,
            "excluded": self.excluded,
            "fallback_criteria": self.fallback_criteria,
            "splits": self.splits,
        }


def story_problem(story_id: str) -> str | None:
    """Why a playable story fails the check, or None."""
    story = load_turtle().stories[story_id]
    oracle = score_story(story_id, story.bottom)
    if oracle.total < ORACLE_MIN:
        return f"the bottom scores {oracle.total:.2f} < {ORACLE_MIN} (credits {list(oracle.credits)})"
    if score_story(story_id, story.bottom).total != oracle.total:
        return "scoring the bottom twice gave different scores"
    surface = score_story(story_id, story.surface).total
    if surface > 0:
        return f"the surface alone scores {surface:.2f} > 0"
    return None


def check_turtle(limit: int | None = None) -> TurtleCheck:
    """Check the first ``limit`` stories (all by default), in file order."""
    data = load_turtle()
    ids = list(data.stories)[:limit] if limit is not None else list(data.stories)
    out = TurtleCheck(total=len(ids), splits={k: len(v) for k, v in data.splits.items()})
    for sid in ids:
        if sid in data.broken:
            out.excluded[sid] = data.broken[sid]
            continue
        out.playable += 1
        index = story_index(sid)
        out.fallback_criteria += sum(a.source == "fallback" for a in index.anchors)
        problem = story_problem(sid)
        if problem is None:
            out.passed += 1
        else:
            out.failures.append({"story": sid, "split": data.split_of(sid), "reason": problem})
    return out
