"""τ² gyms and tau: scripted episodes, the symbolic customer's reply time, its leaks and its stops.

Parts (``--parts``, all by default):

* ``episodes``: for each gym and split, the scripted oracle's success rate and wall time per episode
  (median, p95) over every task of the split (``--step N``: every N-th task), and the random
  agent's success rate on every ``--random-step``-th task;
* ``reply``: the symbolic customer's reply time (median, p95 over ``--replies`` replies cycling
  through info questions, confirmations and wrap-ups, on the gym's first task);
* ``leaks``: on every task of both splits, (a) the value probes: info questions and confirmations
  that carry a gold action's arguments; a reply leaks when it states an identifier or number found
  in the unknown info or in a gold action's arguments that the customer does not know; (b) the
  confirmation probes: for each id of a gold write that the customer was not given, the same
  confirmation request with the right id and with one digit changed (two wordings: the oracle's
  and "To confirm: I will <verb> using <id> ... yes or no?"), each asked of the customer in the
  same state; a pair whose replies differ tells the agent whether the id is right;
* ``premature``: τ²-bench's premature-stop failure (the customer ends the conversation after
  confirming an action, before the task's other requests are done), over every task of both splits
  with the oracle, the random agent (which ends a third of its turns itself with ``###STOP###``),
  the random agent that never ends the conversation itself, and an agent that closes the
  conversation ("anything else?") as soon as its first requested write is done. A premature stop: the customer ends the
  conversation as satisfied (``done``) while a requested write (τ²'s ACTION rule) or a required
  output (COMMUNICATE) is still missing. Refusal stops (the agent refused ``max_insist`` + 1
  times) are counted apart.

Prints one JSON line per gym and part, then one JSON document.

    python benchmarks/bench_tau2.py [--gyms tau2_airline,tau2_retail,tau2_telecom,tau] [--parts ...]
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import statistics
import time
from typing import Any, Callable

import numpy as np

from harness.agents.scripted import oracle_action, random_action, run_episode
from harness.envs.registry import make
from harness.envs.tau2.actions import STOP_TOKEN
from harness.envs.tau2.scenario import flat_values, id_tokens, pending

QUESTIONS = (
    "Could you give me your name and zip code?",
    "What is your email address?",
    "I will cancel order #W0000000. Do you confirm (yes/no)?",
    "Which order do you mean?",
    "Is there anything else I can help you with?",
    "Please check your status bar.",
)


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def episodes(gym: str, split: str, policy: str, step: int) -> dict[str, float]:
    env = make(gym, split=split)
    n = env.task_count(split)
    times, wins, turns = [], 0, []
    for i in range(0, n, step):
        t0 = time.perf_counter()
        rec = run_episode(env, policy, seed=i, options={"task_index": i})
        times.append((time.perf_counter() - t0) * 1000)
        wins += bool(rec["success"])
        turns.append(rec["num_turns"])
    k = len(times)
    return {
        "episodes": k,
        "success": round(wins / k, 4),
        "median_ms": round(statistics.median(times), 1),
        "p95_ms": round(pct(times, 0.95), 1),
        "mean_turns": round(sum(turns) / k, 2),
    }


def reply_times(gym: str, replies: int) -> dict[str, float]:
    env = make(gym)
    env.reset(seed=0, options={"task_index": 0})
    times = []
    for i in range(replies):
        q = QUESTIONS[i % len(QUESTIONS)] + f" ({i})"
        t0 = time.perf_counter_ns()
        env.user.reply(q, env.state)
        times.append((time.perf_counter_ns() - t0) / 1e6)
    return {"replies": replies, "median_ms": round(statistics.median(times), 3), "p95_ms": round(pct(times, 0.95), 3)}


# ------------------------------------------------------------------ leaks
VALUE_RE = re.compile(r"[\w.@#-]*\d[\w.@#-]*|[\w.]+@[\w.]+")
INFO_PROBES = (
    "What is your email address?",
    "Can you give me your name and zip code?",
    "What is your user id?",
    "Which order is it? Please give me the order id.",
    "What are the item ids you want to change?",
    "Which payment method should we use? Give me the payment method id.",
    "What is your reservation id or confirmation number?",
    "What is the flight number?",
    "What is your address?",
    "Tell me everything you know.",
    "Is there anything else?",
)


def one_digit_changed(token: str) -> str:
    """``token`` with its last digit replaced by the next one (9 -> 0): the same kind of id, wrong."""
    i = max(i for i, c in enumerate(token) if c.isdigit())
    return token[:i] + str((int(token[i]) + 1) % 10) + token[i + 1 :]


def _tasks(env: Any) -> list[tuple[str, int]]:
    return [(split, i) for split in ("train", "eval") for i in range(env.task_count(split))]


def _reply(env: Any, split: str, index: int, message: str) -> Any:
    """The customer's reply to ``message`` as the agent's first message of a fresh episode."""
    env.reset(seed=index, options={"task_index": index, "split": split})
    return env.user.reply(message, env.state)


def confirmation_pairs(env: Any) -> list[tuple[str, str, str]]:
    """(id, message with the right id, message with one digit changed) for every id of every gold
    write of the current task that the customer was not given (two wordings each)."""
    sc = env.user.scenario
    known = id_tokens(env.task.data["known_corpus"], sc.ids)
    out = []
    for g in env.gold():
        if g.requestor != "assistant" or g.name not in env.write_tools():
            continue
        args = json.dumps(g.arguments)
        for token in sorted(id_tokens(" ".join(flat_values(g.arguments)), sc.ids) - known):
            raw = next((v for v in flat_values(g.arguments) if v.lower() == token), token)
            wrong = one_digit_changed(raw)
            if wrong.lower() in known or not any(c.isdigit() for c in raw):
                continue
            forms = (
                f"I will now {g.verb()} as follows: {g.name} {{}}. Do you confirm (yes/no)?",
                f"To confirm: I will {g.verb()} using {{}} as we discussed. Yes or no?",
            )
            out.append((raw, forms[0].format(args), forms[0].format(args.replace(raw, wrong))))
            out.append((raw, forms[1].format(raw), forms[1].format(wrong)))
    return out


def leaks(gym: str, step: int = 1) -> dict[str, Any]:
    """The value probes and the confirmation probes over every ``step``-th task of ``gym`` (both splits)."""
    env = make(gym)
    replies = leaked = pairs = differing = 0
    examples: list[dict[str, str]] = []
    tasks = _tasks(env)[::step]
    for split, i in tasks:
        env.reset(seed=i, options={"task_index": i, "split": split})
        d = env.task.data
        secret = {v.lower() for g in d["gold"] for v in flat_values(g["arguments"])}
        secret |= {m.lower() for m in VALUE_RE.findall(d.get("unknown_info") or "")}
        known = d["known_corpus"].lower()
        messages = [
            f"I will {g['name'].split('_')[0]} {json.dumps(g['arguments'])}. Confirm (yes/no)?" for g in d["gold"]
        ]
        probes = confirmation_pairs(env)
        for message in [*messages, *INFO_PROBES]:
            text = _reply(env, split, i, message).text
            replies += 1
            bad = [v for v in (x.strip(".").lower() for x in VALUE_RE.findall(text)) if v in secret and v not in known]
            if bad:
                leaked += 1
                if len(examples) < 5:
                    examples.append({"task": env.task.task_id, "asked": message, "reply": text, "values": bad})
        for token, right, wrong in probes:
            pairs += 1
            a, b = _reply(env, split, i, right).text, _reply(env, split, i, wrong).text
            if a != b:
                differing += 1
                if len(examples) < 10:
                    examples.append({"task": env.task.task_id, "id": token, "right": a, "wrong": b})
    return {
        "tasks": len(tasks),
        "value_probes": replies,
        "replies_stating_an_unknown_value": leaked,
        "confirmation_pairs": pairs,
        "pairs_answered_differently": differing,
        "examples": examples,
    }


# ------------------------------------------------------------------ premature stops
CLOSING = "Your request has been taken care of. Is there anything else I can help you with?"


def requested_writes(env: Any) -> list[Any]:
    """The gold actions the customer wants done: its own (telecom) and the agent's writes."""
    return [g for g in env.gold() if g.requestor == "user" or g.name in env.write_tools()]


