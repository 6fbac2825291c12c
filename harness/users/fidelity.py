"""The verifier of user replies for gyms with hidden facts: does a reply state a value that the
task's facts contradict?

Two kinds of hidden fact, two checks:

* **preferences and details** (travel, intention): :class:`Claim` and :func:`check_claims`, below;
* **identifying values** (the τ² customers: a name, an email, a zip code, an order id): a
  :class:`ValueKind` says how a reply states a value of one kind, :func:`stated_values` reads the
  values a text states, and :func:`check_values` compares them with the task's true values of each
  kind (a gym builds those from its own data: ``harness/envs/tau2/customer.py``).

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
from typing import Callable, Mapping, Sequence

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


# ------------------------------------------------------------------------------ identifying values
# A sentence ends at . ! ? ; followed by a space (an email's or a street's dot does not end one) or a line break.
_VALUE_SENTENCE_RE = re.compile(r"(?<=[.!?;])\s+|\n+")
# Words right before a value that deny it ("not #W1234567", "isn't 12345", "never had ..."), and
# words right after it ("x@y.com is wrong"): such a value is not what the reply says is true.
_DENY_BEFORE = frozenset("not never nor without isn't wasn't aren't don't doesn't didn't no".split())
_DENY_AFTER = re.compile(r"^\W*(is|was|'s)?\s*(wrong|incorrect|not (mine|my|right|correct))\b")
DENY_REACH = 3  # words before a value in which a denial counts


def _lower(value: str) -> str:
    return " ".join(value.lower().split())


@dataclass(frozen=True)
class ValueKind:
    """One kind of identifying value a reply can state (an email, a zip code, an order id).

    key: the kind's name; keys the task's true values and names the kind in a verdict.
    patterns: find a stated value (the match's group ``v``, else the whole match); any one.
    about: words of which the sentence or the question it answers must name one for a match to
        count (a bare 5-digit number is a zip code only next to "zip"); () when the pattern alone
        says what the value is (an email, ``#W1234567``).
    single: the user has one value of this kind (an email, a zip code): a sentence that also states
        the true value is not wrong ("19122, not 19123"). Otherwise (order ids) every value a
        sentence states must be one of the user's.
    words: compare word by word: a stated value agrees when each of its words is a word of a true
        value (names: "Emma" and "Emma Kim" agree with "Emma Kim").
    exclude: values of the pattern's shape that are something else (flight numbers among six-letter
        reservation codes); matched against the normalized value.
    normalize: the canonical text of a value (a phone number's digits, a date in ISO form); None
        drops a value that cannot be read.
    loose: a wider pattern for reading the task's own text (every date in the scenario, not only one
        next to "born"): what the task states counts as true however it is worded.
    """

    key: str
    patterns: tuple[re.Pattern[str], ...]
    about: tuple[str, ...] = ()
    single: bool = True
    words: bool = False
    exclude: re.Pattern[str] | None = None
    normalize: Callable[[str], str | None] = _lower
    loose: tuple[re.Pattern[str], ...] = ()

    def agrees(self, value: str, true: frozenset[str]) -> bool:
        """Whether stated ``value`` (normalized) is one of the ``true`` values."""
        if not self.words:
            return value in true
        known = {w for t in true for w in t.split()}
        return all(w in known for w in value.split())


def _denied(sentence: str, start: int, end: int) -> bool:
    """Whether the words around ``sentence[start:end]`` deny the value there."""
    before = re.findall(r"[\w']+", sentence[:start].lower())[-DENY_REACH:]
    if any(w in _DENY_BEFORE and (w != "no" or i == len(before) - 1) for i, w in enumerate(before)):
        return True
    return _DENY_AFTER.search(sentence[end:].lower()) is not None


def _found(sentence: str, kind: ValueKind, patterns: Sequence[re.Pattern[str]], deny: bool) -> list[str]:
    out: list[str] = []
    for p in patterns:
        for m in p.finditer(sentence):
            group = "v" if "v" in p.groupindex else 0
            raw = m.group(group)
            if raw is None or (deny and _denied(sentence, m.start(group), m.end(group))):
                continue
            value = kind.normalize(raw)
            if value and not (kind.exclude and kind.exclude.fullmatch(value)) and value not in out:
                out.append(value)
    return out


def _names(words: Sequence[str], text: str) -> bool:
    return any(_has(w, text) for w in words)


def stated_values(text: str, kinds: Sequence[ValueKind], *, loose: bool = False) -> dict[str, set[str]]:
    """The values of each kind that ``text`` states, normalized. ``loose``: read a task's own text
    (each kind's ``loose`` patterns too, no ``about`` word needed, denials kept): what a scenario
    mentions at all counts as true.

    >>> zip_code = ValueKind("zip", (re.compile(r"\\b(?P<v>\\d{5})\\b"),), about=("zip",))
    >>> stated_values("My zip is 19122, not 19123. I have 12345 points.", [zip_code])
    {'zip': {'19122'}}
    """
    out: dict[str, set[str]] = {}
    for sentence in (s.strip() for s in _VALUE_SENTENCE_RE.split(text or "")):
        for kind in kinds:
            if not loose and kind.about and not _names(kind.about, sentence.lower()):
                continue
            found = _found(sentence, kind, kind.patterns + (kind.loose if loose else ()), deny=not loose)
            if found:
                out.setdefault(kind.key, set()).update(found)
    return out


def check_values(
    text: str, kinds: Sequence[ValueKind], truth: Mapping[str, frozenset[str]], question: str = ""
) -> ReplyCheck:
    """The verdict on a reply ``text`` (to ``question``) against the task's true values of each kind.

    A kind is checked only where the task knows its true values (``truth[kind.key]`` not empty): a
    value nobody knows cannot be contradicted. A reply is wrong when one of its sentences states a
    value of a kind that is none of the true ones (for a ``single`` kind: and not next to the true
    one), and does not deny it. A reply that states no value (``I don't remember my email``) is not
    checked.

    >>> email = ValueKind("email", (re.compile(r"[\\w.+-]+@[\\w-]+(?:\\.[\\w-]+)+"),))
    >>> truth = {"email": frozenset({"emma.kim@example.com"})}
    >>> check_values("Sure, it's emma.kim@example.org.", [email], truth).said
    'emma.kim@example.org'
    >>> check_values("It's emma.kim@example.com, not ek@example.com.", [email], truth).wrong
    False
    """
    checked = False
    asked = (question or "").lower()
    for sentence in (s.strip() for s in _VALUE_SENTENCE_RE.split(text or "")):
        if not sentence:
            continue
        low = sentence.lower()
        for kind in kinds:
            true = truth.get(kind.key)
            if not true or (kind.about and not (_names(kind.about, low) or _names(kind.about, asked))):
                continue
            said = _found(sentence, kind, kind.patterns, deny=True)
            if not said:
                continue
            checked = True
            bad = [v for v in said if not kind.agrees(v, true)]
            if bad and not (kind.single and len(bad) < len(said)):
                expected = ", ".join(sorted(true)[:3]) + (" ..." if len(true) > 3 else "")
                return ReplyCheck(True, True, f"{kind.key}: the task says {expected}", expected, bad[0])
    return ReplyCheck(checked)
