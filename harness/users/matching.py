"""Similarity between an agent's question and a user's hidden fact.

Both user arms use this one measure: the symbolic user to decide which facts a question asks about,
the LLM user to detect which facts its free-text reply disclosed.

Normalisation (:func:`terms`)
    lower-case; identifiers are split on ``_`` and camelCase (``max_len`` -> ``max len``); runs of
    letters or digits are tokens; stop words and one-letter tokens are dropped; each token is
    stemmed by light suffix stripping (:func:`stem`: ``budgets`` -> ``budget``, ``cheapest`` ->
    ``cheap``, ``flying`` -> ``fly``). The result is a set of content terms.

Score (:func:`similarity`), for question terms ``Q``, keyword terms ``K`` (``fact.keywords``) and
text terms ``T`` (``fact.text``)::

    kw  = min(1, |Q ∩ K| / min(2, |K|))      # two keyword hits (or all, if fewer) = full credit
    txt = |Q ∩ T| / min(|Q|, |T|)             # overlap coefficient with the fact's own words
    score = 0.7 * kw + 0.3 * txt              when K is non-empty
    score = txt                               when the fact has no keywords
    score = 0                                 when Q or (K ∪ T) is empty

so the score is in [0, 1]; keywords dominate because gyms write them for matching, while the text
term lets a question in the fact's own words match too. ``match_threshold`` (knobs/user.yaml) is
compared with this score.

Disclosure detection in free text (:func:`discloses`, the LLM user): a reply ``R`` discloses a fact
when ``similarity(R, fact) >= match_threshold`` *and* ``R`` carries at least half of the fact's text
terms (``|R ∩ T| / |T| >= 0.5``): a reply is long, so sharing a keyword ("hotel") is not enough, it
must state the fact. A fact whose text has no content terms ("Yes.", "No.") is disclosed when all
of its words occur in the reply.

>>> from harness.types import Fact
>>> f = Fact("pref.hotel.budget", "preference", "My hotel budget is under 150 a night.", ("budget", "hotel", "price"))
>>> round(similarity("What is your budget for the hotel?", f), 2)
1.0
>>> round(similarity("Which airline do you like?", f), 2)
0.0
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Iterable, Sequence

from harness.types import Fact

KEYWORD_WEIGHT = 0.7
KEYWORD_SATURATION = 2  # keyword hits that give full keyword credit

_CAMEL_RE = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_TOKEN_RE = re.compile(r"[a-z]+|[0-9]+(?:\.[0-9]+)?")

STOP_WORDS = frozenset(
    """
a an the and or but if then else of to in on at by for with from into onto about as is are was were be been
being am do does did doing done have has had having i me my mine we us our you your yours he him his she her
it its they them their this that these those there here what which who whom whose when where why how can could
would should will shall may might must not no nor so too very just also any some all each every both either
neither other such only own same than s t ll d re ve m please tell know want wanted like would let lets
ok okay yes yeah hi hello hey thanks thank one thing things something anything get got give go going make
""".split()
)

# Longest suffix first; each entry: (suffix, replacement). A stem keeps at least 3 characters.
_SUFFIXES = (
    ("ational", "ate"),
    ("ization", "ize"),
    ("fulness", "ful"),
    ("iveness", "ive"),
    ("ousness", "ous"),
    ("ations", "ate"),
    ("ation", "ate"),
    ("ments", ""),
    ("ment", ""),
    ("ness", ""),
    ("ings", ""),
    ("ing", ""),
    ("iest", "y"),
    ("ies", "y"),
    ("ied", "y"),
    ("est", ""),
    ("ers", ""),
    ("er", ""),
    ("ed", ""),
    ("ly", ""),
    ("sses", "ss"),
    ("es", "e"),
    ("s", ""),
)
_MIN_STEM = 3
_VOWEL_RE = re.compile(r"[aeiouy]")


@lru_cache(maxsize=65536)
def stem(token: str) -> str:
    """Light suffix-stripping stemmer (lower-case input) for plural, tense, comparative and common
    derivational endings. A stripped stem must keep 3+ characters and a vowel (``string`` stays);
    a doubled final consonant left by stripping is undoubled (``running`` -> ``run``); a final
    ``e`` is dropped so that ``rate``, ``rated`` and ``rating`` meet at ``rat``.

    >>> [stem(w) for w in ["budgets", "cheapest", "flying", "running", "strings", "class", "rated", "rate"]]
    ['budget', 'cheap', 'fly', 'run', 'string', 'class', 'rat', 'rat']
    """
    if len(token) <= _MIN_STEM or not token.isalpha():
        return token
    word = token
    if not token.endswith("ss"):
        for suffix, repl in _SUFFIXES:
            if not token.endswith(suffix):
                continue
            base = token[: len(token) - len(suffix)] + repl
            if len(base) < _MIN_STEM or not _VOWEL_RE.search(base):
                continue
            if repl == "" and len(base) > _MIN_STEM and base[-1] == base[-2] and base[-1] not in "lsz":
                base = base[:-1]
            word = base
            break
    if len(word) > _MIN_STEM and word.endswith("e"):
        word = word[:-1]
    return word


def _split_identifiers(text: str) -> str:
    return _CAMEL_RE.sub(" ", text).replace("_", " ")


@lru_cache(maxsize=16384)
def _terms_cached(text: str) -> frozenset[str]:
    tokens = _TOKEN_RE.findall(_split_identifiers(text).lower())
    return frozenset(stem(t) for t in tokens if len(t) > 1 and t not in STOP_WORDS)


def terms(text: str) -> frozenset[str]:
    """The set of stemmed content terms of ``text`` (see the module docstring)."""
    return _terms_cached(text) if len(text) <= 2000 else _terms_cached.__wrapped__(text)


def keyword_terms(keywords: Iterable[str]) -> frozenset[str]:
    """Content terms of a fact's keywords (a keyword may hold several words, e.g. ``"max length"``)."""
    out: set[str] = set()
    for kw in keywords:
        out |= terms(kw)
    return frozenset(out)


