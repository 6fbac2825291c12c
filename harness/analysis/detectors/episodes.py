"""Detectors over episode outcomes and tool traces: deadlock, unreachable tasks, silent tool failures."""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Mapping

from harness.analysis.detectors.base import DetectorInput, Finding, detector, severity_of, skipped
from harness.analysis.run_data import num
from harness.analysis.stats import normalise_argument

# --------------------------------------------------------------------------- deadlock
# A run whose agent can always answer has ~0% deadlocks; the method's min_questions counter bug
# deadlocked 41% of episodes. 15% is far above what a few stubborn episodes give and well below that.
DEADLOCK_RATE = 0.15
# Fewer episodes than this make a rate too coarse to act on (one episode would be 10%+).
DEADLOCK_MIN_EPISODES = 10
# When at least this share of deadlocked episodes had an answer refused for too few questions, the
# cause is the min_questions/max_steps pair, not the policy.
DEADLOCK_EARLY_ANSWER_SHARE = 0.5
# When half of the deadlocked episodes' turns are malformed, the policy cannot write an action yet
# (a fresh model): more turns would not produce an answer.
DEADLOCK_FORMAT_SHARE = 0.5


def _eid(ep: Mapping[str, Any]) -> str:
    return str(ep.get("episode_id"))


def _events(ep: Mapping[str, Any]) -> list[str]:
    return [e for t in ep.get("turns") or [] for e in (t.get("events") or [])]


def _knob(ep: Mapping[str, Any], area: str, name: str) -> Any:
    return ((ep.get("knobs") or {}).get(area) or {}).get(name)


def _weighted_metric(lines: list[dict[str, Any]], name: str, weight: str = "episodes") -> tuple[float | None, int]:
    """Episode-weighted mean of a per-step metric and the episodes behind it."""
    tot = n = 0.0
    for m in lines:
        v, w = num(m.get(name)), num(m.get(weight))
        if v is not None and w:
            tot += v * w
            n += w
    return (tot / n if n else None), int(n)


