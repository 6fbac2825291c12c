"""Scripted agents for the user gyms: a privileged **oracle** and a **random** agent.

The oracle may read ``env.task`` (the hidden facts and answer) but acts only through ordinary agent
turns, so its transcripts are clean warm-start demonstrations: one short question per hidden fact,
built from the fact's keywords; the searches the gym needs; then the correct answer. It respects
the episode's limits: it answers on the last turn it has, fills ``min_questions`` first when turns
run short, and stops asking once the user's ``max_reveals`` budget is spent.

Per gym:

* travel: ask about each undisclosed preference, search each aspect (again after a failed search),
  answer the best option ids.
* function: search the test case, probe a base input and one-variable changes of it (never the test
  case), answer the value.
* telepathy: ask the yes/no question that best splits the entities still consistent with the
  answers so far (a real twenty-questions strategy), answer the entity.
* intention: ask about each uncovered detail, most important first, answer a summary.
* turtle: ask one yes/no question about each of the bottom's first ``TURTLE_QUESTIONS`` clauses
  (its most specific words, never its text), then answer with the bottom itself.
* persuade: rebut each of the user's reasons in turn, one message each: three of the reason's key
  words, a contrast marker and a concrete counter-point (a dated study), the very form the symbolic
  user recognises; a reason whose rebuttal did not land is not tried again. It has nothing to
  answer: the episode ends when the user is persuaded.
* τ² gyms (``tau2_*``) and tau: play the gold actions in order (a write only after asking the
  customer to confirm that exact action; a user action, in telecom, by asking the customer to
  run it on their phone), say the required outputs (before a transfer, else at the end) and ask
  whether there is anything else; end the conversation if the customer does not.

The **public** planner is the non-privileged counterpart where a gym allows one. intention: it
reads only what the agent sees, the request and the replies so far, and asks about each detail the
request usually leaves out, most important first, then answers. persuade: it asks the user why it
believes the claim, then rebuts the reason given, echoing its content words, and asks again. Imitating the privileged oracle
teaches a student that cannot see the hidden facts to stop asking too early (the oracle stops once
every *hidden* detail is covered); the public planner's transcripts do not.

The random agent draws a choice uniformly among the gym's allowed choices and content from the
task's vocabulary (prompt words, the gym's own vocabulary, option ids, entity names, numbers).

``run_episode(env, policy, seed, options)`` plays one episode with ``"oracle"``, ``"public"``, ``"random"`` or any
``policy(env) -> str`` and returns ``env.episode_record()``.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any, Callable, Union

import numpy as np

from harness.envs.base import UserCentricEnv
from harness.envs.function import fmt_probe, probe_key
from harness.envs.intention import REQUESTS
from harness.envs.tau2.actions import STOP_TOKEN
from harness.envs.telepathy_kb import MAYBE, YES, load_kb
from harness.envs.travel import ASPECTS, aspects_in_query
from harness.envs.turtle import story_index
from harness.types import Fact
from harness.users.matching import STOP_WORDS, rank_facts, terms

Policy = Union[str, Callable[[UserCentricEnv], str]]
FILLER_QUESTION = "Is there anything important I have not asked about yet?"


# ---------------------------------------------------------------------------- rendering
def render(env: UserCentricEnv, choice: str, content: str) -> str:
    """One agent turn in the env's rendering (tagged line or ``interact`` tool call)."""
    if env.rendering == "tool_call":
        call = {"name": "interact", "arguments": {"choice": choice, "content": content}}
        return f"<tool_call>{json.dumps(call, ensure_ascii=False)}</tool_call>"
    return f"{choice.upper()}: {content}"


def fact_question(fact: Fact, facts: list[Fact] | None = None, threshold: float = 0.3) -> str:
    """A short question about ``fact`` built from its content keywords.

    With the task's ``facts`` given, the question uses as few keywords as make ``fact`` the best
    match of the symbolic user's similarity (``harness.users.matching``) at ``threshold``.
    """
    words = [w for w in fact.keywords if terms(w)] or [fact.key.rsplit(".", 1)[-1].replace("_", " ")]
    question = ""
    for n in range(1, min(3, len(words)) + 1):
        question = f"What should I know about the {' and '.join(words[:n])}?"
        if facts is None:
            return question
        ranked = rank_facts(question, facts, threshold)
        if ranked and ranked[0][0].key == fact.key:
            return question
    return question


# ---------------------------------------------------------------------------- budgets
def _reveals_left(env: UserCentricEnv) -> int:
    return max(0, int(env.user_knobs.get("max_reveals", 1 << 30)) - env.state.disclosures)


