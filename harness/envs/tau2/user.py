"""The simulated customers of the τ² gyms (and of tau): a symbolic user acting out the task's
scenario, and the LLM user with τ²-style instructions.

The symbolic user, on every agent message (rules: the ``scenario`` section of
``knobs/rules/users/<gym>.yaml``, then its intents):

1. **nothing pending and the agent wraps up, refuses or asks nothing** -> it ends the
   conversation (``done``); a task that wants no change and no output (the policy forbids the
   request) ends only on a refusal or a wrap-up, not on any statement. Pending = a gold write action (the agent's or, in telecom, the
   user's own) no call has matched yet (a failed call counts: τ²'s ACTION check counts it too), or
   a required output the agent has not said.
   So it never stops right after confirming and before the write: the write is still pending.
2. **a confirmation request** (``confirm_patterns`` and the verb of a pending write, e.g.
   "return") -> the answer depends only on what the user's own instructions say. Of the
   identifiers the message names (``id_patterns``), only those in the known corpus count: an id
   the user was not given gets the same answer whether it is right or wrong (else the customer
   would confirm gold ids it does not know, one bit per question). "yes" when a pending gold
   write has the verb and, if the user knows any of that write's ids, the message names one of
   them; else "no", with the request restated.
3. **a request to act on the user's phone** (telecom, dual control; ``user_tools``) -> the user
   runs the matching user tool on its own device through τ²'s environment and reports the tool's
   output. The agent itself can never call a user tool (the gym refuses it).
4. **a refusal** with something pending -> the request restated up to ``max_insist`` times, then
   the conversation ends (``refused``).
5. **a question** -> known info through the intents (facts from the known info, disclosed only
   when asked, within ``facts_per_reply``/``max_reveals``); a question about the unknown info gets
   "I don't know" (``unknown``) and never a value; otherwise the request is restated.

A reply states only templates, facts of the known info, the opening (the reason for the call)
and the user's own tool outputs: never a value found only in the unknown info or in the gold
actions' arguments.
"""

from __future__ import annotations

import json
import re
from typing import Any, Protocol

from harness.envs.tau2.scenario import GoldAction, flat_values, id_tokens, pending
from harness.types import EpisodeState, UserReply
from harness.users.base import SimulatedUser
from harness.users.llm import LLMUser
from harness.users.rules import ScenarioRules, UserRules

STOP_DONE, STOP_REFUSED, STOP_TRANSFER, STOP_OUT_OF_SCOPE = "done", "refused", "transfer", "out_of_scope"
# τ²'s user simulator ends the conversation with one of these tokens; the LLM user is told to use them
STOP_TOKENS = {"###STOP###": STOP_DONE, "###TRANSFER###": STOP_TRANSFER, "###OUT-OF-SCOPE###": STOP_OUT_OF_SCOPE}
MAX_USER_TOOLS_PER_TURN = 3  # one message may ask for a few device actions; more is a wall of output


class World(Protocol):
    """What the gym gives its user: the episode's calls so far (name, arguments),
    the agent's messages, the task's gold actions and outputs, and running a user tool."""

    def done_calls(self) -> list[tuple[str, dict[str, Any]]]: ...

    def said(self) -> list[str]: ...

    def gold(self) -> list[GoldAction]: ...

    def outputs(self) -> list[str]: ...

    def write_tools(self) -> frozenset[str]: ...

    def user_tools(self) -> frozenset[str]: ...

    def run_user_tool(self, name: str, arguments: dict[str, Any]) -> tuple[str, bool]: ...


def _tool_words(name: str) -> re.Pattern[str]:
    """A tool's name as an agent may write it: ``toggle_airplane_mode`` or ``toggle airplane mode``."""
    return re.compile(r"\b" + r"[_ ]".join(map(re.escape, name.split("_"))) + r"\b", re.IGNORECASE)


def _json_object(text: str) -> dict[str, Any] | None:
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        return None
    try:
        obj = json.loads(text[start : end + 1])
    except json.JSONDecodeError:
        return None
    return obj if isinstance(obj, dict) else None


