"""A user who holds a claim and can be argued out of it (the persuade gym): the stance scale, the
rule file's ``persuasion`` section, the deterministic judgement of one agent turn, and the
symbolic persuadable user.

The stance is a number of steps away from agreement on the seven-point scale :data:`STANCES`:
0 is "strongly agree" (every episode starts there), 6 "strongly disagree". Every reply of either
arm ends with the stance sentence ``My stance: <label>.`` (:func:`stance_sentence`) and carries
``flags.stance`` (the steps) and ``flags.stance_move``; the gym turns the stance into reward.

The task tells the user what it believes and why (``task.data``): ``claim`` (text) and ``reasons``
(a list of ``{text, keywords, quote}``, cut from the user's own argument by
``harness.envs.persuade.data``). The symbolic user judges a turn (:func:`judge_turn`) in this order:

1. **abusive**: an ``abusive`` cue matches (insults, contempt). Checked first, so a rude rebuttal
   is still rude.
2. a non-fallback **intent** of the rule file (jailbreak, greeting): answered from its templates,
   stance unchanged.
3. **empty**: fewer than ``min_content_terms`` content terms (``matching.terms``: stop words
   dropped), unless a ``why`` cue matches ("Why?" asks something): "", "ok", "hmm, yes".
4. the argument itself. A reason is *addressed* when the turn contains at least
   ``min(min_term_hits, len(keywords))`` of its key words (compared as stemmed terms). A turn has
   the *rebuttal form* when a ``rebuttal`` cue (a contrast marker, a negation or a rebuttal
   phrase: "but", "however", "not", "only", "already", "that ignores") and a ``concrete`` cue (a
   counter-point that can be checked: a number, "for example", a source such as "a study", a cause
   such as "because") both match. Then, first that applies:

   * **rebuttal**: an addressed reason the user still holds, and the rebuttal form, and the turn is
     a new point (its terms are not ``repeat_overlap`` or more covered by a turn that already moved
     the stance). The addressed held reason with the most key-word hits (the earlier on ties) is
     dropped: the user no longer holds it.
   * **repeat**: the rebuttal form, but every addressed reason was already rebutted, or the point
     was already made (the overlap test above).
   * **why**: a ``why`` cue ("why do you think so?"): the user states *one* reason it still holds,
     the first in its argument's order, by its ``quote``; asked again, it restates the same one,
     so asking never lists the reasons.
   * **unsupported**: an addressed held reason without the rebuttal form (an assertion).
   * **repeat** (again): only rebutted reasons addressed, without the rebuttal form.
   * **unconvinced**: on topic (a content term of the claim or of any reason) but none of the above.
   * **off_topic**: no content term of the claim or the argument.

The stance moves by ``moves[outcome]`` (shipped: +1 for a rebuttal, -1 for off-topic, abusive and
empty turns, 0 otherwise), clamped to the scale. The reply is a template of ``replies[outcome]``
(``{point}``: two key words of the addressed reason; ``{reason}``: the quote), in the persona's
phrasing, then the stance sentence. An on-topic turn that moves nothing is answered from the
fallback intent's templates.

Limits, stated plainly: the judge reads words and cues, not logic. On hand-written natural
rebuttals (``tests/data/persuade_rebuttals.yaml``, BENCHMARKS.md) it recognises about 60% for the
right reason (the rest lack two key words or a cue and are answered "unconvinced" or "unsupported")
and moved on none of the bare assertions. A turn that names a reason's key
words, says "but" and cites any number counts as a rebuttal even if its counter-point is false or
irrelevant; a sound rebuttal in words of its own that shares fewer than ``min_term_hits`` key words
with the reason, or that carries no cue, is not recognised. Reasons are cut from the text by
paragraph, so one reason can hold two ideas (rebutting either drops both) and an intro or
conclusion counts as a reason. The overlap test stops restating a point in the same words, not in
new ones, and a turn stuffed with the words of several reasons rebuts one of them per turn.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from harness.types import EpisodeState, Task, UserReply
from harness.users.base import SimulatedUser
from harness.users.matching import terms
from harness.users.rules import CUES, OUTCOMES, REQUIRED_SLOTS, SLOTS, PersuasionRules

STANCES = (
    "strongly agree",
    "agree",
    "somewhat agree",
    "neutral",
    "somewhat disagree",
    "disagree",
    "strongly disagree",
)
TOP = len(STANCES) - 1  # steps from "strongly agree" to "strongly disagree"
__all__ = ["CUES", "OUTCOMES", "REQUIRED_SLOTS", "SLOTS", "PersuasionRules"]  # the rule-file side (rules.py)


def stance_label(steps: int) -> str:
    """The label of ``steps`` away from "strongly agree" (0..6)."""
    return STANCES[max(0, min(TOP, int(steps)))]


def stance_sentence(steps: int) -> str:
    """The sentence every persuade reply ends with."""
    return f"My stance: {stance_label(steps)}."


_LABELS = "|".join(sorted(STANCES, key=len, reverse=True))  # longest first: "somewhat agree" before "agree"
_STANCE_RE = re.compile(r"stance\W{0,3}\s*(?:is\s+|now\s+)?[*_\"']*(" + _LABELS + r")\b", re.I)


_STANCE_STATEMENT = re.compile(
    r"[(\[]?(?:\b(?:my|current|new|updated)\s+)?" + _STANCE_RE.pattern + r"[*_\"'.!)\]]*", re.I
)


def drop_stance_statements(text: str) -> str:
    """``text`` without its stance statements ("Stance: agree", "(My stance: neutral.)"), the rest
    of each line kept; whitespace collapsed. The reply then gets the canonical stance sentence."""
    return " ".join(_STANCE_STATEMENT.sub(" ", text).split())


def parse_stance(text: str) -> int | None:
    """The stance a reply states ("Stance: agree", "My stance: strongly disagree"), the last one
    when it states several; None when it states none. Longer labels are tried first, so
    "somewhat agree" is never read as "agree"."""
    found = _STANCE_RE.findall(text)
    return STANCES.index(found[-1].lower()) if found else None


@dataclass(frozen=True)
class HeldReason:
    """A reason as the user holds it: its key words' stemmed terms precomputed."""

    text: str
    keywords: tuple[str, ...]
    quote: str
    stems: frozenset[str]

    def point(self) -> str:
        """How a reply names this reason: its two first key words."""
        return " and ".join(self.keywords[:2]) if self.keywords else "that"


