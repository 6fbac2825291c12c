"""The verifier of user replies for gyms with hidden facts: does a reply state a value that the
task's facts contradict?

A gym describes each hidden fact it can check as a :class:`Claim` (the words that put a sentence on
the fact, the phrases that state its value, and the phrases that state a value it rules out) and
passes them to :func:`check_claims` from its ``check_reply`` hook (travel's preferences, intention's
details). A reply is *wrong* when one of its sentences is about a fact and states a ruled-out value
without the task's own, or (for a fact that is a need, "a pool") negates the need. The check is
conservative: a sentence that names no word of the fact, or states the task's value next to another
one, is not called wrong. Replies of both arms are checked the same way; the symbolic arm states
fact texts, so a wrong symbolic reply means an edited rule file or persona.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from harness.types import ReplyCheck

_SENTENCE_RE = re.compile(r"[.!?;\n]+")
# Words that negate what follows within a few words ("I don't need a pool", "no pool", "without a pool").
_NEGATIONS = frozenset("no not never without don't dont doesn't do not n't none nor neither".split())
NEGATION_REACH = 4  # words between a negation and the need it negates ("don't really need a pool")


@dataclass(frozen=True)
class Claim:
    """What a task holds for one hidden fact, for checking replies against it.

    key: the fact's key (named in the verdict).
    about: words that put a sentence on this fact (any one, as a whole word, case-insensitive).
    where: words naming what the fact belongs to (travel: the part of the trip); a sentence that
        names what some claims belong to is checked against those claims only ("For the tour, the
        time is morning" says nothing of the flight's departure time).
    value: phrases that state the task's value (any one).
    others: phrases that state a value the task's value rules out (another option; a number the
        preference does not accept).
    need: the fact is a need ("a pool"): a sentence that negates one of ``value`` contradicts it.
    """

    key: str
    about: tuple[str, ...]
    value: tuple[str, ...]
    others: tuple[str, ...] = ()
    need: bool = False
    where: tuple[str, ...] = ()


def _has(phrase: str, sentence: str) -> bool:
    return re.search(rf"(?<![\w$]){re.escape(phrase.lower())}(?![\w])", sentence) is not None


def _negated(phrase: str, sentence: str) -> bool:
    """Whether a negation comes within ``NEGATION_REACH`` words before ``phrase`` in ``sentence``."""
    words = re.findall(r"[\w$']+", sentence)
    target = re.findall(r"[\w$']+", phrase.lower())
    for i in range(len(words) - len(target) + 1):
        if words[i : i + len(target)] == target:
            before = words[max(0, i - NEGATION_REACH) : i]
            if any(w in _NEGATIONS or w.endswith("n't") for w in before):
                return True
    return False


def _without(sentence: str, phrase: str, values: set[str]) -> str:
    """``sentence`` with every value that holds ``phrase`` inside a longer phrase blanked out: a value
    of one fact is no ruled-out value of another ("a small apartment" does not say the size is small)."""
    for v in sorted((v for v in values if v != phrase.lower() and _has(phrase, v)), key=len, reverse=True):
        sentence = re.sub(rf"(?<![\w$]){re.escape(v)}(?![\w])", " | ", sentence)
    return sentence


def check_claims(text: str, claims: Sequence[Claim]) -> ReplyCheck:
    """The verdict on a reply ``text`` against the task's ``claims`` (see the module docstring).

    >>> stars = Claim("pref.hotel.stars", ("stars", "star"), ("4",), ("2", "3"))
    >>> check_claims("A hotel with at least 3 stars, please.", [stars]).wrong
    True
    >>> check_claims("3 or 4 stars is fine.", [stars]).wrong, check_claims("Three days.", [stars]).checked
    (False, False)
    >>> pool = Claim("pref.hotel.pool", ("pool",), ("pool",), need=True)
    >>> check_claims("I don't need a pool.", [pool]).said
    'no pool'
    """
    checked = False
    values = {v.lower() for c in claims for v in c.value}
    for sentence in (s.strip().lower() for s in _SENTENCE_RE.split(text)):
        if not sentence:
            continue
        named = [c for c in claims if any(_has(w, sentence) for w in c.where)]
        for c in named or claims:
            if not any(_has(w, sentence) for w in c.about):
                continue
            states_value = [v for v in c.value if _has(v, sentence)]
            ruled_out = [o for o in c.others if _has(o, _without(sentence, o, values))]
            if c.need and any(_negated(v, sentence) for v in states_value):
                return ReplyCheck(True, True, f"{c.key}: the task needs it", c.value[0], f"no {c.value[0]}")
            if ruled_out and not states_value:
                return ReplyCheck(True, True, f"{c.key}: the task says {c.value[0]}", c.value[0], ruled_out[0])
            checked = checked or bool(states_value or ruled_out)
    return ReplyCheck(checked)
