"""Build run folders from real episodes for the analysis tests (no trainer needed).

Episodes are played by the real gyms (``harness.envs.registry.make``) with real users (the symbolic
user, or the LLM user over a real OpenAI-compatible server on loopback), scored by the real reward
model, written by :class:`~harness.runs.writer.RunWriter` with ``episode_metrics``. Knob changes
during a run go through the real :class:`~harness.knobs.store.KnobStore` live path (written, then
applied at a step boundary by ``poll``), so ``knob_events.jsonl`` has real events with
``step_effective``.

Two things are test inputs, not measurements, because no trainer exists here:

* the agent: a *scripted learner* that plays the privileged oracle on a share of its turns and the
  random agent on the others, the oracle share growing over the run the way a learning policy's
  success grows (plus variants that plant policy faults: one fixed opening, question farming);
* the optimisation metrics (``entropy``, ``kl``, ...): plausible per-step curves from ``opt_*``.

Faults are planted through knob values and rule files (``RunSpec.env/user/reward``,
``user_rules``, ``reward_rules``, ``changes``), through the LLM user's model (``llm``), or through the
agent for policy faults.
"""

from __future__ import annotations

import copy
import math
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import yaml

from harness.agents.scripted import oracle_action, random_action, render
from harness.envs.registry import make
from harness.knobs.folder import defaults_dir
from harness.runs.metrics import episode_metrics
from harness.runs.writer import RunWriter
from harness.stores import open_store
from harness.users.mixture import UserFactory

Agent = Callable[[Any, np.random.Generator, float], str]  # (env, rng, progress 0..1) -> action text
_TAG_RE = re.compile(r"^(ASK|SEARCH|ANSWER):\s*(.*)$", re.S)


# ---------------------------------------------------------------------------- agents (test inputs)
def _travel_answer(env: Any, rng: np.random.Generator) -> str:
    """Per aspect, the cheapest option meeting the preferences *disclosed so far*."""
    from harness.envs.travel import ASPECTS, option_complies

    data, revealed = env.task.data, env.state.revealed
    ids = []
    for aspect in data["content"]["aspects"]:
        known = {a: t for a, t in data["content"]["prefs"][aspect].items() if f"pref.{aspect}.{a}" in revealed}
        ok = [o for o in data["options"][aspect] if option_complies(ASPECTS[aspect], known, o)]
        ids.append(min(ok, key=lambda o: o["price"])["id"])
    return ", ".join(ids)


def _function_answer(env: Any, rng: np.random.Generator) -> str:
    """The value when at least 3 probes were answered (enough to fit these rule families), else a guess."""
    probes = [k for k in env.state.revealed if k.startswith("probe.")]
    return str(env.task.data["value"]) if len(probes) >= 3 else str(int(rng.integers(-60, 61)))


def _telepathy_answer(env: Any, rng: np.random.Generator) -> str:
    """An entity consistent with every yes/no answer so far (the only one once narrowed down)."""
    from harness.agents.scripted import _kb_matrix
    from harness.envs.telepathy_kb import load_kb

    names, mat, row = _kb_matrix()
    target = mat[row[env.task.data["entity"]]]
    known = [names.index(k[5:]) for k in env.state.revealed if k.startswith("attr.")]
    mask = np.all(mat[:, known] == target[known], axis=1) if known else np.ones(len(mat), dtype=bool)
    ents = load_kb().entities
    return ents[int(rng.choice(np.flatnonzero(mask)))].name


_HONEST_ANSWERS = {"travel": _travel_answer, "function": _function_answer, "telepathy": _telepathy_answer}


def honest_oracle(env: Any, rng: np.random.Generator) -> str:
    """The scripted oracle's turn, except that an answer uses only what the episode disclosed (the
    oracle itself answers the hidden solution; a real agent cannot). intention's oracle is honest already."""
    text = oracle_action(env)
    m = _TAG_RE.match(text)
    if m and m.group(1) == "ANSWER" and env.name in _HONEST_ANSWERS:
        return render(env, "answer", _HONEST_ANSWERS[env.name](env, rng))
    return text


def search_first(env: Any, rng: np.random.Generator) -> str:
    """travel: list every part of the trip before asking (the honest oracle otherwise). A policy
    like this lets a forthcoming user fill in preferences during the searches, so it asks less when
    the user volunteers more: the behaviour behind the method's question-rate drop."""
    if env.name == "travel":
        from harness.agents.scripted import _travel_listed

        listed = _travel_listed(env)
        todo = [a for a in env.task.data["content"]["aspects"] if a not in listed]
        if todo and env.state.turn < int(env.env_knobs["max_steps"]) - 1:
            return render(env, "search", f"{todo[0]} options")
    return honest_oracle(env, rng)


