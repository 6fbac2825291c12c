"""What both user arms share: episode setup, budget and volunteering, persona and leak guard.

The gym (``harness.envs.base.UserCentricEnv``) calls ``reset`` once per episode, ``reply`` for every
ask, and ``volunteer`` after every non-answer turn that disclosed nothing new. The env does the
counting (``EpisodeState.revealed``, ``disclosures``) from ``UserReply.revealed``; a user only
decides what to disclose.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Callable, Mapping

import numpy as np

from harness.types import EpisodeState, Fact, Task, UserReply
from harness.users.disclosure import DisclosurePolicy, task_guard
from harness.users.leakguard import LeakGuard
from harness.users.personas import Persona, get_persona
from harness.users.rules import UserRules

DynamicFacts = Callable[[str], "list[Fact] | None"]


class SimulatedUser(ABC):
    """Base class of the symbolic and LLM users.

    rules: the gym's compiled rule file (templates for declining, volunteering, redaction).
    dynamic_facts: the gym's ``dynamic_facts(question)`` hook (None: the task's static facts only).
    """

    arm: str = ""

    def __init__(self, rules: UserRules, dynamic_facts: DynamicFacts | None = None):
        self.rules = rules
        self.dynamic_facts = dynamic_facts
        self.task: Task | None = None
        self.policy: DisclosurePolicy | None = None
        self.guard: LeakGuard | None = None
        self.persona: Persona | None = None
        self.user_knobs: dict[str, Any] = {}
        self.env_knobs: dict[str, Any] = {}
        self.rng = np.random.default_rng(0)
        self._last_disclosure_turn = -1

    def reset(
        self, task: Task, user_knobs: Mapping[str, Any], env_knobs: Mapping[str, Any], rng: np.random.Generator
    ) -> None:
        """Start an episode on ``task`` with the knobs in force; ``rng`` seeds the user's draws."""
        self.task = task
        self.user_knobs = dict(user_knobs)
        self.env_knobs = dict(env_knobs)
        self.policy = DisclosurePolicy.from_knobs(user_knobs)
        self.persona = get_persona(str(user_knobs.get("persona", "neutral")), self.rules.personas)
        self.guard = task_guard(task)
        # A child generator: the user's draws never shift the env's own random stream mid-episode.
        self.rng = np.random.default_rng(int(rng.integers(0, 2**63 - 1)))
        self._last_disclosure_turn = -1

    @abstractmethod
    def reply(self, question: str, state: EpisodeState) -> UserReply:
        """Answer the agent's ``question``; ``state`` is the episode so far (this turn not yet counted)."""

    # ------------------------------------------------------------------ shared pieces
    def _ready(self) -> tuple[Task, DisclosurePolicy, LeakGuard, Persona]:
        if self.task is None or self.policy is None or self.guard is None or self.persona is None:
            raise RuntimeError(f"{type(self).__name__}: reply()/volunteer() called before reset()")
        return self.task, self.policy, self.guard, self.persona

    def choose(self, templates: tuple[str, ...] | list[str]) -> str:
        """One template, drawn with the user's seeded generator."""
        return templates[int(self.rng.integers(len(templates)))] if len(templates) > 1 else templates[0]

    def fill(self, template: str, facts: list[Fact]) -> str:
        """A template with its ``{facts}`` slot filled, wrapped in the persona's phrasing."""
        _, _, _, persona = self._ready()
        facts_text = persona.join_facts([f.text for f in facts]) if facts else None
        body = template.replace("{facts}", facts_text or "")
        return persona.style(body, self.rng, facts_text)

    def declined(self, flags: dict[str, Any]) -> UserReply:
        """The polite refusal once ``max_reveals`` disclosures were made."""
        flags["declined"] = "max_reveals"
        return UserReply(self.fill(self.choose(self.rules.budget_exhausted), []), [], flags)

    def guarded(self, reply: UserReply) -> UserReply:
        """The final check of every reply: a reply that leaks the secret is replaced by a refusal
        that discloses nothing, flagged ``leak_redacted`` with the measures that fired."""
        _, _, guard, _ = self._ready()
        report = guard.check(reply.text)
        if not report.leaked:
            return reply
        flags = dict(reply.flags)
        flags["leak_redacted"] = report.to_flag()
        text = self.fill(self.choose(self.rules.redacted), [])
        return UserReply(text, [], flags)

    def note_disclosure(self, state: EpisodeState, reply: UserReply) -> UserReply:
        """Remember that this turn disclosed (for the volunteer streak) and return the reply."""
        if reply.revealed:
            self._last_disclosure_turn = state.turn
        return reply

    def volunteer(self, state: EpisodeState) -> UserReply | None:
        """After ``volunteer_interval`` turns without a disclosure, offer the most important allowed
        fact not yet revealed (both arms phrase it with the rule file's ``volunteer`` templates, so
        the knob means the same on either arm). None when nothing is due or left to offer."""
        task, policy, guard, _ = self._ready()
        # The env calls this after incrementing state.turn: this turn's index is state.turn - 1.
        if not policy.volunteer_due(state, self._last_disclosure_turn == state.turn - 1):
            return None
        fact = policy.next_unrevealed(task.facts, state, guard)
        if fact is None:
            return None
        reply = self.guarded(
            UserReply(
                self.fill(self.choose(self.rules.volunteer), [fact]), [fact], {"intent": "volunteer", "arm": self.arm}
            )
        )
        if reply.revealed:
            self._last_disclosure_turn = state.turn - 1
            return reply
        return None
