"""``turtle``: lateral-thinking ("turtle soup") puzzles from UserGym.

The agent sees a strange situation (the story's *surface*) and must find the hidden story behind it
(the *bottom*). It may:

* ``ask`` a yes/no question; the symbolic user answers **Yes**, **No** or **Irrelevant** from the
  bottom, deterministically (:mod:`harness.envs.turtle.judge`: clauses and concepts, negation and
  antonyms; how it works and its limits are in that module's docstring), or **Can't tell** when the
  judge's evidence is weak (the question asserts a word no clause of the story states): it abstains
  rather than guess. A Yes or No is a dynamic fact of kind ``clue`` keyed by the clause that
  settled it, so ``max_reveals``, ``repeat_fact`` and the ``new_fact_disclosed`` reward count it
  like any disclosure. An irrelevant question discloses nothing (the rule file's ``no_match``
  reply), nor does one the judge cannot tell (a fact of kind ``UNDECIDED``: the rule file's
  ``undecided`` reply). Enumerations ("is it A, B or C?"),
  requests for the story and open questions are caught by the rule file
  (``knobs/rules/users/turtle.yaml``) and answered with a fixed reply. No reply ever holds words of
  the bottom: symbolic replies are fixed words, and the leak guard (a 6-token span for this gym)
  redacts an LLM reply that quotes it.
* ``answer`` with a proposed story. It is scored per criterion (0, 0.5 or 1 times the criterion's
  weight) by what it covers (``judge.StoryIndex.criterion_score``). The task reward is the
  improvement over the best score of the episode so far, in [0, 1], so answering again earns only
  what is new. The episode ends with success when the score reaches the ``success_threshold`` env
  knob; otherwise the agent may keep asking and answer again until ``max_steps``. The feedback
  names covered criteria by number only, never their text.

Stories: the 471 UserRL stories shipped in ``data/`` (:mod:`harness.envs.turtle.data`), split as
UserRL split them (``train`` = its 423 train stories, ``eval`` = its 48 test stories), minus the
stories whose surface is an author credit or a fragment (``eau tasks check turtle`` lists them).
Task ``index`` of a split is its ``index % n``-th story, so consecutive indexes cover the split.

The LLM user arm is given the bottom in its instructions (``Task.data["user_role"]``) and the
symbolic verdict for the current question when the judge is confident; the leak guard checks what it
writes, and :meth:`TurtleEnv.check_reply` flags a reply of either arm that the judge, where it is
confident, contradicts (``user_wrong_rate`` in ``metrics.jsonl``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from harness.envs.base import SPLITS, UserCentricEnv
from harness.envs.registry import register
from harness.envs.turtle.data import Story, load_turtle
from harness.envs.turtle.judge import CANNOT_TELL, IRRELEVANT, NO, YES, Idf, StoryIndex, Verdict
from harness.types import UNDECIDED, AnswerResult, Fact, ReplyCheck, Task, UserReply

GYM = "turtle"
LEAK_SPAN_TOKENS = 6  # no reply may hold 6 consecutive tokens of the bottom (LLM arm; the symbolic arm never can)


@lru_cache(maxsize=1)
def story_idf() -> Idf:
    """IDF of concepts over every shipped story (bottom and surface)."""
    return Idf(f"{s.surface} {s.bottom}" for s in load_turtle().stories.values())


@lru_cache(maxsize=1024)
def story_index(story_id: str) -> StoryIndex:
    """The judge's index of one story (built once per process)."""
    s = load_turtle().stories[story_id]
    return StoryIndex(s.surface, s.bottom, [c.statement for c in s.criteria], story_idf())


def prompt_of(story: Story) -> str:
    """What the agent sees: the puzzle and how to play it."""
    return (
        f'Lateral-thinking puzzle "{story.title}":\n{story.surface}\n\n'
        "What really happened? Ask me yes/no questions, one at a time (I answer Yes, No or Irrelevant; "
        '"Can\'t tell" means I cannot settle that question from the story as you put it: ask it another way). '
        "When you think you know, answer with the whole story; you may answer more than once."
    )


def user_role(story: Story) -> str:
    """The LLM user's instructions: it hosts the puzzle and holds the bottom."""
    return (
        "You are the host of a lateral-thinking puzzle. The player sees only this puzzle:\n"
        f"{story.surface}\n"
        "The hidden story, which only you know, is:\n"
        f"{story.bottom}\n"
        "The player asks yes/no questions to find the hidden story. Answer each question with one word, "
        "Yes, No or Irrelevant, judged against the hidden story: Yes when the story says so, No when it "
        "says otherwise or says nothing of it although it is about the story, Irrelevant when it does not "
        "matter to the story. When you cannot decide from the hidden story whether the answer is Yes or "
        'No, answer "Can\'t tell." rather than guess: a wrong Yes or No misleads the player. If a '
        "question is not a single yes/no question (a list of options, a request to tell the story, a "
        "question starting with what/why/how), say that you only answer yes/no questions. Never tell any "
        "part of the hidden story in your own words."
    )


