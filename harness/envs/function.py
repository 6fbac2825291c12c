"""``function``: induce a hidden integer rule ``f(a, b, c, d)`` by probing it through the user.

A task draws one rule template (a small family of arithmetic forms) with seeded constants, and a
test case (four integers). The agent:

* ``ask`` — probes the rule: ``f(1, 2, 3, 4)?``, ``(1, 2, 3, 4)`` or ``a=1 b=2 c=3 d=4`` (any order,
  commas optional). The first probe of a question is evaluated; ``dynamic_facts`` returns a fact of
  kind ``probe`` holding its value, which the user arm discloses. The user gives nothing (and this
  gym's note says why) for the test case itself (that is the task), for the same input asked more
  than ``max_repeated_probes`` times, and for a question with no well-formed probe.
* ``search`` — reveals the test case (any query).
* ``answer`` — the value of ``f`` at the test case: one integer, optionally after ``=`` (e.g.
  ``f(3, 1, 4, 1) = 17``). Expressions are not evaluated: computing the value is the agent's job,
  and evaluating model text would open a reward-hacking channel. Exact match scores 1, anything
  else 0; the answer ends the episode.

Built-in predicates (ask turns; weighted by ``reward.predicate_weight``), signed so that a positive
weight rewards good probing: ``probe_new`` +1 (an input not probed before), ``probe_repeat`` -1 (an
input probed before), ``probe_varies_one`` +1 (differs in exactly one variable from an earlier
answered probe), ``probe_test_case`` -1 (probes the test case), ``probe_malformed`` -1 (no
well-formed probe in the question).
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from dataclasses import dataclass
from typing import Any, Callable

from harness.envs.base import UserCentricEnv, split_of, task_seed
from harness.envs.registry import register
from harness.types import AnswerResult, Fact, Task, ToolResult, TurnRecord, UserReply

GYM = "function"
MAX_INPUT = 10**6  # probes beyond this magnitude are malformed (keeps values small and printable)
PREDICATES = ("probe_new", "probe_repeat", "probe_varies_one", "probe_test_case", "probe_malformed")

Probe = tuple[int, int, int, int]


@dataclass(frozen=True)
class RuleTemplate:
    """A family of rules: ``form`` (with constants k1..k3, for records) and its evaluator."""

    name: str
    form: str
    consts: int  # how many constants k1.. the form uses
    fn: Callable[[int, int, int, int, tuple[int, ...]], int]


TEMPLATES: tuple[RuleTemplate, ...] = (
    RuleTemplate("linear", "k1*a + k2*b + k3*c - d", 3, lambda a, b, c, d, k: k[0] * a + k[1] * b + k[2] * c - d),
    RuleTemplate("product_sum", "a*b + k1*c - d", 1, lambda a, b, c, d, k: a * b + k[0] * c - d),
    RuleTemplate("sum_times_diff", "(a + b) * (c - d) + k1", 1, lambda a, b, c, d, k: (a + b) * (c - d) + k[0]),
    RuleTemplate("max_min", "k1*max(a, b) + min(c, d)", 1, lambda a, b, c, d, k: k[0] * max(a, b) + min(c, d)),
    RuleTemplate("square", "a*a - k1*b + c*d", 1, lambda a, b, c, d, k: a * a - k[0] * b + c * d),
    RuleTemplate("diffs", "k1*(a - b) + k2*(c - d)", 2, lambda a, b, c, d, k: k[0] * (a - b) + k[1] * (c - d)),
    RuleTemplate("triple", "a*b*c - k1*d", 1, lambda a, b, c, d, k: a * b * c - k[0] * d),
    RuleTemplate(
        "distance", "abs(a - k1) + k2*abs(b - c) + d", 2, lambda a, b, c, d, k: abs(a - k[0]) + k[1] * abs(b - c) + d
    ),
    RuleTemplate(
        "shifted_product", "(a + k1) * (b + k2) - c - d", 2, lambda a, b, c, d, k: (a + k[0]) * (b + k[1]) - c - d
    ),
    RuleTemplate("determinant", "a*d - b*c + k1", 1, lambda a, b, c, d, k: a * d - b * c + k[0]),
    RuleTemplate("ignores_d", "k1*a + b*c + k2", 2, lambda a, b, c, d, k: k[0] * a + b * c + k[1]),
    RuleTemplate(
        "total", "k1*(a + b + c + d) - max(a, d)", 1, lambda a, b, c, d, k: k[0] * (a + b + c + d) - max(a, d)
    ),
    RuleTemplate(
        "branch", "a - b if c > d else k1*(c + d)", 1, lambda a, b, c, d, k: a - b if c > d else k[0] * (c + d)
    ),
    RuleTemplate("modulo", "(k1*a + b*c) % (k2 + 4) + d", 2, lambda a, b, c, d, k: (k[0] * a + b * c) % (k[1] + 4) + d),
)
_TEMPLATES = {t.name: t for t in TEMPLATES}

_INT = r"([-+]?\d+)"
_TUPLE_RE = re.compile(r"(?:\bf\s*)?\(\s*" + r"\s*,\s*".join([_INT] * 4) + r"\s*\)", re.IGNORECASE)
_NAMED_RE = re.compile(r"\b([abcd])\s*[=:]\s*" + _INT, re.IGNORECASE)


def evaluate(data: dict[str, Any], probe: Probe) -> int:
    """Value of the task's hidden rule at ``probe``."""
    return _TEMPLATES[data["template"]].fn(*probe, tuple(data["constants"]))


