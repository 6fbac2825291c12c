"""The symbolic user: deterministic (given the seed) replies from the gym's YAML rules.

One reply:

1. classify the agent's question into an intent (``knobs/rules/users/<gym>.yaml``, first match wins);
2. an intent with ``disclosure: none`` answers with one of its templates and discloses nothing;
3. otherwise, when ``max_reveals`` disclosures were already made (repeats count) it declines;
4. a gym whose dynamic facts say it cannot settle the question (a fact of kind ``UNDECIDED``) gets
   the rule file's ``undecided`` reply and nothing is disclosed;
5. else it collects candidates — the gym's dynamic facts for the question if the gym computes them,
   else the task's facts scoring >= ``match_threshold`` (``matching.py``); ``next`` intents take the
   most important allowed fact not yet revealed — keeps only kinds in ``reveal_kinds``, and
   discloses the best ``facts_per_reply`` of them within the remaining budget;
6. the reply is a template with the fact texts in its ``{facts}`` slot, in the persona's phrasing;
7. the leak guard checks the final text (it is built only from templates and fact texts, and facts
   whose text leaks are never candidates, so this should never fire; it is the last line of defence).
"""

from __future__ import annotations

from typing import Any

from harness.types import UNDECIDED, EpisodeState, UserReply
from harness.users.base import SimulatedUser


class SymbolicUser(SimulatedUser):
    """Rule-based user; see the module docstring for how a reply is built."""

    arm = "symbolic"

    def reply(self, question: str, state: EpisodeState) -> UserReply:
        task, policy, guard, _ = self._ready()
        intent = self.rules.classify(question)
        flags: dict[str, Any] = {"intent": intent.name, "arm": self.arm}
        if intent.disclosure == "none":
            return self.guarded(UserReply(self.fill(self.choose(intent.replies), []), [], flags))
        if policy.remaining(state) <= 0:
            return self.guarded(self.declined(flags))
        candidates = []
        if intent.disclosure in ("matched", "matched_or_next"):
            dynamic = self.dynamic_facts(question) if self.dynamic_facts is not None else None
            if dynamic and all(f.kind == UNDECIDED for f in dynamic):
                flags["undecided"] = True
                return self.guarded(UserReply(self.fill(self.choose(self.rules.undecided), []), [], flags))
            candidates = policy.matched(question, task.facts, dynamic, guard)
        if not candidates and intent.disclosure in ("next", "matched_or_next"):
            nxt = policy.next_unrevealed(task.facts, state, guard)
            candidates = [(nxt, 1.0)] if nxt is not None else []
        facts = policy.pick(candidates, state)
        if not facts:
            flags["no_match"] = True
            return self.guarded(UserReply(self.fill(self.choose(self.rules.no_match), []), [], flags))
        reply = self.guarded(UserReply(self.fill(self.choose(intent.replies), facts), facts, flags))
        return self.note_disclosure(state, reply)