def learner(
    p_start: float = 0.6, p_end: float = 0.9, planner: Callable[[Any, np.random.Generator], str] = honest_oracle
) -> Agent:
    """``planner`` (the honest oracle) on a share of turns growing from ``p_start`` to ``p_end`` over
    the run (as a learning policy's success grows), the random agent otherwise."""

    def act(env: Any, rng: np.random.Generator, progress: float) -> str:
        p = p_start + (p_end - p_start) * progress
        return planner(env, rng) if rng.random() < p else random_action(env, rng)

    return act


def fixed_opening(opening: str = "Okay, to be sure I have this right:", base: Agent | None = None) -> Agent:
    """The learner whose turns, more and more over the run (to every turn at the end), start with the
    same phrase: a collapse onto one template developing during training."""
    inner = base or learner()

    def act(env: Any, rng: np.random.Generator, progress: float) -> str:
        text = inner(env, rng, progress)
        m = _TAG_RE.match(text)
        return f"{m.group(1)}: {opening} {m.group(2)}" if m and rng.random() < progress else text

    return act


def question_farmer(q_start: float = 0.0, q_end: float = 0.8, base: Agent | None = None) -> Agent:
    """The learner that, more and more over the run, asks a filler question instead of acting
    (what a policy learns when a rule pays for every question)."""
    inner = base or learner()

    def act(env: Any, rng: np.random.Generator, progress: float) -> str:
        q = q_start + (q_end - q_start) * progress
        if "ask" in env.allowed_choices and rng.random() < q:
            return render(env, "ask", f"Could you tell me more about item {int(rng.integers(1000))}?")
        return inner(env, rng, progress)

    return act


# ---------------------------------------------------------------------------- optimisation metrics (test inputs)
def opt_healthy(step: int, total: int) -> dict[str, float]:
    """Entropy easing from 1.2 to ~0.9 nats, small KL: a run that keeps exploring."""
    x = step / max(1, total - 1)
    wobble = 0.02 * math.sin(step * 1.7)
    return {
        "entropy": 1.2 - 0.3 * x + wobble,
        "kl": 0.01 + 0.01 * x,
        "approx_kl": 0.005,
        "clip_frac": 0.1,
        "policy_loss": -0.01,
        "value_loss": 0.2 - 0.1 * x,
        "grad_norm": 0.8,
        "lr": 1e-5,
        "entropy_coeff": 0.001,
        "kl_coef": 0.001,
        "temperature": 1.0,
    }


def opt_entropy_collapse(step: int, total: int) -> dict[str, float]:
    """Entropy decaying from 1.2 to ~0.02 nats: exploration collapses."""
    out = opt_healthy(step, total)
    out["entropy"] = 1.2 * math.exp(-4.0 * step / max(1, total - 1))
    out["entropy_coeff"] = 0.0
    return out