@detector(
    "deadlock",
    "environment",
    {
        "rate": (DEADLOCK_RATE, "share of episodes that hit the turn limit without answering"),
        "min_episodes": (DEADLOCK_MIN_EPISODES, "episodes needed in the window"),
        "early_answer_share": (
            DEADLOCK_EARLY_ANSWER_SHARE,
            "share of deadlocked episodes with refused early answers that blames min_questions",
        ),
        "format_share": (
            DEADLOCK_FORMAT_SHARE,
            "share of malformed turns in deadlocked episodes that blames the policy",
        ),
    },
)
def deadlock(data: DetectorInput, th: Mapping[str, float]) -> Finding:
    """Episodes that hit the turn limit without answering (``deadlock``), with the likely cause:
    answers refused for too few questions (min_questions vs max_steps), malformed turns, a policy
    that only asks, or too few turns."""
    eps = data.episodes
    if not eps:
        rate, n = _weighted_metric(data.metrics, "deadlock_rate")
        if rate is None:
            return skipped("deadlock", "environment", "no trajectories or deadlock_rate metric in the window", th)
        if n < th["min_episodes"]:
            return skipped("deadlock", "environment", f"only {n} episodes in the window", th)
        flagged = rate >= th["rate"]
        return Finding(
            "deadlock",
            flagged,
            "environment",
            f"deadlock rate {rate:.2f} over {n} episodes (from metrics; no trajectories to attribute a cause)",
            severity=severity_of(rate, th["rate"]),
            metrics={"deadlock_rate": round(rate, 4), "episodes": n},
            suggestion="eau sample --outcome deadlock; env.max_steps, env.min_questions",
        )
    if len(eps) < th["min_episodes"]:
        return skipped("deadlock", "environment", f"only {len(eps)} episodes in the window", th)
    dead = [e for e in eps if e.get("deadlock")]
    rate = len(dead) / len(eps)
    by_gym: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for e in eps:
        by_gym[str(e.get("gym"))][1] += 1
        by_gym[str(e.get("gym"))][0] += 1 if e.get("deadlock") else 0
    early = [e for e in dead if "early_answer" in _events(e)]
    declined = [
        e
        for e in dead
        if any((t.get("user_reply") or {}).get("flags", {}).get("declined") for t in e.get("turns") or [])
    ]
    ask_share = (
        sum(int(e.get("questions", 0)) for e in dead) / max(1, sum(int(e.get("num_turns", 0)) for e in dead))
        if dead
        else 0.0
    )
    early_share = len(early) / len(dead) if dead else 0.0
    fmt_share = (
        sum(int(e.get("format_errors", 0)) for e in dead) / max(1, sum(int(e.get("num_turns", 0)) for e in dead))
        if dead
        else 0.0
    )
    # Does the turn limit bind? Among the episodes that succeeded, the share that needed (nearly) all
    # the turns: a limit leaving successes room to spare is not what deadlocks the others (they ask
    # without answering). No success in the window: nothing shows room, so 1.0.
    wins = [e for e in eps if e.get("success")]
    at_limit = [
        e for e in wins if isinstance(ms := _knob(e, "env", "max_steps"), int) and int(e.get("num_turns", 0)) >= ms - 1
    ]
    limit_share = len(at_limit) / len(wins) if wins else 1.0
    max_steps = sorted({v for e in dead if (v := _knob(e, "env", "max_steps")) is not None})
    min_q = sorted({v for e in dead if (v := _knob(e, "env", "min_questions")) is not None})
    metrics = {
        "deadlock_rate": round(rate, 4),
        "episodes": len(eps),
        "deadlocked": len(dead),
        "per_gym": {g: round(d / n, 4) for g, (d, n) in sorted(by_gym.items())},
        "with_refused_early_answer": len(early),
        "refused_share_in_deadlocked": round(early_share, 3),
        "successes_at_turn_limit_share": round(limit_share, 3),
        "with_user_declined": len(declined),
        "ask_share_in_deadlocked": round(ask_share, 3),
        "format_error_share_in_deadlocked": round(fmt_share, 3),
        "max_steps": max_steps,
        "min_questions": min_q,
    }
    flagged = rate >= th["rate"]
    if early_share >= th["early_answer_share"]:
        component = "config"
        cause = (
            f"{len(early)} of {len(dead)} deadlocked episodes had answers refused for too few questions "
            f"(min_questions {min_q} with max_steps {max_steps})"
        )
        suggestion = (
            "env.min_questions (lower it) or env.max_steps (raise it); eau sample --outcome deadlock; "
            "eau effect on the event that raised min_questions"
        )
    elif fmt_share >= DEADLOCK_FORMAT_SHARE:
        component = "policy"
        cause = (
            f"{fmt_share:.0%} of the deadlocked episodes' turns are malformed: the policy never writes a valid answer"
        )
        suggestion = (
            "the action format (eau sample --outcome deadlock shows the raw turns), the format_error penalty "
            "in rules/rewards, a warm start (eau sft); env.max_steps does not help here"
        )
    elif ask_share >= 0.8:
        component = "policy"
        cause = f"deadlocked episodes spend {ask_share:.0%} of turns asking and never answer"
        suggestion = (
            "a reward for answering (rules/rewards: asked_before_answer) or a questions_over penalty; "
            "env.max_steps; eau sample --outcome deadlock"
        )
    else:
        component = "environment"
        cause = "episodes run out of turns before an answer"
        suggestion = "env.max_steps for the gyms listed in per_gym; eau sample --outcome deadlock"
    return Finding(
        "deadlock",
        flagged,
        component,
        f"{rate:.0%} of {len(eps)} episodes deadlocked (threshold {th['rate']:.0%}); {cause}"
        if flagged
        else f"deadlock rate {rate:.0%} of {len(eps)} episodes is below {th['rate']:.0%}",
        severity=severity_of(rate, th["rate"]),
        metrics=metrics,
        evidence_episodes=[_eid(e) for e in (early or dead)][:5],
        matches=[_eid(e) for e in dead],
        suggestion=suggestion,
    )


