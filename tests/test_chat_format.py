"""ChatFormat: renders are remembered without changing them; observation ids are those of a fresh render."""

from __future__ import annotations

import random

import pytest

from harness.ppo.models import load_policy
from harness.rollout.chat import RENDER_MEMO_SIZE, ChatFormat, _common_prefix_len

SMALL = {"model": "tiny", "tiny": {"num_hidden_layers": 1, "hidden_size": 32, "intermediate_size": 64}}


@pytest.fixture(scope="module")
def tok():
    return load_policy(SMALL)[1]


def test_common_prefix_len_on_hand_cases_and_against_a_character_loop():
    assert _common_prefix_len("", "abc") == 0
    assert _common_prefix_len("abc", "abc") == 3
    assert _common_prefix_len("abcd", "abXd") == 2
    assert _common_prefix_len("ab", "abcdef") == 2
    assert _common_prefix_len("xbc", "abc") == 0
    rng = random.Random(0)
    for _ in range(500):
        a = "".join(rng.choice("ab") for _ in range(rng.randint(0, 16)))
        b = "".join(rng.choice("ab") for _ in range(rng.randint(0, 16)))
        n = 0
        while n < min(len(a), len(b)) and a[n] == b[n]:
            n += 1
        assert _common_prefix_len(a, b) == n, (a, b)


def conversation(i: int) -> list[dict[str, str]]:
    return [{"role": "system", "content": "Be brief."}, {"role": "user", "content": f"Task number {i}."}]


def test_a_remembered_render_is_the_templates_and_the_memory_is_bounded(tok):
    chat = ChatFormat(tok, "tagged")
    msgs = conversation(0)
    direct = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert chat.render(msgs, True) == direct and chat.render(msgs, True) == direct  # miss, then hit
    assert chat.render(msgs, False) == tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=False)
    assert chat.render(msgs, False) != direct  # the generation prompt is part of the key
    msgs[1]["content"] = "Another task."  # a message edited in place is a new conversation
    assert chat.render(msgs, True) == tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    for i in range(RENDER_MEMO_SIZE + 10):
        chat.render(conversation(i), True)
    assert len(chat._memo) == RENDER_MEMO_SIZE


def test_observation_ids_are_the_same_from_a_warm_memory_as_from_fresh_renders(tok):
    warm = ChatFormat(tok, "tagged")
    msgs = conversation(1)
    warm.prompt_ids(msgs)  # as the engine does at the first turn: the 'before' render is then remembered
    obs = warm.observation_message("user", "It is on Friday.")
    action = "ASK: which day?"
    generated = warm.encode(action) + [warm.stop_ids[0]]
    got = warm.observation_ids(msgs, generated, action, obs)
    assert got == ChatFormat(tok, "tagged").observation_ids(msgs, generated, action, obs)
    text = tok.decode(got)
    assert "It is on Friday." in text and action not in text
