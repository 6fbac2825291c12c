"""``persuade``: argue a user out of a claim it holds (UserGym's persuasion gym, UserRL's data).

A task is one of UserRL's 420 persuasion tasks (:mod:`harness.envs.persuade.data`): a claim the
user believes and its own argument for it, cut at load time into 6-8 reasons with key words. The
agent sees the claim; the reasons are the user's (it explains one when asked why, never the list).

Every turn is ``ask``: a message to the user (there is no answer to give; the user's stance is
the outcome). The user (``harness.users.persuasion``: symbolic, or the LLM arm) starts at
"strongly agree" on a seven-point scale and ends every reply with its stance; the symbolic user
moves one step toward disagreement for each reason rebutted with a concrete counter-point, not
for a point made again, and one step back for an off-topic, abusive or empty turn.

Reward (``on_ask``): the improvement of the *best* stance reached so far, in steps, divided by
``stance_threshold`` (env knob, steps from "strongly agree": 6 = "strongly disagree"). A stance
regained after moving back earns nothing again (UserRL paid for it twice), and an episode's task
reward sums to 1 exactly when it succeeds. Success: the stance reaches ``stance_threshold``; the
episode then ends (terminated). Otherwise it ends at ``max_steps`` (truncated: the run's metrics
count it as a deadlock, since persuade has no answer action; read it as "not persuaded in time").

``task_split`` (env knob) chooses the split scheme: ``userrl`` (UserRL's files) or
``claim_disjoint`` (no claim in both train and eval); the task records it in ``data.task_split``
and its id (``persuade-<scheme>-<row id>``).
"""

from __future__ import annotations

from typing import Any

from harness.envs.base import UserCentricEnv
from harness.envs.persuade.data import TASK_SPLITS, Row, reasons_of, split_rows
from harness.envs.registry import register
from harness.types import AnswerResult, Task, UserReply

GYM = "persuade"


def task_prompt(claim: str) -> str:
    """What the agent sees first: the claim, and that the user will say where it stands."""
    return (
        f'I believe this: "{claim}" Try to change my mind. After each of your messages I will tell you '
        "where I stand, from strongly agree to strongly disagree."
    )


def make_task(task_split: str, split: str, index: int) -> Task:
    """Task ``index`` of ``split`` under ``task_split`` (index modulo the split's size, file order)."""
    rows = split_rows(task_split, split)
    row: Row = rows[index % len(rows)]
    return Task(
        gym=GYM,
        task_id=f"{GYM}-{task_split}-{row.id}",
        split=split,
        prompt=task_prompt(row.claim),
        facts=[],  # the reasons are not facts: a persuadable user never discloses or volunteers them
        secret="",
        data={
            "claim": row.claim,
            "reasons": [r.to_dict() for r in reasons_of(row)],
            "source_id": row.id,
            "source_file": row.file,
            "task_split": task_split,
        },
    )


def stance_reward(best_before: int, stance: int, threshold: int) -> float:
    """Task reward of a turn: the improvement of the best stance, in units of ``threshold``."""
    return max(0, min(stance, threshold) - best_before) / threshold


@register
class PersuadeEnv(UserCentricEnv):
    """Persuasion: move the user off its claim by rebutting its reasons (module docstring)."""

    name = GYM
    allowed_choices = ("ask",)
    fact_kinds = ()
    description = (
        "Persuasion: the user holds a claim for reasons of its own. Argue against it, one message per "
        "turn (ASK: <your message>): ask why it believes the claim, then answer its reasons with concrete "
        "counter-points (figures, examples, sources, causes). The user says where it stands after each message."
    )

    def system_prompt(self) -> str:
        how = (
            "Each turn, end with exactly one line of the form\nASK: <your message to the user>"
            if self.rendering == "tagged"
            else "Use the interact tool for every turn, with choice 'ask' and your message as content."
        )
        return f"You are an assistant talking with a user. {self.description}\n{how}"

    def generate_task(self, split: str, index: int) -> Task:
        scheme = self.env_knobs.get("task_split")
        if scheme not in TASK_SPLITS:
            raise ValueError(
                f"env knob task_split = {scheme!r} (knobs/env.yaml) is not a persuade split; allowed: "
                f"{', '.join(TASK_SPLITS)}"
            )
        return make_task(str(scheme), split, index)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, info = super().reset(seed=seed, options=options)
        self.threshold = int(self.env_knobs["stance_threshold"])
        self.best_stance = 0
        self.stance = 0
        info["task_split"] = self.task.data.get("task_split") if self.task else None
        return obs, info

    def on_ask(self, question: str, reply: UserReply) -> tuple[float, list[str]]:
        stance = reply.flags.get("stance")
        events = [f"persuade_{reply.flags['outcome']}"] if "outcome" in reply.flags else []
        if not isinstance(stance, int):  # a reply without a stance (backend failure): nothing moved
            return 0.0, events
        if stance > self.stance:
            events.append("stance_up")
        elif stance < self.stance:
            events.append("stance_down")
        self.stance = stance
        reward = stance_reward(self.best_stance, stance, self.threshold)
        if stance > self.best_stance:
            self.best_stance = stance
            events.append("best_stance")
        if self.best_stance >= self.threshold:
            self.state.success = True
            self.state.done = True
            events.append("persuaded")
        return reward, events

    def on_answer(self, content: str) -> AnswerResult:
        # Unreachable: persuade allows only ``ask`` and the base class refuses other choices.
        return AnswerResult(0.0, None, False, "There is nothing to answer here: argue with ASK.")
