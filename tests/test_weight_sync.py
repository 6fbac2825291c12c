"""The trainer's side of a weight sync (no vLLM here): the weights an engine gets, the probe, the check."""

from __future__ import annotations

import pytest
import torch

from harness.ppo.models import load_policy
from harness.ppo.specs import ENGINE_DTYPES
from harness.rollout.backends import turn_seed
from harness.rollout.weight_sync import (
    DEFAULT_TOLERANCE,
    compare_logprobs,
    engine_weights,
    policy_logprobs,
    probe_ids,
    sync_error,
)

TINY = {"model": "tiny", "tiny": {"num_hidden_layers": 2}}


def test_a_full_model_sends_every_parameter_once_under_its_hugging_face_name():
    torch.manual_seed(0)
    policy, _ = load_policy(TINY)
    sent = list(engine_weights(policy))
    names = [n for n, _ in sent]
    assert names == [n for n, _ in policy.named_parameters()]  # each once: the tied LM head is not repeated
    assert "lm_head.weight" not in names and "model.embed_tokens.weight" in names
    for (_, t), (_, p) in zip(sent, policy.named_parameters()):
        assert t.data_ptr() == p.data_ptr()  # by reference: nothing copied for an engine in this process


def test_lora_weights_are_merged_into_new_tensors_and_the_trained_model_is_not_touched():
    torch.manual_seed(0)
    policy, _ = load_policy({**TINY, "lora": {"r": 4, "alpha": 8}})
    with torch.no_grad():  # adapters that change the output (B starts at zero)
        for n, p in policy.named_parameters():
            if "lora_B" in n:
                p.normal_(std=0.05)
    before = {n: p.detach().clone() for n, p in policy.named_parameters()}
    sent = dict(engine_weights(policy))
    assert all(torch.equal(p, before[n]) for n, p in policy.named_parameters())
    assert not any("lora_" in n or "base_layer" in n or n.startswith("base_model") for n in sent)
    merged = policy.merge_and_unload()  # peft's own merge, on the same numbers
    reference = {n: p for n, p in merged.named_parameters()}
    assert sent.keys() == reference.keys()
    for n, t in sent.items():
        torch.testing.assert_close(t, reference[n], rtol=0, atol=1e-6)
    q = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(sent[q], before["base_model.model.model.layers.0.self_attn.q_proj.base_layer.weight"])


def test_the_probe_is_fixed_text_of_the_asked_length():
    _, tok = load_policy(TINY)
    ids = probe_ids(tok)
    assert len(ids) == 32 and ids == probe_ids(tok)
    assert len(probe_ids(tok, 200)) == 200  # the text repeats to reach a longer probe


def test_policy_logprobs_are_those_of_the_forward_pass_and_keep_the_training_mode():
    torch.manual_seed(0)
    policy, tok = load_policy(TINY)
    policy.train()
    ids = probe_ids(tok, 10)
    lp = policy_logprobs(policy, ids)
    with torch.no_grad():
        logits = policy(input_ids=torch.tensor([ids])).logits[0]
    expected = [logits[t].log_softmax(-1)[ids[t + 1]] for t in range(9)]
    torch.testing.assert_close(lp, torch.stack(expected))
    assert policy.training


def test_a_stale_engine_is_told_apart_from_one_with_other_weights():
    now, before = torch.tensor([-1.0, -2.0, -3.0]), torch.tensor([-1.5, -2.0, -2.0])
    fine = compare_logprobs(now + 1e-5, now, 1e-3, before)
    assert fine.ok and not fine.stale and fine.max_abs_diff == pytest.approx(1e-5, abs=1e-7)
    stale = compare_logprobs(before, now, 1e-3, before)
    assert not stale.ok and stale.stale and stale.mean_abs_diff == pytest.approx(0.5)
    other = compare_logprobs(torch.tensor([-9.0, -9.0, -9.0]), now, 1e-3, before)
    assert not other.ok and not other.stale
    assert "not taken" in str(sync_error(stale, 1e-3, "weight sync 3"))
    assert "neither the policy's before nor after" in str(sync_error(other, 1e-3, "weight sync 3"))
    with pytest.raises(ValueError, match="cannot be compared"):
        compare_logprobs(now[:2], now, 1e-3)


def test_default_tolerances_cover_every_engine_dtype():
    assert set(DEFAULT_TOLERANCE) == set(ENGINE_DTYPES)


def test_a_turns_seed_depends_on_the_episode_and_the_turn_only():
    seeds = {turn_seed(s, t) for s in range(20) for t in range(20)}
    assert len(seeds) == 400  # no two (episode, turn) pairs share a seed here
    assert turn_seed(5, 3) == turn_seed(5, 3)