# ---------------------------------------------------------------------------- LLM user server
class UserModelServer:
    """A real OpenAI-compatible ``/v1/chat/completions`` server on loopback that plays a user model
    (``reply(request_json) -> text``). HTTP/1.1 keep-alive with TCP_NODELAY: the LLM user's client
    keeps one connection, so a call costs milliseconds and a run of a few hundred calls stays fast."""

    def __init__(self, reply: Callable[[dict[str, Any]], str]):
        import json
        import socket
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.calls = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                outer.calls += 1
                data = json.dumps(
                    {
                        "id": f"c{outer.calls}",
                        "object": "chat.completion",
                        "created": 0,
                        "model": body.get("model"),
                        "choices": [
                            {
                                "index": 0,
                                "finish_reason": "stop",
                                "message": {"role": "assistant", "content": reply(body)},
                            }
                        ],
                        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


# ---------------------------------------------------------------------------- LLM user models (loopback server replies)
_FACT_LINE = re.compile(r"^- (.+)$", re.M)
_STOP = {
    "the",
    "a",
    "an",
    "for",
    "to",
    "of",
    "i",
    "you",
    "is",
    "it",
    "do",
    "what",
    "your",
    "have",
    "any",
    "and",
    "be",
    "about",
    "me",
    "my",
    "should",
    "know",
    "there",
    "does",
    "are",
    "want",
    "preference",
}


def _prompt_parts(req: dict[str, Any]) -> tuple[str, list[str], list[str]]:
    msgs = req.get("messages") or []
    system = next((m["content"] for m in msgs if m.get("role") == "system"), "")
    question = msgs[-1]["content"] if msgs else ""
    head, _, dyn = system.partition("The true answer to the assistant's latest question is:")
    dyn_lines = _FACT_LINE.findall(dyn.split("Never write")[0]) if dyn else []
    facts = _FACT_LINE.findall(head.split("Never write")[0])
    return question, facts, dyn_lines


def cooperative_user(req: dict[str, Any]) -> str:
    """A user model that answers what was asked: the computed answer, else the one fact sharing most
    content words with the question, else a shrug."""
    question, facts, dyn = _prompt_parts(req)
    if dyn:
        return dyn[0]
    q = {w for w in re.findall(r"[a-z]+", question.lower()) if w not in _STOP}
    best = max(facts, key=lambda f: len(q & set(re.findall(r"[a-z]+", f.lower()))), default=None)
    if best and q & set(re.findall(r"[a-z]+", best.lower())):
        return best
    return "I don't really mind about that."


def chatty_user(req: dict[str, Any]) -> str:
    """A user model that ignores the per-reply limit and pastes every fact it was told."""
    question, facts, dyn = _prompt_parts(req)
    return " ".join(dyn + facts) or "I don't know."


def unhelpful_user(req: dict[str, Any]) -> str:
    """A user model that never says anything useful."""
    return "Hmm, I'm not sure. Whatever you think is best."


def lying_user(req: dict[str, Any]) -> str:
    """An intention user model that answers with the hidden detail sharing most words with the
    question, its value swapped for another of the detail's pool ("My budget is $800." when it is $300)."""
    from harness.envs.intention import REQUESTS

    pools = {v: d.values for r in REQUESTS for d in r.details for v in d.values}
    question, facts, _ = _prompt_parts(req)
    if not facts:
        return "I don't mind."
    q = set(re.findall(r"[a-z]+", question.lower()))
    fact = max(facts, key=lambda f: len(q & set(re.findall(r"[a-z]+", f.lower()))))
    for value in sorted(pools, key=len, reverse=True):  # "$300" before "$30"
        if re.search(rf"(?<![\w$]){re.escape(value)}(?!\w)", fact):
            return fact.replace(value, next(v for v in pools[value] if v != value))
    return fact


def contrarian_host(req: dict[str, Any]) -> str:
    """A turtle host model that contradicts the story: No where the judge's verdict it is given says
    Yes and the reverse (and Yes where it is given none)."""
    _, _, dyn = _prompt_parts(req)
    return {"Yes.": "No.", "No.": "Yes."}.get(dyn[0] if dyn else "", "Yes.")


# ---------------------------------------------------------------------------- run spec
@dataclass
class RunSpec:
    """What to build. Knob overrides are written into the knobs folder the run starts from.

    changes: ``{step: [(knob, value) or (knob, value, gym), ...]}`` written through the live knob path
        before ``step``.
    llm: reply function of the LLM user's loopback server (None: no LLM arm; set user_strategy_mix).
    """

    run_id: str
    gyms: tuple[str, ...] = ("travel", "function", "intention")
    steps: int = 12
    tasks_per_step: int = 2
    samples: int = 4
    agent: Agent = field(default_factory=learner)
    env: dict[str, Any] = field(default_factory=dict)
    user: dict[str, Any] = field(default_factory=dict)
    reward: dict[str, Any] = field(default_factory=dict)
    user_rules: dict[str, Any] = field(default_factory=dict)
    reward_rules: dict[str, Any] = field(default_factory=dict)
    changes: dict[int, list[tuple[Any, ...]]] = field(default_factory=dict)
    opt: Callable[[int, int], dict[str, float]] = opt_healthy
    llm: Callable[[dict[str, Any]], str] | None = None
    seed: int = 0


def prepare_knobs(dst: Path, spec: RunSpec) -> Path:
    """A copy of the repository's knobs with the spec's values and rule files written in."""
    shutil.copytree(defaults_dir(), dst, ignore=shutil.ignore_patterns(".pending", ".history"))
    for area, over in (("env", spec.env), ("user", spec.user), ("reward", spec.reward)):
        if over:
            path = dst / f"{area}.yaml"
            doc = yaml.safe_load(path.read_text())
            doc.update(copy.deepcopy(over))
            path.write_text(yaml.safe_dump(doc, sort_keys=False))
    for gym, rules in spec.user_rules.items():
        (dst / "rules" / "users" / f"{gym}.yaml").write_text(yaml.safe_dump(rules, sort_keys=False))
    for stem, rules in spec.reward_rules.items():
        path = dst / "rules" / "rewards" / f"{stem}.yaml"
        if rules is None:
            path.unlink(missing_ok=True)
        else:
            path.write_text(yaml.safe_dump(rules, sort_keys=False))
    return dst


def _play(env: Any, agent: Agent, rng: np.random.Generator, progress: float, seed: int, index: int) -> dict[str, Any]:
    env.reset(seed=seed, options={"task_index": index})
    for _ in range(int(env.env_knobs["max_steps"])):
        _, _, terminated, truncated, _ = env.step(agent(env, rng, progress))
        if terminated or truncated:
            break
    return env.episode_record()


def build_run(runs_dir: Path, spec: RunSpec, work_dir: Path) -> Path:
    """Build run ``spec.run_id`` under ``runs_dir`` (its knobs folder inside it; ``work_dir`` unused); returns the run folder."""
    run_dir = Path(runs_dir) / spec.run_id
    knobs_dir = prepare_knobs(run_dir / "knobs", spec)  # the run's own knobs folder, as a real run has
    store = open_store(knobs_dir, events_path=run_dir / "knob_events.jsonl", run_gyms=list(spec.gyms), debounce_s=0.0)
    store.live_run = True
    config = {
        "preset": "analysis-test",
        "gyms": list(spec.gyms),
        "steps": spec.steps,
        "seed": spec.seed,
        "tasks_per_step": spec.tasks_per_step,
        "samples": spec.samples,
    }
    server = None
    factory = UserFactory()
    if spec.llm is not None:
        server = UserModelServer(spec.llm)
        config["user_llm"] = {"base_url": server.base_url, "model": "user-sim"}
        from harness.users.backends import OpenAIChatBackend

        factory = UserFactory(
            OpenAIChatBackend(server.base_url, "user-sim", api_key="sk-test", timeout_s=5.0, retry_backoff_s=0.01)
        )
    writer = RunWriter.create(run_dir, config, knobs_dir, list(spec.gyms), spec.steps)
    writer.knobs_in_force(store.in_force_document())
    rng = np.random.default_rng(spec.seed)
    history: list[dict[str, Any]] = []
    try:
        for step in range(spec.steps):
            t0 = time.perf_counter()
            applied = []
            if step in spec.changes:
                for name, value, *gym in spec.changes[step]:
                    res = store.set(
                        name,
                        value,
                        gym=gym[0] if gym else None,
                        author="agent",
                        reason=f"test change before step {step}",
                        recent_metrics=history,
                        step_written=step - 1,
                        for_run="live",
                    )
                    if not res.ok:
                        raise ValueError(f"planted change {name}={value!r} refused: {res.event.get('message')}")
                store.current_step = step
                poll = store.poll(step, history, rescan=True, wait_debounce=False)
                if poll.refused:
                    raise ValueError(f"planted change refused at poll: {poll.refused[0].get('message')}")
                applied = poll.applied
                writer.knobs_in_force(store.in_force_document())
            snap = store.snapshot()
            progress = step / max(1, spec.steps - 1)
            episodes = []
            for gym in spec.gyms:
                env = make(gym, knobs=snap, user_factory=factory)
                for t in range(spec.tasks_per_step):
                    index = int(rng.integers(0, 10**6))
                    for s in range(spec.samples):
                        rec = _play(env, spec.agent, rng, progress, int(rng.integers(0, 2**31 - 1)), index)
                        rec.update(
                            {
                                "episode_id": f"s{step:06d}-e{len(episodes):03d}",
                                "step": step,
                                "index": len(episodes),
                                "group": f"{gym}/train/{index}",
                                "sample": s,
                                "prompt_tokens": len(rec["task"]["prompt"].split()),
                                "response_tokens": [len(t["action"]["raw"].split()) for t in rec["turns"]],
                                "token_truncated": False,
                            }
                        )
                        episodes.append(rec)
            writer.trajectories(step, episodes)
            dt = time.perf_counter() - t0
            line = {
                "step": step,
                "time": time.time(),
                **episode_metrics(episodes),
                **spec.opt(step, spec.steps),
                "time_rollout_s": dt,
                "time_update_s": 0.0,
                "time_harness_s": 0.0,
                "time_step_s": dt,
                "knob_version": store.version,
                "knob_changes": len(applied),
            }
            writer.metrics(line)
            history.append(line)
            writer.write_status(step=step + 1, eta_s=dt * (spec.steps - step - 1))
            writer.log(f"step {step} reward {line['reward_mean']:.3f} success {line['success_rate']:.2f}")
        writer.finish("finished")
    finally:
        if server is not None:
            server.close()
    return run_dir


# ---------------------------------------------------------------------------- the catalogue of planted runs
def farming_rules(value: float = 0.3) -> dict[str, Any]:
    """A rule file that pays ``value`` for every question (a reward-hacking channel next to the default rules)."""
    return {
        "description": "planted: pays for every question",
        "rules": [{"name": "ask_bonus", "predicate": "question_asked", "value": value}],
    }


HEALTHY = "healthy"
# The question-rate run's agent without its knob change: what that agent does when nothing is planted.
CONTROL_SEARCH_FIRST = "control_search_first"
# Runs with an LLM user play travel and function: there the loopback user model below answers as
# well as the symbolic user (intention needs paraphrase that a scripted server cannot do).
LLM_GYMS = ("travel", "function")
# ... and are smaller: every LLM-user reply is a real HTTP call through the openai client.
LLM_SIZE = {"gyms": LLM_GYMS, "steps": 8, "samples": 3}
HEALTHY_MIXED = "healthy_mixed"

SPECS: dict[str, Callable[[], RunSpec]] = {
    HEALTHY: lambda: RunSpec(HEALTHY),
    CONTROL_SEARCH_FIRST: lambda: RunSpec(CONTROL_SEARCH_FIRST, agent=learner(0.85, 0.85, planner=search_first)),
    # both user arms, a cooperative LLM user: the arms pose the same task
    HEALTHY_MIXED: lambda: RunSpec(HEALTHY_MIXED, **LLM_SIZE, user={"user_strategy_mix": 0.5}, llm=cooperative_user),
    # the method's min_questions deadlock: too few turns for the questions the gym demands
    "deadlock": lambda: RunSpec("deadlock", env={"max_steps": 3, "min_questions": 2}),
    # an LLM user that pastes every fact it knows into each reply
    "user_leakage": lambda: RunSpec("user_leakage", **LLM_SIZE, user={"user_strategy_mix": 0.0}, llm=chatty_user),
    # a rule paying for every question, and a policy learning to farm it
    "reward_hacking": lambda: RunSpec(
        "reward_hacking", reward_rules={"farm": farming_rules()}, agent=question_farmer()
    ),
    "template_collapse": lambda: RunSpec("template_collapse", agent=fixed_opening()),
    "entropy_collapse": lambda: RunSpec("entropy_collapse", opt=opt_entropy_collapse),
    # every search fails
    "silent_tool_failures": lambda: RunSpec("silent_tool_failures", env={"search_failure_interval": 1}),
    # intention's only fact kind is filtered out: no detail is ever disclosed, so no task can succeed
    "unreachable_tasks": lambda: RunSpec("unreachable_tasks", user={"reveal_kinds": ["preference", "probe"]}),
    # an LLM user that never helps next to a working symbolic user
    "arm_disparity": lambda: RunSpec("arm_disparity", **LLM_SIZE, user={"user_strategy_mix": 0.5}, llm=unhelpful_user),
    # an LLM host that contradicts the story on turtle, next to the symbolic host
    "user_unreliable": lambda: RunSpec(
        "user_unreliable", gyms=("turtle",), steps=8, samples=3, user={"user_strategy_mix": 0.5}, llm=contrarian_host
    ),
    # mid-run the user starts volunteering every turn: a policy that searches first asks less (its
    # oracle share held flat, so nothing else moves the question rate)
    "question_rate_drop": lambda: RunSpec(
        "question_rate_drop",
        agent=learner(0.85, 0.85, planner=search_first),
        changes={6: [("user.volunteer_interval", 1), ("env.elicitation_interval", 1)]},
    ),
}


# Runs for `eau effect`: a harmful change of one gym's knob, with the agent's skill held flat so the
# change is the only thing that moves the metrics.
EFFECT_HARM = "effect_harm"
EXTRA_SPECS: dict[str, Callable[[], RunSpec]] = {
    EFFECT_HARM: lambda: RunSpec(
        EFFECT_HARM, agent=learner(0.85, 0.85), changes={6: [("user.max_reveals", 3, "intention")]}
    ),
}


# ---------------------------------------------------------------------------- one build per test process
_ROOT: Path | None = None
_BUILT: dict[str, Path] = {}


def cached_run(name: str) -> Path:
    """Run ``name`` of :data:`SPECS` or :data:`EXTRA_SPECS`, built once per test process in a private temporary folder
    (removed at exit). Callers must treat it as read-only: other tests read the same folder."""
    global _ROOT
    if name not in _BUILT:
        if _ROOT is None:
            import atexit
            import tempfile

            _ROOT = Path(tempfile.mkdtemp(prefix="eau-analysis-runs-"))
            atexit.register(shutil.rmtree, _ROOT, True)
        _BUILT[name] = build_run(_ROOT / "runs", {**SPECS, **EXTRA_SPECS}[name](), _ROOT)
    return _BUILT[name]