def score_terms(q: frozenset[str], k: frozenset[str], t: frozenset[str]) -> float:
    """The similarity formula of the module docstring on precomputed term sets."""
    if not q or not (k or t):
        return 0.0
    txt = len(q & t) / min(len(q), len(t)) if t else 0.0
    if not k:
        return txt
    kw = min(1.0, len(q & k) / min(KEYWORD_SATURATION, len(k)))
    return KEYWORD_WEIGHT * kw + (1.0 - KEYWORD_WEIGHT) * txt


def similarity(question: str, fact: Fact) -> float:
    """Similarity in [0, 1] between ``question`` and ``fact`` (formula in the module docstring)."""
    return score_terms(terms(question), keyword_terms(fact.keywords), terms(fact.text))


def discloses_unasked(question: str, disclosed: Sequence[Fact], threshold: float, volunteered: bool = False) -> bool:
    """Whether a reply to ``question`` that disclosed ``disclosed`` gave away what was not asked: a
    fact scoring below ``threshold`` against the question, the bar a symbolic user uses to match a
    question to a fact (one such fact allowed when the reply also ``volunteered`` one). A leaking
    rule (every question gets the next hidden detail) does this on most replies."""
    unasked = [f for f in disclosed if similarity(question, f) < threshold]
    return len(unasked) > (1 if volunteered else 0)


def rank_facts(question: str, facts: Sequence[Fact], threshold: float) -> list[tuple[Fact, float]]:
    """Facts scoring at least ``threshold`` (and above 0), best first; ties keep task order."""
    q = terms(question)
    scored = []
    for i, f in enumerate(facts):
        s = score_terms(q, keyword_terms(f.keywords), terms(f.text))
        if s > 0.0 and s >= threshold:
            scored.append((-s, i, f, s))
    scored.sort(key=lambda x: (x[0], x[1]))
    return [(f, s) for _, _, f, s in scored]


DETECT_COVERAGE = 0.5  # share of a fact's text terms a reply must carry to count as disclosing it
_WORD_RE = re.compile(r"[a-z0-9]+")


def discloses(text: str, fact: Fact, threshold: float) -> bool:
    """Whether free ``text`` (an LLM user's reply) discloses ``fact`` (rule in the module docstring)."""
    t = terms(fact.text)
    if not t:
        words = set(_WORD_RE.findall(fact.text.lower()))
        return bool(words) and words <= set(_WORD_RE.findall(text.lower()))
    r = terms(text)
    if len(r & t) / len(t) < DETECT_COVERAGE:
        return False
    s = score_terms(r, keyword_terms(fact.keywords), t)
    return s > 0.0 and s >= threshold
