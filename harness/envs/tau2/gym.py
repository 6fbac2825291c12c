"""The τ²-bench gyms ``tau2_airline``, ``tau2_retail`` and ``tau2_telecom`` on the gym API.

An episode is one τ² task (τ²'s own train/test split: the harness's ``train`` and ``eval``). The
agent sees the domain policy and the customer's opening message; each turn it either calls tools
(the domain's agent tools, run by τ² on the episode's database) or sends a message to the
customer, who replies (symbolic or LLM arm). Telecom is dual control: the customer owns the phone
and its user tools; the agent asks, the customer runs them; an agent call of a user tool is an
error.

The episode ends when

* the customer stops (requests done or refused), is transferred (the agent's successful
  ``transfer_to_human_agents``) or declares the request out of scope (LLM arm) -> ``user_stop``;
* the agent ends it (``###STOP###``) -> ``agent_stop``;
* ``max_steps`` agent turns were played -> ``max_steps`` (scores 0, as in τ²);
* ``max_tool_errors`` tool calls failed (unknown tool, bad arguments, unparseable JSON, a user
  tool, a tool that raised) -> ``too_many_errors`` (scores 0).

Every failed call comes back as the tool's error text (τ²'s ``Error: ...``), never an exception.
The last turn carries the τ² score (``scoring.py``) as its task reward; the record says which
reward-basis components it was computed from. Every customer reply is checked against what is true
of the customer (``customer.py``; the reply's ``check`` flag, ``user_wrong_rate``).

Action mapping onto the harness's choices (for metrics): a message is ``ask``, a turn of tool calls
``search``, the agent's stop ``answer``.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from harness.envs.base import UserCentricEnv
from harness.envs.tau2 import domain as dom
from harness.envs.tau2.actions import STOP_TOKEN, parse_turn, tagged_instructions, tool_call_instructions
from harness.envs.tau2.customer import Truth, check_customer_reply, find_customer, merge, record_values, scenario_values
from harness.envs.tau2.scenario import GoldAction, known_corpus, known_facts, opening_message
from harness.envs.tau2.scoring import SCORED_ENDS, Call, Score, llm_judge, score_episode
from harness.types import Action, ReplyCheck, Task, TurnRecord, UserReply

DEFAULT_ERROR_LIMIT = 10  # τ²'s max_errors


def _instructions(task: Any) -> dict[str, Any]:
    """The user scenario's instructions as a dict (τ² allows a plain string: the reason for the call)."""
    ins = task.user_scenario.instructions
    if isinstance(ins, str):
        return {"reason_for_call": ins}
    return ins.model_dump()


def scenario_data(domain: str, task: Any) -> dict[str, Any]:
    """What the harness keeps of a τ² task in ``Task.data`` (JSON-ready)."""
    ins = _instructions(task)
    crit = task.evaluation_criteria
    gold = [
        {"name": a.name, "arguments": a.arguments, "requestor": a.requestor, "compare_args": a.compare_args}
        for a in (crit.actions or [] if crit else [])
    ]
    reason = ins.get("reason_for_call") or ""
    return {
        "domain": domain,
        "tau2_id": task.id,
        "reason_for_call": reason,
        "known_info": ins.get("known_info"),
        "unknown_info": ins.get("unknown_info"),
        "task_instructions": ins.get("task_instructions"),
        "request": opening_message(reason).removeprefix("Hi! "),
        "known_corpus": known_corpus(ins),
        "gold": gold,
        "outputs": list(crit.communicate_info or []) if crit else [],
    }


def make_task(gym: str, domain: str, task: Any, split: str) -> Task:
    """The harness task of τ² task ``task``: the opening message as prompt, the known info as facts."""
    data = scenario_data(domain, task)
    return Task(
        gym=gym,
        task_id=f"{gym}-{task.id}",
        split=split,
        prompt=opening_message(data["reason_for_call"]),
        facts=known_facts(data["known_info"]),
        secret="",  # nothing to hide: the user may state all it knows, and only that
        data=data,
    )


def gold_actions(data: dict[str, Any]) -> list[GoldAction]:
    return [
        GoldAction(
            g["name"],
            g["arguments"],
            g["requestor"],
            tuple(g["compare_args"]) if g["compare_args"] is not None else None,
        )
        for g in data["gold"]
    ]