def closes_after_first_write(env: Any) -> str:
    """The oracle until one requested write is done, then a closing question every turn."""
    done = env.done_calls()
    if any(g.matches(n, a) for g in requested_writes(env) for n, a in done):
        return env.render_message(CLOSING)
    return oracle_action(env)


def random_without_stop(seed: int) -> Callable[[Any], str]:
    """The random agent (``harness.agents.scripted``) that never ends the conversation itself, so its
    episodes run until the customer stops or the turn limit: every stop is the customer's."""
    rng = np.random.default_rng(seed)

    def act(env: Any) -> str:
        while True:
            turn = random_action(env, rng)
            if STOP_TOKEN not in turn:
                return turn

    return act


def stop_check(env: Any, rec: dict[str, Any]) -> dict[str, Any] | None:
    """How an episode that ended on the customer's side ended (``done``, ``refused``, ``transfer``,
    ``out_of_scope``; ``agent_transfer``: the agent's own transfer call), and what was still missing
    then; None for any other end."""
    last = rec["turns"][-1] if rec["turns"] else {}
    flags = (last.get("user_reply") or {}).get("flags") or {}
    if rec["tau2"]["end"] != "user_stop":
        return None
    missing_writes = [g.name for g in pending(requested_writes(env), env.done_calls())]
    missing_outputs = rec["tau2"]["score"]["checks"].get("not_communicated", [])
    before = rec["turns"][-2] if len(rec["turns"]) > 1 else {}
    confirmed = ((before.get("user_reply") or {}).get("flags") or {}).get("confirmed")
    return {
        "reason": flags.get("stop", "agent_transfer"),
        "missing": missing_writes + list(missing_outputs),
        "after_confirming": bool(confirmed) or bool(flags.get("confirmed")),
    }