def make_task(split: str, index: int) -> Task:
    """Task ``index`` of ``split``: the ``index % n``-th playable story of the split."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; allowed: {', '.join(SPLITS)}")
    data = load_turtle()
    pool = data.splits[split]
    story = data.stories[pool[index % len(pool)]]
    return task_of(story, split)


def task_of(story: Story, split: str) -> Task:
    """The task of ``story`` (any story, broken ones included: the task check scores them too)."""
    return Task(
        gym=GYM,
        task_id=f"{GYM}-{story.story_id}",
        split=split,
        prompt=prompt_of(story),
        facts=[],  # the clues are computed from each question (dynamic facts); nothing to volunteer
        secret=story.bottom,
        data={
            "story_id": story.story_id,
            "title": story.title,
            "weights": [c.weight for c in story.criteria],
            "user_role": user_role(story),
            "leak_span_tokens": LEAK_SPAN_TOKENS,
        },
    )


@dataclass(frozen=True)
class StoryScore:
    """A proposed story's score: per-criterion credit (0, 0.5, 1) and the weighted total."""

    credits: tuple[float, ...]
    weights: tuple[float, ...]

    @property
    def total(self) -> float:
        return round(sum(c * w for c, w in zip(self.credits, self.weights)), 6)

    def numbers(self, credit: float) -> list[int]:
        """1-based numbers of the criteria with this credit."""
        return [i + 1 for i, c in enumerate(self.credits) if c == credit]


def score_story(story_id: str, content: str) -> StoryScore:
    """Score a proposed story against the criteria of ``story_id``."""
    index = story_index(story_id)
    story = load_turtle().stories[story_id]
    got = index.answer_concepts(content)
    credits = tuple(index.criterion_score(a, got) for a in index.anchors)
    return StoryScore(credits, tuple(c.weight for c in story.criteria))


def feedback_text(score: StoryScore, best: float, success: bool) -> str:
    """What the agent reads after an answer: covered criteria by number only, the score, the best."""
    n = len(score.credits)
    full, half = score.numbers(1.0), score.numbers(0.5)
    parts = [f"Your story covers {len(full)} of the {n} key point(s) fully"]
    parts[0] += f" (no. {', '.join(map(str, full))})" if full else ""
    if half:
        parts.append(f"and {len(half)} partly (no. {', '.join(map(str, half))})")
    text = " ".join(parts) + f". Score {score.total:.2f}; your best so far {best:.2f}."
    return text + (" You solved it!" if success else " Keep asking, then answer again.")


def clue_fact(verdict: Verdict) -> Fact:
    """The disclosure of one yes/no answer, counted under the clause that settled it."""
    return Fact(key=verdict.key, kind="clue", text=f"{verdict.label}.", keywords=())


UNDECIDED_FACT = Fact(key="undecided", kind=UNDECIDED, text=f"{CANNOT_TELL}.", keywords=())
# The answer a reply gives: its first word(s), as the rules ask both arms to answer.
_ANSWER_RE = re.compile(r"^\W*(yes|no|irrelevant|can'?t tell|cannot tell)\b", re.IGNORECASE)
_ANSWERS = {"yes": YES, "no": NO, "irrelevant": IRRELEVANT}


def reply_answer(text: str) -> str | None:
    """Yes, No, Irrelevant or Can't tell as a reply states it (its opening words), None for any
    other reply (a refusal, a remark).

    >>> reply_answer("No."), reply_answer("yes, he was"), reply_answer("Can't tell."), reply_answer("Noted.")
    ('No', 'Yes', "Can't tell", None)
    """
    m = _ANSWER_RE.match(text)
    if m is None:
        return None
    word = m.group(1).lower()
    return _ANSWERS.get(word, CANNOT_TELL)


def check_answer(question: str, reply: str, verdict: Verdict) -> ReplyCheck:
    """Whether ``reply`` contradicts what the judge settled for ``question``: a Yes where the judge,
    confident, says No, or the reverse. Checked only when the judge is confident of a Yes or No and
    the reply states a Yes or No; an Irrelevant or Can't tell is never called wrong."""
    said = reply_answer(reply)
    if verdict.label not in (YES, NO) or said not in (YES, NO):
        return ReplyCheck(checked=False)
    if said == verdict.label:
        return ReplyCheck(checked=True)
    return ReplyCheck(
        checked=True,
        wrong=True,
        why=f"the story says {verdict.label} (judge, confident)",
        expected=verdict.label,
        said=said,
    )


@register
class TurtleEnv(UserCentricEnv):
    """Turtle soup: find the hidden story behind a strange situation with yes/no questions."""

    name = GYM
    allowed_choices = ("ask", "answer")
    fact_kinds = ("clue",)
    description = (
        "Lateral-thinking puzzle: the user knows the hidden story behind a strange situation. Ask yes/no "
        "questions (e.g. 'ASK: Was the man already dead?'), then answer with the whole story; answering "
        "again is allowed and only an improvement earns reward."
    )

    def generate_task(self, split: str, index: int) -> Task:
        return make_task(split, index)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, info = super().reset(seed=seed, options=options)
        self.best_score = 0.0
        return obs, info

    def story_id(self) -> str:
        assert self.task is not None
        return str(self.task.data["story_id"])

    def dynamic_facts(self, question: str) -> list[Fact] | None:
        verdict = story_index(self.story_id()).answer(question)
        if verdict.label == CANNOT_TELL:
            return [UNDECIDED_FACT]
        return [] if verdict.label == IRRELEVANT else [clue_fact(verdict)]

    def check_reply(self, question: str, reply: UserReply) -> ReplyCheck:
        """A reply (either arm) that the judge, where confident, contradicts (see ``check_answer``)."""
        return check_answer(question, reply.text, story_index(self.story_id()).answer(question))

    def on_answer(self, content: str) -> AnswerResult:
        score = score_story(self.story_id(), content)
        threshold = float(self.env_knobs["success_threshold"])
        gain = min(1.0, max(0.0, score.total - self.best_score))
        self.best_score = max(self.best_score, score.total)
        success = score.total >= threshold
        # Any answer counts as answering (not a deadlock), though only a success ends the episode.
        self.state.answered = True
        details = {"score": score.total, "best": self.best_score, "credits": list(score.credits)}
        return AnswerResult(gain, success, success, feedback_text(score, self.best_score, success), details)