def held_reasons(task: Task) -> tuple[str, tuple[HeldReason, ...]]:
    """(claim, reasons) from ``task.data``; a clear error naming the task and field when missing."""
    data = task.data or {}
    claim = data.get("claim")
    raw = data.get("reasons")
    if not isinstance(claim, str) or not claim.strip():
        raise ValueError(f"task {task.task_id}: a persuadable user needs task.data['claim'] (text); got {claim!r}")
    if not isinstance(raw, Sequence) or isinstance(raw, str) or not raw:
        raise ValueError(f"task {task.task_id}: a persuadable user needs task.data['reasons'] (a non-empty list)")
    out = []
    for i, r in enumerate(raw):
        if not isinstance(r, Mapping) or not all(
            isinstance(r.get(k), (str, list, tuple)) for k in ("text", "keywords", "quote")
        ):
            raise ValueError(
                f"task {task.task_id}: task.data['reasons'][{i}] needs text, keywords and quote; got {r!r}"
            )
        kws = tuple(str(k) for k in r["keywords"])
        stems = frozenset().union(*(terms(k) for k in kws)) if kws else frozenset()
        out.append(HeldReason(str(r["text"]), kws, str(r["quote"]), stems))
    return claim, tuple(out)


@dataclass(frozen=True)
class Judgement:
    """What one turn does to the user: ``outcome`` (one of OUTCOMES, or ``intent``), the reason it
    addressed (index, None if none) and the turn's content terms."""

    outcome: str
    reason: int | None = None
    turn_terms: frozenset[str] = frozenset()


def is_abusive(text: str, rules: PersuasionRules) -> bool:
    """Step 1: an abusive cue matches."""
    return rules.cue("abusive", text)


def is_empty(text: str, rules: PersuasionRules) -> bool:
    """Step 3: too few content terms to say anything, and not a question for the user's reasons."""
    return len(terms(text)) < rules.min_content_terms and not rules.cue("why", text)


def already_said(turn_terms: frozenset[str], said: Sequence[frozenset[str]], overlap: float) -> bool:
    """Whether an earlier turn that moved the stance covers ``overlap`` or more of these terms."""
    return bool(turn_terms) and any(len(turn_terms & s) / len(turn_terms) >= overlap for s in said)


def judge_argument(
    text: str,
    reasons: Sequence[HeldReason],
    rebutted: set[int],
    said: Sequence[frozenset[str]],
    topic: frozenset[str],
    rules: PersuasionRules,
) -> Judgement:
    """Step 4 of the module docstring, for a turn that is neither abusive nor empty."""
    t = terms(text)
    hits = [len(t & r.stems) for r in reasons]
    addressed = [i for i, r in enumerate(reasons) if r.stems and hits[i] >= min(rules.min_term_hits, len(r.stems))]
    held = [i for i in addressed if i not in rebutted]
    best_held = max(held, key=lambda i: (hits[i], -i)) if held else None
    best_any = max(addressed, key=lambda i: (hits[i], -i)) if addressed else None
    form = rules.cue("rebuttal", text) and rules.cue("concrete", text)
    if form and best_held is not None and not already_said(t, said, rules.repeat_overlap):
        return Judgement("rebuttal", best_held, t)
    if form and best_any is not None:
        return Judgement("repeat", best_any, t)
    if rules.cue("why", text):
        first = next((i for i in range(len(reasons)) if i not in rebutted), None)
        return Judgement("why", first, t)
    if best_held is not None:
        return Judgement("unsupported", best_held, t)
    if best_any is not None:
        return Judgement("repeat", best_any, t)
    return Judgement("unconvinced" if t & topic else "off_topic", None, t)


