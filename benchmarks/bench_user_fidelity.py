"""The reply verifiers of the gyms with hidden facts (travel, intention; the τ² gyms and tau):
false alarms and catches.

* **false alarms**: the scripted oracle and random agents play ``--episodes`` episodes of each gym
  with the symbolic user, whose replies state the task's facts; every ask turn's ``check`` flag is
  read (``user_checked_rate`` / ``user_wrong_rate`` in ``metrics.jsonl``). A flag here is a false alarm.
* **catches**: for every hidden fact of ``--tasks`` tasks, its own text with the value swapped for
  one the task rules out (travel: another option or a number the preference refuses; a need said
  as "I don't need ..."; intention: another value of the detail's pool): what a lying LLM user would
  say. The share flagged is the verifier's recall on such lies.

The τ² gyms (``tau2_airline``, ``tau2_retail``, ``tau2_telecom``) and tau, every task of both
splits unless ``--tau-tasks`` caps it (``harness/envs/tau2/customer.py``):

* **symbolic arm** (false alarms): the oracle and the random agent play each task to its end, and an
  *asker* asks the customer for every kind of identifying value (name, ids, email, zip code, phone,
  address, payment, date of birth);
* **LLM arm** through the gym's real path (the OpenAI-compatible backend and a scripted customer
  on a loopback HTTP server, ``tests/test_users_support.py``'s ``ChatServer``), the asker's
  questions answered three ways: *honest* (a true value of the asked kind: false alarms),
  *unknowing* ("I don't know my ...": never flagged) and *lying* (another customer's value of the
  kind from the domain database: the catches), each in a full sentence ("My zip code is 12345.")
  and as a bare answer ("It's 12345.").

turtle's verifier (the judge, where confident) is measured in ``bench_turtle_user.py``.

    python benchmarks/bench_user_fidelity.py [--episodes 600] [--tasks 300] [--gyms ...] [--tau-tasks N]

Prints one JSON document.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import json
import re
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from test_users_support import ChatServer  # noqa: E402  (tests/ is on sys.path just above)

from harness.agents.scripted import run_episode  # noqa: E402
from harness.envs import intention, travel  # noqa: E402
from harness.envs.registry import make  # noqa: E402
from harness.envs.tau2 import domain as dom  # noqa: E402
from harness.envs.tau2.customer import KINDS, record_values  # noqa: E402
from harness.knobs.folder import defaults_dir  # noqa: E402
from harness.knobs.snapshot import KnobSnapshot  # noqa: E402
from harness.users import UserFactory  # noqa: E402
from harness.users.backends import OpenAIChatBackend  # noqa: E402
from harness.users.fidelity import Claim, check_claims  # noqa: E402

GYMS = {"travel": travel, "intention": intention}
TAU_GYMS = ("tau2_airline", "tau2_retail", "tau2_telecom", "tau")


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


# ------------------------------------------------------------------------------ τ² customers
# Per kind: the asker's question, what the value is called, and the customer's answer three ways: a
# full sentence, bare, and in other words (a value written differently: a date as words).
ASKS: dict[str, tuple[str, str, dict[str, str]]] = {
    "name": (
        "May I have your full name?",
        "full name",
        {"full": "My name is {v}.", "bare": "{v}.", "other": "Sure, it's {v}."},
    ),
    "user_id": (
        "What is your user id?",
        "user id",
        {"full": "My user id is {v}.", "bare": "It's {v}.", "other": "You can find me under {v}."},
    ),
    "customer_id": (
        "What is your customer id?",
        "customer id",
        {"full": "My customer id is {v}.", "bare": "It's {v}.", "other": "I think it's {v}, yes."},
    ),
    "email": (
        "What is your email address?",
        "email address",
        {"full": "My email is {v}.", "bare": "It's {v}.", "other": "You can reach me at {v}."},
    ),
    "zip": (
        "What is your zip code?",
        "zip code",
        {"full": "My zip code is {v}.", "bare": "It's {v}.", "other": "{v} is where I live."},
    ),
    "phone": (
        "What is your phone number?",
        "phone number",
        {"full": "My phone number is {v}.", "bare": "{v}.", "other": "Call me at {v}."},
    ),
    "street": (
        "What is your street address?",
        "address",
        {"full": "I live at {v}.", "bare": "{v}.", "other": "My address is {v}, Suite 100."},
    ),
    "dob": (
        "What is your date of birth?",
        "date of birth",
        {"full": "I was born on {v}.", "bare": "{v}.", "other": "It's {v:words}."},
    ),
    "order_id": (
        "What is the order number?",
        "order number",
        {"full": "The order number is {v}.", "bare": "{v}.", "other": "I'm calling about {v}."},
    ),
    "reservation_id": (
        "What is the reservation number?",
        "reservation number",
        {"full": "My reservation number is {v}.", "bare": "{v}.", "other": "It's {v}, I believe."},
    ),
    "line_id": (
        "Which line id is it?",
        "line id",
        {"full": "It's my line {v}.", "bare": "{v}.", "other": "The line is {v}."},
    ),
    "payment_id": (
        "Which payment method id should I use?",
        "payment method id",
        {"full": "Please use {v}.", "bare": "{v}.", "other": "Charge {v}, please."},
    ),
    "card_last_four": (
        "What are the last four digits of your card?",
        "card number",
        {"full": "My card ends in {v}.", "bare": "{v}.", "other": "It's the card ending {v}."},
    ),
    "payment_kind": (
        "How would you like to pay?",
        "payment details",
        {"full": "I'll pay with my {v}.", "bare": "With {v}.", "other": "Put it on my {v}, please."},
    ),
}
UNKNOWING = "I'm sorry, I don't remember my {what}."
_PAY_KINDS = ("paypal", "gift_card", "credit_card", "certificate", "visa", "mastercard")
_KIND = {k.key: k for k in KINDS}


def say(template: str, kind: str, value: str) -> str:
    """``template`` with a normalized true or planted ``value`` written as a customer writes it."""
    if "{v:words}" in template:  # a date in words: 1985-06-15 -> June 15, 1985
        return template.replace("{v:words}", datetime.date.fromisoformat(value).strftime("%B %-d, %Y"))
    return template.replace("{v}", render(kind, value))


def render(kind: str, value: str) -> str:
    """A normalized value as a customer writes it."""
    if kind == "phone":
        return f"{value[:3]}-{value[3:6]}-{value[6:]}"
    if kind in ("name", "street"):
        return value.title()
    if kind == "payment_kind":
        return value.replace("_", " ")
    return value


def _knobs(mix: float) -> KnobSnapshot:
    snap = KnobSnapshot.read_dir(defaults_dir())
    values = copy.deepcopy(snap.values)
    values["user"]["user_strategy_mix"] = mix
    return KnobSnapshot(values=values, user_rules=snap.user_rules, reward_rules=snap.reward_rules)


def _tasks(env: Any, cap: int | None) -> list[tuple[str, int]]:
    out = [(s, i) for s in ("train", "eval") for i in range(env.task_count(s))]
    return out[:cap] if cap else out


def _count(c: Counter, turns: list[dict[str, Any]], examples: list[str]) -> None:
    for t in turns:
        if (t.get("action") or {}).get("choice") != "ask" or not t.get("user_reply"):
            continue
        check = (t["user_reply"].get("flags") or {}).get("check")
        c["replies"] += 1
        c["checked"] += check is not None
        if (check or {}).get("wrong"):
            c["flagged"] += 1
            if len(examples) < 5:
                examples.append(f"{t['action']['content'][:80]!r} -> {t['user_reply']['text'][:120]!r}: {check['why']}")


def tau_symbolic(gym: str, cap: int | None) -> dict[str, Any]:
    """Checked and flagged replies of the symbolic customer to the oracle, random and asker agents."""
    env = make(gym, knobs=_knobs(1.0))
    out: dict[str, Any] = {}
    examples: list[str] = []
    for agent in ("oracle", "random", "asker"):
        c: Counter = Counter()
        for split, i in _tasks(env, cap):
            opts = {"task_index": i, "split": split}
            if agent == "asker":  # every kind of value asked for; no tool runs, so no score is computed
                env.reset(seed=i, options=opts)
                for question, *_ in ASKS.values():
                    if env.state.done:
                        break
                    env.step(env.render_message(question))
                turns = env.episode_record()["turns"]
            else:
                turns = run_episode(env, agent, i, opts)["turns"]
            _count(c, turns, examples)
        out[agent] = {"replies": c["replies"], "checked": c["checked"], "flagged": c["flagged"]}
    out["examples"] = examples
    return out


def planted(kind: str, truth: frozenset[str], domain: str, customers: list[str], start: int) -> str | None:
    """Another customer's value of ``kind`` (from the domain database) that is none of ``truth``."""
    if kind == "payment_kind":
        return next((k for k in _PAY_KINDS if k not in truth), None)
    db = dom.base_db(domain)
    for j in range(len(customers)):
        for v in sorted(record_values(domain, db, customers[(start + j) % len(customers)]).get(kind, set())):
            if not _KIND[kind].agrees(v, truth):
                return v
    return None


