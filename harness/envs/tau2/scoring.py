"""Scoring a τ² episode as τ²'s evaluator does, saying which components were checked.

The reward is the product over the task's reward basis (``evaluation_criteria.reward_basis``;
τ²'s default is DB and COMMUNICATE) of:

* ``DB`` — the hashes of the agent's database and of the user's database (telecom) equal those of a
  fresh environment in the task's initial state with the gold actions replayed;
* ``ENV_ASSERTION`` — every env assertion of the task holds on the episode's environment (all or
  nothing, as in τ²);
* ``COMMUNICATE`` — every ``communicate_info`` string occurs in some message the agent sent to the
  user, compared case-insensitively with commas removed from the message;
* ``ACTION`` — every gold action is matched by some tool call of the episode (the agent's or the
  user's), by name and by the arguments the action says to compare (all when it says none);
* ``NL_ASSERTION`` — needs an LLM judge; without one it is *unscored*: left out of the product and
  listed in ``unscored``, so a result never counts it as passed. No shipped task has it in its
  basis today (airline's tasks carry NL assertions outside their basis).

An episode that ended prematurely (turn limit, too many tool errors, an error) scores 0, as in τ²;
its components are still computed and kept for diagnosis. ``scored_on`` lists the components the
reward was actually computed from, so "1.0" always says on what.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from harness.envs.tau2.domain import db_hashes, gold_hashes

COMPONENTS = ("DB", "ENV_ASSERTION", "COMMUNICATE", "ACTION", "NL_ASSERTION")
# How an episode may end; the first two are scored (τ²'s USER_STOP and AGENT_STOP: a transfer or
# an out-of-scope declaration is the user stopping), the others score 0.
SCORED_ENDS = ("user_stop", "agent_stop")
ENDS = SCORED_ENDS + ("max_steps", "too_many_errors", "error")

Judge = Callable[[Sequence[str], Sequence[str]], "list[bool] | None"]


@dataclass(frozen=True)
class Call:
    """One tool call of the episode: who made it (``assistant`` or ``user``), what, and whether it failed."""

    name: str
    arguments: dict[str, Any]
    requestor: str = "assistant"
    error: bool = False


@dataclass
class Score:
    """The evaluation of one episode.

    reward: the product over ``scored_on`` (0 when the episode ended prematurely).
    basis: the task's reward basis. components: each basis component's value, None when unscored.
    scored_on / unscored: which basis components the reward was / was not computed from.
    checks: per-component details (which outputs were missing, which actions unmatched, ...).
    end: how the episode ended (one of ``ENDS``).
    """

    reward: float
    basis: list[str]
    components: dict[str, float | None]
    scored_on: list[str]
    unscored: list[str]
    end: str
    checks: dict[str, Any] = field(default_factory=dict)

    @property
    def success(self) -> bool:
        return self.reward >= 1.0 - 1e-9

    def to_dict(self) -> dict[str, Any]:
        return {
            "reward": self.reward,
            "success": self.success,
            "basis": list(self.basis),
            "components": dict(self.components),
            "scored_on": list(self.scored_on),
            "unscored": list(self.unscored),
            "end": self.end,
            "checks": self.checks,
        }


JUDGE_PROMPT = (
    "You check a customer-service conversation against one statement. The agent's messages to the "
    "customer were:\n{messages}\n\nStatement: {assertion}\n\nDoes the conversation satisfy the "
    "statement? Answer with one word: YES or NO."
)


def llm_judge(backend: Any, temperature: float = 0.0, seed: int = 0) -> Judge:
    """An NL-assertion judge on a chat backend (``harness.users.backends``: the LLM user's kind of
    endpoint): one question per assertion; a reply that is neither YES nor NO, or a backend
    failure, leaves the component unscored (None), never passed."""

    def judge(messages: Sequence[str], assertions: Sequence[str]) -> list[bool] | None:
        text = "\n".join(f"- {m}" for m in messages) or "(none)"
        verdicts = []
        for a in assertions:
            prompt = JUDGE_PROMPT.format(messages=text, assertion=a)
            try:
                reply = backend.chat([{"role": "user", "content": prompt}], temperature, seed)
            except Exception:  # noqa: BLE001 -- any backend failure: unscored, never passed
                return None
            word = reply.strip().split()[0].strip(".,!").upper() if reply.strip() else ""
            if word not in ("YES", "NO"):
                return None
            verdicts.append(word == "YES")
        return verdicts

    return judge


def normalise_said(text: str) -> str:
    """A message as COMMUNICATE compares it: lower case, commas removed."""
    return text.lower().replace(",", "")


def communicate_check(required: Sequence[str], said: Sequence[str]) -> tuple[float, list[str]]:
    """(1.0 when every required string was said, else 0.0; the strings not said)."""
    msgs = [normalise_said(m) for m in said]
    missing = [info for info in required if not any(info.lower() in m for m in msgs)]
    return (0.0 if missing else 1.0), missing


def action_check(gold: Sequence[Any], calls: Sequence[Call]) -> tuple[float, list[str]]:
    """(1.0 when every gold action matches some call, else 0.0; the unmatched gold actions)."""
    from tau2.data_model.message import ToolCall

    predicted = [
        ToolCall(id=str(i), name=c.name, arguments=c.arguments, requestor=c.requestor) for i, c in enumerate(calls)
    ]
    unmatched = [f"{a.name}({a.arguments})" for a in gold if not any(a.compare_with_tool_call(p) for p in predicted)]
    return (0.0 if unmatched else 1.0), unmatched


def env_assertion_check(env: Any, assertions: Sequence[Any]) -> tuple[float, list[str]]:
    """(1.0 when every assertion holds on ``env``, else 0.0; the failed ones). An assertion whose
    function raises counts as failed, with the error."""
    failed = []
    for a in assertions:
        try:
            ok = env.run_env_assertion(a, raise_assertion_error=False)
        except Exception as exc:  # noqa: BLE001
            failed.append(f"{a.func_name}({a.arguments}): raised {exc}")
            continue
        if not ok:
            failed.append(f"{a.func_name}({a.arguments}) != {a.assert_value}")
    return (0.0 if failed else 1.0), failed


def db_check(domain: str, task: Any, env: Any) -> tuple[float, dict[str, bool]]:
    gold_agent, gold_user = gold_hashes(domain, task)
    agent, user = db_hashes(env)
    match = {"agent_db": agent == gold_agent, "user_db": user == gold_user}
    return (1.0 if all(match.values()) else 0.0), match


def score_episode(
    domain: str, task: Any, env: Any, said: Sequence[str], calls: Sequence[Call], end: str, judge: Judge | None = None
) -> Score:
    """Score an episode of ``task`` whose environment ended as ``env``; ``said``: the agent's messages
    to the user; ``calls``: every tool call (agent's and user's); ``end``: one of ``ENDS``;
    ``judge``: an NL-assertion judge (messages, assertions -> one verdict each, None on failure)."""
    if end not in ENDS:
        raise ValueError(f"unknown episode end {end!r}; allowed: {', '.join(ENDS)}")
    crit = task.evaluation_criteria
    basis = [str(getattr(b, "value", b)) for b in crit.reward_basis] if crit is not None else []
    components: dict[str, float | None] = {}
    checks: dict[str, Any] = {}
    if crit is not None:
        components["DB"], checks["db"] = db_check(domain, task, env)
        components["ENV_ASSERTION"], checks["env_assertions_failed"] = env_assertion_check(
            env, crit.env_assertions or []
        )
        components["COMMUNICATE"], checks["not_communicated"] = communicate_check(crit.communicate_info or [], said)
        components["ACTION"], checks["actions_unmatched"] = action_check(crit.actions or [], calls)
        components["NL_ASSERTION"] = None
        if crit.nl_assertions and judge is not None:
            verdicts = judge(list(said), list(crit.nl_assertions))
            if verdicts is not None:
                components["NL_ASSERTION"] = 1.0 if all(verdicts) else 0.0
                checks["nl_assertions_failed"] = [a for a, v in zip(crit.nl_assertions, verdicts) if not v]
        elif not crit.nl_assertions:
            components["NL_ASSERTION"] = 1.0  # nothing to judge: τ² scores an empty list as met
    scored_on = [b for b in basis if components.get(b) is not None]
    unscored = [b for b in basis if components.get(b) is None]
    reward = 1.0
    for b in scored_on:
        reward *= float(components[b])  # type: ignore[arg-type]
    if end not in SCORED_ENDS:
        checks["premature"] = end
        reward = 0.0
    return Score(reward, basis, {b: components.get(b) for b in basis}, scored_on, unscored, end, checks)