def judge_turn(
    text: str,
    reasons: Sequence[HeldReason],
    rebutted: set[int],
    said: Sequence[frozenset[str]],
    topic: frozenset[str],
    rules: PersuasionRules,
) -> Judgement:
    """The judgement of one turn without the intent step (module docstring, steps 1, 3 and 4)."""
    if is_abusive(text, rules):
        return Judgement("abusive", None, terms(text))
    if is_empty(text, rules):
        return Judgement("empty", None, terms(text))
    return judge_argument(text, reasons, rebutted, said, topic, rules)


@dataclass
class StanceState:
    """What the user holds during an episode: its stance, the reasons rebutted so far and the
    terms of the turns that moved it (for the repeat test)."""

    steps: int = 0
    rebutted: set[int] = field(default_factory=set)
    said: list[frozenset[str]] = field(default_factory=list)

    def move(self, by: int) -> int:
        """Move by ``by`` steps, clamped to the scale; returns the actual move."""
        new = max(0, min(TOP, self.steps + int(by)))
        moved, self.steps = new - self.steps, new
        return moved


def stance_flags(state: StanceState, moved: int, **extra: Any) -> dict[str, Any]:
    """The flags every persuade reply carries (the gym reads ``stance``)."""
    return {"stance": state.steps, "stance_label": stance_label(state.steps), "stance_move": moved, **extra}


class PersuadableUser(SimulatedUser):
    """The symbolic persuadable user (module docstring); built by ``UserFactory`` for a rule file
    with a ``persuasion`` section."""

    arm = "symbolic"

    def reset(self, task, user_knobs, env_knobs, rng) -> None:
        super().reset(task, user_knobs, env_knobs, rng)
        if self.rules.persuasion is None:
            raise ValueError(f"rule file of gym {self.rules.gym!r} has no persuasion section")
        self.claim, self.reasons = held_reasons(task)
        self.topic = terms(self.claim).union(*(terms(r.text) for r in self.reasons))
        self.stance = StanceState()

    def judge(self, question: str) -> tuple[Judgement, Any]:
        """The turn's judgement and, for a meta turn (step 2), the intent that caught it."""
        p = self.rules.persuasion
        if not is_abusive(question, p):
            intent = self.rules.classify(question)
            if intent is not self.rules.fallback:
                return Judgement("intent", None, terms(question)), intent
        st = self.stance
        return judge_turn(question, self.reasons, st.rebutted, st.said, self.topic, p), None

    def reply(self, question: str, state: EpisodeState) -> UserReply:
        self._ready()
        p = self.rules.persuasion
        j, intent = self.judge(question)
        st = self.stance
        if intent is not None:
            template, moved = self.choose(intent.replies), 0
        else:
            moved = st.move(p.moves[j.outcome])
            if j.outcome == "rebuttal" and j.reason is not None:
                st.rebutted.add(j.reason)
                st.said.append(j.turn_terms)
            unconvinced = j.outcome == "unconvinced" or (j.outcome == "why" and j.reason is None)
            template = self.choose(self.rules.fallback.replies if unconvinced else p.replies[j.outcome])
        reason = self.reasons[j.reason] if j.reason is not None else None
        body = template.replace("{point}", reason.point() if reason else "that")
        body = body.replace("{reason}", reason.quote if reason else "")
        text = self.fill(body, [])
        flags = stance_flags(
            st, moved, arm=self.arm, outcome=j.outcome, intent=intent.name if intent else self.rules.fallback.name
        )
        if j.reason is not None:
            flags["reason"] = j.reason
        return self.guarded(UserReply(with_stance(text, st.steps, self.env_knobs), [], flags))


def with_stance(body: str, steps: int, env_knobs: Mapping[str, Any]) -> str:
    """``body`` followed by the stance sentence, the body shortened at a word boundary when the
    reply would pass ``human_response_char_limit`` (the gym cuts longer replies from the end, and
    the stance must survive that cut)."""
    tail = stance_sentence(steps)
    limit = int(env_knobs.get("human_response_char_limit", 0) or 0)
    room = limit - len(tail) - 1 if limit else 0
    if limit and len(body) > room:
        cut = body[: max(0, room - 2)].rsplit(" ", 1)[0]
        body = (cut + " …") if cut else ""
    return f"{body} {tail}".strip() if body else tail