def parse_probe(text: str) -> Probe | None:
    """The first well-formed probe of a question, or None.

    >>> parse_probe("What is f(1, -2, 3, 4)?"), parse_probe("a=1, c=3, b=2, d=4"), parse_probe("f(1, 2)")
    ((1, -2, 3, 4), (1, 2, 3, 4), None)
    """
    m = _TUPLE_RE.search(text)
    if m:
        probe = tuple(int(g) for g in m.groups())
    else:
        named: dict[str, int] = {}
        for var, val in _NAMED_RE.findall(text):
            named.setdefault(var.lower(), int(val))
        if set(named) != set("abcd"):
            return None
        probe = tuple(named[v] for v in "abcd")
    if any(abs(x) > MAX_INPUT for x in probe):
        return None
    return probe  # type: ignore[return-value]


def probe_key(probe: Probe) -> str:
    """Fact key of a probe's value (disclosures of the same input count against one key)."""
    return "probe." + ",".join(str(x) for x in probe)


def fmt_probe(probe: Probe) -> str:
    """``f(a, b, c, d)`` as the user and the search tool write it."""
    return "f(" + ", ".join(str(x) for x in probe) + ")"


def make_task(split: str, index: int) -> Task:
    """Task ``index`` of ``split`` (deterministic; content decides the split)."""
    attempt = 0
    while True:
        rng = random.Random(task_seed(GYM, split, index, attempt))
        tpl = rng.choice(TEMPLATES)
        constants = [rng.randint(2, 5) for _ in range(tpl.consts)]
        test = [rng.randint(-3, 9) for _ in range(4)]
        content = {"template": tpl.name, "constants": constants, "test_case": test}
        key = json.dumps(content, sort_keys=True)
        if split_of(key) == split:
            break
        attempt += 1
    value = evaluate(content, tuple(test))  # type: ignore[arg-type]
    prompt = (
        "I have a secret function f(a, b, c, d) of four integers. Ask me for its value at inputs "
        "of your choice, e.g. 'f(1, 2, 3, 4)?' or 'a=1 b=2 c=3 d=4', to work out the rule. Search "
        "to get the test case, then answer with the value of f at the test case (one integer)."
    )
    task_id = f"{GYM}-{hashlib.sha256(key.encode()).hexdigest()[:10]}"
    return Task(
        gym=GYM,
        task_id=task_id,
        split=split,
        prompt=prompt,
        facts=[],
        secret=str(value),
        data={**content, "form": tpl.form, "value": value},
    )


_ANSWER_INT_RE = re.compile(r"[-+]?\d+")


def parse_answer(content: str) -> int | None:
    """The integer an answer gives: the only integer after the last ``=`` (or in the whole text).

    >>> parse_answer("f(3, 1, 4, 1) = -17."), parse_answer("42"), parse_answer("3 + 4")
    (-17, 42, None)
    """
    tail = content.rsplit("=", 1)[-1]
    found = _ANSWER_INT_RE.findall(tail.replace(",", ""))
    if len(found) != 1 or re.search(r"[*/%^]|\d\s*[-+]\s*\d", tail):
        return None
    return int(found[0])


def score_answer(task: Task, content: str) -> AnswerResult:
    """Exact match of the answered integer with f at the test case."""
    value = parse_answer(content)
    if value is None:
        return AnswerResult(
            0.0,
            False,
            True,
            "Answer not understood: give one integer, the value of f at the test case.",
            {"parsed": None, "error": "not_one_integer"},
        )
    ok = value == task.data["value"]
    return AnswerResult(
        1.0 if ok else 0.0,
        ok,
        True,
        "Correct." if ok else f"Wrong: {value} is not f at the test case.",
        {"parsed": value, "correct": ok},
    )


