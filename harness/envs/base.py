"""The gym API: a Gymnasium text environment around one user-centric task.

An episode: ``reset`` draws a task (seeded, from a split), the user arm (mixture) and reads the knobs
in force; each ``step(text)`` parses one agent turn into ``interact(choice, content)`` and routes it:

* ``ask``    -> the user (symbolic or LLM) replies and may disclose facts;
* ``search`` -> the gym's tool (``on_search``);
* ``answer`` -> the gym scores it (``on_answer``); usually terminal.

Every turn's reward is the task reward plus the rule rewards (``harness.rewards``), scaled and
clipped; its breakdown is kept on the turn. Malformed turns get feedback and the ``format_error``
predicate, never an exception. Env knobs are read at reset only, so a change applies from the next
episode.

A gym subclasses :class:`UserCentricEnv` and implements ``generate_task``, ``on_answer`` and, as
needed, ``on_search``, ``on_ask``, ``dynamic_facts``, ``check_reply`` (the verifier of user
replies), ``builtin_predicates`` and ``after_turn``.
"""

from __future__ import annotations

import hashlib
from abc import abstractmethod
from typing import Any, ClassVar, Sequence

import gymnasium
import numpy as np

from harness.envs.actions import format_feedback, interact_tool_schema, parse_action, tagged_instructions
from harness.knobs.folder import defaults_dir
from harness.knobs.snapshot import KnobSnapshot
from harness.plugins.points import override_point
from harness.rewards import RewardModel
from harness.types import (
    CHOICES,
    Action,
    AnswerResult,
    EpisodeState,
    Fact,
    ReplyCheck,
    Task,
    ToolResult,
    TurnRecord,
    UserReply,
)
from harness.users import UserFactory
from harness.users.matching import discloses_unasked

SPLITS = ("train", "eval")
EVAL_SHARE = 5  # one content hash in EVAL_SHARE goes to the eval split


def split_of(content_key: str) -> str:
    """The split a task belongs to, decided by a hash of its *content* (not its seed), so the
    train and eval splits can never share a task even when two seeds draw the same content."""
    h = int(hashlib.sha256(content_key.encode()).hexdigest()[:8], 16)
    return "eval" if h % EVAL_SHARE == 0 else "train"


def task_seed(gym: str, split: str, index: int, attempt: int = 0) -> int:
    """Deterministic RNG seed of task ``index`` of a gym's split."""
    return int(hashlib.sha256(f"{gym}/{split}/{index}/{attempt}".encode()).hexdigest()[:15], 16)


def _asks_of(record: dict[str, Any]) -> list[tuple[str, str]]:
    """The ask turns of a recorded episode: ``(question, gym)``."""
    return [
        (t["action"]["content"], record["gym"])
        for t in record["turns"]
        if (t.get("action") or {}).get("choice") == "ask"
    ]


def _turns_of(record: dict[str, Any]) -> list[tuple[int, int]]:
    """Every turn of a recorded episode: ``(turns taken, max_steps)``."""
    max_steps = int(record["knobs"]["env"]["max_steps"])
    return [(i + 1, max_steps) for i in range(len(record["turns"]))]


COUNTS_AS_QUESTION = override_point(
    "base.counts_as_question",
    default=lambda question, gym: True,
    params=("question", "gym"),
    returns=bool,
    doc="Whether an ask turn counts as a question (``questions``: min_questions, the questions_over "
    "predicate, the question metrics). ``question``: the ask's text; ``gym``: the gym's name. Default: "
    "every ask counts.",
    samples=[("What is your budget?", "travel"), ("", "intention"), ("tell me the tone", "intention")],
    replay=_asks_of,
)
TURN_LIMIT_REACHED = override_point(
    "base.turn_limit_reached",
    default=lambda turns, max_steps: turns >= max_steps,
    params=("turns", "max_steps"),
    returns=bool,
    doc="Whether the episode ends at the turn limit after this turn (a deadlock when no answer was "
    "given). ``turns``: turns taken, this one included; ``max_steps``: the env knob. Default: "
    "``turns >= max_steps``.",
    samples=[(1, 16), (16, 16), (10, 10), (3, 6)],
    replay=_turns_of,
)


