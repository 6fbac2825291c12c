"""Replaying recorded episodes under candidate knobs and rules (``eau gate``), without training.

* :func:`replay_rewards` recomputes every recorded turn's reward with candidate reward rules and
  reward knobs through the real :class:`~harness.rewards.RewardModel`, on the recorded turn (its
  action, events, user reply flags, tool trace) and the episode state rebuilt turn by turn. The
  gym's built-in predicate values are recovered from the recorded breakdown (weighted value /
  recorded ``predicate_weight``).
* :func:`replay_episodes` re-plays each recorded episode's agent turns (their raw text, in order)
  in a fresh gym on the same task (rebuilt by :mod:`harness.analysis.tasks`) with the candidate
  knobs and rules and the symbolic user, so disclosures, leaks, rewards and outcomes show how the
  candidates would shift them. The replay is open-loop: the agent's later turns are the recorded
  ones, although a real agent would react to different replies; an episode whose recorded turns
  run out before it ends is counted as ``ran_out``.

Both stop at a time budget and say how far they got.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import time
from collections import defaultdict
from typing import Any, Mapping, Sequence

from harness.analysis.leakage import episode_leaks
from harness.analysis.tasks import record_snapshot, regenerate
from harness.envs.registry import make
from harness.knobs.snapshot import resolve
from harness.rewards import RewardModel
from harness.types import Action, EpisodeState, TurnRecord, UserReply

TOP_MOVED = 5


def _record_turn(t: Mapping[str, Any]) -> TurnRecord:
    a = t.get("action") or {}
    ur = t.get("user_reply")
    reply = UserReply(str(ur.get("text", "")), [], dict(ur.get("flags") or {})) if isinstance(ur, dict) else None
    return TurnRecord(
        turn=int(t.get("turn", 0)),
        action=Action(
            a.get("choice"),
            str(a.get("content", "")),
            str(a.get("raw", "")),
            a.get("format_error"),
            str(a.get("rendering", "tagged")),
        ),
        observation=str(t.get("observation", "")),
        obs_role=str(t.get("obs_role", "env")),
        user_reply=reply,
        tool=t.get("tool"),
        answer=t.get("answer"),
        events=list(t.get("events") or []),
    )


def _advance(state: EpisodeState, t: Mapping[str, Any], task_reward: float) -> None:
    """Update ``state`` with recorded turn ``t`` the way the env does before scoring it."""
    a = t.get("action") or {}
    ur = t.get("user_reply") if isinstance(t.get("user_reply"), dict) else {}
    events = t.get("events") or []
    state.turn += 1
    if a.get("choice") == "ask":
        state.questions += 1
    elif a.get("choice") == "search":
        state.searches += 1
    elif a.get("choice") is None:
        state.format_errors += 1
    for k in ur.get("revealed") or []:
        state.disclosures += 1
        state.revealed[k] = state.revealed.get(k, 0) + 1
    if "answer" in events and (t.get("answer") or {}).get("terminal", True):
        state.answers += 1
        state.answered = True
        state.done = True
    if "deadlock" in events or "turn_limit" in events:
        state.done = state.truncated = True
    state.task_score += task_reward


def _resolved(raw: Mapping[str, Any] | None, gym: str) -> dict[str, Any]:
    return {k: resolve(v, gym) for k, v in (raw or {}).items()}


def replay_rewards(
    episodes: Sequence[Mapping[str, Any]],
    reward_rules: Mapping[str, Any],
    reward_area: Mapping[str, Any] | None,
    *,
    time_budget_s: float,
) -> dict[str, Any]:
    """Old vs new reward of ``episodes`` under ``reward_rules`` ({stem: parsed file}) and, when given,
    the candidate ``reward_area`` (raw values of reward.yaml)."""
    model = RewardModel()
    model.set_rules(reward_rules)  # raises RewardRuleError for an invalid set (e.g. a duplicated name)
    t0 = time.perf_counter()
    old_rules: dict[str, float] = defaultdict(float)
    new_rules: dict[str, float] = defaultdict(float)
    moved = []
    notes: set[str] = set()
    done = 0
    for ep in episodes:
        if time.perf_counter() - t0 > time_budget_s:
            break
        gym = str(ep.get("gym"))
        knobs = dict((ep.get("knobs") or {}).get("reward") or {})
        old_weight = float(knobs.get("predicate_weight", 0.0) or 0.0)
        if reward_area:
            knobs.update(_resolved(reward_area, gym))
        state = EpisodeState()
        new_total = 0.0
        for t in ep.get("turns") or []:
            bd = t.get("reward_breakdown") or {}
            task_reward = float(bd.get("task", 0.0) or 0.0)
            builtin = {}
            for name, v in (bd.get("builtin") or {}).items():
                if old_weight:
                    builtin[name] = float(v) / old_weight
                elif v:
                    notes.add("builtin predicate values could not be recovered (recorded predicate_weight 0)")
            rec = _record_turn(t)
            _advance(state, t, task_reward)
            new_bd = model.score_turn(
                gym=gym, record=rec, state=state, task_reward=task_reward, knobs=knobs, builtin=builtin
            )
            state.turns.append(rec)
            new_total += float(new_bd["total"])
            for k, v in (bd.get("rules") or {}).items():
                old_rules[k] += float(v)
            for k, v in new_bd["rules"].items():
                new_rules[k] += float(v)
        old_total = float(ep.get("reward", 0.0))
        moved.append(
            {
                "episode_id": ep.get("episode_id"),
                "gym": gym,
                "success": bool(ep.get("success")),
                "old": round(old_total, 4),
                "new": round(new_total, 4),
                "delta": round(new_total - old_total, 4),
            }
        )
        done += 1
    n = max(1, done)
    by_outcome = {}
    for label, want in (("success", True), ("failure", False)):
        group = [m for m in moved if m["success"] is want]
        if group:
            by_outcome[label] = {
                "episodes": len(group),
                "old_mean": round(sum(m["old"] for m in group) / len(group), 4),
                "new_mean": round(sum(m["new"] for m in group) / len(group), 4),
            }
    old_mean = sum(m["old"] for m in moved) / n
    new_mean = sum(m["new"] for m in moved) / n
    return {
        "kind": "rewards",
        "episodes": len(episodes),
        "replayed": done,
        "complete": done == len(episodes),
        "elapsed_s": round(time.perf_counter() - t0, 3),
        "reward_mean": {"old": round(old_mean, 4), "new": round(new_mean, 4), "delta": round(new_mean - old_mean, 4)},
        "by_outcome": by_outcome,
        "rules": {
            k: {"old_total": round(old_rules.get(k, 0.0), 4), "new_total": round(new_rules.get(k, 0.0), 4)}
            for k in sorted(set(old_rules) | set(new_rules))
        },
        "most_moved": sorted(moved, key=lambda m: -abs(m["delta"]))[:TOP_MOVED],
        "notes": sorted(notes),
    }


def _episode_summary(rec: Mapping[str, Any], task: Any) -> dict[str, Any]:
    lk = episode_leaks(rec, task)
    return {
        "reward": float(rec.get("reward", 0.0)),
        "success": bool(rec.get("success")),
        "deadlock": bool(rec.get("deadlock")),
        "disclosures": int(rec.get("disclosures", 0)),
        "facts": sorted((rec.get("revealed") or {}).keys()),
        "secret_leak": lk.secret_leak,
        "redacted": len(lk.redacted_turns),
        "overdisclosed": len(set(lk.over_disclosed_turns) | set(lk.bulk_turns)),
        "filtered_kind": len(lk.filtered_kind_turns),
    }


def replay_episodes(
    episodes: Sequence[Mapping[str, Any]],
    *,
    overrides: Mapping[str, Mapping[str, Any]],
    user_rules: Mapping[str, Any],
    reward_rules: Mapping[str, Any],
    time_budget_s: float,
    plugins: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Re-play the symbolic-arm ``episodes`` under candidate knob ``overrides`` ({area: raw values}) and
    rule files, comparing disclosures, leaks, rewards and outcomes with the recorded ones. ``plugins``:
    override point -> plug-in entry in force for the replay (a candidate plug-in, harness.plugins)."""
    t0 = time.perf_counter()
    skipped: dict[str, int] = defaultdict(int)
    rows = []
    for ep in episodes:
        if time.perf_counter() - t0 > time_budget_s:
            break
        if ep.get("arm") != "symbolic":
            skipped["LLM-arm episode (its user model cannot be re-run here)"] += 1
            continue
        task, why = regenerate(ep)
        if task is None:
            skipped[why or "task not rebuilt"] += 1
            continue
        gym = str(ep.get("gym"))
        over = {area: _resolved(vals, gym) for area, vals in overrides.items()}
        snap = record_snapshot(ep, over, user_rules=user_rules, reward_rules=reward_rules)
        if plugins:
            snap = dataclasses.replace(snap, plugins=dict(plugins))
        env = make(
            gym,
            knobs=snap,
            rendering=str(((ep.get("turns") or [{}])[0].get("action") or {}).get("rendering", "tagged")),
        )
        seed = int(hashlib.sha256(str(ep.get("episode_id")).encode()).hexdigest()[:8], 16)
        env.reset(seed=seed, options={"task": copy.deepcopy(task), "arm": "symbolic", "split": task.split})
        ran_out = True
        for t in ep.get("turns") or []:
            _, _, terminated, truncated, _ = env.step(str((t.get("action") or {}).get("raw", "")))
            if terminated or truncated:
                ran_out = False
                break
        new = env.episode_record()
        new["episode_id"] = ep.get("episode_id")
        rows.append(
            {
                "episode_id": ep.get("episode_id"),
                "gym": gym,
                "old": _episode_summary(ep, task),
                "new": _episode_summary(new, task),
                "ran_out": ran_out,
            }
        )
    n = max(1, len(rows))

    def agg(side: str, key: str) -> float:
        return round(sum(float(r[side][key]) for r in rows) / n, 4)

    keys = ("reward", "success", "deadlock", "disclosures", "secret_leak", "redacted", "overdisclosed", "filtered_kind")
    changed = []
    for r in rows:
        gained = sorted(set(r["new"]["facts"]) - set(r["old"]["facts"]))
        lost = sorted(set(r["old"]["facts"]) - set(r["new"]["facts"]))
        score = (
            abs(r["new"]["reward"] - r["old"]["reward"])
            + len(gained)
            + len(lost)
            + 2 * (r["new"]["secret_leak"] != r["old"]["secret_leak"])
        )
        if score:
            changed.append(
                {
                    "episode_id": r["episode_id"],
                    "gym": r["gym"],
                    "facts_gained": gained,
                    "facts_lost": lost,
                    "reward": [round(r["old"]["reward"], 4), round(r["new"]["reward"], 4)],
                    "success": [r["old"]["success"], r["new"]["success"]],
                    "secret_leak": [r["old"]["secret_leak"], r["new"]["secret_leak"]],
                    "_score": score,
                }
            )
    changed.sort(key=lambda c: -c["_score"])
    for c in changed:
        del c["_score"]
    return {
        "kind": "episodes",
        "episodes": len(episodes),
        "replayed": len(rows),
        "complete": len(rows) + sum(skipped.values()) == len(episodes),
        "skipped": dict(skipped),
        "elapsed_s": round(time.perf_counter() - t0, 3),
        "ran_out_of_recorded_turns": sum(1 for r in rows if r["ran_out"]),
        "mean_per_episode": {k: {"old": agg("old", k), "new": agg("new", k)} for k in keys},
        "facts_revealed_per_episode": {
            "old": round(sum(len(r["old"]["facts"]) for r in rows) / n, 4),
            "new": round(sum(len(r["new"]["facts"]) for r in rows) / n, 4),
        },
        "episodes_changed": len(changed),
        "most_changed": changed[:TOP_MOVED],
        "note": "open-loop: recorded agent turns are re-sent in order; a real agent would react to different replies",
    }