class Tau2SymbolicUser(SimulatedUser):
    """The scenario-following symbolic customer; see the module docstring."""

    arm = "symbolic"

    def __init__(self, rules: UserRules, world: World):
        if rules.scenario is None:
            raise ValueError(f"the user rules of gym {rules.gym!r} have no scenario section; a τ² user needs one")
        super().__init__(rules, None)
        self.scenario: ScenarioRules = rules.scenario
        self.world = world
        self.refusals = 0

    # ------------------------------------------------------------------ state of the request
    def pending_writes(self) -> list[GoldAction]:
        w = self.world
        wanted = [g for g in w.gold() if g.requestor == "user" or g.name in w.write_tools()]
        return pending(wanted, w.done_calls())

    def pending_outputs(self) -> list[str]:
        said = [m.lower().replace(",", "") for m in self.world.said()]
        return [o for o in self.world.outputs() if not any(o.lower() in m for m in said)]

    def had_requests(self) -> bool:
        """Whether the task wants any change or any output at all (from the gold, not the episode)."""
        w = self.world
        return bool(w.outputs()) or any(g.requestor == "user" or g.name in w.write_tools() for g in w.gold())

    def nothing_pending(self) -> bool:
        return not self.pending_writes() and not self.pending_outputs()

    def request(self) -> str:
        assert self.task is not None
        return self.task.data["request"]

    # ------------------------------------------------------------------ replies
    def say(self, key: str, flags: dict[str, Any], **slots: str) -> UserReply:
        text = self.choose(self.scenario.replies[key])
        for k, v in slots.items():
            text = text.replace("{" + k + "}", v)
        return UserReply(self.fill(text, []), [], flags)

    def stop(self, key: str, reason: str, flags: dict[str, Any]) -> UserReply:
        flags["stop"] = reason
        return self.say(key, flags)

    def confirmation(self, message: str, flags: dict[str, Any]) -> UserReply | None:
        """The answer to a confirmation request, or None when the message proposes no action."""
        sc = self.scenario
        if not sc.any_match(sc.confirm, message):
            return None
        verbs = {g.verb() for g in self.world.gold()} | {n.split("_", 1)[0] for n in self.world.write_tools()}
        named = [v for v in verbs if re.search(r"\b" + re.escape(v), message, re.IGNORECASE)]
        if not named:
            return None  # "can you confirm your email?" asks for info, not for an action
        known = id_tokens(self.known_text, sc.ids)
        mentioned = id_tokens(message, sc.ids) & known  # the ids the user can judge
        for g in self.pending_writes():
            if g.requestor != "assistant" or g.verb() not in named:
                continue
            own = id_tokens(" ".join(flat_values(g.arguments)), sc.ids) & known
            if not own or mentioned & own:
                flags["intent"], flags["confirmed"] = "confirm", g.name
                return self.say("confirm_yes", flags)
        flags["intent"], flags["confirmed"] = "confirm", None
        return self.say("confirm_no", flags)

    def device_actions(self, message: str, flags: dict[str, Any]) -> UserReply | None:
        """Run the user tools the message asks for (dual control); None when it asks for none."""
        runs: list[tuple[str, dict[str, Any]]] = []
        names = self.world.user_tools()
        for tool, patterns in self.scenario.user_tools:
            if tool not in names or len(runs) >= MAX_USER_TOOLS_PER_TURN:
                continue
            args = None
            if _tool_words(tool).search(message):
                args = _json_object(message) or {}
            else:
                for p in patterns:
                    m = p.search(message)
                    if m:
                        args = {k: v for k, v in m.groupdict().items() if v is not None}
                        break
            if args is not None:
                runs.append((tool, args))
        if not runs:
            return None
        parts, ran = [], []
        for tool, args in runs:
            result, error = self.world.run_user_tool(tool, args)
            ran.append({"tool": tool, "arguments": args, "error": error})
            key = "tool_failed" if error else "tool_result"
            text = (
                self.choose(self.scenario.replies[key])
                .replace("{tool}", tool.replace("_", " "))
                .replace("{result}", result)
            )
            parts.append(text)
        flags["intent"], flags["user_tools"] = "device_action", ran
        return UserReply(" ".join(parts), [], flags)

    def asks_unknown(self, message: str) -> bool:
        assert self.task is not None
        unknown = self.task.data.get("unknown_info") or ""
        return any(p.search(unknown) and p.search(message) for p in self.scenario.unknown)

    def reset(self, task, user_knobs, env_knobs, rng) -> None:  # type: ignore[override]
        super().reset(task, user_knobs, env_knobs, rng)
        self.refusals = 0
        self.known_text = task.data.get("known_corpus", "")

    def reply(self, question: str, state: EpisodeState) -> UserReply:
        task, policy, _, _ = self._ready()
        sc = self.scenario
        flags: dict[str, Any] = {"arm": self.arm}
        confirm = self.confirmation(question, flags)
        if confirm is not None:
            return confirm
        acted = self.device_actions(question, flags)
        if acted is not None:
            return acted
        refusal = sc.any_match(sc.refusal, question)
        closing = sc.any_match(sc.closing, question)
        # a statement with no question ends the call once the wanted changes are made; a customer whose
        # wish the policy forbids (no gold write, nothing to say) waits for the refusal or the wrap-up
        settled = refusal or closing or ("?" not in question and self.had_requests())
        if self.nothing_pending() and settled:
            flags["intent"] = "wrap_up"
            return self.stop("done", STOP_DONE, flags)
        if refusal:
            self.refusals += 1
            flags["intent"] = "refusal"
            if self.refusals > sc.max_insist:
                return self.stop("refused", STOP_REFUSED, flags)
            return self.say("insist", flags, request=self.request())
        intent = self.rules.classify(question)
        flags["intent"] = intent.name
        if intent.disclosure != "none" and not closing:
            if policy.remaining(state) <= 0:
                return self.declined(flags)
            candidates = policy.matched(question, task.facts, None, None)
            facts = policy.pick(candidates, state)
            if facts:
                return self.note_disclosure(
                    state, UserReply(self.fill(self.choose(intent.replies), facts), facts, flags)
                )
            if self.asks_unknown(question):
                flags["intent"] = "unknown"
                return self.say("unknown", flags)
        elif intent.disclosure == "none" and not closing:
            return UserReply(self.fill(self.choose(intent.replies), []), [], flags)
        flags["intent"] = "remind"
        return self.say("remind", flags, request=self.request())

    def volunteer(self, state: EpisodeState) -> UserReply | None:
        return None  # a τ² customer gives known info only when asked