def _schedule(
    env: UserCentricEnv, steps: list[tuple[str, str]], answer: str, ask_fallback: str = FILLER_QUESTION
) -> str:
    """Pick this turn's action from the remaining useful ``steps`` under the episode's limits."""
    st = env.state
    # Each question is put once: a user that did not answer it (declined, LLM arm) is not nagged.
    steps = [s for s in steps if s[0] != "ask" or " ".join(s[1].lower().split()) not in st.asked]
    remaining = int(env.env_knobs["max_steps"]) - st.turn  # turns left, this one included
    asks_needed = max(0, env.effective_min_questions() - st.questions)
    first_ask = next((s for s in steps if s[0] == "ask"), ("ask", ask_fallback))
    if asks_needed and remaining - 1 <= asks_needed:
        return render(env, *first_ask)  # only just enough turns left for the required questions
    if remaining <= 1 or not steps:
        if asks_needed:
            return render(env, *first_ask)
        return render(env, "answer", answer)
    return render(env, *steps[0])


# ---------------------------------------------------------------------------- travel
def _travel_listed(env: UserCentricEnv) -> set[str]:
    """Aspects whose options some successful search of this episode listed."""
    trip = env.task.data["content"]["aspects"]
    done: set[str] = set()
    for t in env.state.turns:
        if t.tool and t.tool.get("ok") and not str(t.tool.get("result", "")).startswith("No options"):
            done.update(a for a in aspects_in_query(str(t.tool.get("args", ""))) if a in trip)
    return done


def _travel_oracle(env: UserCentricEnv) -> str:
    task, st = env.task, env.state
    steps: list[tuple[str, str]] = []
    if _reveals_left(env):
        for f in task.facts:
            if f.key not in st.revealed:
                aspect = f.key.split(".")[1]
                steps.append(("ask", f"Do you have a preference for the {aspect} {f.keywords[1]}?"))
    listed = _travel_listed(env)
    steps += [("search", f"{a} options") for a in task.data["content"]["aspects"] if a not in listed]
    return _schedule(env, steps, task.secret)


# ---------------------------------------------------------------------------- function
def _function_probes(test: tuple[int, ...]) -> list[tuple[int, ...]]:
    """A base input and its one-variable changes, none equal to the test case."""
    for base in ((1, 1, 1, 1), (2, 2, 2, 2), (1, 2, 3, 4)):
        probes = [base] + [tuple(v + (1 if i == j else 0) for j, v in enumerate(base)) for i in range(4)]
        if test not in probes:
            return probes
    return []  # unreachable: the three bases' probe sets are disjoint


def _function_oracle(env: UserCentricEnv) -> str:
    task, st = env.task, env.state
    steps: list[tuple[str, str]] = []
    if not any(t.tool and t.tool.get("ok") for t in st.turns):
        steps.append(("search", "test case"))
    if _reveals_left(env):
        steps += [
            ("ask", f"What is {fmt_probe(p)}?")
            for p in _function_probes(tuple(task.data["test_case"]))
            if probe_key(p) not in st.revealed
        ]
    return _schedule(env, steps, str(task.data["value"]), "What is f(0, 0, 0, 0)?")


# ---------------------------------------------------------------------------- telepathy
@lru_cache(maxsize=1)
def _kb_matrix() -> tuple[list[str], np.ndarray, dict[str, int]]:
    """(attribute names, entity x attribute value codes, entity name -> row)."""
    kb = load_kb()
    names = list(kb.attributes)
    code = {YES: 0, MAYBE: 1}
    mat = np.array([[code.get(e.values[a], 2) for a in names] for e in kb.entities], dtype=np.int8)
    return names, mat, {e.name: i for i, e in enumerate(kb.entities)}


def best_split(candidates: np.ndarray, skip: set[int]) -> int | None:
    """Column of the attribute whose answer best splits the ``candidates`` rows (highest entropy)."""
    n = len(candidates)
    if n <= 1:
        return None
    counts = np.stack([(candidates == v).sum(axis=0) for v in range(3)]).astype(float) / n  # (3, A)
    with np.errstate(divide="ignore", invalid="ignore"):
        ent = -(np.where(counts > 0, counts * np.log2(counts), 0.0)).sum(axis=0)
    for j in skip:
        ent[j] = -1.0
    j = int(np.argmax(ent))
    return j if ent[j] > 0 else None


