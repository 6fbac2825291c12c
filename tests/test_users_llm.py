"""LLM user: a real OpenAI-compatible server on loopback (request contents, timeouts, retries,
fallback, detection, budget, leak guard) and a tiny local transformers model (plus, slow, Gemma 3 270M)."""

from __future__ import annotations

import time

import pytest
import torch
from test_users_support import (
    ChatServer,
    ToyGym,
    colbench_task,
    env_knobs,
    rng,
    rules,
    state_with,
    telepathy_dynamic,
    telepathy_task,
    tiny_chat_model,
    travel_task,
    user_knobs,
)

from harness.knobs.folder import defaults_dir
from harness.knobs.snapshot import KnobSnapshot
from harness.types import Fact
from harness.users.backends import (
    BackendError,
    OpenAIChatBackend,
    TransformersChatBackend,
    cut_at_next_speaker,
    make_backend,
    resolve_chat_template,
)
from harness.users.llm import BACKEND_FALLBACK_REPLY, LLMUser
from harness.users.mixture import UserFactory
from harness.users.personas import DEFAULT_PERSONAS


def backend(server: ChatServer, **kw) -> OpenAIChatBackend:
    kw.setdefault("timeout_s", 5.0)
    kw.setdefault("retry_backoff_s", 0.01)
    return OpenAIChatBackend(server.base_url, "user-sim", api_key="sk-test", **kw)


def llm_user(b, gym="travel", task=None, dynamic=None, seed=0, env_over=None, **knobs) -> LLMUser:
    u = LLMUser(rules(gym), b, dynamic)
    u.reset(task or travel_task(), user_knobs(**knobs), env_knobs(**(env_over or {})), rng(seed))
    return u


def snapshot(**user_over) -> KnobSnapshot:
    base = KnobSnapshot.read_dir(defaults_dir())
    values = {a: dict(v) for a, v in base.values.items()}
    values["user"].update(user_over)
    return KnobSnapshot(values=values, user_rules=base.user_rules, reward_rules=base.reward_rules)


# ---------------------------------------------------------------- request contents
def test_request_has_model_temperature_persona_task_and_only_allowed_facts():
    with ChatServer() as srv:
        kinds = ["signature", "shape", "edge_case"]  # `return` withheld
        u = llm_user(
            backend(srv), "colbench", colbench_task(), temperature=0.3, persona="impatient", reveal_kinds=kinds
        )
        u.reply("What are the inputs?", state_with())
        body = srv.requests[0]["body"]
        assert srv.requests[0]["path"] == "/v1/chat/completions"
        assert srv.requests[0]["auth"] == "Bearer sk-test"
        assert body["model"] == "user-sim" and body["temperature"] == pytest.approx(0.3)
        msgs = body["messages"]
        assert [m["role"] for m in msgs] == ["system", "user"] and msgs[1]["content"] == "What are the inputs?"
        system = msgs[0]["content"]
        assert DEFAULT_PERSONAS["impatient"].description in system
        assert colbench_task().prompt in system
        assert "The scores come as a list of numbers." in system
        assert "It returns a new list" not in system  # kind not in reveal_kinds
        assert "Never write the solution" in system
        assert "out.append" not in system and "for s in scores" not in system  # the secret is never in the prompt


def test_history_of_earlier_asks_is_sent():
    replies = iter(["My hotel budget is under 150 euros a night.", "I prefer flying with TAP."])
    with ChatServer(lambda req: next(replies)) as srv:
        env = ToyGym(
            "travel", travel_task(), knobs=snapshot(user_strategy_mix=0.0), user_factory=UserFactory(backend(srv))
        )
        _, info = env.reset(seed=1)
        assert info["arm"] == "llm"
        env.step("ASK: What is your hotel budget?")
        env.step("ASK: Which airline?")
        msgs = srv.requests[1]["body"]["messages"]
        assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user"]
        assert msgs[2]["content"] == "My hotel budget is under 150 euros a night."
        assert env.state.revealed == {"pref.hotel.budget": 1, "pref.flight.airline": 1}


def test_api_key_from_environment_variable(monkeypatch):
    monkeypatch.setenv("EAU_TEST_USER_KEY", "sk-env")
    with ChatServer() as srv:
        b = OpenAIChatBackend(srv.base_url, "m", api_key_env="EAU_TEST_USER_KEY", timeout_s=5)
        b.chat([{"role": "user", "content": "hi"}], 0.0)
        assert srv.requests[0]["auth"] == "Bearer sk-env"


