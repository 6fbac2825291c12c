"""``tau``: UserGym's tau gym (UserRL's TauGym) on the τ²-bench domain code.

Tasks: UserRL's tau-bench v1 files shipped in ``data/`` (train: 500 retail tasks; eval: 115
retail and 50 airline; Apache-2.0, ``data/SOURCE.md``). The databases are τ²'s retail and airline
``db.json`` (tau-bench v1's, unchanged), so the tools, the databases and the symbolic customer are
the τ² gyms' (``harness.envs.tau2``); only the interface, the tasks and the reward differ.

UserRL's interface, through the harness's ``interact(choice, content)`` tool:

* ``search`` with ``tools`` (the domain tools' schemas) or ``help`` (how to act);
* ``ask``: a message to the customer (``###STOP###`` in it ends the conversation);
* ``answer``: a tool call, ``{"name": ..., "arguments": {...}}``; its result is the observation.

Unlike UserRL, the agent is shown the domain policy in its instructions.

Reward (tau-bench v1): 1 when the database after the episode equals the database after replaying
the gold actions *and* every ``outputs`` string was said to the customer (case-insensitive, commas
removed), else 0; an episode that hits the turn or error limit scores 0. The episode record says
which of the two parts held (``tau2.score.components``: DB, COMMUNICATE).
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

from harness.envs.actions import format_feedback, interact_tool_schema, parse_action, tagged_instructions
from harness.envs.registry import register
from harness.envs.tau2 import domain as dom
from harness.envs.tau2.actions import STOP_TOKEN, TauTurn, parse_call
from harness.envs.tau2.gym import Tau2Env
from harness.envs.tau2.scenario import first_person, known_facts
from harness.types import Task

GYM = "tau"
DATA_DIR = Path(__file__).with_name("data")
FILES = {"train": "tau_train.json", "eval": "tau_test.json"}
# Persona sentences of a tau-bench instruction ("You are outgoing, impatient, independent.") are
# how to behave, not facts to disclose.
_PERSONA_RE = re.compile(r"^\s*you are ([a-z-]+,? )*(and )?[a-z-]+\.?\s*$", re.IGNORECASE)


class TauDataError(ValueError):
    """A tau task file that cannot be used; the message names the file, the task and the field."""


@cache
def load_tasks(split: str) -> tuple[dict[str, Any], ...]:
    """The tasks of ``split`` (``train`` | ``eval``), checked field by field."""
    path = DATA_DIR / FILES[split]
    rows = json.loads(path.read_text(encoding="utf-8"))
    for i, row in enumerate(rows):
        for field in ("id", "obs", "info"):
            if field not in row:
                raise TauDataError(f"{path}: task #{i} has no field {field!r}")
        task = row["info"].get("task") or {}
        for field in ("user_id", "actions", "instruction", "outputs"):
            if field not in task:
                raise TauDataError(f"{path}: task {row['id']!r} has no field info.task.{field}")
        if domain_of(row) not in ("retail", "airline"):
            raise TauDataError(f"{path}: task {row['id']!r}: id names no domain (retail-..., airline-...)")
    return tuple(rows)


def domain_of(row: dict[str, Any]) -> str:
    return str(row["id"]).split("-", 1)[0]


def tau2_task(row: dict[str, Any]) -> Any:
    """The task as a τ² ``Task``: the gold actions and outputs scored on DB and COMMUNICATE, which
    is tau-bench v1's reward."""
    dom.require_tau2()  # first: it silences τ²'s logger before τ² is imported
    from tau2.data_model.tasks import Task as Tau2Task

    t = row["info"]["task"]
    return Tau2Task.model_validate(
        {
            "id": str(row["id"]),
            "user_scenario": {"instructions": t["instruction"]},
            "evaluation_criteria": {
                "actions": [
                    {"action_id": f"{row['id']}_{i}", "name": a["name"], "arguments": a["kwargs"]}
                    for i, a in enumerate(t["actions"])
                ],
                "communicate_info": list(t["outputs"]),
                "reward_basis": ["DB", "COMMUNICATE"],
            },
        }
    )


