"""The batched multi-turn rollout engine.

A batch is ``tasks x n`` episodes (each task drawn once and shared by its ``n`` samples, so they form
a group). Two ways to decode them, the same episodes either way (greedy: token for token):

* continuous (``HFBackend``'s default, :meth:`HFBackend.run_turns`): every live episode decodes one
  token per model call; when an episode's turn ends its text goes through its gym at once and the
  observation is encoded in the next call, packed beside the other rows' next tokens, then it
  decodes on with the others, so the batch costs about its longest episode in model calls;
* per turn (any backend): every turn ONE batched ``generate`` over all live episodes, which lasts
  as long as its longest row.

vLLM's backend decodes either way (``VLLMBackend.run_turns`` queues an episode's next turn in vLLM's
own scheduler).

Each turn's text goes through its gym (``env.step``), which replies through the user, a tool or the
scorer; episodes leave the batch as they finish. Budgets: ``max_new_tokens_per_turn`` and
``max_episode_tokens`` (knobs agent.*) and the gym's ``max_steps``.

A gym's ``step`` never raises into the engine: an unexpected exception in one episode's turn ends
that episode there (the turn's reward is 0) and its record carries ``error`` (type, message, turn,
where); the other episodes and the run go on. The trainer logs an ``episode_error`` event for it.

Recorded per episode: token ids (prompt, actions, observations), the action mask (1 on tokens the
policy generated), each turn's last action token and reward, and the gym's episode record; with
``with_stats`` (continuous decoding) also each action token's sampling log-prob and, given a value
head, its state's value, so the trainer needs no scoring pass for them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from harness.envs.base import UserCentricEnv
from harness.rollout.backends import GenerationBackend, SamplingParams, TurnStats, turn_seed
from harness.rollout.chat import ChatFormat


@dataclass
class Episode:
    """One episode in progress (and its finished record)."""

    env: UserCentricEnv
    group: str
    sample: int
    messages: list[dict[str, Any]] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)
    action_mask: list[int] = field(default_factory=list)
    turn_last_token: list[int] = field(default_factory=list)  # index in ids of each turn's last action token
    turn_rewards: list[float] = field(default_factory=list)
    response_tokens: list[int] = field(default_factory=list)
    prompt_tokens: int = 0
    done: bool = False
    token_truncated: bool = False
    record: dict[str, Any] | None = None
    error: dict[str, Any] | None = None  # the exception that ended the episode, if one did
    # run(with_stats=True): per token of ids, the log-prob each action token was sampled with and the
    # value of the state it was sampled in (0 on other tokens; values None without a value head);
    # both None when the episode has a turn the backend did not score (an empty output)
    logprobs: list[float] | None = None
    values: list[float] | None = None

    def extend(self, ids: Sequence[int], is_action: bool, stats: TurnStats | None = None) -> None:
        self.ids.extend(int(i) for i in ids)
        self.action_mask.extend([1 if is_action else 0] * len(ids))
        if self.logprobs is not None:
            if stats is None and is_action:  # an action the backend did not score: none of the episode's count
                self.logprobs = self.values = None
                return
            self.logprobs.extend(stats.logprobs if stats is not None else [0.0] * len(ids))
            if self.values is not None and is_action and stats.values is None:  # never zeros for a value
                self.values = None
            elif self.values is not None:
                self.values.extend(stats.values if is_action else [0.0] * len(ids))


@dataclass
class RolloutResult:
    episodes: list[Episode]
    generated_tokens: int
    time_generate_s: float
    time_env_s: float


class RolloutEngine:
    """Runs batches of episodes against gyms: continuously (the backend's ``run_turns``) or with one
    batched generation call per turn."""

    def __init__(self, backend: GenerationBackend, chat: ChatFormat, continuous: bool | None = None):
        """``continuous``: decode episodes with the backend's ``run_turns`` (a row's next turn starts
        as soon as its last one ended) instead of one ``generate`` per turn; default: when the
        backend has it and has it switched on (``HFBackend(continuous=True)``)."""
        self.backend = backend
        self.chat = chat
        if continuous is None:
            continuous = bool(getattr(backend, "continuous", False))
        if continuous and not hasattr(backend, "run_turns"):
            raise ValueError(f"{type(backend).__name__} has no run_turns: it cannot decode continuously")
        self.continuous = continuous

    def run(
        self,
        envs: Sequence[UserCentricEnv],
        reset_kwargs: Sequence[dict[str, Any]],
        groups: Sequence[str],
        samples: Sequence[int],
        *,
        params: SamplingParams,
        max_new_tokens_per_turn: int,
        max_episode_tokens: int,
        on_turn: Callable[[int, int], None] | None = None,
        with_stats: bool = False,
        seeds: Sequence[int] | None = None,
    ) -> RolloutResult:
        """Roll out one episode per env (``reset_kwargs[i]`` goes to ``envs[i].reset``).

        ``on_turn(turns, live)``: called after each batched turn (one ``generate`` call), or in
        continuous mode after each episode's turn, with the episode turns played so far and the
        episodes still live.

        ``with_stats`` (continuous decoding only): record in every episode the log-prob each action
        token was sampled with and, when the backend has a ``value_fn``, the values
        (``Episode.logprobs`` / ``Episode.values``), so PPO needs no scoring pass for them.

        ``seeds``: one sampling seed per episode (continuous decoding, or per-turn decoding on a backend
        that seeds each request: ``per_request_seeds``, each turn then gets ``turn_seed(seed, turn)``);
        an episode's tokens then do not depend on the other episodes in the batch (the same seed rolls
        out the same episode alone or among others, up to float rounding). Default: the global torch RNG.
        """
        per_turn_seeds = not self.continuous and bool(getattr(self.backend, "per_request_seeds", False))
        if seeds is not None and ((not self.continuous and not per_turn_seeds) or len(seeds) != len(envs)):
            raise ValueError(
                f"seeds need continuous decoding or a backend that seeds each request, and one seed per episode "
                f"({len(envs)}), got {len(seeds)} with continuous={self.continuous} and {type(self.backend).__name__}"
            )
        if with_stats and not self.continuous:
            raise ValueError(
                "with_stats needs continuous decoding (run_turns): one generate per turn keeps no "
                "log-probs; score the batch after the rollout instead"
            )
        want_values = with_stats and getattr(self.backend, "value_fn", None) is not None
        episodes: list[Episode] = []
        t_env = 0.0
        self.backend.clear_cache()  # a cache from an earlier batch belongs to older weights
        for env, kw, g, s in zip(envs, reset_kwargs, groups, samples):
            t0 = time.perf_counter()
            obs, info = env.reset(**kw)
            t_env += time.perf_counter() - t0
            ep = Episode(env=env, group=g, sample=s)
            if with_stats:
                ep.logprobs, ep.values = [], ([] if want_values else None)
            ep.messages = [{"role": "system", "content": info["system_prompt"]}, {"role": "user", "content": obs}]
            if self.chat.rendering == "tool_call":
                self.chat.tools = info.get("tools")
            ep.extend(self.chat.prompt_ids(ep.messages), is_action=False)
            ep.prompt_tokens = len(ep.ids)
            if len(ep.ids) >= max_episode_tokens:  # the prompt alone exceeds the budget
                ep.done, ep.token_truncated = True, True
            episodes.append(ep)
        generated, turns = 0, 0
        t_turn_ends = 0.0  # gym steps, templating and bookkeeping between model calls

        def end_turn(ep: Episode, out: list[int], stats: TurnStats | None = None) -> list[int] | None:
            """Record a turn's ids and step its gym; the observation ids that follow, or None when over."""
            nonlocal generated, t_env
            if not out:  # a model that emits nothing still spends the turn: record one stop token
                out = [self.chat.stop_ids[0]] if self.chat.stop_ids else []
                stats = None
            ep.extend(out, is_action=True, stats=stats)
            generated += len(out)
            ep.response_tokens.append(len(out))
            ep.turn_last_token.append(len(ep.ids) - 1)
            text = self.chat.decode_action(out)
            t0 = time.perf_counter()
            try:
                obs, reward, terminated, truncated, info = ep.env.step(text)
                reward, obs_role = float(reward), (None if terminated or truncated else info["turn"]["obs_role"])
            except Exception as exc:  # noqa: BLE001 -- one episode's failure must not end the rollout
                ep.error = episode_error(exc, "step", len(ep.turn_rewards))
                reward, terminated, truncated = 0.0, True, False
            t_env += time.perf_counter() - t0
            ep.turn_rewards.append(reward)
            assistant_msg = {"role": "assistant", "content": text}
            if terminated or truncated:
                ep.done = True
                ep.messages.append(assistant_msg)
                return None
            obs_msg = self.chat.observation_message(obs_role, obs)
            obs_ids = self.chat.observation_ids(ep.messages, out, text, obs_msg)
            ep.messages += [assistant_msg, obs_msg]
            ep.extend(obs_ids, is_action=False)
            if len(ep.ids) >= max_episode_tokens - 1:
                ep.done, ep.token_truncated = True, True
                return None
            return obs_ids

        def budget(ep: Episode) -> int:
            return max(1, min(max_new_tokens_per_turn, max_episode_tokens - len(ep.ids)))

        def timed_end_turn(ep: Episode, out: list[int], stats: TurnStats | None = None) -> list[int] | None:
            nonlocal turns, t_turn_ends
            t0 = time.perf_counter()
            obs_ids = end_turn(ep, out, stats)
            t_turn_ends += time.perf_counter() - t0
            turns += 1
            return obs_ids

        t_start = time.perf_counter()
        live = [ep for ep in episodes if not ep.done]
        if self.continuous and live:

            def on_turn_end(row: int, out: list[int], stats: TurnStats | None = None) -> tuple[list[int], int] | None:
                obs_ids = timed_end_turn(live[row], out, stats)
                if on_turn is not None:
                    on_turn(turns, sum(not e.done for e in episodes))
                return None if obs_ids is None else (obs_ids, budget(live[row]))

            live_seeds = None if seeds is None else [sd for sd, ep in zip(seeds, episodes) if not ep.done]
            self.backend.run_turns(
                [ep.ids for ep in live],
                [budget(ep) for ep in live],
                params,
                on_turn_end,
                with_stats=with_stats,
                seeds=live_seeds,
            )
        episode_seed = {} if seeds is None else {id(ep): sd for ep, sd in zip(episodes, seeds)}
        while not self.continuous:
            live = [ep for ep in episodes if not ep.done]
            if not live:
                break
            if seeds is None:
                outs = self.backend.generate([ep.ids for ep in live], [budget(ep) for ep in live], params)
            else:  # each request its own seed: the episode's, and the turn's index
                turn_seeds = [turn_seed(episode_seed[id(ep)], len(ep.turn_rewards)) for ep in live]
                outs = self.backend.generate(
                    [ep.ids for ep in live], [budget(ep) for ep in live], params, seeds=turn_seeds
                )
            for ep, out in zip(live, outs):
                timed_end_turn(ep, out)
            if on_turn is not None:
                on_turn(turns, len([e for e in episodes if not e.done]))
        t_gen = time.perf_counter() - t_start - t_turn_ends  # the backend's share: model calls and sampling
        self.backend.clear_cache()  # free the batch's KV cache before the update
        for ep in episodes:
            ep.record = self._record(ep)
        return RolloutResult(episodes=episodes, generated_tokens=generated, time_generate_s=t_gen, time_env_s=t_env)

    @staticmethod
    def _record(ep: Episode) -> dict[str, Any]:
        """The gym's record of a finished episode with the engine's fields; a gym whose record
        fails gives a minimal one (and the episode an error) instead of ending the rollout."""
        try:
            rec = dict(ep.env.episode_record())
        except Exception as exc:  # noqa: BLE001
            ep.error = ep.error or episode_error(exc, "episode_record", len(ep.turn_rewards))
            rec = {
                "gym": getattr(ep.env, "name", "?"),
                "task": None,
                "turns": [],
                "reward": float(sum(ep.turn_rewards)),
                "success": False,
                "answered": False,
                "num_turns": len(ep.turn_rewards),
            }
        rec.update(
            {
                "group": ep.group,
                "sample": ep.sample,
                "prompt_tokens": ep.prompt_tokens,
                "response_tokens": list(ep.response_tokens),
                "episode_tokens": len(ep.ids),
                "token_truncated": ep.token_truncated,
            }
        )
        if ep.error is not None:
            rec["error"] = dict(ep.error)
            rec["success"] = False
        return rec


def episode_error(exc: BaseException, where: str, turn: int) -> dict[str, Any]:
    """What an episode's record keeps of the exception that ended it."""
    try:
        message = str(exc)[:500]
    except Exception:  # noqa: BLE001 -- an exception whose __str__ fails
        message = ""
    return {
        "type": f"{type(exc).__module__}.{type(exc).__qualname__}",
        "message": message,
        "where": where,
        "turn": turn,
    }