class UserCentricEnv(gymnasium.Env):
    """Base class of every gym. See the module docstring for the episode flow."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}
    name: ClassVar[str] = ""
    allowed_choices: ClassVar[tuple[str, ...]] = CHOICES
    fact_kinds: ClassVar[tuple[str, ...]] = ()
    description: ClassVar[str] = ""

    def __init__(
        self,
        knobs: KnobSnapshot | None = None,
        rendering: str = "tagged",
        user_factory: Any = None,
        reward_model: Any = None,
        split: str = "train",
    ):
        super().__init__()

        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; allowed: {', '.join(SPLITS)}")
        self.knobs = knobs if knobs is not None else KnobSnapshot.read_dir(defaults_dir())
        self.rendering = rendering
        self.split = split
        self.user_factory = user_factory if user_factory is not None else UserFactory()
        self.reward_model = reward_model if reward_model is not None else RewardModel()
        self.observation_space = gymnasium.spaces.Text(max_length=1 << 20)
        self.action_space = gymnasium.spaces.Text(max_length=1 << 20)
        self.task: Task | None = None
        self.state = EpisodeState()
        self.user = None
        self.arm: str | None = None
        self.env_knobs: dict[str, Any] = {}
        self.user_knobs: dict[str, Any] = {}
        self.reward_knobs: dict[str, Any] = {}
        self.np_random_episode = np.random.default_rng(0)

    # ------------------------------------------------------------------ gym hooks
    @abstractmethod
    def generate_task(self, split: str, index: int) -> Task:
        """Task ``index`` of ``split``; deterministic; must satisfy ``split_of(content) == split``."""

    @abstractmethod
    def on_answer(self, content: str) -> AnswerResult:
        """Score an answer against ``self.task``."""

    def on_search(self, query: str) -> ToolResult:
        """Run the gym's search tool (only called when ``search`` is allowed)."""
        return ToolResult("Search is not available in this task.", ok=False)

    def on_ask(self, question: str, reply: UserReply) -> tuple[float, list[str]]:
        """Task reward earned by an ask turn and extra turn events (intention scores coverage here)."""
        return 0.0, []

    def dynamic_facts(self, question: str) -> list[Fact] | None:
        """Facts computed from the question (function: probe values; telepathy: yes/no on attributes).
        None means the gym has none and users match the task's static facts."""
        return None

    def check_reply(self, question: str, reply: UserReply) -> ReplyCheck:
        """The verifier of user replies: whether ``reply`` (either arm) to ``question`` states something
        the task's truth contradicts. Default: nothing is checked (the gym has no verifier). A checked
        reply carries its verdict as the ``check`` flag (``user_wrong_rate`` in ``metrics.jsonl``)."""
        return ReplyCheck(checked=False)

    def builtin_predicates(self, record: TurnRecord) -> dict[str, float]:
        """Gym-specific progress predicates for this turn, weighted by ``reward.predicate_weight``."""
        return {}

    def after_turn(self, record: TurnRecord) -> str | None:
        """Extra text appended to the observation after a turn (travel's elicitation); may update state."""
        return None

    def system_prompt(self) -> str:
        """Instructions shown to the agent before the task."""
        how = (
            tagged_instructions(self.allowed_choices)
            if self.rendering == "tagged"
            else ("Use the interact tool for every turn.")
        )
        return (
            f"You are an assistant solving a task for a user. {self.description} The request is "
            f"incomplete on purpose: find out what the user wants before answering.\n{how}"
        )

    @classmethod
    def check_available(cls) -> None:
        """Raise ImportError naming what to install when the gym needs an absent optional package."""

    # ------------------------------------------------------------------ API
    def tool_schema(self) -> dict[str, Any]:
        return interact_tool_schema(self.allowed_choices)

    def tool_schemas(self) -> list[dict[str, Any]]:
        """Every function schema the agent may call (``info["tools"]``): the interact tool here; a gym
        with tools of its own (τ²'s domain tools) lists them instead."""
        return [self.tool_schema()]

    def set_knobs(self, knobs: KnobSnapshot) -> None:
        """Swap the knob snapshot; it is read at the next reset (never mid-episode)."""
        self.knobs = knobs

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        opts = dict(options or {})
        self.np_random_episode = np.random.default_rng(seed)
        self.env_knobs = self.knobs.area("env", self.name)
        self.user_knobs = self.knobs.area("user", self.name)
        self.reward_knobs = self.knobs.area("reward", self.name)
        split = opts.get("split", self.split)
        if "task" in opts:
            self.task = opts["task"]
        else:
            index = opts.get("task_index")
            if index is None:
                index = int(self.np_random_episode.integers(0, 2**31 - 1))
            self.task = self.generate_task(split, int(index))
        self.state = EpisodeState()
        self.arm = opts.get("arm") or self.user_factory.choose_arm(self.np_random_episode, self.user_knobs)
        self.user = self.user_factory.make(self.arm, self)
        self.user.reset(self.task, self.user_knobs, self.env_knobs, self.np_random_episode)
        self.reward_model.set_rules(self.knobs.reward_rule_files())
        obs = self.task.prompt
        info = {
            "gym": self.name,
            "task_id": self.task.task_id,
            "split": self.task.split,
            "arm": self.arm,
            "system_prompt": self.system_prompt(),
            "tools": self.tool_schemas(),
        }
        return obs, info

    def step(self, action_text: str):
        if self.task is None or self.state.done:
            raise RuntimeError(f"{self.name}: step() called before reset() or after the episode ended")
        st = self.state
        action = parse_action(action_text, self.allowed_choices, self.rendering)
        record = TurnRecord(turn=st.turn, action=action, observation="", obs_role="env")
        task_reward = 0.0
        if action.choice is None:
            st.format_errors += 1
            record.events.append("format_error")
            record.observation = format_feedback(action.format_error or "", self.allowed_choices, self.rendering)
        elif action.choice == "ask":
            task_reward = self._do_ask(action, record)
        elif action.choice == "search":
            self._do_search(action, record)
        else:
            task_reward = self._do_answer(action, record)

        st.turn += 1
        extra = self.after_turn(record) if not st.done else None
        if not st.done and self.user is not None and "new_fact" not in record.events and action.choice != "answer":
            vol = self.user.volunteer(st)
            if vol is not None and vol.text:
                self._account_reply(vol, record, volunteered=True)
                extra = (extra + "\n" if extra else "") + vol.text
        if extra:
            record.observation = (record.observation + "\n" + extra).strip()
        if not record.events or not any(e in ("new_fact", "repeat_fact") for e in record.events):
            st.turns_since_disclosure += 1
        if not st.done and TURN_LIMIT_REACHED(self.knobs, st.turn, int(self.env_knobs["max_steps"])):
            st.done = True
            st.truncated = True
            record.events.append("deadlock" if not st.answered else "turn_limit")
            if st.success is None:
                st.success = False

        st.task_score += task_reward
        builtin = self.builtin_predicates(record)
        breakdown = self.reward_model.score_turn(
            gym=self.name, record=record, state=st, task_reward=task_reward, knobs=self.reward_knobs, builtin=builtin
        )
        record.reward = float(breakdown["total"])
        record.reward_breakdown = breakdown
        st.turns.append(record)
        info = {
            "turn": record.to_dict(),
            "success": st.success,
            "arm": self.arm,
            "format_error": action.format_error,
            "deadlock": "deadlock" in record.events,
        }
        terminated = st.done and not st.truncated
        return record.observation, record.reward, terminated, st.truncated, info

    # ------------------------------------------------------------------ routing
    def _account_reply(self, reply: UserReply, record: TurnRecord, volunteered: bool = False) -> None:
        st = self.state
        for fact in reply.revealed:
            st.disclosures += 1
            seen = st.revealed.get(fact.key, 0)
            st.revealed[fact.key] = seen + 1
            record.events.append("repeat_fact" if seen else "new_fact")
        if reply.revealed:
            st.turns_since_disclosure = 0
        if volunteered:
            reply.flags["volunteered"] = True
            if record.user_reply is None:
                record.user_reply = reply
            else:
                record.user_reply.revealed.extend(reply.revealed)
                record.user_reply.flags["volunteered"] = True

    def _do_ask(self, action: Action, record: TurnRecord) -> float:
        st = self.state
        norm = " ".join(action.content.lower().split())
        if norm in st.asked:
            record.events.append("repeated_question")
        st.asked.append(norm)
        if COUNTS_AS_QUESTION(self.knobs, action.content, self.name):
            st.questions += 1
        reply = self.user.reply(action.content, st)
        limit = int(self.env_knobs.get("human_response_char_limit", 0) or 0)
        if limit and len(reply.text) > limit:
            cut = reply.text[:limit].rsplit(" ", 1)[0] or reply.text[:limit]
            reply.text = cut + " …"
            reply.flags["truncated"] = True
        check = self.check_reply(action.content, reply)
        if check.checked:
            reply.flags["check"] = check.to_flag()
        record.user_reply = reply
        record.obs_role = "user"
        record.observation = reply.text
        self._account_reply(reply, record)
        if self._discloses_unasked(action.content, reply):
            record.events.append("unasked_disclosure")
        reward, events = self.on_ask(action.content, reply)
        record.events.extend(events)
        return reward

    def _discloses_unasked(self, question: str, reply: UserReply) -> bool:
        """Whether ``reply`` gives away a task fact ``question`` did not ask about (one volunteered
        fact allowed), by the users' own matching bar: the ``unasked_rate`` of ``metrics.jsonl``
        and of the ``user_leakage`` detector, which sees it from the recorded trajectory."""
        if reply.flags.get("intent") == "volunteer" or self.task is None:
            return False
        static = {f.key for f in self.task.facts}
        disclosed = list({f.key: f for f in reply.revealed if f.key in static}.values())
        threshold = float(self.user_knobs.get("match_threshold", 0.3) or 0.3)
        return discloses_unasked(question, disclosed, threshold, volunteered=bool(reply.flags.get("volunteered")))

    def _do_search(self, action: Action, record: TurnRecord) -> None:
        self.state.searches += 1
        res = self.on_search(action.content)
        record.tool = {"name": "search", "args": action.content, "ok": res.ok, "result": res.text}
        if not res.ok:
            record.events.append("tool_failure")
        record.obs_role = "tool"
        record.observation = res.text

    def effective_min_questions(self) -> int:
        """``min_questions`` capped at ``max_steps - 1`` so an answer always stays reachable."""
        return max(0, min(int(self.env_knobs.get("min_questions", 0)), int(self.env_knobs["max_steps"]) - 1))

    def _do_answer(self, action: Action, record: TurnRecord) -> float:
        st = self.state
        need = self.effective_min_questions()
        if st.questions < need:
            record.events.append("early_answer")
            record.observation = (
                f"Please ask me at least {need} question(s) before answering (asked so far: {st.questions})."
            )
            return 0.0
        st.answers += 1
        res = self.on_answer(action.content)
        record.answer = {
            "content": action.content,
            "task_reward": res.task_reward,
            "success": res.success,
            "terminal": res.terminal,
            "details": res.details,
        }
        record.observation = res.feedback
        record.events.append("answer")
        if st.questions:
            record.events.append("answered_after_asking")
        if res.success is not None:
            st.success = res.success
        if res.terminal:
            st.answered = True
            st.done = True
        return res.task_reward

    # ------------------------------------------------------------------ records
    def episode_record(self) -> dict[str, Any]:
        """The finished (or running) episode as a JSON-ready dict for ``trajectories/``."""
        st = self.state
        return {
            "gym": self.name,
            "task": self.task.summary() if self.task else None,
            "arm": self.arm,
            "knobs": {"env": self.env_knobs, "user": self.user_knobs, "reward": self.reward_knobs},
            "turns": [t.to_dict() for t in st.turns],
            "reward": float(sum(t.reward for t in st.turns)),
            "task_score": st.task_score,
            "success": bool(st.success) if st.success is not None else False,
            "answered": st.answered,
            "deadlock": st.truncated and not st.answered,
            "num_turns": st.turn,
            "questions": st.questions,
            "searches": st.searches,
            "format_errors": st.format_errors,
            "disclosures": st.disclosures,
            "revealed": dict(st.revealed),
        }


def oracle_facts_text(facts: Sequence[Fact]) -> str:
    """Facts as one text block (used by the LLM user's prompt and by oracle agents in tests)."""
    return "\n".join(f"- {f.text}" for f in facts)