def make_task(row: dict[str, Any], split: str) -> Task:
    t = row["info"]["task"]
    instruction = t["instruction"]
    facts = [
        f for f in known_facts(instruction, "instruction") if not _PERSONA_RE.match(f.text.replace("I am", "You are"))
    ]
    gold = [
        {"name": a["name"], "arguments": a["kwargs"], "requestor": "assistant", "compare_args": None}
        for a in t["actions"]
    ]
    return Task(
        gym=GYM,
        task_id=f"{GYM}-{row['id']}",
        split=split,
        prompt=row["obs"],
        facts=facts,
        secret="",
        data={
            "domain": domain_of(row),
            "tau_id": str(row["id"]),
            "user_id": t["user_id"],
            "reason_for_call": instruction,
            "known_info": None,
            "unknown_info": None,
            "task_instructions": None,
            "request": first_person(row["obs"]),
            "known_corpus": instruction,
            "gold": gold,
            "outputs": list(t["outputs"]),
        },
    )


def render(env: Any, choice: str, content: str) -> str:
    """One interact turn in ``env``'s rendering."""
    if env.rendering == "tool_call":
        call = {"name": "interact", "arguments": {"choice": choice, "content": content}}
        return f"<tool_call>{json.dumps(call, ensure_ascii=False)}</tool_call>"
    return f"{choice.upper()}: {content}"


HELP = (
    "You are a customer service agent; follow the policy in your instructions. Use search with "
    '\'tools\' to list the tools, answer with a tool call {"name": <tool>, "arguments": {...}} to '
    f"run one, and ask to send a message to the customer. Write {STOP_TOKEN} in a message to end the "
    "conversation. Get the customer's explicit confirmation before any action that changes their records."
)


@register
class TauEnv(Tau2Env):
    """UserGym's tau: tau-bench v1 tasks through UserRL's interface; see the module docstring."""

    name = GYM
    domain = "retail"  # per task: retail or airline (set at reset)
    call_choice = "answer"
    description = "tau-bench customer service (retail, airline) through search/ask/answer."

    def split_ids(self, split: str) -> tuple[str, ...]:
        return tuple(str(r["id"]) for r in load_tasks("train" if split == "train" else "eval"))

    def generate_task(self, split: str, index: int) -> Task:
        rows = load_tasks("train" if split == "train" else "eval")
        return make_task(rows[index % len(rows)], split)

    def tau2_task(self, task: Task) -> Any:
        split = "train" if task.split == "train" else "eval"
        row = next(r for r in load_tasks(split) if str(r["id"]) == task.data["tau_id"])
        return tau2_task(row)

    def tool_schemas(self) -> list[dict[str, Any]]:
        return [
            interact_tool_schema(
                self.allowed_choices,
                description="search: 'tools' lists the domain tools, 'help' explains; ask: a message to the "
                'customer; answer: run one tool, content {"name": <tool>, "arguments": {...}}.',
            )
        ]

    def system_prompt(self) -> str:
        how = (
            tagged_instructions(self.allowed_choices)
            if self.rendering == "tagged"
            else "Use the interact tool for every turn."
        )
        domain = self.task.data["domain"] if self.task is not None else self.domain
        return f"{HELP}\n{how}\n\n<policy>\n{dom.policy(domain).strip()}\n</policy>"

    def parse(self, action_text: str) -> TauTurn:
        act = parse_action(action_text, self.allowed_choices, self.rendering)
        if act.choice is None:
            fb = format_feedback(act.format_error or "", self.allowed_choices, self.rendering)
            return TauTurn([], "", False, empty=True, format_error=act.format_error, feedback=fb)
        if act.choice == "search":
            return TauTurn([], "", False, search=act.content.strip())
        if act.choice == "answer":
            return TauTurn([parse_call(act.content.strip())], "", False)
        stop = STOP_TOKEN in act.content
        msg = act.content.replace(STOP_TOKEN, "").strip()
        return TauTurn([], msg, stop, empty=not msg and not stop)

    def render_call(self, name: str, arguments: dict[str, Any]) -> str:
        return render(self, "answer", json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False))

    def render_message(self, text: str) -> str:
        return render(self, "ask", text)

    def search_result(self, query: str) -> tuple[str, bool]:
        q = query.strip().lower()
        if q in ("tools", "tool", "list tools"):
            return json.dumps([s["function"] for s in dom.tool_schemas(self.domain)], separators=(",", ":")), True
        if q == "help":
            return HELP, True
        return f"Unknown search {query!r}: search 'tools' to list the tools or 'help' for how to act.", False


__all__ = ["TauEnv", "load_tasks", "make_task", "tau2_task"]