def _telepathy_oracle(env: UserCentricEnv) -> str:
    names, mat, row = _kb_matrix()
    target = mat[row[env.task.data["entity"]]]
    kb = load_kb()
    known = [names.index(k[5:]) for k in env.state.revealed if k.startswith("attr.")]
    mask = np.all(mat[:, known] == target[known], axis=1) if known else np.ones(len(mat), dtype=bool)
    asked = {names.index(a.name) for q in env.state.asked for a in kb.attributes_in(q)}
    steps: list[tuple[str, str]] = []
    if _reveals_left(env):
        j = best_split(mat[mask], set(known) | asked)
        if j is not None:
            steps.append(("ask", kb.attributes[names[j]].question))
    return _schedule(env, steps, env.task.data["entity"], "Is it alive?")


# ---------------------------------------------------------------------------- turtle
TURTLE_QUESTIONS = 2  # enough to make the demonstration elicit; the bottom solves the puzzle anyway


def turtle_question(clause_words: list[tuple[str, float]]) -> str | None:
    """A yes/no question about a clause from its (word, weight) pairs: its two most specific words."""
    top = [w for w, _ in sorted(clause_words, key=lambda x: -x[1])[:2]]
    if not top:
        return None
    return f"Does it have to do with the {' and the '.join(top)}?"


def _turtle_oracle(env: UserCentricEnv) -> str:
    index = story_index(env.task.data["story_id"])
    steps: list[tuple[str, str]] = []
    if _reveals_left(env):
        clauses = [c for c in index.clauses if c.source == "bottom" and c.words][:TURTLE_QUESTIONS]
        for c in clauses:
            q = turtle_question([(w.text, index.idf.word(w)) for w in c.words])
            if q is not None:
                steps.append(("ask", q))
    return _schedule(env, steps, env.task.secret, "Does it have to do with the surface?")


# ---------------------------------------------------------------------------- intention
def _intention_oracle(env: UserCentricEnv) -> str:
    task = env.task
    covered = getattr(env, "covered", set())
    steps: list[tuple[str, str]] = []
    if _reveals_left(env):
        pending = sorted((f for f in task.facts if f.key not in covered), key=lambda f: f.importance)
        threshold = float(env.user_knobs.get("match_threshold", 0.3))
        steps += [("ask", fact_question(f, task.facts, threshold)) for f in pending]
    known = [f.text for f in task.facts if f.key in env.state.revealed]
    summary = "Here is the plan, based on what you told me: " + (" ".join(known) if known else "a standard plan.")
    return _schedule(env, steps, summary)


def _intention_public(env: UserCentricEnv) -> str:
    """Ask about every detail the request's kind may leave out (not only the hidden ones), most
    important first, one keyword each; then answer with what was disclosed."""
    req = next(r for r in REQUESTS if r.name == env.task.data["request"])
    revealed = env.state.revealed
    steps: list[tuple[str, str]] = []
    if _reveals_left(env):
        pending = sorted((d for d in req.details if f"detail.{d.name}" not in revealed), key=lambda d: d.importance)
        steps += [
            ("ask", fact_question(Fact(key=f"detail.{d.name}", kind="detail", text="", keywords=d.keywords)))
            for d in pending
        ]
    known = [f.text for f in env.task.facts if f.key in revealed]  # what the user said, nothing hidden
    summary = "Here is the plan, based on what you told me: " + (" ".join(known) if known else "a standard plan.")
    return _schedule(env, steps, summary)


# ---------------------------------------------------------------------------- persuade (public)
_STANCE_TAIL = re.compile(r"\s*My stance: [a-z ]+\.\s*$")
PERSUADE_WHY = "Why do you believe that?"


def echo_words(reply: str, n: int = 8) -> list[str]:
    """Up to ``n`` content words of a user reply (its stance sentence and a lead-in ending in a colon
    dropped), in order, each once."""
    body = _STANCE_TAIL.sub("", reply)
    body = body.split(": ", 1)[-1]  # "One of my reasons: <the reason>": the words after the lead-in
    words = [w.lower() for w in _WORD_RE.findall(body) if len(w) > 3 and w.lower() not in STOP_WORDS]
    return list(dict.fromkeys(words))[:n]


def _persuade_public(env: UserCentricEnv) -> str:
    """Ask why, then rebut the reason the user gave in its own words; again for the next reason.
    Reads only the replies: the reason is whatever the user said after "why"."""
    turns = env.state.turns
    last = turns[-1] if turns else None
    if last is not None and last.user_reply is not None and last.action.content == PERSUADE_WHY:
        words = echo_words(last.observation)
        if words:
            return render(env, "ask", persuade_rebuttal(words, 2010 + len(turns), n=len(words)))
    return render(env, "ask", PERSUADE_WHY)


_PUBLIC: dict[str, Callable[[UserCentricEnv], str]] = {"intention": _intention_public, "persuade": _persuade_public}


