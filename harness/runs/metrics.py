"""Episode statistics of a step: the behavioural half of a ``metrics.jsonl`` line.

Computed from trajectory records (``env.episode_record()`` plus the rollout's token counts), so the
same function serves the trainer, ``eau gate`` replays and evaluation. Metrics are always also split
by gym (``gym/<gym>/<metric>``) and by user arm (``arm/<symbolic|llm>/<metric>``): a blended number
hides the arms' difference (the method's mixed runs differed by 0.29 between arms).

User fidelity: each user reply to a question carries the gym verifier's ``check`` flag when the
verifier could judge it (``UserCentricEnv.check_reply``: turtle's judge where it is confident; the
hidden facts of travel and intention; the τ² and tau customer's identifying values). ``user_checked_rate`` and ``user_wrong_rate`` are the checked
and the flagged-wrong replies as shares of all replies to a question, overall, per gym and per arm.
"""

from __future__ import annotations

import math
from collections import defaultdict
from datetime import datetime, timezone
from typing import Any, Iterable, Mapping, Sequence

SPLIT_METRICS = (
    "reward_mean",
    "success_rate",
    "episodes",
    "answer_rate",
    "deadlock_rate",
    "questions_mean",
    "user_replies",
    "user_checked_rate",
    "user_wrong_rate",
    "leak_flag_rate",
)


def _mean(xs: Sequence[float]) -> float:
    return float(sum(xs) / len(xs)) if xs else 0.0


def _std(xs: Sequence[float]) -> float:
    if len(xs) < 2:
        return 0.0
    m = _mean(xs)
    return float(math.sqrt(sum((x - m) ** 2 for x in xs) / len(xs)))


def _turn_counts(ep: Mapping[str, Any]) -> dict[str, int]:
    """Counts of an episode's turns: asks, tool failures, leak flags, turns, disclosing replies to a
    question and of them disclosing what was not asked, user replies to a question, of them checked
    by the gym's verifier and flagged wrong."""
    c = dict.fromkeys(("asks", "fails", "leaks", "disclosing", "unasked", "replies", "checked", "wrong"), 0)
    turns = ep.get("turns") or []
    for t in turns:
        events = t.get("events") or []
        reply = t.get("user_reply") or {}
        flags = reply.get("flags") or {}
        if (t.get("action") or {}).get("choice") == "ask":
            c["asks"] += 1
            if reply.get("revealed"):
                c["disclosing"] += 1
                c["unasked"] += "unasked_disclosure" in events
            if reply:
                c["replies"] += 1
                check = flags.get("check")
                c["checked"] += isinstance(check, Mapping)
                c["wrong"] += isinstance(check, Mapping) and bool(check.get("wrong"))
        if "tool_failure" in events:
            c["fails"] += 1
        if flags.get("leak_redacted"):
            c["leaks"] += 1
    c["turns"] = len(turns)
    return c


