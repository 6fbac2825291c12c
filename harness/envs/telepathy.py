"""``telepathy``: guess the entity the user is thinking of by asking yes/no questions.

The entity comes from the hand-built knowledge base in :mod:`harness.envs.telepathy_kb` (about 300
entities over eight categories, each with a yes/no/maybe value for every one of about 115
attributes). A question is answered through ``dynamic_facts``: every attribute it mentions becomes a
fact of kind ``attribute`` (``Yes. It can fly.``) that the user arm discloses (``facts_per_reply``
caps how many per reply). A question that names a specific entity ("is it a penguin?") is not
answered, because guessing happens with ``answer`` and one guess ends the episode; a question that
mentions no known property gets a hint listing a few.

``answer`` is the entity's name; case, articles, plurals and the knowledge base's aliases are
normalised ("Dogs", "a dog", "The dog." all name ``dog``). An answer naming several entities is
wrong. The answer ends the episode with reward 1 (right) or 0.

The task's static facts are the entity's yes/maybe attributes (what a user volunteers, and what an
LLM user's prompt lists); their keys (``attr.<name>``) are the keys of the dynamic facts, so that a
fact disclosed either way is counted once per key.
"""

from __future__ import annotations

import random
from typing import Any

from harness.envs.base import UserCentricEnv, split_of, task_seed
from harness.envs.registry import register
from harness.envs.telepathy_kb import MAYBE, YES, Attribute, Entity, load_kb
from harness.plugins.points import override_point
from harness.types import AnswerResult, Fact, Task, TurnRecord, UserReply

GYM = "telepathy"
_HINT_ATTRS = ("animal", "alive", "big", "fly", "food", "man_made", "red", "water", "europe")


def attribute_fact(attr: Attribute, value: str) -> Fact:
    """The fact that answers a question about ``attr`` for an entity whose value is ``value``."""
    return Fact(key=f"attr.{attr.name}", kind="attribute", text=attr.statement(value), keywords=attr.keywords)


def entities_of(split: str) -> list[Entity]:
    """Entities whose name puts them in ``split`` (the split is decided by the content: the name)."""
    return [e for e in load_kb().entities if split_of(f"{GYM}:{e.name}") == split]


def make_task(split: str, index: int) -> Task:
    """Task ``index`` of ``split``: a seeded draw among the split's entities."""
    pool = entities_of(split)
    ent = pool[random.Random(task_seed(GYM, split, index)).randrange(len(pool))]
    kb = load_kb()
    facts = [attribute_fact(kb.attributes[a], v) for a, v in ent.values.items() if v in (YES, MAYBE)]
    prompt = (
        "I'm thinking of something: an animal, a plant, a food, an object, a place, a profession, a "
        "vehicle or a musical instrument. Ask me yes/no questions about its properties, one at a time, "
        "then answer with its name. You get one guess."
    )
    return Task(
        gym=GYM,
        task_id=f"{GYM}-{ent.name.lower().replace(' ', '_')}",
        split=split,
        prompt=prompt,
        facts=facts,
        secret=ent.name,
        data={"entity": ent.name, "category": ent.category},
    )


def _answers_of(record: dict[str, Any]) -> list[tuple[list[str], str]]:
    """The scored guesses of a recorded telepathy episode: ``(named, entity)``."""
    return [
        (list(t["answer"]["details"]["named"]), str(t["answer"]["details"]["entity"]))
        for t in record["turns"]
        if record["gym"] == GYM and t.get("answer") and "entity" in (t["answer"].get("details") or {})
    ]


ANSWER_CORRECT = override_point(
    "telepathy.answer_correct",
    default=lambda named, entity: named == [entity],
    params=("named", "entity"),
    returns=bool,
    doc="Whether a telepathy guess is right. ``named``: the knowledge-base entities the answer names "
    "(canonical names, aliases resolved); ``entity``: the hidden one. Default: ``named == [entity]`` "
    "(exactly one entity, the right one).",
    samples=[(["dog"], "dog"), (["cat"], "dog"), ([], "dog"), (["dog", "cat"], "dog")],
    replay=_answers_of,
)


def score_answer(task: Task, content: str, knobs: Any = None) -> AnswerResult:
    """1 when the answer names exactly the hidden entity, else 0; always ends the episode. ``knobs``:
    the snapshot whose plug-in, if any, decides (``telepathy.answer_correct``)."""
    named = load_kb().entities_in_answer(content)
    names = [e.name for e in named]
    ok = ANSWER_CORRECT(knobs, names, task.data["entity"])
    if ok:
        feedback = f"Yes! I was thinking of {task.data['entity']}."
    elif not named:
        feedback = "That is not something I know; wrong guess."
    elif len(named) > 1:
        feedback = f"One guess only: you named {', '.join(names)}. Wrong."
    else:
        feedback = f"No, it was not {names[0]}."
    return AnswerResult(
        1.0 if ok else 0.0, ok, True, feedback, {"named": names, "correct": ok, "entity": task.data["entity"]}
    )


@register
class TelepathyEnv(UserCentricEnv):
    """Twenty questions: narrow down a hidden entity with yes/no questions, then guess it once."""

    name = GYM
    allowed_choices = ("ask", "answer")
    fact_kinds = ("attribute",)
    description = (
        "Guessing game: the user is thinking of something. Ask yes/no questions about its "
        "properties (e.g. 'ASK: Can it fly?'), then answer with its name; you get one guess."
    )

    def generate_task(self, split: str, index: int) -> Task:
        return make_task(split, index)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, info = super().reset(seed=seed, options=options)
        self._note: str | None = None
        return obs, info

    def entity(self) -> Entity:
        """The hidden entity of the current task."""
        assert self.task is not None
        return load_kb().entity(self.task.data["entity"])

    def dynamic_facts(self, question: str) -> list[Fact] | None:
        kb = load_kb()
        ent = self.entity()
        return [attribute_fact(a, ent.values[a.name]) for a in kb.attributes_in(question)]

    def on_ask(self, question: str, reply: UserReply) -> tuple[float, list[str]]:
        kb = load_kb()
        self._note = None
        if kb.attributes_in(question):
            return 0.0, []
        named, _ = kb.entities_in_question(question)
        if named:
            self._note = "(I don't answer guesses as questions: use ANSWER to guess; you get one guess.)"
            return 0.0, ["guess_as_question"]
        examples = "; ".join(kb.attributes[a].question for a in _HINT_ATTRS)
        self._note = f"(I can answer yes/no questions about its properties, e.g.: {examples})"
        return 0.0, ["unknown_property"]

    def after_turn(self, record: TurnRecord) -> str | None:
        note, self._note = self._note, None
        return note if record.action.choice == "ask" else None

    def on_answer(self, content: str) -> AnswerResult:
        assert self.task is not None
        return score_answer(self.task, content, self.knobs)
