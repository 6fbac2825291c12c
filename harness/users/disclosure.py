"""What a user may disclose, shared by both arms: the user knobs turned into one policy object.

* ``reveal_kinds``: only facts of these kinds are ever disclosed (and only they enter the LLM
  user's prompt). Facts whose own text would leak the secret are dropped as well.
* ``facts_per_reply``: most facts in one reply.
* ``match_threshold``: least similarity (``harness.users.matching``) for a fact to be a candidate.
* ``max_reveals``: most disclosures in an episode. ``EpisodeState.disclosures`` counts every
  disclosure, repeats of an already revealed fact included, so a repeat spends budget too.
* ``volunteer_interval``: after this many agent turns in a row without a disclosure, the user
  volunteers one allowed fact not yet revealed (0 never volunteers).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from harness.types import EpisodeState, Fact, Task
from harness.users.leakguard import LeakGuard
from harness.users.matching import rank_facts

USER_KNOBS = ("facts_per_reply", "match_threshold", "volunteer_interval", "max_reveals", "reveal_kinds", "persona")


def _knob(
    knobs: Mapping[str, Any], name: str, kind: type | tuple[type, ...], lo: float | None = None, hi: float | None = None
) -> Any:
    if name not in knobs:
        raise ValueError(f"user knob {name!r} is missing (knobs/user.yaml); the user needs: {', '.join(USER_KNOBS)}")
    v = knobs[name]
    if isinstance(v, bool) or not isinstance(v, kind) or (lo is not None and v < lo) or (hi is not None and v > hi):
        rng = f" in [{lo}, {hi}]" if lo is not None else ""
        raise ValueError(f"user knob {name}={v!r} is invalid; expected {getattr(kind, '__name__', kind)}{rng}")
    return v


@dataclass
class DisclosurePolicy:
    """The disclosure limits of one episode, read from the resolved user knobs at reset."""

    reveal_kinds: frozenset[str]
    facts_per_reply: int
    match_threshold: float
    max_reveals: int
    volunteer_interval: int

    @classmethod
    def from_knobs(cls, knobs: Mapping[str, Any]) -> DisclosurePolicy:
        kinds = knobs.get("reveal_kinds")
        if not isinstance(kinds, (list, tuple)) or not all(isinstance(k, str) for k in kinds):
            raise ValueError(f"user knob reveal_kinds={kinds!r} is invalid; expected a list of fact kinds")
        return cls(
            reveal_kinds=frozenset(kinds),
            facts_per_reply=int(_knob(knobs, "facts_per_reply", int, 1, 3)),
            match_threshold=float(_knob(knobs, "match_threshold", (int, float), 0.0, 1.0)),
            max_reveals=int(_knob(knobs, "max_reveals", int, 0, None)),
            volunteer_interval=int(_knob(knobs, "volunteer_interval", int, 0, None)),
        )

    def allowed(self, facts: Sequence[Fact], guard: LeakGuard | None = None) -> list[Fact]:
        """Facts of an allowed kind whose text does not itself leak the secret."""
        return [f for f in facts if f.kind in self.reveal_kinds and not (guard and guard.leaks(f.text))]

    def remaining(self, state: EpisodeState) -> int:
        """Disclosures left in this episode (repeats count)."""
        return max(0, self.max_reveals - state.disclosures)

    def matched(
        self, question: str, facts: Sequence[Fact], dynamic: list[Fact] | None, guard: LeakGuard | None
    ) -> list[tuple[Fact, float]]:
        """Candidate facts for ``question`` with their scores, best first, filtered by kind and leak check.

        dynamic: the gym's facts computed from the question; when not None they replace matching of
        the static facts (score 1.0 each; the threshold does not apply to them)."""
        if dynamic is not None:
            return [(f, 1.0) for f in self.allowed(dynamic, guard)]
        ranked = rank_facts(question, facts, self.match_threshold)
        keep = {id(f) for f in self.allowed([f for f, _ in ranked], guard)}
        return [(f, s) for f, s in ranked if id(f) in keep]

    def pick(self, candidates: Sequence[tuple[Fact, float]], state: EpisodeState) -> list[Fact]:
        """At most ``facts_per_reply`` candidates within the remaining budget: best score first and,
        among equal scores, facts not yet revealed before repeats (then candidate order)."""
        order = sorted(
            range(len(candidates)), key=lambda i: (-candidates[i][1], candidates[i][0].key in state.revealed, i)
        )
        n = min(self.facts_per_reply, self.remaining(state))
        return [candidates[i][0] for i in order[:n]]

    def next_unrevealed(self, facts: Sequence[Fact], state: EpisodeState, guard: LeakGuard | None) -> Fact | None:
        """The most important allowed fact not yet revealed (task order breaks ties)."""
        pool = [f for f in self.allowed(facts, guard) if f.key not in state.revealed]
        return min(pool, key=lambda f: f.importance) if pool else None

    def volunteer_due(self, state: EpisodeState, disclosed_this_turn: bool) -> bool:
        """Whether ``volunteer_interval`` turns in a row (this one included) passed without a disclosure.

        Called after the turn's reply was accounted but before the env counts this turn in
        ``turns_since_disclosure``; a turn that disclosed (a repeat included) resets the streak."""
        if self.volunteer_interval <= 0 or disclosed_this_turn or self.remaining(state) <= 0:
            return False
        return state.turns_since_disclosure + 1 >= self.volunteer_interval


def task_guard(task: Task) -> LeakGuard:
    """The leak guard of ``task``: its secret, with the prompt as the public text. A gym whose
    secret is prose sets a shorter token span in ``task.data["leak_span_tokens"]`` (turtle: 6)."""
    span = task.data.get("leak_span_tokens")
    if span is None:
        return LeakGuard(task.secret, public=task.prompt)
    return LeakGuard(task.secret, public=task.prompt, max_span_tokens=int(span))
