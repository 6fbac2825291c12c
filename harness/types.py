"""Plain data types shared by gyms, users, rewards and the rollout engine.

Everything here is JSON-serialisable through ``to_dict`` so that trajectories can be written and
replayed (``eau gate`` replays recorded episodes through changed rules).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

CHOICES = ("ask", "search", "answer")
ARMS = ("symbolic", "llm")
# The kind of a dynamic fact that says the gym cannot settle the question (turtle's judge when its
# evidence is weak). It is never a disclosure: the symbolic user answers with the rule file's
# ``undecided`` reply, and the LLM user is given no verdict for that question.
UNDECIDED = "undecided"


@dataclass(frozen=True)
class Fact:
    """One piece of hidden information a user holds about the task.

    key: unique within a task (e.g. ``pref.hotel.stars``); disclosures are counted per key.
    kind: category used by the ``reveal_kinds`` knob (preference, attribute, detail, probe, rule,
        signature, shape, return, edge_case, constant, clue); ``UNDECIDED`` marks a gym's "cannot
        tell" (never disclosed).
    text: how the user states it.
    keywords: content words a question about this fact is likely to contain (matching).
    importance: 1 (most important) to 3, used by the intention gym; 1 elsewhere.
    """

    key: str
    kind: str
    text: str
    keywords: tuple[str, ...] = ()
    importance: int = 1

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["keywords"] = list(self.keywords)
        return d


@dataclass
class Task:
    """One task instance of a gym.

    prompt: what the agent sees first (underspecified on purpose).
    facts: hidden facts the user holds.
    secret: the hidden answer or reference; a user must never disclose it (leak guard, tests).
    data: gym-specific payload (options, the hidden rule, the reference code and tests, ...). Two
        optional keys are read by the users: ``user_role`` (text that replaces the LLM user's
        generic "you asked an assistant for help" role) and ``leak_span_tokens`` (the leak guard's
        token span for this task, default 8).
    """

    gym: str
    task_id: str
    split: str
    prompt: str
    facts: list[Fact]
    secret: str
    data: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        """What a trajectory records about the task (no bulky data)."""
        return {
            "gym": self.gym,
            "task_id": self.task_id,
            "split": self.split,
            "prompt": self.prompt,
            "facts": [f.to_dict() for f in self.facts],
        }


@dataclass
class Action:
    """A parsed agent turn. ``choice`` is None when the turn was malformed (see ``format_error``)."""

    choice: str | None
    content: str
    raw: str
    format_error: str | None = None
    rendering: str = "tagged"  # "tagged" or "tool_call"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class UserReply:
    """A user's reply and the facts it disclosed (repeats included)."""

    text: str
    revealed: list[Fact] = field(default_factory=list)
    flags: dict[str, Any] = field(default_factory=dict)  # e.g. leak_redacted, truncated, intent, declined

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "revealed": [f.key for f in self.revealed], "flags": dict(self.flags)}


@dataclass(frozen=True)
class ReplyCheck:
    """A verifier's verdict on one user reply (a gym's ``check_reply``), stored on the reply as its
    ``check`` flag when ``checked`` (``metrics.jsonl``: ``user_checked_rate``, ``user_wrong_rate``).

    checked: the verifier could judge the reply (it speaks to something the gym knows for sure).
    wrong: the reply states something the task's truth contradicts.
    why, expected, said: for a wrong reply, what the truth is and what the reply said.
    """

    checked: bool
    wrong: bool = False
    why: str = ""
    expected: str = ""
    said: str = ""

    def to_flag(self) -> dict[str, Any]:
        """The ``check`` flag of a checked reply."""
        flag: dict[str, Any] = {"wrong": self.wrong}
        if self.wrong:
            flag.update({"why": self.why, "expected": self.expected, "said": self.said})
        return flag


@dataclass
class ToolResult:
    """Result of a non-user tool call (``search``). ``ok`` False records a failure in the trace."""

    text: str
    ok: bool = True
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class AnswerResult:
    """Scoring of an ``answer`` action.

    task_reward: the verifiable reward of this answer.
    success: task success (None when the gym does not decide success on this answer).
    terminal: whether the episode ends.
    feedback: observation returned to the agent.
    details: scoring details (e.g. tests passed) kept in the trajectory.
    """

    task_reward: float
    success: bool | None
    terminal: bool
    feedback: str
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class TurnRecord:
    """Everything that happened in one agent turn; one entry of a trajectory's ``turns``."""

    turn: int
    action: Action
    observation: str
    obs_role: str  # "user" (a user reply), "tool" (search result) or "env" (feedback, scoring)
    user_reply: UserReply | None = None
    tool: dict[str, Any] | None = None  # {"name", "args", "ok", "result"}
    answer: dict[str, Any] | None = None
    reward: float = 0.0
    reward_breakdown: dict[str, Any] = field(default_factory=dict)
    events: list[str] = field(default_factory=list)  # e.g. "new_fact", "repeated_question", "early_answer"

    def to_dict(self) -> dict[str, Any]:
        return {
            "turn": self.turn,
            "action": self.action.to_dict(),
            "observation": self.observation,
            "obs_role": self.obs_role,
            "user_reply": self.user_reply.to_dict() if self.user_reply else None,
            "tool": self.tool,
            "answer": self.answer,
            "reward": self.reward,
            "reward_breakdown": self.reward_breakdown,
            "events": list(self.events),
        }


@dataclass
class EpisodeState:
    """Counters and history of the episode in progress, read by users and reward predicates."""

    turn: int = 0  # completed agent turns
    questions: int = 0  # ask actions (every turn whose action is ask counts; see min_questions)
    searches: int = 0
    answers: int = 0
    format_errors: int = 0
    disclosures: int = 0  # every disclosure, repeats included (max_reveals counts this)
    revealed: dict[str, int] = field(default_factory=dict)  # fact key -> times disclosed
    turns_since_disclosure: int = 0
    asked: list[str] = field(default_factory=list)  # normalised ask contents, in order
    turns: list[TurnRecord] = field(default_factory=list)
    answered: bool = False
    success: bool | None = None
    done: bool = False
    truncated: bool = False
    task_score: float = 0.0  # sum of task rewards so far (can exceed 1 on intention)