def premature(gym: str, agents: dict[str, Callable[[int], Any]]) -> dict[str, Any]:
    """Customer stops per agent over every task of ``gym`` (both splits); ``agents``: name -> the
    policy of the episode with a given seed."""
    env = make(gym)
    out = {}
    for name, policy in agents.items():
        row = {
            "episodes": 0,
            "successes": 0,
            "agent_transfers": 0,
            "user_stops": 0,
            "done_stops": 0,
            "premature_stops": 0,
            "premature_after_confirming": 0,
            "refused_stops_with_requests_left": 0,
            "tasks_with_several_requests": 0,
            "examples": [],
        }
        for split, i in _tasks(env):
            rec = run_episode(env, policy(i), seed=i, options={"task_index": i, "split": split})
            row["episodes"] += 1
            row["successes"] += int(bool(rec["success"]))
            row["tasks_with_several_requests"] += int(len(requested_writes(env)) + len(env.outputs()) >= 2)
            stop = stop_check(env, rec)
            if stop is None:
                continue
            if stop["reason"] == "agent_transfer":
                row["agent_transfers"] += 1
                continue
            row["user_stops"] += 1
            row["done_stops"] += int(stop["reason"] == "done")
            if stop["missing"] and stop["reason"] == "done":
                row["premature_stops"] += 1
                row["premature_after_confirming"] += int(stop["after_confirming"])
                if len(row["examples"]) < 5:
                    row["examples"].append({"task": env.task.task_id, **stop})
            elif stop["missing"] and stop["reason"] == "refused":
                row["refused_stops_with_requests_left"] += 1
        out[name] = row
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gyms", default="tau2_airline,tau2_retail,tau2_telecom,tau")
    ap.add_argument("--parts", default="episodes,reply,leaks,premature", help="comma-separated parts to run")
    ap.add_argument("--agents", help="premature part: only these agents (comma-separated)")
    ap.add_argument("--step", type=int, default=1)
    ap.add_argument("--random-step", type=int, default=3)
    ap.add_argument("--replies", type=int, default=2000)
    args = ap.parse_args()
    parts = set(args.parts.split(","))
    agents: dict[str, Callable[[int], Any]] = {
        "oracle": lambda seed: "oracle",
        "random": lambda seed: "random",
        "random_without_stop": random_without_stop,
        "closes_after_first_write": lambda seed: closes_after_first_write,
    }
    if args.agents:
        agents = {name: agents[name] for name in args.agents.split(",")}
    out = {"machine": platform.platform(), "python": platform.python_version(), "gyms": {}}
    for gym in args.gyms.split(","):
        res: dict[str, Any] = {}
        if "episodes" in parts:
            res["oracle_train"] = episodes(gym, "train", "oracle", args.step)
            res["oracle_eval"] = episodes(gym, "eval", "oracle", args.step)
            res["random_train"] = episodes(gym, "train", "random", args.random_step)
        if "reply" in parts:
            # telecom's customer runs its phone's tools; the status-bar question is one of them
            res["symbolic_reply"] = reply_times(gym, args.replies)
        if "leaks" in parts:
            res["leaks"] = leaks(gym)
        if "premature" in parts:
            res["premature"] = premature(gym, agents)
        out["gyms"][gym] = res
        print(json.dumps({gym: res}), flush=True)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
