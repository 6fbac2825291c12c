"""Roll a policy out on a fixed list of tasks and score it (used by ``eau eval`` and the benchmarks).

Unlike training rollouts, the tasks are enumerated (task indices ``0..N-1`` of a split, per gym),
so two evaluations of the same policy with the same seed see the same tasks, users and sampling.
"""

from __future__ import annotations

from math import comb
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch

from harness.envs.registry import make as make_gym
from harness.knobs.snapshot import KnobSnapshot
from harness.rollout.backends import HFBackend, SamplingParams
from harness.rollout.chat import ChatFormat
from harness.rollout.engine import RolloutEngine
from harness.runs.metrics import core_stats


def pass_hat_k(successes: int, trials: int, k: int) -> float:
    """Unbiased estimate of pass^k (all of k fresh trials succeed) from ``successes`` of ``trials``:
    C(c, k) / C(n, k), as in tau-bench. 0 when fewer than k trials succeeded.

    >>> pass_hat_k(2, 2, 2), pass_hat_k(1, 2, 1), pass_hat_k(1, 2, 2)
    (1.0, 0.5, 0.0)
    """
    if not 1 <= k <= trials:
        raise ValueError(f"k must be in 1..{trials}, got {k}")
    return comb(successes, k) / comb(trials, k)


def evaluate_policy(
    model: torch.nn.Module,
    tokenizer: Any,
    gyms: Sequence[str],
    *,
    knobs: KnobSnapshot,
    tasks_per_gym: int | Mapping[str, int] = 20,
    trials: int = 1,
    split: str = "eval",
    seed: int = 0,
    rendering: str = "tagged",
    temperature: float = 1.0,
    top_p: float = 1.0,
    max_new_tokens_per_turn: int = 48,
    max_episode_tokens: int = 1024,
    batch_size: int = 32,
    user_factory: Any = None,
    task_offset: int = 0,
    user_replies: str = "user",
    gym_kwargs: Mapping[str, Mapping[str, Any]] | None = None,
    progress: Callable[[int, int, int], None] | None = None,
) -> dict[str, Any]:
    """Per-gym scores: ``{gym: {reward_mean, success_rate, ..., episodes}}`` plus the raw records.

    ``tasks_per_gym``: one count for every gym, or a count per gym. ``trials`` > 1 repeats every task
    (different sampling seeds) and adds ``pass_hat_k`` (the unbiased estimator, :func:`pass_hat_k`).
    ``gym_kwargs``: extra constructor arguments per gym (e.g. colbench's ``data_file``).
    ``progress(done, total, turns)`` is called after every agent turn: episodes finished, episodes
    in all, agent turns played so far (an episode plays at most its gym's ``max_steps`` turns).
    ``user_replies``: in the tool-call rendering, user replies as ``user`` messages or ``tool`` results.
    A record's ``group`` names its task (``<gym>/<split>/<index>``) and ``sample`` its trial.
    """
    chat = ChatFormat(tokenizer, rendering, user_replies=user_replies)
    engine = RolloutEngine(HFBackend(model, tokenizer), chat)
    params = SamplingParams(temperature=temperature, top_p=top_p, stop_ids=tuple(chat.stop_ids))
    counts = {g: int(tasks_per_gym[g] if isinstance(tasks_per_gym, Mapping) else tasks_per_gym) for g in gyms}
    jobs = [(g, task_offset + i, t) for g in gyms for i in range(counts[g]) for t in range(trials)]
    records: list[dict[str, Any]] = []
    devices_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    turns_before = 0
    try:
        for s in range(0, len(jobs), batch_size):
            chunk = jobs[s : s + batch_size]
            envs, kws, groups, samples = [], [], [], []
            for g, idx, t in chunk:
                kw = {"knobs": knobs, "rendering": rendering, "split": split, **dict((gym_kwargs or {}).get(g, {}))}
                if user_factory is not None:
                    kw["user_factory"] = user_factory
                envs.append(make_gym(g, **kw))
                kws.append({"seed": seed * 1_000_003 + idx * 101 + t, "options": {"task_index": idx, "split": split}})
                groups.append(f"{g}/{split}/{idx}")
                samples.append(t)

            def on_turn(
                turns: int, live: int, before: int = len(records), n: int = len(chunk), earlier: int = turns_before
            ) -> None:
                if progress is not None:
                    progress(before + n - live, len(jobs), earlier + turns)

            res = engine.run(
                envs,
                kws,
                groups,
                samples,
                params=params,
                max_new_tokens_per_turn=max_new_tokens_per_turn,
                max_episode_tokens=max_episode_tokens,
                on_turn=on_turn,
            )
            records += [e.record for e in res.episodes]
            turns_before += sum(int(e.record.get("num_turns") or 0) for e in res.episodes)
    finally:
        torch.random.set_rng_state(devices_state)
    out: dict[str, Any] = {"gyms": {}, "records": records}
    for g in gyms:
        group = [r for r in records if r["gym"] == g]
        st = core_stats(group)
        entry = {
            k: st[k]
            for k in (
                "episodes",
                "reward_mean",
                "success_rate",
                "task_score_mean",
                "turns_mean",
                "questions_mean",
                "answer_rate",
                "deadlock_rate",
                "format_error_rate",
            )
        }
        if trials > 1:
            by_task: dict[str, list[bool]] = {}
            for r in group:
                by_task.setdefault(r["group"], []).append(bool(r["success"]))
            entry["pass_hat_k"] = {
                k: float(np.mean([pass_hat_k(sum(v), len(v), k) for v in by_task.values()]))
                for k in range(1, trials + 1)
            }
        out["gyms"][g] = entry
    return out