# --------------------------------------------------------------------------- unreachable tasks
# With 4 samples, a task the policy solves half the time fails all four 1 time in 16; fewer samples
# cannot tell "hard" from "unlucky".
UNREACHABLE_MIN_ATTEMPTS = 4
# Half of a gym's tasks never solved while enough samples were drawn is a task or knob problem: a
# learning policy leaves a few hard tasks unsolved, not most of them.
UNREACHABLE_SHARE = 0.5
# One unsolved task is a hard task; the detector is about a share, so it needs a few.
UNREACHABLE_MIN_TASKS = 2
# A weak policy leaves most tasks unsolved by chance: at a per-sample success p, a task with n
# samples goes unsolved with probability (1-p)^n even when every task is reachable (p = 0.1, n = 4:
# 66%). A gym that solves some samples flags only when its unsolved share exceeds that chance share
# by this margin (half of the gym's tasks unreachable at p = 0.3 gives 0.51 against 0.24 expected;
# the warm-started tiny policy at p = 0.1 gives ~0.67 against 0.66). A gym with no success at all
# keeps the plain share test: nothing tells a task out of reach from a policy that never succeeds.
UNREACHABLE_EXCESS = 0.2


def _task_key(ep: Mapping[str, Any]) -> str:
    task = ep.get("task") or {}
    return str(task.get("task_id") or ep.get("group") or ep.get("episode_id"))


@detector(
    "unreachable_tasks",
    "environment",
    {
        "min_attempts": (UNREACHABLE_MIN_ATTEMPTS, "samples of a task needed before 'never succeeds' counts"),
        "share": (UNREACHABLE_SHARE, "share of a gym's tasks (with enough samples) that never succeed"),
        "min_tasks": (UNREACHABLE_MIN_TASKS, "unsolved tasks needed to flag a gym"),
        "excess": (UNREACHABLE_EXCESS, "unsolved share above the chance share at the gym's success rate (if > 0)"),
    },
)
def unreachable_tasks(data: DetectorInput, th: Mapping[str, float]) -> Finding:
    """Tasks that no sample ever solves, per gym: a share of them means the knobs or the gym make
    success impossible (nothing disclosed, a threshold out of reach), not a weak policy. Where the gym
    solves some samples, the unsolved share must also exceed the share its success rate leaves
    unsolved by chance."""
    if not data.episodes:
        return skipped("unreachable_tasks", "environment", "no trajectories in the window", th)
    tasks: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for e in data.episodes:
        tasks[(str(e.get("gym")), _task_key(e))].append(e)
    per_gym: dict[str, dict[str, Any]] = {}
    flagged_gyms = []
    matches: list[str] = []
    for gym in sorted({g for g, _ in tasks}):
        eligible = {k: v for (g, k), v in tasks.items() if g == gym and len(v) >= th["min_attempts"]}
        if not eligible:
            continue
        never = {k: v for k, v in eligible.items() if not any(e.get("success") for e in v)}
        share = len(never) / len(eligible)
        eps = [e for v in eligible.values() for e in v]
        p = sum(1 for e in eps if e.get("success")) / len(eps)
        chance = sum((1.0 - p) ** len(v) for v in eligible.values()) / len(eligible)
        eps_never = [e for v in never.values() for e in v]
        per_gym[gym] = {
            "tasks": len(eligible),
            "never_solved": len(never),
            "share": round(share, 3),
            "success_rate": round(p, 3),
            "chance_share": round(chance, 3),
            "answered_rate_of_unsolved": round(
                sum(1 for e in eps_never if e.get("answered")) / max(1, len(eps_never)), 3
            ),
            "disclosures_mean_of_unsolved": round(
                sum(float(e.get("disclosures", 0)) for e in eps_never) / max(1, len(eps_never)), 3
            ),
            "example_tasks": sorted(never)[:3],
        }
        if share >= th["share"] and len(never) >= th["min_tasks"] and (p == 0 or share - chance >= th["excess"]):
            flagged_gyms.append(gym)
            matches += [_eid(e) for e in eps_never]
    if not per_gym:
        return skipped(
            "unreachable_tasks",
            "environment",
            f"no task has {int(th['min_attempts'])}+ samples in the window (raise --window)",
            th,
        )
    flagged = bool(flagged_gyms)
    worst = max(per_gym.values(), key=lambda d: d["share"])["share"]
    if flagged:
        summary = (
            "tasks never solved by any sample: "
            + "; ".join(f"{g} {per_gym[g]['never_solved']}/{per_gym[g]['tasks']}" for g in flagged_gyms)
            + " (answered but wrong points at scoring/thresholds; few disclosures points at the user knobs)"
        )
    else:
        summary = (
            f"at most {worst:.0%} of a gym's tasks went unsolved (threshold {th['share']:.0%}, or "
            f"{th['excess']:.0%} above the share the gym's success rate leaves unsolved by chance)"
        )
    return Finding(
        "unreachable_tasks",
        flagged,
        "environment",
        summary,
        severity=severity_of(worst, th["share"], high_factor=1.8),
        metrics={"per_gym": per_gym},
        matches=matches,
        suggestion=(
            "for the gyms flagged: user.reveal_kinds / user.max_reveals (is anything disclosed?), "
            "env.success_threshold, env.max_steps; eau tasks; eau sample --flag unreachable_tasks"
        ),
    )