def tau_llm(gym: str, cap: int | None) -> dict[str, Any]:
    """The LLM customer on loopback answering the asker honestly, not knowing, and lying; one
    episode per asked kind (the episode's other customers' values are the lies)."""
    current = {"text": ""}  # the scripted customer's next answer
    res = {m: Counter() for m in ("honest", "unknowing")}
    lies: Counter = Counter()
    by_kind: dict[str, list[int]] = {}
    missed: list[str] = []
    with ChatServer(lambda req: current["text"]) as srv:
        backend = OpenAIChatBackend(srv.base_url, "scripted-customer", api_key="k", timeout_s=10, retry_backoff_s=0.01)
        env = make(gym, knobs=_knobs(0.0), user_factory=UserFactory(backend))
        for split, i in _tasks(env, cap):
            for kind, (question, what, styles) in ASKS.items():
                env.reset(seed=i, options={"task_index": i, "split": split})
                truth = env.customer_truth()
                answers = [("unknowing", "-", UNKNOWING.format(what=what))]
                known = truth.get(kind)
                if known:
                    true = sorted(known)[0]
                    answers += [("honest", st, say(t, kind, true)) for st, t in styles.items()]
                    own = truth.get("user_id", set()) | truth.get("customer_id", set())
                    others = [c for c in _customer_ids(env.domain) if c.lower() not in own and c not in own]
                    fake = planted(kind, known, env.domain, others, i)
                    if fake is not None:
                        answers += [("lie", st, say(t, kind, fake)) for st, t in styles.items()]
                for mode, style, text in answers:
                    if env.state.done:
                        break
                    current["text"] = text
                    env.step(env.render_message(question))
                    check = env.state.turns[-1].user_reply.flags.get("check")
                    wrong = bool((check or {}).get("wrong"))
                    if mode == "lie":
                        lies[f"{style}_planted"] += 1
                        lies[f"{style}_caught"] += wrong
                        k = by_kind.setdefault(kind, [0, 0])
                        k[0] += 1
                        k[1] += wrong
                        if not wrong and len(missed) < 8:
                            missed.append(f"{kind}/{style}: {text!r}")
                    else:
                        c = res[mode]
                        c["replies"] += 1
                        c["checked"] += check is not None
                        c["flagged"] += wrong
    out: dict[str, Any] = {m: dict(c) for m, c in res.items()}
    for style in ("full", "bare", "other"):
        n, k = lies[f"{style}_planted"], lies[f"{style}_caught"]
        out[f"lies_{style}"] = {"planted": n, "caught": k, "recall": round(k / n, 4) if n else None}
    out["lies_by_kind"] = {k: f"{v[1]}/{v[0]}" for k, v in sorted(by_kind.items())}
    out["missed_examples"] = missed
    return out


def _customer_ids(domain: str) -> list[str]:
    db = dom.base_db(domain)
    return [c.customer_id for c in db.customers] if domain == "telecom" else list(db.users)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=600, help="episodes per agent and gym (false alarms)")
    ap.add_argument("--tasks", type=int, default=300, help="tasks per gym whose facts are turned into lies")
    ap.add_argument("--gyms", nargs="+", default=[*GYMS, *TAU_GYMS], choices=[*GYMS, *TAU_GYMS], help="gyms to measure")
    ap.add_argument("--tau-tasks", type=int, default=None, help="cap on the tasks per τ² gym and tau (default: all)")
    args = ap.parse_args()
    t0 = time.perf_counter()
    out: dict[str, Any] = {}
    for g in args.gyms:
        if g in GYMS:
            out[g] = {"truthful": false_alarms(g, args.episodes), "lies": catches(g, args.tasks)}
        else:
            out[g] = {"symbolic": tau_symbolic(g, args.tau_tasks), "llm": tau_llm(g, args.tau_tasks)}
        print(f"{g}: {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    out["seconds"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