@register
class FunctionEnv(UserCentricEnv):
    """Rule induction: probe a hidden f(a, b, c, d) through the user, then compute it at a test case."""

    name = GYM
    allowed_choices = ("ask", "search", "answer")
    fact_kinds = ("probe",)
    description = (
        "Rule induction: the user knows a secret integer function f(a, b, c, d). Ask for its value "
        "at inputs you choose (e.g. 'ASK: f(1, 2, 3, 4)?'), search to get the test case, then "
        "answer with f at the test case (one integer)."
    )

    def generate_task(self, split: str, index: int) -> Task:
        return make_task(split, index)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, info = super().reset(seed=seed, options=options)
        self._probe_counts: dict[Probe, int] = {}
        self._answered: list[Probe] = []
        self._last: dict[str, Any] | None = None  # classification of this turn's probe (ask turns)
        return obs, info

    # -- probing -------------------------------------------------------------------------------
    def _refusal(self, question: str) -> tuple[Probe | None, str | None]:
        """(probe, reason it gets no value or None)."""
        assert self.task is not None
        probe = parse_probe(question)
        if probe is None:
            return None, "malformed"
        if list(probe) == self.task.data["test_case"]:
            return probe, "test_case"
        if self._probe_counts.get(probe, 0) >= int(self.env_knobs["max_repeated_probes"]):
            return probe, "repeat_limit"
        return probe, None

    def dynamic_facts(self, question: str) -> list[Fact] | None:
        probe, reason = self._refusal(question)
        if probe is None or reason is not None:
            return []
        assert self.task is not None
        value = evaluate(self.task.data, probe)
        return [
            Fact(
                key=probe_key(probe),
                kind="probe",
                text=f"{fmt_probe(probe)} = {value}.",
                keywords=("f", *[str(x) for x in probe]),
            )
        ]

    def on_ask(self, question: str, reply: UserReply) -> tuple[float, list[str]]:
        probe, reason = self._refusal(question)
        info: dict[str, Any] = {"probe": probe, "reason": reason, "seen": False, "varies_one": False}
        events: list[str] = []
        if probe is not None:
            info["seen"] = probe in self._probe_counts
            info["varies_one"] = any(sum(x != y for x, y in zip(probe, p)) == 1 for p in self._answered)
            self._probe_counts[probe] = self._probe_counts.get(probe, 0) + 1
            if any(f.key == probe_key(probe) for f in reply.revealed):
                self._answered.append(probe)
        if reason is not None:
            events.append(f"probe_{reason}")
        self._last = info
        return 0.0, events

    def builtin_predicates(self, record: TurnRecord) -> dict[str, float]:
        if record.action.choice != "ask" or self._last is None:
            return {}
        info, self._last = self._last, None
        probe, reason = info["probe"], info["reason"]
        return {
            "probe_new": 1.0 if probe is not None and reason != "test_case" and not info["seen"] else 0.0,
            "probe_repeat": -1.0 if info["seen"] else 0.0,
            "probe_varies_one": 1.0
            if probe is not None and reason is None and not info["seen"] and info["varies_one"]
            else 0.0,
            "probe_test_case": -1.0 if reason == "test_case" else 0.0,
            "probe_malformed": -1.0 if reason == "malformed" else 0.0,
        }

    def after_turn(self, record: TurnRecord) -> str | None:
        """Say why a probe got no value (the user's own words may not)."""
        if record.action.choice != "ask" or self._last is None:
            return None
        reason = self._last["reason"]
        if reason == "malformed":
            return "(To probe the function, ask e.g. 'f(1, 2, 3, 4)?' or 'a=1 b=2 c=3 d=4'.)"
        if reason == "test_case":
            return "(That is the test case: working out its value is your task, so I won't evaluate it.)"
        if reason == "repeat_limit":
            return (
                f"(You already asked for {fmt_probe(self._last['probe'])} "
                f"{self.env_knobs['max_repeated_probes']} time(s); I won't evaluate it again.)"
            )
        return None

    # -- tools and scoring ----------------------------------------------------------------------
    def on_search(self, query: str) -> ToolResult:
        assert self.task is not None
        test = tuple(self.task.data["test_case"])
        return ToolResult(
            f"Test case: {fmt_probe(test)}. Answer with the value of f at these inputs.",
            ok=True,
            data={"test_case": list(test)},
        )

    def on_answer(self, content: str) -> AnswerResult:
        assert self.task is not None
        return score_answer(self.task, content)
