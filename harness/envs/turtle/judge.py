"""The turtle gym's symbolic judge: answers yes/no questions from a story's bottom, and scores a
proposed story against the story's criteria. Deterministic and model-free.

**How a question is answered.** At load time the bottom (the hidden story), the surface (what the
agent sees) and the criteria (UserRL's paraphrases of the bottom: more words for the same facts) are
cut into clauses: sentences, split again at ", but", "; ", ", and", ", so", " because " and the
like. Each clause keeps its words in order, each word with the concepts it stands for
(``lexicon.concepts``: stems, synonym groups, irregular forms) and whether a negation cue ("not",
"never", "n't", "no", "without", ...) governs it (a cue reaches the next ``NEGATION_SCOPE`` content
words, never past a comma). A question is reduced the same way to its content words (stop words and
question framing dropped) and its own negation parity, counted in its main clause only ("Did they
kill him so he could not talk?" is not a negated question). Each content word carries an IDF weight
over the whole story collection, so "man" or "day" counts for less than "corpse".

For every clause the judge measures the weighted share of the question's content words that the
clause states (a synonym counts; an antonym counts as a *contradicting* match, "daytime" against
"night", unless the story also states the word itself: then the clause is about something else; a
word the clause lacks but the surface holds counts ``ELSEWHERE_CREDIT``, as clauses often name it
by a pronoun; a word the clause only reports, after "claimed", "lied", "might" and the like, counts
``REPORTED_CREDIT``). The best clause (ties: more direct matches, then the bottom before the surface
and the criteria, then the earlier clause) decides:

* **Yes** or **No** only on strong evidence: the clause *states* at least ``STATED_COVER`` of the
  question's weight — directly or by an antonym, or (in a question that is not negated) as a word
  the surface names — and covers at least ``YES_COVER`` in all. The answer is Yes, flipped to No
  once for each of: a negation in the question, a negation before a matched word in the clause, an
  antonym match. "Was there light?" against "there was no light" is No; "Was it dark?" against the
  same clause is Yes (dark is the antonym of light, and the clause negates light).
* **Irrelevant** when the question's words are (almost) absent from the story: the best clause
  covers less than ``IRRELEVANT_COVER``.
* **Can't tell** otherwise: the question is about something in the story, but asserts a word that
  no clause states (a paraphrase outside the synonym groups, a detail the story does not give, an
  opposite the lexicon does not know). Guessing there was wrong about as often as right on unseen
  stories, and a wrong Yes or No sends the agent the wrong way, so the judge abstains. The reply
  discloses nothing; the agent reads it as "ask it another way".

**How a proposed story is scored.** Each criterion's *anchors* (:class:`Anchors`) are its content
words that the bottom also states (criteria are paraphrases of the bottom written by UserRL; words
such as "story", "reveals" or "protagonist" are meta words and never anchors); a criterion that only
the surface speaks to (the setting) is anchored in the surface, and one that shares no word with the
story on the bottom's ``FALLBACK_ANCHORS`` most specific words that the surface lacks (the story's
*hidden* concepts). The answer must hold at least one anchor that the surface does not hold (or,
when there is none, one hidden concept): restating the puzzle earns nothing. A setting criterion
counts the surface as said (a story explains the setting, it need not restate it). Coverage of the
anchors, IDF-weighted: >= ``FULL_COVER`` scores 1, >= ``HALF_COVER`` scores 0.5, else 0; the story's
score is the weighted sum over criteria. The bottom itself holds every anchor, so it scores 1. Only
the first ``word_cap()`` words of an answer are read (twice the bottom's length, at least
``MIN_WORD_CAP``), so a list of every word of the puzzle's topic cannot cover everything.

**Limits** (what a reader of the transcripts should expect): the judge matches concepts, not
meaning. Relations are not checked ("Did the wife kill the man?" matches "the man killed his wife"),
which is most of what is left of its wrong Yes/No answers; scoring does not check the negation of
what an answer says. Precision and coverage on labelled questions: BENCHMARKS.md (turtle).
Questions that are not yes/no questions (enumerations, "tell me the story", wh-questions) never
reach the judge: the gym's rule file (``knobs/rules/users/turtle.yaml``) answers them with a fixed
reply.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Sequence

from harness.envs.turtle.lexicon import NEGATION_CUES, antonyms, concepts, head_concept, story_concepts, words

YES, NO, IRRELEVANT, CANNOT_TELL = "Yes", "No", "Irrelevant", "Can't tell"
YES_COVER = 0.6  # weighted share of a question's content words a clause must cover (credits included) for Yes/No
# ... and the share it must *state* (directly, by an antonym, or named by the surface): below it the
# question asserts something the clause does not say. On the tuning sets (the three first labelled
# sets and the development set) a Yes/No with every word stated is wrong 1 time in 20; one with a
# word missing, 1 time in 3 (benchmarks/bench_turtle_user.py).
STATED_COVER = 0.85
IRRELEVANT_COVER = 0.2  # below this the question's words are not in the story: Irrelevant
NEGATION_SCOPE = 2  # content words a negation cue governs ("without a head leads to fainting": head only)
# Words that end a question's main clause: a negation after them is not the question's ("Did they
# kill him so he could not talk?").
SUBORDINATORS = frozenset("so because since when while after before until unless although though if".split())
FULL_COVER = 0.6  # a criterion whose anchors are this covered scores 1
HALF_COVER = 0.3  # ... this covered scores 0.5
FALLBACK_ANCHORS = 3  # anchors of a criterion that shares no content word with the story
MIN_WORD_CAP = 80  # an answer's words read for scoring: max(MIN_WORD_CAP, 2 x the bottom's words)
ELSEWHERE_CREDIT = 0.7  # a question word the clause lacks but the surface holds (often a pronoun in the clause)
REPORTED_CREDIT = 0.5  # a word the story only reports (a lie, an accusation) is weak evidence
# Words after which a clause reports what someone claimed or supposed rather than what happened
# ("claiming the student attempted suicide", "it might be stray cats", "if the bite had just
# happened"), up to the next comma.
REPORT_CUES = frozenset(
    "claim claimed claiming claims accuse accused accusing suspect suspected lie lied lying pretend pretended "
    "pretending rumor rumored rumour alleged allegedly might maybe perhaps seem seems seemed like suggest "
    "suggested if should".split()
)
ANTONYM_CREDIT = 0.9  # a clause that states a word beats one that states its opposite
# Words that describe the criterion rather than the story ("The story reveals that ...").
META_WORDS = frozenset(
    """story reveal reveals revealed include includes included including detail details mention
    mentions mentioned explain explains explained explanation describe describes described
    protagonist character player narrator original version twist key element clarify clarifies
    logical logically justifiable justify justified plausible reason reasons motive motivation
    answer guess identify identifies identified state states stated show shows shown indicate
    indicates point aspect part""".split()
)
_CLAUSE_RE = re.compile(
    r"[.!?;]+|,\s*(?:but|and|so|yet|because|then|while|whereas)\b|\s(?:but|because|so that|although|though|while|whereas)\s"
)


_LETTER_RE = re.compile(r"\b([A-Z])\b(?!')")


def letter_names(text: str) -> frozenset[str]:
    """Capital letters the story uses as names ("A bet B that ..."): single capitals other than
    "I", when at least two different ones occur (a lone "A" is an article)."""
    found = set(_LETTER_RE.findall(text)) - {"I"}
    return frozenset(found) if len(found) >= 2 else frozenset()


@dataclass(frozen=True)
class Word:
    """One content word of a clause: its concepts, whether a negation precedes it in the clause, and
    whether it is reported rather than told as true ("claiming the student attempted suicide")."""

    text: str
    concepts: frozenset[str]
    negated: bool
    reported: bool = False  # after a claim, accusation or mistaken belief: said, not stated as true


@dataclass(frozen=True)
class Clause:
    """One clause of a story. ``source``: "bottom" or "surface"; ``index``: position in the story."""

    text: str
    words: tuple[Word, ...]
    source: str
    index: int

    def concept_set(self) -> frozenset[str]:
        return frozenset(c for w in self.words for c in w.concepts)


@dataclass(frozen=True)
class Question:
    """A question reduced to its content words and its negation parity."""

    words: tuple[Word, ...]
    negated: bool


@dataclass(frozen=True)
class Verdict:
    """The judge's answer to a question: label (Yes, No, Irrelevant or Can't tell), coverage of
    the best clause, and which clause settled it (``None`` unless the label is Yes or No)."""

    label: str
    coverage: float
    clause: Clause | None

    @property
    def confident(self) -> bool:
        """Whether the judge settled the question (Yes, No or Irrelevant) rather than abstained."""
        return self.label != CANNOT_TELL

    @property
    def key(self) -> str:
        """What a disclosure is counted under: the clause that settled the question."""
        return f"clause.{self.clause.source}.{self.clause.index}" if self.clause else "irrelevant"


def content_words(text: str, story: bool = False) -> tuple[Word, ...]:
    """Content words of ``text`` in order, each with its concepts and whether a negation cue
    governs it (the ``NEGATION_SCOPE`` content words after the cue, within a comma-free part). ``story``: the text is the puzzle's own, where a
    gendered pronoun stands for a man or a woman (``lexicon.story_concepts``)."""
    concepts_of = story_concepts if story else concepts
    out: list[Word] = []
    for part in text.split(","):  # a negation never reaches past a comma ("X, not wanting Y, lied")
        reported = False
        left = 0  # content words the last negation cue still governs
        neg = False
        for w in words(part):
            if w in NEGATION_CUES:
                neg = not neg
                left = NEGATION_SCOPE
                continue
            cs = concepts_of(w)
            if cs:
                out.append(Word(w, cs, neg, reported))
                if neg:
                    left -= 1
                    neg = left > 0
            reported |= w in REPORT_CUES  # the cue itself is told as true ("she lied"); what follows is not
    return tuple(out)


def split_clauses(text: str) -> list[str]:
    """Clauses of ``text``: sentences, cut again at coordinating and causal conjunctions.

    >>> split_clauses("It was night, and there was no light. The shadow was a corpse!")
    ['It was night', 'there was no light', 'The shadow was a corpse']
    """
    return [c.strip(" ,'\"") for c in _CLAUSE_RE.split(text) if c and c.strip(" ,'\"")]


def parse_question(text: str) -> Question:
    """The question's content words (each counted once) and whether it is negated (odd number of
    negation cues in its main clause: "Was he not ...?", "Didn't ...?" and "Is it true that ...
    never ...", but not "Did they kill him so he could not talk?").

    >>> parse_question("Did the gang kill him so he could not talk?").negated
    False
    >>> parse_question("Didn't the gang kill him?").negated
    True
    """
    seen: set[str] = set()
    kept: list[Word] = []
    # (head concepts only: "Was he murdered?" must not match "he was found dead")
    neg, main = False, True
    for w in words(text):
        main = main and w not in SUBORDINATORS
        if w in NEGATION_CUES:
            neg = neg != main  # flips only in the main clause
            continue
        c = head_concept(w)
        if c is not None and c not in seen:  # a question asks about what its words name, no more
            seen.add(c)
            kept.append(Word(w, frozenset([c]), False))
    return Question(tuple(kept), neg)


class Idf:
    """Inverse document frequency of concepts over a collection of stories (bottom + surface each)."""

    def __init__(self, documents: Iterable[str]):
        df: Counter[str] = Counter()
        n = 0
        for doc in documents:
            n += 1
            df.update({c for w in content_words(doc) for c in w.concepts})
        self.n = max(n, 1)
        self.df = df

    def concept(self, c: str) -> float:
        return math.log((self.n + 1) / (self.df.get(c, 0) + 1)) + 1.0

    def word(self, w: Word) -> float:
        """A word weighs what its most specific concept weighs."""
        return max(self.concept(c) for c in w.concepts)


@dataclass(frozen=True)
class Match:
    """How a question meets one clause: the weighted share of its words the clause covers (credits
    included), how many it states directly or by an antonym, whether a negation covers a matched
    word, and the weighted shares it *states* (directly or by an antonym, not merely reports) and
    that only the surface names (``elsewhere``)."""

    coverage: float
    direct: int
    contradicting: int
    negated: bool
    clause: Clause
    stated: float = 0.0
    elsewhere: float = 0.0


def match_clause(
    q: Question, clause: Clause, idf: Idf, surface: frozenset[str] = frozenset(), told: frozenset[str] = frozenset()
) -> Match:
    """How much of ``q`` the clause states, and with which polarity (see the module docstring).
    ``surface``: the surface's concepts; a question word the clause lacks but the surface holds
    counts ``ELSEWHERE_CREDIT`` (clauses say "she" where the question says "the woman").
    ``told``: every concept of the story; a clause holding only the opposite of a word the story
    also states is about someone or something else ("the boy" when the question asks about "the
    girl", who is in the story too), not a contradiction."""
    total = sum(idf.word(w) for w in q.words)
    got = stated = elsewhere = 0.0
    direct = anti = 0
    negated = False
    for qw in q.words:
        hit = None
        for cw in clause.words:
            if qw.concepts & cw.concepts:
                hit, is_anti = cw, False
                break
        if hit is None and not qw.concepts & told:
            opposite = frozenset(a for c in qw.concepts for a in antonyms(c))
            for cw in clause.words:
                if opposite & cw.concepts:
                    hit, is_anti = cw, True
                    break
        if hit is None:
            if qw.concepts & surface:
                got += ELSEWHERE_CREDIT * idf.word(qw)
                elsewhere += idf.word(qw)
            continue
        weight = idf.word(qw)
        got += weight * (ANTONYM_CREDIT if is_anti else 1.0) * (REPORTED_CREDIT if hit.reported else 1.0)
        stated += 0.0 if hit.reported else weight
        anti += is_anti
        direct += not is_anti
        negated |= hit.negated  # a negation before any matched word negates what the clause says of it
    if not total:
        return Match(0.0, direct, anti, negated, clause)
    return Match(got / total, direct, anti, negated, clause, stated / total, elsewhere / total)


@dataclass(frozen=True)
class Anchors:
    """What one criterion is scored on: concept sets (one per content word; a word is covered when
    the answer holds any of its concepts) and where they come from: ``bottom`` (the criterion's
    words the bottom states), ``surface`` (the criterion is about the setting the agent is shown),
    ``fallback`` (the criterion shares no word with the story: the bottom's most specific words)."""

    words: tuple[frozenset[str], ...]
    source: str


class StoryIndex:
    """A story cut into clauses for the judge, with the anchors of each of its criteria."""

    def __init__(self, surface: str, bottom: str, criteria: Sequence[str], idf: Idf):
        self.idf = idf
        self.letters = letter_names(f"{surface} {bottom}")
        surface, bottom = self.named(surface), self.named(bottom)
        criteria = [self.named(s) for s in criteria]
        # criteria are paraphrases of the bottom: more words for the same facts (answering only;
        # scoring anchors come from the bottom and the surface)
        said = " ".join(c.strip() if c.strip().endswith((".", "!", "?")) else c.strip() + "." for c in criteria)
        self.clauses = tuple(
            Clause(text, content_words(text, story=True), source, i)
            for source, body in (("bottom", bottom), ("surface", surface), ("criteria", said))
            for i, text in enumerate(split_clauses(body))
        )
        self.bottom_concepts = frozenset(c for w in content_words(bottom) for c in w.concepts)
        self.surface_concepts = frozenset(c for w in content_words(surface) for c in w.concepts)
        self.bottom_words = len(words(bottom))
        # The bottom's most specific concepts that the surface does not hold: what a solution has
        # to bring that the puzzle does not.
        hidden = sorted(self.bottom_concepts - self.surface_concepts, key=lambda c: (-idf.concept(c), c))
        self.hidden = tuple(frozenset([c]) for c in hidden[:FALLBACK_ANCHORS])
        self.anchors = tuple(self._anchors(s) for s in criteria)

    def named(self, text: str) -> str:
        """``text`` with this story's letter names made words ("A was poisoned" -> "chra was ...")."""
        if not self.letters:
            return text
        return _LETTER_RE.sub(lambda m: f"chr{m.group(1).lower()}" if m.group(1) in self.letters else m.group(1), text)

    # ------------------------------------------------------------------ questions
    def answer(self, question: str) -> Verdict:
        """Yes, No, Irrelevant or Can't tell for ``question`` (see the module docstring)."""
        q = parse_question(self.named(question))
        if not q.words:
            return Verdict(IRRELEVANT, 0.0, None)
        told = self.bottom_concepts | self.surface_concepts
        matches = [match_clause(q, c, self.idf, self.surface_concepts, told) for c in self.clauses]
        best = max(
            matches,
            key=lambda m: (round(m.coverage, 9), m.direct, m.clause.source == "bottom", -m.clause.index),
        )
        if best.coverage < IRRELEVANT_COVER:
            return Verdict(IRRELEVANT, best.coverage, None)
        # a negated question about a word only the surface names chains two weak links: not stated
        stated = best.stated + (0.0 if q.negated else best.elsewhere)
        if best.coverage >= YES_COVER and stated >= STATED_COVER - 1e-9:
            flip = q.negated ^ best.negated ^ (best.contradicting % 2 == 1)
            return Verdict(NO if flip else YES, best.coverage, best.clause)
        return Verdict(CANNOT_TELL, best.coverage, None)

    # ------------------------------------------------------------------ scoring
    def _anchors(self, statement: str) -> Anchors:
        """The criterion's anchors (see :class:`Anchors`): its content words that the bottom
        states; else (a criterion about the puzzle's setting) those the surface states; else (a
        criterion worded apart from the story) the bottom's ``FALLBACK_ANCHORS`` most specific
        concepts that the surface does not hold."""
        for source, told in (("bottom", self.bottom_concepts), ("surface", self.surface_concepts)):
            out: list[frozenset[str]] = []
            for w in content_words(statement):
                stated = w.concepts & told
                if w.text not in META_WORDS and stated and stated not in out:
                    out.append(frozenset(stated))
            if out:
                return Anchors(tuple(out), source)
        return Anchors(self.hidden, "fallback")

    def word_cap(self) -> int:
        """How many words of an answer are read."""
        return max(MIN_WORD_CAP, 2 * self.bottom_words)

    def criterion_score(self, anchors: Anchors, answer: frozenset[str]) -> float:
        """0, 0.5 or 1: how well an answer's concepts (:meth:`answer_concepts`) cover one
        criterion's anchors. The answer must hold an anchor that the surface does not (for a
        criterion anchored in the surface, or one whose anchors are all in the surface too: one of
        the bottom's hidden concepts), so that restating the puzzle scores nothing; a criterion
        about the setting counts the surface as said."""
        if not anchors.words:
            return 0.0
        weight = {a: max(self.idf.concept(c) for c in a) for a in anchors.words}
        novel = [a for a in anchors.words if not a & self.surface_concepts and anchors.source != "surface"]
        if not any(a & answer for a in novel or self.hidden):
            return 0.0
        said = answer | self.surface_concepts if anchors.source == "surface" else answer
        cover = sum(weight[a] for a in anchors.words if a & said) / sum(weight.values())
        return 1.0 if cover >= FULL_COVER else 0.5 if cover >= HALF_COVER else 0.0

    def answer_concepts(self, text: str) -> frozenset[str]:
        """Concepts of the first ``word_cap()`` words of a proposed story."""
        head = " ".join(words(self.named(text))[: self.word_cap()])
        return frozenset(c for w in content_words(head) for c in w.concepts)
