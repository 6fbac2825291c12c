"""The reply verifier of the gyms with hidden facts (travel, intention): false alarms and catches.

* **false alarms**: the scripted oracle and random agents play ``--episodes`` episodes of each gym
  with the symbolic user, whose replies state the task's facts; every ask turn's ``check`` flag is
  read (``user_checked_rate`` / ``user_wrong_rate`` in ``metrics.jsonl``). A flag here is a false alarm.
* **catches**: for every hidden fact of ``--tasks`` tasks, its own text with the value swapped for
  one the task rules out (travel: another option or a number the preference refuses; a need said
  as "I don't need ..."; intention: another value of the detail's pool): what a lying LLM user would
  say. The share flagged is the verifier's recall on such lies.

turtle's verifier (the judge, where confident) is measured in ``bench_turtle_user.py``.

    python benchmarks/bench_user_fidelity.py [--episodes 600] [--tasks 300]

Prints one JSON document.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from typing import Any

from harness.agents.scripted import run_episode
from harness.envs import intention, travel
from harness.envs.registry import make
from harness.users.fidelity import Claim, check_claims

GYMS = {"travel": travel, "intention": intention}


def false_alarms(gym: str, episodes: int) -> dict[str, Any]:
    """Checked and flagged shares of the symbolic user's replies to the oracle and random agents."""
    env = make(gym)
    asks = checked = wrong = 0
    for seed in range(episodes):
        for agent in ("oracle", "random"):
            for t in run_episode(env, agent, seed)["turns"]:
                if (t.get("action") or {}).get("choice") != "ask":
                    continue
                flags = (t.get("user_reply") or {}).get("flags") or {}
                asks += 1
                checked += "check" in flags
                wrong += bool((flags.get("check") or {}).get("wrong"))
    return {"replies": asks, "checked": round(checked / asks, 4), "flagged": wrong}


def lie(text: str, claim: Claim) -> str | None:
    """``text`` (a fact's statement) with its value swapped for one the task rules out."""
    if claim.need:
        return f"I don't need {claim.value[0]}."
    if not claim.others:
        return None
    return re.sub(re.escape(claim.value[0]), claim.others[0], text, flags=re.IGNORECASE)


def catches(gym: str, tasks: int) -> dict[str, Any]:
    """How many planted lies (one per hidden fact) the verifier flags."""
    mod = GYMS[gym]
    n = caught = 0
    for i in range(tasks):
        task = mod.make_task("train", i, 3, 2) if gym == "travel" else mod.make_task("train", i)
        claims = mod.claims_of(task)
        by_key = {c.key: c for c in claims}
        for fact in task.facts:
            said = lie(fact.text, by_key[fact.key]) if fact.key in by_key else None
            if said is not None:
                n += 1
                caught += check_claims(said, claims).wrong
    return {"lies": n, "caught": caught, "recall": round(caught / n, 4) if n else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=600, help="episodes per agent and gym (false alarms)")
    ap.add_argument("--tasks", type=int, default=300, help="tasks per gym whose facts are turned into lies")
    args = ap.parse_args()
    t0 = time.perf_counter()
    out = {g: {"truthful": false_alarms(g, args.episodes), "lies": catches(g, args.tasks)} for g in GYMS}
    out["seconds"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