# ---------------------------------------------------------------- failures
def test_retries_after_server_errors_then_succeeds():
    with ChatServer(fail_first=2, fail_status=503) as srv:
        b = backend(srv, max_retries=2)
        assert b.chat([{"role": "user", "content": "q"}], 0.5) == "I prefer flying with TAP."
        assert len(srv.requests) == 3


def test_failure_after_retries_gives_flagged_fallback_reply():
    with ChatServer(fail_first=10, fail_status=500) as srv:
        u = llm_user(backend(srv, max_retries=2))
        r = u.reply("Which airline?", state_with())
        assert len(srv.requests) == 3
        assert r.text == BACKEND_FALLBACK_REPLY and r.text.strip()
        assert r.revealed == [] and "500" in r.flags["backend_error"]


def test_client_error_is_not_retried():
    with ChatServer(fail_first=10, fail_status=400) as srv:
        with pytest.raises(BackendError, match="1 attempt"):
            backend(srv, max_retries=3).chat([{"role": "user", "content": "q"}], 0.5)
        assert len(srv.requests) == 1


def test_timeout_then_retry():
    with ChatServer(stall_first=1, stall_s=1.5) as srv:
        b = backend(srv, timeout_s=0.4, max_retries=1)
        t0 = time.monotonic()
        assert b.chat([{"role": "user", "content": "q"}], 0.5) == "I prefer flying with TAP."
        assert time.monotonic() - t0 < 1.4  # the stalled call was abandoned at the timeout
        assert len(srv.requests) == 2


def test_timeout_without_retries_fails_clearly():
    with ChatServer(stall_first=5, stall_s=1.0) as srv:
        with pytest.raises(BackendError, match="Timeout"):
            backend(srv, timeout_s=0.3, max_retries=0).chat([{"role": "user", "content": "q"}], 0.5)


def test_empty_reply_is_retried_and_never_returned():
    with ChatServer(lambda req: "") as srv:
        u = llm_user(backend(srv, max_retries=1))
        r = u.reply("Which airline?", state_with())
        assert len(srv.requests) == 2 and r.text == BACKEND_FALLBACK_REPLY and "empty" in r.flags["backend_error"]


# ---------------------------------------------------------------- disclosure accounting
def test_disclosures_detected_and_budget_declines_without_calling_the_model():
    with ChatServer(lambda req: "Sure, my hotel budget is under 150 euros a night.") as srv:
        env = ToyGym(
            "travel",
            travel_task(),
            knobs=snapshot(user_strategy_mix=0.0, max_reveals=2, volunteer_interval=0),
            user_factory=UserFactory(backend(srv)),
        )
        env.reset(seed=3)
        _, _, _, _, i1 = env.step("ASK: What is your hotel budget?")
        assert i1["turn"]["events"] == ["new_fact"]
        _, _, _, _, i2 = env.step("ASK: Budget again?")
        assert "repeat_fact" in i2["turn"]["events"]  # a repeat counts against max_reveals
        _, _, _, _, i3 = env.step("ASK: Which airline?")
        assert i3["turn"]["user_reply"]["flags"]["declined"] == "max_reveals"
        assert len(srv.requests) == 2 and env.state.disclosures == 2


def test_over_disclosure_is_counted_and_flagged():
    text = "My hotel budget is under 150 euros a night. I prefer flying with TAP."
    with ChatServer(lambda req: text) as srv:
        r = llm_user(backend(srv), facts_per_reply=1).reply("Tell me about hotel and airline", state_with())
        assert {f.key for f in r.revealed} == {"pref.hotel.budget", "pref.flight.airline"}
        assert r.flags["over_disclosed"] == 2


def test_reply_cut_to_char_limit_before_detection():
    text = "Well " + "really " * 30 + "my hotel budget is under 150 euros a night."
    with ChatServer(lambda req: text) as srv:
        r = llm_user(backend(srv), env_over={"human_response_char_limit": 60}).reply("Hotel budget?", state_with())
        assert len(r.text) <= 60 and r.flags["truncated"] and r.revealed == []


def test_dynamic_facts_enter_prompt_and_are_detected():
    with ChatServer(lambda req: "Yes.") as srv:
        u = llm_user(backend(srv), "telepathy", telepathy_task(), telepathy_dynamic)
        r = u.reply("Is it an animal?", state_with())
        assert (
            "The true answer to the assistant's latest question is:\n- Yes."
            in srv.requests[0]["body"]["messages"][0]["content"]
        )
        assert [f.key for f in r.revealed] == ["q.animal"]


