"""The persuade gym's task data: UserRL's persuasion tasks, their two splits, and their reasons.

Files (``data/``, shipped with the package; ``SOURCE.md`` names the origin, ``LICENSE.txt`` is
UserRL's Apache-2.0 license): ``persuade_train.jsonl`` (378 tasks) and ``persuade_test.jsonl``
(42), one task a line with ``id``, ``claim`` (what the user believes) and ``argument`` (the user's
own case for it, 150-360 words).

Splits (the ``task_split`` env knob names the one in force; every task records it):

* ``userrl``: UserRL's own split, train = ``persuade_train.jsonl``, eval = ``persuade_test.jsonl``
  (comparable with UserRL's numbers). The two share claims: all 27 claims of the test file also
  appear in train, with other arguments.
* ``claim_disjoint``: both files pooled, each *claim* assigned to train or eval by a hash of its
  normalised text (``harness.envs.base.split_of``, one claim in five to eval), so no claim is
  argued in both splits: an eval score then measures arguing against claims never trained on.

Reasons (:func:`split_reasons`, computed at load time, so the symbolic user is deterministic): the
argument is cut into sentences (a sentence ends at ``.``, ``!`` or ``?`` followed by a space and a
capital, a digit or an opening quote) grouped by paragraph (a line break ends a paragraph); a
paragraph under ``MIN_REASON_WORDS`` (12) words ("Dear friend,", a signature) joins the next one
(the last joins the previous). Each paragraph is one reason; while there are fewer than ``MIN_REASONS`` (6, the steps from "strongly
agree" to "strongly disagree"), the reason with the most sentences is cut in two at its middle
sentence; while there are more than ``MAX_REASONS`` (8), the two adjacent reasons with the fewest
words together are merged. Every argument has at least six sentences, so every task gets 6-8
reasons. Intros and conclusions stay reasons too: the user holds what it wrote.

Key words of a reason (:func:`key_words`): its content terms (``harness.users.matching.terms``:
stemmed, stop words dropped), minus the claim's terms (every reason shares them; they tell reasons
apart no better than the topic does), minus ``FILLER`` (words arguments structure themselves with)
and minus numbers, ranked by how often the term occurs in the
reason's sentences times ``log(1 + R / df)`` (R reasons, df of them containing the term: a term
proper to one reason ranks above one the whole argument uses), ties by first occurrence; the top
``KEY_WORDS`` (12), each as the surface word that first carried it. A reason left with fewer than
``MIN_KEY_WORDS`` (3), one that only restates the claim, is filled up with its claim terms, ranked
the same way. The reason's ``quote`` is its
sentence with the most key words (first on ties): what the user says when asked why it believes
the claim.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

from harness.envs.base import SPLITS, split_of
from harness.users.matching import terms

DATA_DIR = Path(__file__).resolve().parent / "data"
FILES = {"train": "persuade_train.jsonl", "test": "persuade_test.jsonl"}
TASK_SPLITS = ("userrl", "claim_disjoint")
MIN_REASONS = 6  # steps from "strongly agree" to "strongly disagree": each needs a reason to rebut
MAX_REASONS = 8  # more would make a 16-turn episode a checklist
MIN_REASON_WORDS = 12  # a shorter paragraph joins its neighbour (merge_short)
KEY_WORDS = (
    12  # chosen on hand-written rebuttals (tests/data/persuade_rebuttals.yaml): 8 missed more, 16 misattributed more
)
MIN_KEY_WORDS = 3  # fewer own words than this: the claim's words make up the rest

# Words every argument uses to structure itself ("the first and most important reason is...");
# as key words they would let a turn address a reason without naming its content.
FILLER = frozenset().union(
    *(
        terms(w)
        for w in """
    first second third fourth finally several many much more most less least even well way ways out up down
    now put may might often however therefore thus while still already another other others reason reasons
    important likely unlikely need needs needed new good bad idea ideas lead leads include includes including
    conclusion argument arguments believe think clear simply really truly fact facts sure far without within
    mean means ensure take takes made makes making become becomes given overall instead whether rather
    though although yet able can cannot could would should will shall must always never ever point points
    because since due etc lot lots case cases find found today meanwhile unfortunately fortunately also
    according study studies research data evidence report survey example instance percent result results show
    furthermore moreover additionally unless through recent recently nearly almost come comes help helps
    consider considers multitude numerous various drastically dramatically significantly equally
    comparatively currently simply particularly especially greatly largely truly fundamentally
    """.split()
    )
)

_SENTENCE_END = re.compile(r"(?<=[.!?])[\"'”’)]*\s+(?=[\"“'(]?[A-Z0-9])")
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]*")


@dataclass(frozen=True)
class Reason:
    """One reason the user holds: ``text`` (its sentences), ``keywords`` (the words a turn must
    use to address it) and ``quote`` (the sentence the user states it with)."""

    text: str
    keywords: tuple[str, ...]
    quote: str

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "keywords": list(self.keywords), "quote": self.quote}


@dataclass(frozen=True)
class Row:
    """One line of a data file."""

    id: str
    claim: str
    argument: str
    file: str


class PersuadeDataError(ValueError):
    """A data file or row is malformed; the message names the file, the line and the field."""


def sentences(paragraph: str) -> list[str]:
    """The sentences of one paragraph (whitespace collapsed)."""
    text = " ".join(paragraph.split())
    return [s.strip() for s in _SENTENCE_END.split(text) if s.strip()]


def paragraphs(argument: str) -> list[list[str]]:
    """The argument's paragraphs (split at line breaks), each as its sentences; empty ones dropped."""
    out = [sentences(p) for p in argument.split("\n")]
    return [p for p in out if p]


