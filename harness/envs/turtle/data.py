"""The turtle stories shipped with the package (``data/``, from UserRL, Apache-2.0: see
``data/SOURCE.md`` and ``data/LICENSE.txt``) and their splits.

``stories.json``: ``{id: {title, surface, bottom, criteria: [{statement, weight}]}}``;
``splits.json``: UserRL's split, ``{train: [ids], test: [ids]}``. The gym's ``train`` split is
UserRL's train and its ``eval`` split UserRL's test, so results compare with UserRL's.

A story whose surface is an author credit or a few characters ("Author:", "Adapted by: ...") has no
puzzle to solve; :func:`broken_reason` names it and the gym never draws such a story (``eau tasks
check turtle`` lists them).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

DATA_DIR = Path(__file__).resolve().parent / "data"
STORIES_FILE = DATA_DIR / "stories.json"
SPLITS_FILE = DATA_DIR / "splits.json"
SPLIT_NAMES = {"train": "train", "eval": "test"}  # gym split -> UserRL split
MIN_SURFACE_CHARS = 20  # shorter surfaces ("It's too dark.") are fragments, not puzzles
WEIGHT_TOLERANCE = 1e-6
_CREDIT_RE = re.compile(r"^\s*(author|adapted by|adaptation|source)\b[^:]{0,20}:", re.IGNORECASE)


class StoryDataError(ValueError):
    """The story or split file is malformed; the message names the file, the story and the field."""


@dataclass(frozen=True)
class Criterion:
    """One evaluation criterion: a statement the proposed story must cover, and its weight."""

    statement: str
    weight: float


@dataclass(frozen=True)
class Story:
    """One turtle-soup puzzle.

    story_id: UserRL's id. surface: what the agent sees. bottom: the hidden story (the answer).
    criteria: what a proposed story is scored on; their weights sum to 1.
    """

    story_id: str
    title: str
    surface: str
    bottom: str
    criteria: tuple[Criterion, ...]


def broken_reason(story: Story) -> str | None:
    """Why ``story`` cannot be played (its surface is no puzzle), or None."""
    if _CREDIT_RE.match(story.surface):
        return f"surface is an author credit ({story.surface.strip()!r})"
    if len(story.surface.strip()) < MIN_SURFACE_CHARS:
        return f"surface is a fragment of {len(story.surface.strip())} characters ({story.surface.strip()!r})"
    return None


def _text(path: Path, sid: str, raw: dict[str, Any], field: str) -> str:
    value = raw.get(field)
    if not isinstance(value, str) or not value.strip():
        raise StoryDataError(f"{path}: story {sid!r}: field {field!r} must be a non-empty string, got {value!r}")
    return value


def parse_story(path: Path, sid: str, raw: Any) -> Story:
    """One story record, checked field by field."""
    if not isinstance(raw, dict):
        raise StoryDataError(f"{path}: story {sid!r} must be an object, got {type(raw).__name__}")
    crit_raw = raw.get("criteria")
    if not isinstance(crit_raw, list) or not crit_raw:
        raise StoryDataError(f"{path}: story {sid!r}: field 'criteria' must be a non-empty list, got {crit_raw!r}")
    criteria = []
    for i, c in enumerate(crit_raw):
        if not isinstance(c, dict) or not isinstance(c.get("statement"), str) or not c["statement"].strip():
            raise StoryDataError(f"{path}: story {sid!r}: criteria[{i}].statement must be a non-empty string")
        w = c.get("weight")
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not 0.0 < w <= 1.0:
            raise StoryDataError(f"{path}: story {sid!r}: criteria[{i}].weight = {w!r} must be a number in (0, 1]")
        criteria.append(Criterion(c["statement"], float(w)))
    total = sum(c.weight for c in criteria)
    if abs(total - 1.0) > WEIGHT_TOLERANCE:
        raise StoryDataError(f"{path}: story {sid!r}: criteria weights sum to {total}, not 1")
    return Story(
        sid,
        _text(path, sid, raw, "title"),
        _text(path, sid, raw, "surface"),
        _text(path, sid, raw, "bottom"),
        tuple(criteria),
    )


def load_stories(path: Path = STORIES_FILE) -> dict[str, Story]:
    """Every story of ``path``, by id."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise StoryDataError(f"{path}: cannot read the story file: {exc}") from None
    if not isinstance(data, dict) or not data:
        raise StoryDataError(f"{path}: the top level must be a non-empty object of stories by id")
    return {sid: parse_story(path, sid, raw) for sid, raw in data.items()}


def load_splits(path: Path, stories: dict[str, Story]) -> dict[str, tuple[str, ...]]:
    """UserRL's split of ``stories``: ``{"train": ids, "test": ids}``, checked to be disjoint and known."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise StoryDataError(f"{path}: cannot read the split file: {exc}") from None
    out: dict[str, tuple[str, ...]] = {}
    for name in SPLIT_NAMES.values():
        ids = data.get(name) if isinstance(data, dict) else None
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise StoryDataError(f"{path}: field {name!r} must be a list of story ids, got {ids!r}"[:300])
        unknown = [i for i in ids if i not in stories]
        if unknown:
            raise StoryDataError(f"{path}: field {name!r} names unknown story id(s): {', '.join(unknown[:5])}")
        out[name] = tuple(ids)
    shared = set(out["train"]) & set(out["test"])
    if shared:
        raise StoryDataError(f"{path}: story id(s) in both train and test: {', '.join(sorted(shared)[:5])}")
    return out


@dataclass(frozen=True)
class TurtleData:
    """The stories and their splits.

    source: gym split ("train"/"eval") -> UserRL's ids, broken stories included (file order).
    splits: gym split -> the playable ids (broken ones left out), in file order.
    broken: story id -> why it is left out.
    """

    stories: dict[str, Story]
    source: dict[str, tuple[str, ...]]
    splits: dict[str, tuple[str, ...]]
    broken: dict[str, str]

    def split_of(self, story_id: str) -> str:
        """The gym split holding ``story_id`` (broken stories included)."""
        for gym_split, ids in self.source.items():
            if story_id in ids:
                return gym_split
        raise KeyError(f"story {story_id!r} is in no split")


@lru_cache(maxsize=1)
def load_turtle() -> TurtleData:
    """The shipped stories and splits (read once per process)."""
    stories = load_stories()
    by_source = load_splits(SPLITS_FILE, stories)
    source = {g: by_source[src] for g, src in SPLIT_NAMES.items()}
    broken = {sid: r for sid, s in stories.items() if (r := broken_reason(s)) is not None}
    splits = {g: tuple(i for i in ids if i not in broken) for g, ids in source.items()}
    return TurtleData(stories, source, splits, broken)