# ---------------------------------------------------------------------------------- LLM arm
LLM_GUIDELINES = """\
You are playing a customer who contacted a customer-service agent. Stay in that role for the whole
conversation: you are the customer, never the agent, and you never mention that you are simulated.

How to play the customer:
- Say only what the scenario below gives you. Share a piece of your known information when the
  agent asks for it, not before, and a little at a time rather than all at once.
- If the agent asks for something you were not told (including anything under "unknown"), say that
  you don't know or don't remember it. Never make up an identifier, a number, a date or an address.
- Agree to an action only when it is what your instructions ask for; otherwise say no and explain
  what you want instead.
- Keep your messages short and natural, as a person typing in a chat would.
- Do not end the conversation while the agent is still about to do something you agreed to: wait
  until it reports that the change was made.
- When everything you wanted is done, or the agent has clearly and finally refused, write
  ###STOP### as your whole message. If you are transferred to a human agent, write ###TRANSFER###.
  If the agent asks you about something your scenario does not cover at all, write
  ###OUT-OF-SCOPE###."""

DEVICE_GUIDELINES = """\
You hold a phone that the agent cannot see. When the agent asks you to check or change something on
it, do it by writing exactly one line CALL: {"name": <tool>, "arguments": {...}} with one of your
phone's tools below; you will then see what the phone shows and can tell the agent. Always base what
you say about your phone on those results, never on guesses. Your phone's tools: """


class Tau2LLMUser(LLMUser):
    """The LLM customer: τ²-style guidelines and the scenario as its instructions; ends the
    conversation with τ²'s stop tokens; in telecom it acts on its phone through its user tools."""

    MAX_DEVICE_ROUNDS = 4  # tool calls one reply may make before it must answer the agent

    def __init__(self, rules: UserRules, backend: Any, world: World):
        super().__init__(rules, backend, None)
        self.world = world

    def system_prompt(self, dynamic) -> str:  # type: ignore[override]
        task, _, _, persona = self._ready()
        d = task.data
        parts = [LLM_GUIDELINES, f"Your personality: {persona.description}", "Your scenario:"]
        parts.append(f"- Why you are contacting the agent: {d.get('reason_for_call') or ''}")
        if d.get("known_info"):
            parts.append(f"- What you know: {d['known_info']}")
        if d.get("unknown_info"):
            parts.append(f"- What you do not know: {d['unknown_info']}")
        if d.get("task_instructions"):
            parts.append(f"- Further instructions: {d['task_instructions']}")
        tools = sorted(self.world.user_tools())
        if tools:
            parts.append(DEVICE_GUIDELINES + ", ".join(tools) + ".")
        return "\n".join(parts)

    def messages(self, question, state, dynamic):  # type: ignore[override]
        task, _, _, _ = self._ready()
        msgs = [{"role": "system", "content": self.system_prompt(None)}]
        # the opening was the user's; the agent's messages are "user" turns to this model
        msgs.append({"role": "assistant", "content": task.prompt})
        for t in state.turns:
            if t.action.choice in ("ask", "answer") and t.user_reply is not None:
                msgs += [
                    {"role": "user", "content": t.action.content},
                    {"role": "assistant", "content": t.user_reply.text},
                ]
        msgs.append({"role": "user", "content": question})
        return msgs

    def reply(self, question: str, state: EpisodeState) -> UserReply:
        from harness.users.backends import BackendError

        flags: dict[str, Any] = {"arm": self.arm, "backend": self.backend.name}
        msgs = self.messages(question, state, None)
        seed = int(self.rng.integers(0, 2**31 - 1))
        temperature = float(self.user_knobs.get("temperature", 0.7))
        ran = []
        text = ""
        for _ in range(self.MAX_DEVICE_ROUNDS + 1):
            try:
                text = self.backend.chat(msgs, temperature, seed)
            except BackendError as exc:
                flags["backend_error"] = str(exc)[:500]
                return UserReply("Sorry, could you say that again?", [], flags)
            m = re.search(r"^\s*CALL:\s*(\{.*\})\s*$", text, re.MULTILINE)
            if not m or not self.world.user_tools():
                break
            call = _json_object(m.group(1)) or {}
            name, args = str(call.get("name", "")), call.get("arguments", {})
            result, error = self.world.run_user_tool(name, args if isinstance(args, dict) else {})
            ran.append({"tool": name, "arguments": args, "error": error})
            msgs += [{"role": "assistant", "content": text}, {"role": "user", "content": f"[your phone] {result}"}]
        if ran:
            flags["user_tools"] = ran
        for token, reason in STOP_TOKENS.items():
            if token in text:
                flags["stop"] = reason
                text = text.replace(token, "").strip() or "Thank you, goodbye."
                break
        return UserReply(text, [], flags)
