"""A gym of this harness as an OpenEnv environment (``openenv-core``: its ``Environment``, ``Action``,
``Observation`` and ``State`` types; served by :mod:`harness.gymserver.server`).

One OpenEnv session is one gym instance: ``reset`` draws a task (``seed``, or ``task_index`` and
``split``; ``arm`` picks the user arm), reading the knobs folder's values in force at that moment (env,
user and reward knobs and rule files, as a run's episode does); ``step`` takes one agent turn as the
agent writes it (``message``: ``ASK: ...`` in the tagged rendering, a tool call in the ``tool_call``
one) and returns what came back, the turn's reward (task reward plus rule rewards, scaled and clipped,
as in training) and its breakdown. The observation that ends an episode carries the whole episode
record, as ``trajectories/`` and ``eau play --json`` write it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Optional
from uuid import uuid4

from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, EnvironmentMetadata, Observation, State
from pydantic import Field

from harness.envs.base import UserCentricEnv
from harness.envs.registry import gym_class
from harness.knobs.snapshot import KnobSnapshot
from harness.stores import open_store


class GymAction(Action):
    """One agent turn, as the agent writes it in the served rendering."""

    message: str = Field(
        ..., description="The agent's turn: 'ASK: ...', 'SEARCH: ...', 'ANSWER: ...' (tagged) or a tool call"
    )


class GymObservation(Observation):
    """What the agent sees after a reset or a turn (``reward`` and ``done`` are OpenEnv's own fields)."""

    text: str = Field(
        default="", description="The task prompt after a reset; the reply, result or feedback after a turn"
    )
    role: str = Field(default="task", description="task (after a reset), user, tool (a search or tool result) or env")
    system_prompt: str = Field(default="", description="The agent's instructions (after a reset)")
    tools: list[dict[str, Any]] = Field(
        default_factory=list, description="Function schemas the agent may call (after a reset)"
    )
    gym: str = Field(default="", description="The gym's name")
    task_id: str = Field(default="", description="The task's id")
    split: str = Field(default="", description="train or eval")
    arm: str = Field(default="", description="The user arm: symbolic or llm")
    turn: int = Field(default=0, description="Turns taken so far")
    success: Optional[bool] = Field(default=None, description="Whether the task was solved (None until scored)")
    truncated: bool = Field(default=False, description="The episode ended at the turn limit")
    reward_breakdown: dict[str, Any] = Field(default_factory=dict, description="The turn's reward, part by part")
    events: list[str] = Field(
        default_factory=list, description="The turn's events (new_fact, format_error, answer, ...)"
    )
    episode: Optional[dict[str, Any]] = Field(default=None, description="The whole episode record, once it is done")


class GymState(State):
    """The session's episode: OpenEnv's ``episode_id`` and ``step_count`` plus the gym's own totals."""

    gym: str = ""
    task_id: str = ""
    done: bool = False
    reward_total: float = 0.0


class GymEnvironment(Environment[GymAction, GymObservation, GymState]):
    """One gym behind OpenEnv's server. ``knobs``: called at every reset for the snapshot in force."""

    SUPPORTS_CONCURRENT_SESSIONS = True  # each session builds its own gym, task, user and reward state

    def __init__(
        self,
        gym: str,
        knobs: Callable[[], KnobSnapshot],
        *,
        rendering: str = "tagged",
        user_factory: Any = None,
        split: str = "train",
        arm: str | None = None,
    ):
        """``arm``: the user arm of every episode (symbolic or llm) unless a reset names one; None
        draws it from the knobs' user mixture."""
        super().__init__()
        self.gym_name, self.knobs, self.split, self.arm = gym, knobs, split, arm
        self.env: UserCentricEnv = gym_class(gym)(
            knobs=knobs(), rendering=rendering, user_factory=user_factory, split=split
        )
        self._state = GymState(gym=gym)

    def reset(
        self,
        seed: Optional[int] = None,
        episode_id: Optional[str] = None,
        task_index: Optional[int] = None,
        split: Optional[str] = None,
        arm: Optional[str] = None,
        **kwargs: Any,
    ) -> GymObservation:
        self.env.set_knobs(self.knobs())  # the knobs in force now: a folder edit applies from the next episode
        options: dict[str, Any] = {"split": split or self.split}
        if task_index is not None:
            options["task_index"] = int(task_index)
        if arm or self.arm:
            options["arm"] = arm or self.arm
        text, info = self.env.reset(seed=seed, options=options)
        self._state = GymState(
            episode_id=episode_id or str(uuid4()), step_count=0, gym=self.gym_name, task_id=info["task_id"]
        )
        return GymObservation(
            text=text,
            role="task",
            system_prompt=info["system_prompt"],
            tools=info["tools"],
            gym=info["gym"],
            task_id=info["task_id"],
            split=info["split"],
            arm=info["arm"],
            reward=0.0,
            done=False,
        )

    def step(self, action: GymAction, timeout_s: Optional[float] = None, **kwargs: Any) -> GymObservation:
        if self.env.task is None or self.env.state.done:
            raise RuntimeError(f"{self.gym_name}: step before reset or after the episode ended; reset first")
        text, reward, terminated, truncated, info = self.env.step(action.message)
        turn = info["turn"]
        done = bool(terminated or truncated)
        self._state.step_count += 1
        self._state.done = done
        self._state.reward_total += float(reward)
        task = self.env.task
        return GymObservation(
            text=text,
            role=turn["obs_role"],
            gym=self.gym_name,
            task_id=task.task_id,
            split=task.split,
            arm=str(self.env.arm),
            turn=self.env.state.turn,
            success=info["success"],
            truncated=bool(truncated),
            reward_breakdown=turn["reward_breakdown"],
            events=list(turn["events"]),
            episode=self.env.episode_record() if done else None,
            reward=float(reward),
            done=done,
        )

    @property
    def state(self) -> GymState:
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        cls = gym_class(self.gym_name)
        return EnvironmentMetadata(
            name=f"eau-{self.gym_name}",
            description=f"EAU gym {self.gym_name}: {cls.description}".strip(),
            version="1.0.0",
        )


def knobs_reader(folder: Path) -> Callable[[], KnobSnapshot]:
    """The knob snapshot in force in ``folder``, read again when a file there changed (one check of
    modification times per reset; a folder that turned invalid keeps the last valid snapshot)."""
    folder = Path(folder)
    last: dict[str, Any] = {"stamp": None, "snapshot": None}

    def stamp() -> tuple[tuple[str, int], ...]:
        return tuple(sorted((str(p), p.stat().st_mtime_ns) for p in folder.rglob("*") if p.is_file()))

    def read() -> KnobSnapshot:
        now = stamp()
        if now != last["stamp"] or last["snapshot"] is None:
            try:
                last["snapshot"] = open_store(folder, events_path=None).snapshot()
            except Exception:
                if last["snapshot"] is None:
                    raise
            last["stamp"] = now
        return last["snapshot"]

    return read