# ---------------------------------------------------------------------------- persuade
def persuade_rebuttal(keywords: list[str], year: int, n: int = 3) -> str:
    """A one-line rebuttal naming ``n`` of these words (the oracle's three key words of a reason)."""
    words = keywords[:n]
    named = ", ".join(words[:-1]) + f" and {words[-1]}" if len(words) > 1 else (words[0] if words else "that")
    return f"Yet on {named}, a {year} study found the reverse."


def _persuade_oracle(env: UserCentricEnv) -> str:
    reasons = env.task.data["reasons"]
    i = env.state.turn % len(reasons)  # turn k rebuts reason k; past the last one, start over
    return render(env, "ask", persuade_rebuttal(list(reasons[i]["keywords"]), 2010 + i))


_ORACLES: dict[str, Callable[[UserCentricEnv], str]] = {
    "travel": _travel_oracle,
    "function": _function_oracle,
    "telepathy": _telepathy_oracle,
    "intention": _intention_oracle,
    "turtle": _turtle_oracle,
    "persuade": _persuade_oracle,
}


def _tau_call(env: Any, name: str, arguments: dict[str, Any]) -> str:
    return env.render_call(name, arguments)


def _tau_progress(env: Any) -> int:
    """How many gold actions the episode has played, in order (every call, the user's too)."""
    gold, p = env.gold(), 0
    for name, args in env.done_calls():
        if p < len(gold) and name == gold[p].name and args == gold[p].arguments:
            p += 1
    return p


def _tau_last(env: Any) -> tuple[str | None, dict[str, Any]]:
    """(the oracle's last message or None, the customer's reply flags)."""
    turns = env.state.turns
    if not turns or turns[-1].action.choice != "ask" or turns[-1].user_reply is None:
        return None, {}
    return turns[-1].action.content, turns[-1].user_reply.flags


def _tau_oracle(env: Any) -> str:
    say = env.render_message
    gold, p = env.gold(), _tau_progress(env)
    unsaid = env.user.pending_outputs() if hasattr(env.user, "pending_outputs") else []
    last, flags = _tau_last(env)
    if p < len(gold):
        g = gold[p]
        if g.name == "transfer_to_human_agents" and unsaid:
            return say("Here is what I found: " + "; ".join(unsaid) + ".")
        if g.requestor == "user":
            return say(f"Please do this on your phone: {g.name} {json.dumps(g.arguments)}")
        if g.name in env.write_tools():
            proposal = f"I will now {g.verb()} as follows: {g.name} {json.dumps(g.arguments)}. Do you confirm (yes/no)?"
            if last != proposal:
                return say(proposal)
        return _tau_call(env, g.name, g.arguments)
    closing = "Is there anything else I can help you with?"
    if unsaid:
        return say("Here is what I found: " + "; ".join(unsaid) + ". " + closing)
    return say(STOP_TOKEN if last == closing else closing)


def _next_turn(planners: dict[str, Callable[[UserCentricEnv], str]], env: UserCentricEnv, who: str) -> str:
    if env.task is None:
        raise RuntimeError(f"{who}_action: call env.reset() first")
    if env.name not in planners:
        raise ValueError(f"no {who} planner for gym {env.name!r}; gyms with one: {', '.join(planners)}")
    return planners[env.name](env)


def public_action(env: UserCentricEnv) -> str:
    """The public (non-privileged) planner's next turn; ValueError for a gym without one."""
    return _next_turn(_PUBLIC, env, "public")


def oracle_action(env: UserCentricEnv) -> str:
    """The oracle's next turn for ``env`` (after ``reset``); ValueError for a gym without an oracle."""
    if env.task is not None and hasattr(env, "gold"):  # the τ² gyms and tau share one oracle
        return _tau_oracle(env)
    return _next_turn(_ORACLES, env, "oracle")


def impatient(
    planner: Callable[[UserCentricEnv], str], give_up: float, rng: np.random.Generator
) -> Callable[[UserCentricEnv], str]:
    """``planner`` that, at each turn, gives up with probability ``give_up`` and answers at once.

    Giving up plays the planner's own last turn (what it does when no turn is left: its answer with
    what it knows so far). A student of such demonstrations learns the planner's questions at every
    position but stops at a random point; when to stop is then left for RL to learn.
    """
    if not 0.0 <= give_up <= 1.0:
        raise ValueError(f"give_up must be a probability in [0, 1]; got {give_up!r}")

    def act(env: UserCentricEnv) -> str:
        if give_up == 0.0 or rng.random() >= give_up:
            return planner(env)
        limit = env.env_knobs["max_steps"]
        env.env_knobs["max_steps"] = env.state.turn + 1  # this turn is the last one, for the planner
        try:
            return planner(env)
        finally:
            env.env_knobs["max_steps"] = limit

    return act