def _words(unit: list[str]) -> int:
    return sum(len(s.split()) for s in unit)


def merge_short(units: list[list[str]]) -> list[list[str]]:
    """Paragraphs under MIN_REASON_WORDS words (a salutation, a signature, a one-line aside) joined
    to the next paragraph (the last one to the previous): alone they would be reasons nobody argues."""
    out: list[list[str]] = []
    carry: list[str] = []
    for u in units:
        u = carry + list(u)
        carry = []
        if _words(u) < MIN_REASON_WORDS:
            carry = u
        else:
            out.append(u)
    if carry:
        if out:
            out[-1] = out[-1] + carry
        else:
            out.append(carry)
    return out


def group_reasons(units: list[list[str]]) -> list[list[str]]:
    """Paragraph sentence lists regrouped into MIN_REASONS..MAX_REASONS reasons (module docstring):
    cut the reason with most sentences while too few, merge the lightest adjacent pair while too many."""
    units = merge_short(units)
    while len(units) < MIN_REASONS:
        i = max(range(len(units)), key=lambda j: (len(units[j]), -j))
        if len(units[i]) < 2:
            break  # nothing left to cut: fewer sentences than reasons (never in the shipped data)
        u = units[i]
        # the sentence boundary that halves the words most evenly (not the middle sentence: a short
        # sentence alone would make a reason with hardly a word of its own)
        mid = min(range(1, len(u)), key=lambda k: (abs(_words(u[:k]) - _words(u[k:])), k))
        units[i : i + 1] = [u[:mid], u[mid:]]
    while len(units) > MAX_REASONS:
        i = min(range(len(units) - 1), key=lambda j: (_words(units[j]) + _words(units[j + 1]), j))
        units[i : i + 2] = [units[i] + units[i + 1]]
    return units


def _surface(sentence_list: list[str]) -> dict[str, str]:
    """Stem -> the first surface word that carries it, over the sentences in order."""
    out: dict[str, str] = {}
    for s in sentence_list:
        for w in _WORD.findall(s):
            for t in terms(w):
                out.setdefault(t, w.lower())
    return out


def key_words(units: list[list[str]], claim: str) -> list[tuple[str, ...]]:
    """The KEY_WORDS key words of each reason (ranking in the module docstring)."""
    claim_terms = terms(claim)
    out = _ranked_key_words(units, claim_terms | FILLER)
    # A reason that only restates the claim has no words of its own left: it is addressed by the
    # claim's words instead (otherwise no turn could ever rebut it).
    fallback = _ranked_key_words(units, FILLER)
    return [
        kws if len(kws) >= MIN_KEY_WORDS else tuple(dict.fromkeys(kws + fb))[:KEY_WORDS]
        for kws, fb in zip(out, fallback)
    ]


