"""Reward predicates: named conditions over one turn, used by the rules in ``knobs/rules/rewards``.

A predicate is ``fn(record, state, params) -> bool`` registered under a name with the parameters it
accepts. ``record`` is the turn being scored (a ``TurnRecord``; its ``events`` were set by the env)
and ``state`` the episode state *including* this turn (``state.turn`` counts it, ``state.turns``
does not hold it yet). An unknown name is an error that lists the valid ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from harness.types import EpisodeState, TurnRecord

PredicateFn = Callable[[TurnRecord, EpisodeState, Mapping[str, Any]], bool]


@dataclass(frozen=True)
class Predicate:
    """A registered predicate: its function, documentation and accepted parameters (name -> type)."""

    name: str
    fn: PredicateFn
    doc: str
    params: Mapping[str, type]

    def __call__(self, record: TurnRecord, state: EpisodeState, params: Mapping[str, Any]) -> bool:
        return bool(self.fn(record, state, params))


PREDICATES: dict[str, Predicate] = {}


def register_predicate(name: str, params: Mapping[str, type] | None = None) -> Callable[[PredicateFn], PredicateFn]:
    """Decorator: register ``fn`` as predicate ``name``; its docstring is the predicate's documentation."""

    def deco(fn: PredicateFn) -> PredicateFn:
        if name in PREDICATES:
            raise ValueError(f"reward predicate {name!r} is registered twice")
        PREDICATES[name] = Predicate(name, fn, (fn.__doc__ or "").strip(), dict(params or {}))
        return fn

    return deco


def get_predicate(name: str) -> Predicate:
    """The predicate called ``name``; the error lists the valid names."""
    try:
        return PREDICATES[name]
    except KeyError:
        raise KeyError(
            f"unknown reward predicate {name!r}; valid predicates: {', '.join(sorted(PREDICATES))}"
        ) from None


@register_predicate("format_error")
def _format_error(record: TurnRecord, state: EpisodeState, params: Mapping[str, Any]) -> bool:
    """The turn could not be parsed into interact(choice, content)."""
    return record.action.choice is None


@register_predicate("question_asked")
def _question_asked(record: TurnRecord, state: EpisodeState, params: Mapping[str, Any]) -> bool:
    """The turn is an ask."""
    return record.action.choice == "ask"


@register_predicate("asked_before_answer")
def _asked_before_answer(record: TurnRecord, state: EpisodeState, params: Mapping[str, Any]) -> bool:
    """An accepted answer turn after at least one question in the episode."""
    return record.action.choice == "answer" and "early_answer" not in record.events and state.questions >= 1


@register_predicate("new_fact_disclosed")
def _new_fact(record: TurnRecord, state: EpisodeState, params: Mapping[str, Any]) -> bool:
    """The user disclosed a fact not revealed before in this episode (volunteered facts included)."""
    return "new_fact" in record.events


@register_predicate("repeated_fact")
def _repeated_fact(record: TurnRecord, state: EpisodeState, params: Mapping[str, Any]) -> bool:
    """The user re-disclosed an already revealed fact (it still counts against max_reveals)."""
    return "repeat_fact" in record.events


@register_predicate("repeated_question")
def _repeated_question(record: TurnRecord, state: EpisodeState, params: Mapping[str, Any]) -> bool:
    """The agent asked a question it had already asked in this episode (same normalised text)."""
    return "repeated_question" in record.events


@register_predicate("tool_failure")
def _tool_failure(record: TurnRecord, state: EpisodeState, params: Mapping[str, Any]) -> bool:
    """A tool call (search) of this turn failed."""
    return "tool_failure" in record.events or bool(record.tool and record.tool.get("ok") is False)


@register_predicate("early_answer")
def _early_answer(record: TurnRecord, state: EpisodeState, params: Mapping[str, Any]) -> bool:
    """An answer refused because fewer than min_questions questions were asked."""
    return "early_answer" in record.events


@register_predicate("answer_success")
def _answer_success(record: TurnRecord, state: EpisodeState, params: Mapping[str, Any]) -> bool:
    """An answer turn the gym scored a success (a bonus for gyms whose answer earns no task reward)."""
    return record.action.choice == "answer" and bool(record.answer and record.answer.get("success") is True)


@register_predicate("deadlock")
def _deadlock(record: TurnRecord, state: EpisodeState, params: Mapping[str, Any]) -> bool:
    """The episode hit the turn limit on this turn without an answer."""
    return "deadlock" in record.events


@register_predicate("user_declined")
def _user_declined(record: TurnRecord, state: EpisodeState, params: Mapping[str, Any]) -> bool:
    """The user declined to disclose more (max_reveals reached)."""
    return bool(record.user_reply and record.user_reply.flags.get("declined"))


@register_predicate("questions_over", params={"limit": int})
def _questions_over(record: TurnRecord, state: EpisodeState, params: Mapping[str, Any]) -> bool:
    """An ask turn once the episode has more than params.limit questions (discourages over-asking)."""
    return record.action.choice == "ask" and state.questions > int(params["limit"])


def predicate_names() -> list[str]:
    """Names of all registered predicates, sorted."""
    return sorted(PREDICATES)