# ---------------------------------------------------------------- leak guard
def test_leaking_reply_is_redacted():
    task = colbench_task()
    with ChatServer(lambda req: "Fine, here it is:\n" + task.secret) as srv:
        r = llm_user(backend(srv), "colbench", task).reply("just paste the code", state_with())
        assert "leak_redacted" in r.flags and r.revealed == []
        assert "for s in scores" not in r.text and "out.append" not in r.text
        assert r.flags["leak_redacted"]["reasons"]


def test_short_secret_named_by_the_model_is_redacted():
    with ChatServer(lambda req: "Fine: it is an elephant.") as srv:
        r = llm_user(backend(srv), "telepathy", telepathy_task()).reply("what is it?", state_with())
        assert "elephant" not in r.text and r.flags["leak_redacted"]["reasons"] == ["whole_secret"]


def test_volunteer_on_llm_arm_uses_templates_without_a_call():
    with ChatServer() as srv:
        u = llm_user(backend(srv), volunteer_interval=1)
        v = u.volunteer(state_with(turn=1))
        assert v is not None and [f.key for f in v.revealed] == ["pref.hotel.budget"] and srv.requests == []


# ---------------------------------------------------------------- local transformers backend
def test_local_model_reply_is_seeded_and_leaves_global_rng_alone():
    model, tok = tiny_chat_model()
    b = TransformersChatBackend(model, tok, max_new_tokens=6)
    msgs = [{"role": "system", "content": "you are a user"}, {"role": "user", "content": "which airline ?"}]
    before = torch.get_rng_state()
    a1, a2 = b.chat(msgs, 1.0, seed=1), b.chat(msgs, 1.0, seed=1)
    assert a1 == a2 and a1.strip()
    assert len({b.chat(msgs, 1.0, seed=s) for s in range(2, 5)}) > 1
    assert b.chat(msgs, 0.0, seed=1) == b.chat(msgs, 0.0, seed=99)  # greedy ignores the seed
    assert torch.equal(before, torch.get_rng_state())


def test_local_model_without_chat_template_and_as_user():
    model, tok = tiny_chat_model(chat_template=False)
    b = TransformersChatBackend(model, tok, max_new_tokens=8)
    env = ToyGym("travel", travel_task(), knobs=snapshot(user_strategy_mix=0.0), user_factory=UserFactory(b))
    env.reset(seed=0)
    _, _, _, _, info = env.step("ASK: Which airline do you prefer?")
    reply = info["turn"]["user_reply"]
    assert (
        reply["text"].strip()
        and reply["flags"]["arm"] == "llm"
        and reply["flags"]["backend"].startswith("transformers")
    )
    assert info["arm"] == "llm" and env.episode_record()["arm"] == "llm"


def test_make_backend_config_errors():
    assert make_backend(None) is None
    with pytest.raises(ValueError, match="allowed: openai, vllm, transformers, gemma3_270m"):
        make_backend({"kind": "nope"})
    with pytest.raises(ValueError, match="base_url and model"):
        make_backend({"kind": "openai", "model": ""})
    with pytest.raises(ValueError, match="unexpected keyword"):
        make_backend({"kind": "openai", "base_url": "http://x/v1", "model": "m", "colour": 1})


def test_factory_accepts_a_user_llm_config_mapping():
    with ChatServer() as srv:
        f = UserFactory({"kind": "openai", "base_url": srv.base_url, "model": "m", "timeout_s": 5})
        assert isinstance(f.llm, OpenAIChatBackend)


@pytest.mark.slow
def test_packaged_gemma_plays_the_user():
    b = TransformersChatBackend.packaged_gemma(max_new_tokens=40)
    u = llm_user(b, temperature=0.0)
    r = u.reply("Which airline do you prefer?", state_with())
    assert r.text.strip() and "backend_error" not in r.flags and r.flags["backend"].startswith("transformers")
    assert all(isinstance(f, Fact) for f in r.revealed)


def test_trl_chat_template_for_a_tokenizer_without_one():
    model, tok = tiny_chat_model(chat_template=False)
    b = TransformersChatBackend(model, tok, max_new_tokens=4, chat_template="gemma3")
    assert "<start_of_turn>" in tok.chat_template
    assert b.chat(
        [{"role": "system", "content": "you are a user"}, {"role": "user", "content": "which airline ?"}], 0.0
    ).strip()
    with pytest.raises(ValueError, match="TRL ships: .*gemma3"):
        resolve_chat_template("no_such_template")
    assert resolve_chat_template("{{ messages }}") == "{{ messages }}"


def test_reply_cut_where_the_model_writes_the_next_speaker():
    assert cut_at_next_speaker("I prefer TAP.\nUser: What about hotels?\nAssistant: hm") == "I prefer TAP."
    assert cut_at_next_speaker("No colon here\nusers are fine") == "No colon here\nusers are fine"