# --------------------------------------------------------------------------- silent tool failures
# A group of calls with the same argument needs a few calls before "always fails" means anything.
TOOL_MIN_CALLS = 5
# "(Almost) always": a flaky tool fails now and then; an argument that fails 9 times in 10 is broken
# (or the failure knob is set to fail everything).
TOOL_FAIL_SHARE = 0.9
MAX_GROUPS_SHOWN = 5


@detector(
    "silent_tool_failures",
    "environment",
    {
        "min_calls": (TOOL_MIN_CALLS, "calls with the same normalised argument needed to judge a group"),
        "fail_share": (TOOL_FAIL_SHARE, "failure share of a group that counts as always failing"),
    },
)
def silent_tool_failures(data: DetectorInput, th: Mapping[str, float]) -> Finding:
    """Tool calls (``tool.ok == false``) grouped by gym, tool and normalised argument; a group that
    (almost) always fails is a broken tool or a failure knob, which the agent cannot learn around."""
    groups: dict[tuple[str, str, str], dict[str, Any]] = {}
    calls = fails = 0
    for e in data.episodes:
        for t in e.get("turns") or []:
            tool = t.get("tool")
            if not isinstance(tool, dict):
                continue
            calls += 1
            key = (str(e.get("gym")), str(tool.get("name")), normalise_argument(str(tool.get("args", ""))))
            g = groups.setdefault(key, {"calls": 0, "failures": 0, "episodes": [], "result": None})
            g["calls"] += 1
            if tool.get("ok") is False:
                fails += 1
                g["failures"] += 1
                g["episodes"].append(_eid(e))
                g["result"] = g["result"] or str(tool.get("result", ""))[:160]
    if not calls:
        return skipped("silent_tool_failures", "environment", "no tool calls in the window", th)
    bad = [
        (k, g)
        for k, g in groups.items()
        if g["calls"] >= th["min_calls"] and g["failures"] / g["calls"] >= th["fail_share"]
    ]
    bad.sort(key=lambda kg: -kg[1]["calls"])
    shown = [
        {
            "gym": k[0],
            "tool": k[1],
            "argument": k[2],
            "calls": g["calls"],
            "failures": g["failures"],
            "fail_share": round(g["failures"] / g["calls"], 3),
            "result": g["result"],
        }
        for k, g in bad[:MAX_GROUPS_SHOWN]
    ]
    by_gym: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for (gym, _, _), g in groups.items():
        by_gym[gym][0] += g["failures"]
        by_gym[gym][1] += g["calls"]
    metrics = {
        "calls": calls,
        "failures": fails,
        "failure_rate": round(fails / calls, 4),
        "per_gym_failure_rate": {g: round(f / n, 4) for g, (f, n) in sorted(by_gym.items())},
        "groups": len(groups),
        "always_failing_groups": len(bad),
        "worst_groups": shown,
    }
    flagged = bool(bad)
    matches = [ep for _, g in bad for ep in g["episodes"]]
    summary = (
        f"{len(bad)} argument group(s) fail (almost) always, e.g. {shown[0]['tool']}({shown[0]['argument']!r}) "
        f"in {shown[0]['gym']}: {shown[0]['failures']}/{shown[0]['calls']} failed"
        if flagged
        else f"tool failure rate {fails / calls:.1%} over {calls} calls; no argument group always fails"
    )
    return Finding(
        "silent_tool_failures",
        flagged,
        "environment",
        summary,
        severity="high" if flagged and fails / calls >= 0.5 else "medium",
        metrics=metrics,
        matches=matches,
        suggestion="env.search_failure_interval (1 fails every search) and the gym's search tool; "
        "eau sample --flag silent_tool_failures",
    )
