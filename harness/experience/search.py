"""Ranking findings for ``eau finding search QUERY``: a small, documented keyword score.

The query is split into terms (lowercase words of two or more characters; common English words
dropped). A finding's text is split the same way, and each name with underscores or dots
(``user.max_reveals``) also yields its parts (``user``, ``max_reveals``, ``max``, ``reveals``). A
term *matches* a word when they are equal or when the term has 4+ characters and the word starts
with it (``reveal`` matches ``reveals``). For each distinct query term the finding earns:

====================================  ======
term matches a word of the title        +3
term matches a tag                      +3
term matches a part of a knob name      +3
term matches a word of change, predicted or measured  +2
each body word it matches (at most 3)   +1
====================================  ======

and, once per query, +2 when the whole query (lowercased) occurs verbatim in the title. Findings
scoring 0 are left out; ties go to the newer finding (higher id). The score is deliberately simple
so that a session can predict why a finding ranks where it does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

from harness.experience.finding import Finding

WEIGHT_TITLE = 3
WEIGHT_TAG = 3
WEIGHT_KNOB = 3
WEIGHT_FIELDS = 2
WEIGHT_BODY = 1
BODY_CAP = 3  # one finding that repeats a word many times should not outrank a precise title match
WEIGHT_PHRASE = 2
PREFIX_MIN = 4  # shorter terms match whole words only ("kl" must not match "klass")

STOP_WORDS = frozenset(
    """a an the and or of to in on at for by with from is are was were be been it its this that
these those as not no do does did than then so if into over under after before when what which who how
why all any per""".split()
)

_WORD = re.compile(r"[a-z0-9][a-z0-9_.\-/]*")


def words(text: str) -> list[str]:
    """Lowercase words of ``text``; compound names also yield their parts.

    >>> words("Lowering user.max_reveals")
    ['lowering', 'user.max_reveals', 'user', 'max_reveals', 'max', 'reveals']
    """
    out: list[str] = []
    for w in _WORD.findall(text.lower()):
        w = w.strip("._-/")
        if not w:
            continue
        out.append(w)
        if re.search(r"[._\-/]", w):
            parts = [p for p in re.split(r"[./\-]", w) if p]
            for p in parts:
                if p != w:
                    out.append(p)
                if "_" in p:
                    out += [q for q in p.split("_") if q]
    return out


def query_terms(query: str) -> list[str]:
    """Distinct search terms of a query, in order (stop words and 1-letter words dropped)."""
    terms = [w for w in words(query) if len(w) >= 2 and w not in STOP_WORDS]
    return list(dict.fromkeys(terms))


def _matches(term: str, word: str) -> bool:
    return word == term or (len(term) >= PREFIX_MIN and word.startswith(term))


def _any(term: str, ws: Iterable[str]) -> bool:
    return any(_matches(term, w) for w in ws)


@dataclass
class Hit:
    """A finding with its score and which terms matched where (for explaining the rank)."""

    finding: Finding
    score: int
    matched: dict[str, list[str]]


def score(finding: Finding, query: str) -> Hit:
    """Score one finding against ``query`` (see the module docstring for the rule)."""
    title_w = words(finding.title)
    knob_w = [w for k in finding.knobs for w in words(k)]
    field_w = words(" ".join((finding.change, finding.predicted, finding.measured)))
    body_w = words(finding.body)
    tags = finding.tags
    total = 0
    matched: dict[str, list[str]] = {}
    for term in query_terms(query):
        where = []
        if _any(term, title_w):
            total += WEIGHT_TITLE
            where.append("title")
        if _any(term, tags):
            total += WEIGHT_TAG
            where.append("tag")
        if _any(term, knob_w):
            total += WEIGHT_KNOB
            where.append("knob")
        if _any(term, field_w):
            total += WEIGHT_FIELDS
            where.append("change/predicted/measured")
        n_body = sum(1 for w in body_w if _matches(term, w))
        if n_body:
            total += WEIGHT_BODY * min(n_body, BODY_CAP)
            where.append("body")
        if where:
            matched[term] = where
    phrase = query.strip().lower()
    if total and phrase and phrase in finding.title.lower():
        total += WEIGHT_PHRASE
    return Hit(finding, total, matched)


def rank(findings: Iterable[Finding], query: str, limit: int | None = None) -> list[Hit]:
    """Findings that match ``query``, best first (ties: newer id first), at most ``limit``."""
    hits = [h for h in (score(f, query) for f in findings) if h.score > 0]
    hits.sort(key=lambda h: (-h.score, -h.finding.number))
    return hits[:limit] if limit else hits