# ---------------------------------------------------------------------------- random agent
_WORD_RE = re.compile(r"[A-Za-z][A-Za-z'-]+")


def _vocabulary(env: UserCentricEnv) -> list[str]:
    """Words a random agent draws from: the prompt plus the gym's own vocabulary."""
    words = _WORD_RE.findall(env.task.prompt)
    if env.name == "travel":
        for asp in ASPECTS.values():
            words += list(asp.synonyms[:2]) + [w for a in asp.attributes for w in a.words]
    elif env.name == "telepathy":
        for attr in load_kb().attributes.values():
            words += _WORD_RE.findall(attr.question)
    elif env.name == "intention":
        req = next(r for r in REQUESTS if r.name == env.task.data["request"])
        words += [k for d in req.details for k in d.keywords]
    elif env.name == "persuade":
        # the words any argument is made of; the reasons' key words are the user's, not the agent's
        words += "but however because study data example percent why reason evidence shows actually".split()
    return words


def _random_answer(env: UserCentricEnv, rng: np.random.Generator, words: list[str]) -> str:
    if env.name == "travel":
        opts = env.task.data["options"]
        return ", ".join(str(rng.choice([o["id"] for o in opts[a]])) for a in env.task.data["content"]["aspects"])
    if env.name == "function":
        return str(int(rng.integers(-60, 61)))
    if env.name == "telepathy":
        ents = load_kb().entities
        return ents[int(rng.integers(len(ents)))].name
    return " ".join(str(w) for w in rng.choice(words, size=int(rng.integers(3, 9))))


def random_action(env: UserCentricEnv, rng: np.random.Generator) -> str:
    """A uniformly random choice with random content from the task's vocabulary."""
    if env.task is None:
        raise RuntimeError("random_action: call env.reset() first")
    if hasattr(env, "gold"):
        return _tau_random(env, rng)
    words = _vocabulary(env)
    choice = str(rng.choice(list(env.allowed_choices)))
    if choice == "answer":
        return render(env, "answer", _random_answer(env, rng, words))
    if env.name == "function" and choice == "ask" and rng.random() < 0.5:
        probe = ", ".join(str(int(x)) for x in rng.integers(-5, 10, size=4))
        return render(env, "ask", f"What is f({probe})?")
    content = " ".join(str(w) for w in rng.choice(words, size=int(rng.integers(2, 7))))
    return render(env, choice, content + ("?" if choice == "ask" else ""))


def _tau_random(env: Any, rng: np.random.Generator) -> str:
    """τ²/tau: a message of prompt words, a call of a random domain tool with arguments drawn from
    the prompt's words, or the end of the conversation, uniformly."""
    words = _WORD_RE.findall(env.task.prompt) + re.findall(r"#?\w*\d\w*", env.task.prompt) or ["hello"]
    kind = int(rng.integers(3))
    if kind == 0:
        return env.render_message(" ".join(str(w) for w in rng.choice(words, size=int(rng.integers(2, 8)))) + "?")
    if kind == 2:
        return env.render_message("###STOP###")
    schema = env.tool_schemas()[int(rng.integers(len(env.tool_schemas())))]["function"]
    props = schema.get("parameters", {}).get("properties", {})
    args = {k: str(rng.choice(words)) for k in props}
    return _tau_call(env, schema["name"], args)


# ---------------------------------------------------------------------------- episodes
def run_episode(
    env: UserCentricEnv, policy: Policy, seed: int, options: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Play one episode of ``env`` with ``policy`` ("oracle", "random" or ``policy(env) -> str``).

    ``seed`` seeds the reset (task draw, user) and the random agent; returns ``env.episode_record()``.
    """
    if isinstance(policy, str):
        if policy == "oracle":
            act: Callable[[UserCentricEnv], str] = oracle_action
        elif policy == "public":
            act = public_action
        elif policy == "random":
            rng = np.random.default_rng(seed)
            act = lambda e: random_action(e, rng)  # noqa: E731
        else:
            raise ValueError(f"unknown scripted policy {policy!r}; allowed: oracle, public, random, or a callable")
    else:
        act = policy
    env.reset(seed=seed, options=options)
    limit = int(env.env_knobs["max_steps"])
    for _ in range(limit):
        _, _, terminated, truncated, _ = env.step(act(env))
        if terminated or truncated:
            break
    return env.episode_record()