def _ranked_key_words(units: list[list[str]], excluded: frozenset[str]) -> list[tuple[str, ...]]:
    """Each reason's terms outside ``excluded`` ranked as in the module docstring, top KEY_WORDS."""
    per_unit = [[terms(s) - excluded for s in u] for u in units]
    df: dict[str, int] = {}
    for sent_terms in per_unit:
        for t in set().union(*sent_terms):
            df[t] = df.get(t, 0) + 1
    n = len(units)
    out = []
    for unit, sent_terms in zip(units, per_unit):
        surface = _surface(unit)
        order = {t: i for i, t in enumerate(surface)}
        counts: dict[str, int] = {}
        for st in sent_terms:
            for t in st:
                if not t.isdigit() and not t.replace(".", "").isdigit():
                    counts[t] = counts.get(t, 0) + 1
        ranked = sorted(counts, key=lambda t: (-counts[t] * math.log(1 + n / df[t]), order.get(t, 1 << 30)))
        words = dict.fromkeys(surface.get(t, t) for t in ranked)  # two stems may share a word (TikTok)
        out.append(tuple(list(words)[:KEY_WORDS]))
    return out


def split_reasons(claim: str, argument: str) -> list[Reason]:
    """The user's reasons for ``claim``, from its ``argument`` (module docstring)."""
    units = group_reasons(paragraphs(argument))
    reasons = []
    for unit, kws in zip(units, key_words(units, claim)):
        kw_terms = [terms(k) for k in kws]
        quote = max(unit, key=lambda s: (sum(bool(t & terms(s)) for t in kw_terms), -unit.index(s)))
        reasons.append(Reason(" ".join(unit), kws, quote))
    return reasons


def normalise_claim(claim: str) -> str:
    """A claim's identity across rows: lower-case words and numbers, punctuation dropped."""
    return " ".join(re.findall(r"[a-z0-9$%]+", claim.lower()))


def _parse_line(line: str, where: str) -> Row:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise PersuadeDataError(f"{where}: not valid JSON ({exc.msg})") from None
    if not isinstance(obj, dict):
        raise PersuadeDataError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    for field in ("id", "claim", "argument"):
        v = obj.get(field)
        if not isinstance(v, str) or not v.strip():
            raise PersuadeDataError(f"{where}: field {field!r} = {v!r} must be a non-empty string")
    return Row(obj["id"], obj["claim"].strip(), obj["argument"], where.split(":")[0])


@cache
def load_rows(name: str, data_dir: str = str(DATA_DIR)) -> tuple[Row, ...]:
    """The rows of data file ``name`` (``train`` or ``test``), in file order."""
    if name not in FILES:
        raise ValueError(f"unknown persuade data file {name!r}; allowed: {', '.join(FILES)}")
    path = Path(data_dir) / FILES[name]
    rows = []
    with path.open(encoding="utf-8") as fh:
        for i, line in enumerate(fh, 1):
            if line.strip():
                rows.append(_parse_line(line, f"{path.name}:{i}"))
    ids = [r.id for r in rows]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise PersuadeDataError(f"{path.name}: duplicate task id(s) {', '.join(dup[:5])}")
    return tuple(rows)


def claim_split(claim: str) -> str:
    """The split of ``claim`` under ``claim_disjoint`` (a hash of its normalised text)."""
    return split_of(f"persuade-claim:{normalise_claim(claim)}")


@cache
def split_rows(task_split: str, split: str) -> tuple[Row, ...]:
    """The rows of ``split`` (train or eval) under ``task_split`` (userrl or claim_disjoint)."""
    if task_split not in TASK_SPLITS:
        raise ValueError(
            f"env knob task_split = {task_split!r} is not a persuade split; allowed: {', '.join(TASK_SPLITS)}"
        )
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; allowed: {', '.join(SPLITS)}")
    if task_split == "userrl":
        return load_rows("train" if split == "train" else "test")
    pool = load_rows("train") + load_rows("test")
    return tuple(r for r in pool if claim_split(r.claim) == split)


@lru_cache(maxsize=1024)
def reasons_of(row: Row) -> tuple[Reason, ...]:
    """The reasons of ``row`` (cached: the data is immutable)."""
    return tuple(split_reasons(row.claim, row.argument))