def core_stats(episodes: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """The headline behaviour metrics of a group of episodes."""
    n = len(episodes)
    if n == 0:
        return {"episodes": 0}
    rewards = [float(e.get("reward", 0.0)) for e in episodes]
    turns_total = sum(int(e.get("num_turns", 0)) for e in episodes)
    tc: dict[str, int] = defaultdict(int)
    for e in episodes:
        for k, v in _turn_counts(e).items():
            tc[k] += v
    asks, fails, leaks, disclosing, unasked = tc["asks"], tc["fails"], tc["leaks"], tc["disclosing"], tc["unasked"]
    replies = tc["replies"]
    resp = [x for e in episodes for x in (e.get("response_tokens") or [])]
    seqs = [int(e["episode_tokens"]) for e in episodes if e.get("episode_tokens") is not None]
    return {
        "episodes": n,
        "reward_mean": _mean(rewards),
        "reward_std": _std(rewards),
        "task_score_mean": _mean([float(e.get("task_score", 0.0)) for e in episodes]),
        "success_rate": _mean([1.0 if e.get("success") else 0.0 for e in episodes]),
        "turns_mean": turns_total / n,
        "questions_mean": _mean([float(e.get("questions", 0)) for e in episodes]),
        "question_rate": asks / turns_total if turns_total else 0.0,
        "answer_rate": _mean([1.0 if e.get("answered") else 0.0 for e in episodes]),
        "format_error_rate": sum(int(e.get("format_errors", 0)) for e in episodes) / turns_total
        if turns_total
        else 0.0,
        "deadlock_rate": _mean([1.0 if e.get("deadlock") else 0.0 for e in episodes]),
        "disclosures_mean": _mean([float(e.get("disclosures", 0)) for e in episodes]),
        "tool_failure_rate": fails / turns_total if turns_total else 0.0,
        "leak_flag_rate": leaks / turns_total if turns_total else 0.0,
        # a leak the guard cannot see: replies to a question that disclose a fact it did not ask about
        "unasked_rate": unasked / disclosing if disclosing else 0.0,
        # user fidelity: replies to a question the gym's verifier checked, and found wrong
        "user_replies": replies,
        "user_checked_rate": tc["checked"] / replies if replies else 0.0,
        "user_wrong_rate": tc["wrong"] / replies if replies else 0.0,
        "token_truncation_rate": _mean([1.0 if e.get("token_truncated") else 0.0 for e in episodes]),
        "response_tokens_mean": _mean(resp) if resp else 0.0,
        # the whole sequence the update trains on (prompt, actions, observations): its cost grows with it
        "episode_tokens_mean": _mean(seqs) if seqs else 0.0,
    }


def episode_metrics(episodes: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """Core stats over all episodes plus ``gym/<g>/*``, ``arm/<a>/*`` and ``gym/<g>/arm/<a>/*`` splits."""
    eps = list(episodes)
    out: dict[str, float] = dict(core_stats(eps))
    by_gym: dict[str, list] = defaultdict(list)
    by_arm: dict[str, list] = defaultdict(list)
    by_gym_arm: dict[tuple[str, str], list] = defaultdict(list)
    for e in eps:
        by_gym[str(e.get("gym"))].append(e)
        by_arm[str(e.get("arm"))].append(e)
        by_gym_arm[(str(e.get("gym")), str(e.get("arm")))].append(e)
    for g, group in sorted(by_gym.items()):
        st = core_stats(group)
        for k in SPLIT_METRICS:
            out[f"gym/{g}/{k}"] = st[k]
    for a, group in sorted(by_arm.items()):
        st = core_stats(group)
        for k in SPLIT_METRICS:
            out[f"arm/{a}/{k}"] = st[k]
    for (g, a), group in sorted(by_gym_arm.items()):
        st = core_stats(group)
        out[f"gym/{g}/arm/{a}/reward_mean"] = st["reward_mean"]
        out[f"gym/{g}/arm/{a}/success_rate"] = st["success_rate"]
    return out


def prompts_over_budget(records: Sequence[Mapping[str, Any]], budget: int) -> dict[str, dict[str, int]]:
    """Per gym, the episodes that ended at their prompt because the prompt alone filled the token
    budget (``agent.max_episode_tokens``): ``{gym: {"episodes", "over", "prompt_tokens_max"}}`` for
    the gyms with any. Such an episode takes no action and trains nothing (a τ² policy document is
    8-14k tokens; the tiny preset's budget is 1,024)."""
    out: dict[str, dict[str, int]] = {}
    for gym in sorted({str(r.get("gym")) for r in records}):
        mine = [r for r in records if str(r.get("gym")) == gym]
        over = [int(r.get("prompt_tokens") or 0) for r in mine if int(r.get("prompt_tokens") or 0) >= budget]
        if over:
            out[gym] = {"episodes": len(mine), "over": len(over), "prompt_tokens_max": max(over)}
    return out


def prompt_alerts(
    step: int, records: Sequence[Mapping[str, Any]], budget: int, seen: set[tuple[str, int]]
) -> list[tuple[str, dict[str, Any]]]:
    """The ``prompt_over_budget`` alerts of a step, once per gym and budget (``seen`` remembers them):
    ``(message, fields)`` for each gym whose prompt alone fills ``agent.max_episode_tokens``. Such
    episodes end before their first action and train nothing, which no loss curve shows; the knob is
    live, so raising it mends the run from the next step."""
    out = []
    for gym, n in prompts_over_budget(records, budget).items():
        if (gym, budget) in seen:
            continue
        seen.add((gym, budget))
        message = (
            f"step {step}: {n['over']} of {n['episodes']} {gym} episodes ended at their prompt "
            f"({n['prompt_tokens_max']} tokens) before any action, because agent.max_episode_tokens is "
            f"{budget}; they train nothing. Raise agent.max_episode_tokens above "
            f"{n['prompt_tokens_max']} plus room for the turns (it applies from the next step)."
        )
        fields = {"gym": gym, "budget": budget, "prompt_tokens": n["prompt_tokens_max"]}
        out.append((message, {**fields, "episodes": n["episodes"], "over": n["over"]}))
    return out


def update_metrics(updates: Sequence[Mapping[str, float]], knobs: Any) -> dict[str, float]:
    """The optimisation part of a ``metrics.jsonl`` line: the update's statistics (averaged over
    processes) under their documented names, and the knob values the step ran with (``knobs``: the
    step's agent knobs, harness.ppo.hyperparams.AgentKnobs)."""
    upd = (
        {
            key: float(sum(u[key] for u in updates if key in u) / sum(1 for u in updates if key in u))
            for key in updates[0]
        }
        if updates
        else {}
    )
    return {
        "entropy": upd.get("actor/entropy", 0.0),
        "kl": upd.get("actor/kl", 0.0),
        "policy_loss": upd.get("actor/pg_loss", 0.0),
        "value_loss": upd.get("critic/vf_loss", 0.0),
        "clip_frac": upd.get("actor/clip_frac", 0.0),
        "approx_kl": upd.get("actor/approx_kl", 0.0),
        "grad_norm": upd.get("grad_norm", 0.0),
        "critic_grad_norm": upd.get("critic_grad_norm", upd.get("grad_norm", 0.0)),
        "value_mean": upd.get("critic/vpred_mean", 0.0),
        "explained_var": upd.get("critic/explained_var", 0.0),
        "lr": knobs.lr,
        "critic_lr": knobs.critic_lr,
        "lr_warmup_factor": upd.get("lr_warmup_factor", 1.0),
        "entropy_coeff": knobs.entropy_coeff,
        "kl_coef": knobs.kl_coef,
        "temperature": knobs.temperature,
        "update_skipped": upd.get("update_skipped", 0.0),  # 1: non-finite numbers, no update (harness/ppo/guards.py)
    }


def step_metrics(
    step: int,
    records: Sequence[Mapping[str, Any]],
    updates: Sequence[Mapping[str, float]],
    knobs: Any,
    score_stats: Mapping[str, float],
    rollout_t: Mapping[str, float],
    time_update: float,
    knob_version: int,
    knob_changes: int,
) -> dict[str, Any]:
    """One step's line of ``metrics.jsonl`` (before the harness and step times are added): the
    episodes', the update's and the scoring pass's metrics, the step's timings and the knob version."""
    return {
        "step": step,
        "time": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        **episode_metrics(records),
        **update_metrics(updates, knobs),
        **score_stats,
        "time_rollout_s": rollout_t["time_rollout_s"],
        "time_generate_s": rollout_t["time_generate_s"],
        "time_env_s": rollout_t["time_env_s"],
        "time_update_s": time_update,
        "rollout_tokens_per_s": rollout_t["generated_tokens"] / max(rollout_t["time_generate_s"], 1e-9),
        "knob_version": knob_version,
        "knob_changes": knob_changes,
        "episode_errors": sum(1 for r in records if r.get("error")),
    }


def step_line(m: Mapping[str, Any]) -> str:
    """A step's line in ``log.txt``."""
    return (
        f"step {m['step']}: reward {m['reward_mean']:.3f} success {m['success_rate']:.2f} "
        f"turns {m['turns_mean']:.1f} entropy {m['entropy']:.3f} kl {m['kl']:.4f} "
        f"vloss {m['value_loss']:.4f} ({m['time_step_s']:.1f}s)"
    )