class Tau2Env(UserCentricEnv):
    """One τ² domain as a gym; subclasses set ``name`` and ``domain``. See the module docstring."""

    domain: ClassVar[str] = ""
    call_choice: ClassVar[str] = "search"  # the harness choice a turn of tool calls is recorded as
    allowed_choices = ("ask", "search", "answer")
    fact_kinds = ("detail",)

    @classmethod
    def check_available(cls) -> None:
        dom.require_tau2()

    def __init__(self, *args: Any, judge: Any = None, **kwargs: Any):
        dom.require_tau2()  # a clear error naming the install command before anything else
        super().__init__(*args, **kwargs)
        llm = getattr(self.user_factory, "llm", None)
        # NL assertions are judged by the run's LLM-user endpoint when it has one, else left unscored
        self.judge = judge if judge is not None else (llm_judge(llm) if llm is not None else None)
        self._world_env: Any = None
        self.tau_task: Any = None
        self.calls: list[Call] = []
        self.messages: list[str] = []
        self.errors = 0
        self.score: Score | None = None
        self.end: str | None = None
        self._customer: tuple[str | None, Truth] | None = None  # (id, truth of the task as it began)

    @property
    def world_env(self) -> Any:
        """The episode's τ² environment (its databases), in the task's initial state."""
        if self._world_env is None:
            if self.tau_task is None:
                raise RuntimeError(f"{self.name}: the environment exists only after reset()")
            self._world_env = dom.initial_environment(self.domain, self.tau_task)
        return self._world_env

    # ------------------------------------------------------------------ tasks
    def split_ids(self, split: str) -> tuple[str, ...]:
        return dom.split_ids(self.domain)["train" if split == "train" else "test"]

    def generate_task(self, split: str, index: int) -> Task:
        ids = self.split_ids(split)
        task = dom.task_by_id(self.domain)[ids[index % len(ids)]]
        return make_task(self.name, self.domain, task, split)

    def task_count(self, split: str) -> int:
        return len(self.split_ids(split))

    # ------------------------------------------------------------------ the world the user sees
    def done_calls(self) -> list[tuple[str, dict[str, Any]]]:
        """Every tool call so far (name, arguments), failed ones included: τ²'s ACTION check counts
        them too, and a gold action that fails in τ² is done as far as it can be."""
        return [(c.name, c.arguments) for c in self.calls]

    def said(self) -> list[str]:
        return list(self.messages)

    def gold(self) -> list[GoldAction]:
        assert self.task is not None
        return gold_actions(self.task.data)

    def outputs(self) -> list[str]:
        assert self.task is not None
        return list(self.task.data["outputs"])

    def write_tools(self) -> frozenset[str]:
        return dom.write_tools(self.domain)

    def user_tools(self) -> frozenset[str]:
        return dom.user_tool_names(self.domain)

    def run_user_tool(self, name: str, arguments: dict[str, Any]) -> tuple[str, bool]:
        """The customer runs one of its own tools on its device (dual control); recorded as a user call."""
        if name not in self.user_tools():
            out = dom.ToolOutcome(f"Error: the phone has no tool {name!r}", True)
        else:
            out = dom.call_tool(self.world_env, name, arguments, requestor="user")
        self.calls.append(Call(name, dict(arguments), "user", out.error))
        return out.text, out.error

    def build_user(self, arm: str, rules: Any, llm: Any) -> Any:
        """The τ² customer of arm ``arm`` (called by ``UserFactory.make``)."""
        from harness.envs.tau2.user import Tau2LLMUser, Tau2SymbolicUser

        if self.task is not None:  # the user is built before reset() returns: take the task's domain now
            self.domain = self.task.data["domain"]
        unknown = [t for t, _ in (rules.scenario.user_tools if rules.scenario else ()) if t not in self.user_tools()]
        if unknown:
            from harness.users.rules import RuleFileError

            raise RuleFileError(
                f"knobs/rules/users/{self.name}.yaml: scenario.user_tools names {unknown}, which are not user tools of "
                f"τ²'s {self.domain} domain (user tools: {', '.join(sorted(self.user_tools())) or 'none'})"
            )
        if arm == "symbolic":
            return Tau2SymbolicUser(rules, self)
        return Tau2LLMUser(rules, llm, self)

    # ------------------------------------------------------------------ the customer's truth
    def customer_truth(self) -> Truth:
        """The true values of each kind about the task's customer (``customer.py``): its record in the
        domain database as the episode began and as it is now, and everything its scenario says."""
        assert self.task is not None
        if self._customer is None:
            base = dom.base_db(self.domain)
            key = find_customer(self.domain, self.task.data, base)
            self._customer = key, merge(scenario_values(self.task.data), record_values(self.domain, base, key))
        key, start = self._customer
        if self._world_env is None:  # no tool has run: the database is as it began
            return start
        return merge(start, record_values(self.domain, self._world_env.tools.db, key))

    def check_reply(self, question: str, reply: UserReply) -> ReplyCheck:
        """A customer reply (either arm) that states a value of the customer the task's truth contradicts."""
        return check_customer_reply(reply.text, self.customer_truth(), question)

    # ------------------------------------------------------------------ prompts
    def system_prompt(self) -> str:
        how = tagged_instructions() if self.rendering == "tagged" else tool_call_instructions()
        parts = [
            "You are a customer service agent. Help the customer by following the policy below exactly: "
            "use the tools to look up and change their records, ask for what you need, and get the "
            "customer's explicit confirmation before any action that changes their records. Each turn, "
            f"either call tools or write one message to the customer. {how}",
            "<policy>\n" + dom.policy(self.domain).strip() + "\n</policy>",
        ]
        if self.rendering == "tagged":  # no native tool schemas: list them in the prompt
            tools = "\n".join(json.dumps(s["function"], separators=(",", ":")) for s in dom.tool_schemas(self.domain))
            parts.append("<tools>\n" + tools + "\n</tools>")
        return "\n\n".join(parts)

    def tool_schemas(self) -> list[dict[str, Any]]:
        """The domain's agent tools (τ²'s schemas from signatures and docstrings); no interact tool."""
        return list(dom.tool_schemas(self.domain))

    # ------------------------------------------------------------------ episode
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        opts = dict(options or {})
        obs, info = super().reset(seed=seed, options=opts)
        assert self.task is not None
        self.domain = self.task.data["domain"]  # tau mixes domains; τ² gyms have one (same value)
        self.tau_task = self.tau2_task(self.task)
        self._world_env = None  # built on first use: loading a domain database is most of a reset's cost
        self.calls, self.messages, self.errors = [], [], 0
        self.score, self.end = None, None
        self._customer = None
        info["tau2_id"] = self.tau_task.id
        return obs, info

    def tau2_task(self, task: Task) -> Any:
        """The τ² task object (scenario, initial state, evaluation criteria) behind ``task``."""
        return dom.task_by_id(self.domain)[task.data["tau2_id"]]

    def parse(self, action_text: str) -> Any:
        """One agent turn as a ``TauTurn`` (tau overrides this with UserRL's interface)."""
        return parse_turn(action_text, self.rendering)

    def render_call(self, name: str, arguments: dict[str, Any]) -> str:
        """A tool call written as an agent writes it in this gym's rendering (scripted agents)."""
        call = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
        return f"<tool_call>{call}</tool_call>" if self.rendering == "tool_call" else f"CALL: {call}"

    def render_message(self, text: str) -> str:
        """A message to the customer as an agent writes it (plain text in both renderings)."""
        return text

    def search_result(self, query: str) -> tuple[str, bool]:
        """tau's ``search`` (this gym has none)."""
        return "There is no search here.", False

    def error_limit(self) -> int:
        return int(self.env_knobs.get("max_tool_errors", DEFAULT_ERROR_LIMIT))

    def _run_calls(self, parsed: list[Any], record: TurnRecord) -> str | None:
        """Run a turn's tool calls in order; the episode end they cause (transfer), if any."""
        results, trace, end = [], [], None
        for pc in parsed:
            if pc.error is not None:
                out = dom.ToolOutcome(pc.error, True)
            elif pc.name in self.user_tools() and pc.name not in dom.tool_names(self.domain):
                out = dom.ToolOutcome(
                    f"Error: {pc.name} is a tool on the customer's phone; you cannot call it. Ask the customer to do it.",
                    True,
                )
            else:
                out = dom.call_tool(self.world_env, pc.name, pc.arguments, requestor="assistant")
            self.calls.append(Call(pc.name or "?", dict(pc.arguments), "assistant", out.error))
            self.errors += int(out.error)
            trace.append({"name": pc.name, "args": pc.arguments, "ok": not out.error, "result": out.text})
            results.append(out.text if len(parsed) == 1 else f"[{pc.name or '?'}] {out.text}")
            if pc.name == dom.TRANSFER_TOOL and not out.error:
                end = "user_stop"  # τ²'s user answers a transfer with ###TRANSFER###
                break
        record.tool = {
            "name": "+".join(t["name"] or "?" for t in trace),
            "args": [t["args"] for t in trace],
            "ok": all(t["ok"] for t in trace),
            "result": "\n".join(results),
            "calls": trace,
        }
        if not record.tool["ok"]:
            record.events.append("tool_failure")
        record.obs_role = "tool"
        record.observation = "\n".join(results)
        return end

    def _message(self, text: str, record: TurnRecord) -> str | None:
        """Send a message to the customer; the episode end it causes, if any."""
        st = self.state
        self.messages.append(text)
        st.questions += 1
        st.asked.append(" ".join(text.lower().split()))
        reply: UserReply = self.user.reply(text, st)
        check = self.check_reply(text, reply)
        if check.checked:
            reply.flags["check"] = check.to_flag()
        record.user_reply = reply
        record.obs_role = "user"
        record.observation = reply.text
        self._account_reply(reply, record)
        stop = reply.flags.get("stop")
        if stop:
            record.events.append(f"user_{stop}")
            return "user_stop"
        return None

    def step(self, action_text: str):
        if self.task is None or self.state.done:
            raise RuntimeError(f"{self.name}: step() called before reset() or after the episode ended")
        st = self.state
        turn = self.parse(action_text)
        end: str | None = None
        raw = action_text if isinstance(action_text, str) else ""
        if turn.empty:
            action = Action(None, "", raw, turn.format_error or "empty_turn", self.rendering)
        elif turn.search is not None:
            action = Action("search", turn.search, raw, None, self.rendering)
        elif turn.calls:
            content = "\n".join(c.raw for c in turn.calls)
            action = Action(self.call_choice, content, raw, None, self.rendering)
        else:
            action = Action(
                "answer" if turn.stop else "ask", turn.message or STOP_TOKEN, action_text, None, self.rendering
            )
        record = TurnRecord(turn=st.turn, action=action, observation="", obs_role="env")
        if turn.empty:
            st.format_errors += 1
            record.events.append("format_error")
            record.observation = turn.feedback or "Your turn was empty. Call a tool or write a message to the customer."
        elif turn.search is not None:
            st.searches += 1
            text, ok = self.search_result(turn.search)
            record.tool = {"name": "search", "args": turn.search, "ok": ok, "result": text}
            record.obs_role, record.observation = "tool", text
        elif turn.calls:
            st.searches += 1
            end = self._run_calls(turn.calls, record)
        elif turn.stop:
            if turn.message:
                self.messages.append(turn.message)  # a last message still counts as said
            record.events.append("agent_stop")
            record.observation = "The conversation has ended."
            end = "agent_stop"
        else:
            end = self._message(turn.message, record)
        st.turn += 1
        if end is None and self.errors >= self.error_limit():
            end = "too_many_errors"
            record.events.append("too_many_errors")
        if end is None and st.turn >= int(self.env_knobs["max_steps"]):
            end = "max_steps"
            record.events.append("turn_limit")
        task_reward = self._finish(end, record) if end is not None else 0.0
        st.task_score += task_reward
        breakdown = self.reward_model.score_turn(
            gym=self.name, record=record, state=st, task_reward=task_reward, knobs=self.reward_knobs, builtin={}
        )
        record.reward = float(breakdown["total"])
        record.reward_breakdown = breakdown
        st.turns.append(record)
        info = {
            "turn": record.to_dict(),
            "success": st.success,
            "arm": self.arm,
            "format_error": action.format_error,
            "deadlock": "deadlock" in record.events,
        }
        terminated = st.done and not st.truncated
        return record.observation, record.reward, terminated, st.truncated, info

    def _finish(self, end: str, record: TurnRecord) -> float:
        st = self.state
        self.end = end
        self.score = score_episode(
            self.domain, self.tau_task, self.world_env, self.messages, self.calls, end, self.judge
        )
        st.done = True
        st.truncated = end == "max_steps"
        st.answered = end in SCORED_ENDS
        st.success = self.score.success
        if end == "max_steps":
            record.events.append("deadlock")
        record.answer = {
            "task_reward": self.score.reward,
            "success": self.score.success,
            "terminal": True,
            "details": self.score.to_dict(),
        }
        return self.score.reward

    def episode_record(self) -> dict[str, Any]:
        rec = super().episode_record()
        rec["tau2"] = {
            "domain": self.domain,
            "task_id": self.tau_task.id if self.tau_task is not None else None,
            "end": self.end,
            "tool_errors": self.errors,
            "calls": [
                {"name": c.name, "arguments": c.arguments, "requestor": c.requestor, "error": c.error}
                for c in self.calls
            ],
            "score": self.score.to_dict() if self.score is not None else None,
        }
        return rec
