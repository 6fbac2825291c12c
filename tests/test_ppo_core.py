"""Hand-computed checks of the PPO core functions (harness.ppo.core)."""

from __future__ import annotations

import math

import pytest
import torch

from harness import distributions
from harness.ppo import core

T_ = torch.tensor


def close(a: torch.Tensor | float, b, tol: float = 1e-5) -> bool:
    return torch.allclose(torch.as_tensor(a, dtype=torch.float32), torch.as_tensor(b, dtype=torch.float32), atol=tol)


# ---------------------------------------------------------------------------------------------------
# aggregation and masked statistics
# ---------------------------------------------------------------------------------------------------


def test_agg_loss_modes_by_hand():
    loss = T_([[2.0, 4.0, 6.0], [1.0, 0.0, 9.0]])
    mask = T_([[1, 1, 0], [1, 0, 0]])
    # token-mean: (2 + 4 + 1) / 3 tokens
    assert close(core.agg_loss(loss, mask, "token-mean"), 7 / 3)
    # seq-mean-token-sum: ((2 + 4) + 1) / 2 sequences
    assert close(core.agg_loss(loss, mask, "seq-mean-token-sum"), 3.5)
    # seq-mean-token-mean: ((2 + 4) / 2 + 1 / 1) / 2
    assert close(core.agg_loss(loss, mask, "seq-mean-token-mean"), 2.0)
    # denom replaces the divisor (micro-batch accumulation): (2 + 4 + 1) / 10
    assert close(core.agg_loss(loss, mask, "token-mean", denom=10), 0.7)


def test_agg_loss_skips_empty_sequences_and_rejects_bad_mode():
    loss = T_([[2.0, 4.0], [7.0, 7.0]])
    mask = T_([[1, 1], [0, 0]])
    # the second sequence has no action token: (2 + 4) / 2 over one sequence, not two
    assert close(core.agg_loss(loss, mask, "seq-mean-token-mean"), 3.0)
    assert close(core.agg_loss(loss, mask, "seq-mean-token-sum"), 6.0)
    with pytest.raises(ValueError, match="token-mean, seq-mean-token-sum, seq-mean-token-mean"):
        core.agg_loss(loss, mask, "mean")


@pytest.mark.parametrize("mode", core.AGG_MODES)
def test_micro_batches_add_up_to_the_mini_batch_under_agg_denominator(mode):
    """Accumulating micro-batch losses with denom = agg_denominator(whole mini-batch) gives the
    mini-batch's loss in every mode (the trainer's gradient accumulation)."""
    loss = T_([[2.0, 4.0, 6.0], [1.0, 0.0, 9.0], [3.0, 3.0, 3.0], [5.0, 1.0, 2.0]])
    mask = T_([[1, 1, 0], [1, 0, 0], [0, 0, 0], [1, 1, 1]])
    assert close(core.agg_denominator(mask, mode), 6.0 if mode == "token-mean" else 3.0)
    denom = core.agg_denominator(mask, mode)
    parts = sum(core.agg_loss(loss[i : i + 2], mask[i : i + 2], mode, denom=denom) for i in (0, 2))
    assert close(parts, core.agg_loss(loss, mask, mode))
    with pytest.raises(ValueError, match="unknown loss aggregation mode 'mean'"):
        core.agg_denominator(mask, "mean")


def test_masked_whiten_by_hand():
    x = T_([[2.0, 4.0, 6.0, 100.0]])
    m = T_([[1, 1, 1, 0]])
    # mean 4, unbiased var ((-2)^2 + 0 + 2^2) / 2 = 4, std 2 -> (x - 4) / 2; masked slot -> 0
    assert close(core.masked_whiten(x, m), [[-1.0, 0.0, 1.0, 0.0]])
    # shift_mean=False keeps the mean: (x - 4) / 2 + 4
    assert close(core.masked_whiten(x, m, shift_mean=False), [[3.0, 4.0, 5.0, 0.0]])
    assert close(core.masked_mean(x, m), 4.0) and close(core.masked_var(x, m), 4.0)
    assert close(core.masked_mean(x, torch.zeros_like(m)), 0.0)  # empty mask: 0, not NaN


# ---------------------------------------------------------------------------------------------------
# advantages
# ---------------------------------------------------------------------------------------------------

# prompt | turn 1 (tokens 1, 2) | observation (3, 4) | turn 2 (5, 6)
MASK = T_([[0, 1, 1, 0, 0, 1, 1]])
VALUES = T_([[9.0, 0.5, 0.6, 9.0, 9.0, 0.4, 0.7]])  # the 9s sit on non-action tokens: ignored
REWARDS = T_([[0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 2.0]])  # each turn's reward on its last action token


def test_turn_ends():
    assert core.turn_ends(MASK).tolist() == [[0, 0, 1, 0, 0, 0, 1]]


def test_gae_multiturn_by_hand():
    adv, ret = core.gae_advantages(REWARDS, VALUES, MASK, gamma=0.9, lam=0.8)
    # t=6 (turn end, last): delta = 2 + 0.9*0 - 0.7 = 1.3                      A6 = 1.3
    # t=5 (inside turn, 1/1): delta = 0 + 0.7 - 0.4 = 0.3;   A5 = 0.3 + 1.3  = 1.6
    # t=4, t=3 observation tokens: skipped
    # t=2 (turn end -> gamma 0.9, lam 0.8; next action value V5 = 0.4):
    #     delta = 1 + 0.9*0.4 - 0.6 = 0.76;   A2 = 0.76 + 0.9*0.8*1.6 = 1.912
    # t=1 (inside turn): delta = 0 + 0.6 - 0.5 = 0.1;         A1 = 0.1 + 1.912 = 2.012
    assert close(adv, [[0.0, 2.012, 1.912, 0.0, 0.0, 1.6, 1.3]])
    # returns = A + V on action tokens: 2.512, 2.512, 2.0, 2.0
    assert close(ret, [[0.0, 2.512, 2.512, 0.0, 0.0, 2.0, 2.0]])


def test_gae_token_gamma_lam_by_hand():
    adv, _ = core.gae_advantages(REWARDS, VALUES, MASK, gamma=0.9, lam=0.8, token_gamma=0.5, token_lam=0.5)
    # t=6: A6 = 2 - 0.7 = 1.3
    # t=5 (token 0.5/0.5): delta = 0.5*0.7 - 0.4 = -0.05;  A5 = -0.05 + 0.25*1.3 = 0.275
    # t=2 (turn end 0.9/0.8): delta = 1 + 0.9*0.4 - 0.6 = 0.76; A2 = 0.76 + 0.72*0.275 = 0.958
    # t=1 (token): delta = 0.5*0.6 - 0.5 = -0.2;           A1 = -0.2 + 0.25*0.958 = 0.0395
    assert close(adv, [[0.0, 0.0395, 0.958, 0.0, 0.0, 0.275, 1.3]])


def test_gae_explicit_turn_end_mask():
    mask = T_([[1, 1, 1, 1]])
    rewards = T_([[0.0, 1.0, 0.0, 1.0]])
    ends = T_([[0, 1, 0, 1]])  # two turns with no observation tokens between them
    adv, _ = core.gae_advantages(rewards, torch.zeros(1, 4), mask, gamma=0.5, lam=1.0, turn_end_mask=ends)
    # t3: 1;  t2 (in turn): 0 + 1 = 1;  t1 (turn end, gamma 0.5): 1 + 0.5*0 + 0.5*1*1 = 1.5;  t0: 1.5
    assert close(adv, [[1.5, 1.5, 1.0, 1.0]])
    # derived from the mask it is one turn: gamma never applies -> 2, 2, 1, 1
    adv2, _ = core.gae_advantages(rewards, torch.zeros(1, 4), mask, gamma=0.5, lam=1.0)
    assert close(adv2, [[2.0, 2.0, 1.0, 1.0]])
    with pytest.raises(ValueError, match="not an action token"):
        core.gae_advantages(rewards, torch.zeros(1, 4), T_([[1, 1, 0, 0]]), turn_end_mask=ends)
    with pytest.raises(ValueError, match=r"\(B, T\)"):
        core.gae_advantages(rewards, torch.zeros(1, 3), mask)


def test_gae_rows_are_independent():
    r = torch.cat([REWARDS, T_([[0.0, 0.0, 0.0, 0.0, 3.0, 0.0, 0.0]])])
    v = torch.cat([VALUES, T_([[0.0, 0.2, 0.1, 0.3, 0.4, 5.0, 5.0]])])
    m = torch.cat([MASK, T_([[0, 0, 1, 1, 1, 0, 0]])])
    adv, _ = core.gae_advantages(r, v, m, gamma=0.9, lam=0.8)
    alone, _ = core.gae_advantages(r[:1], v[:1], m[:1], gamma=0.9, lam=0.8)
    assert close(adv[:1], alone)
    # row 2: one turn (2..4), reward 3 at its end: A4 = 3 - 0.4 = 2.6; A3 = 0.4 - 0.3 + 2.6 = 2.7; A2 = 0.3 - 0.1 + 2.7 = 2.9
    assert close(adv[1], [0.0, 0.0, 2.9, 2.7, 2.6, 0.0, 0.0])


def _random_episode_masks(B: int, T: int, gen: torch.Generator) -> torch.Tensor:
    """Prompt, then alternating action and observation runs of random length."""
    mask = torch.zeros(B, T, dtype=torch.long)
    for b in range(B):
        t = int(torch.randint(1, 4, (1,), generator=gen))
        act = True
        while t < T:
            n = int(torch.randint(1, 5, (1,), generator=gen))
            if act:
                mask[b, t : t + n] = 1
            t += n
            act = not act
    return mask


@pytest.mark.parametrize("name", ["gae", "reinforce"])
def test_observation_tokens_never_move_action_advantages(name):
    gen = torch.Generator().manual_seed(0)
    B, T = 6, 40
    mask = _random_episode_masks(B, T, gen)
    ends = core.turn_ends(mask)
    values = torch.randn(B, T, generator=gen)
    rewards = torch.randn(B, T, generator=gen) * ends  # rewards on turn ends only
    est = core.get_adv_estimator(name)
    kw = dict(gamma=0.9, lam=0.7, token_gamma=0.95, token_lam=0.9)
    adv, ret = est(rewards, values, mask, **kw)
    obs = 1 - mask
    for _ in range(5):
        noisy_v = values + obs * torch.randn(B, T, generator=gen) * 100
        noisy_r = rewards + obs * torch.randn(B, T, generator=gen) * 100
        adv2, ret2 = est(noisy_r, noisy_v, mask, **kw)
        assert torch.equal(adv, adv2) and torch.equal(ret, ret2)
    assert torch.all(adv[mask == 0] == 0) and torch.all(ret[mask == 0] == 0)
    # and the action tokens do matter (the test could fail): moving one action value moves advantages
    first = mask.nonzero()[0]
    bumped = values.clone()
    bumped[first[0], first[1]] += 1.0
    if name == "gae":
        assert not torch.equal(est(rewards, bumped, mask, **kw)[0], adv)


def test_reinforce_is_discounted_return():
    adv, ret = core.reinforce_advantages(REWARDS, VALUES, MASK, gamma=0.9)
    # turn 2 tokens: return 2; turn 1 tokens: 1 + 0.9 * 2 = 2.8 (values ignored)
    assert close(adv, [[0.0, 2.8, 2.8, 0.0, 0.0, 2.0, 2.0]]) and torch.equal(adv, ret)


def test_estimator_registry():
    assert core.get_adv_estimator("gae") is core.gae_advantages
    with pytest.raises(ValueError, match="valid: gae, reinforce"):
        core.get_adv_estimator("grpo")
    with pytest.raises(ValueError, match="already registered"):
        core.register_adv_est("gae")(core.gae_advantages)


# ---------------------------------------------------------------------------------------------------
# losses
# ---------------------------------------------------------------------------------------------------


def test_policy_loss_by_hand():
    ratios = T_([[1.5, 0.5, 1.1, 1.0]])
    logp = torch.log(ratios).requires_grad_(True)
    old = torch.zeros(1, 4)
    adv = T_([[1.0, 1.0, -1.0, 2.0]])
    mask = T_([[1, 1, 1, 0]])
    loss, m = core.policy_loss(logp, old, adv, mask, clip_low=0.2, clip_high=0.3)
    # t0: r=1.5, A=1:  max(-1.5, -clip(1.5, 0.8, 1.3) = -1.3) = -1.3   (clipped)
    # t1: r=0.5, A=1:  max(-0.5, -0.8) = -0.5                           (not clipped)
    # t2: r=1.1, A=-1: max(1.1, 1.1) = 1.1                              (inside the range)
    # loss = (-1.3 - 0.5 + 1.1) / 3
    assert close(loss, -0.7 / 3)
    assert close(m["actor/clip_frac"], 1 / 3)
    # approx_kl = mean((r - 1) - ln r) = (0.5 - ln 1.5 + (-0.5) - ln 0.5 + 0.1 - ln 1.1) / 3
    assert close(m["actor/approx_kl"], (0.5 - math.log(1.5) - 0.5 - math.log(0.5) + 0.1 - math.log(1.1)) / 3)
    assert close(m["actor/ratio_mean"], 3.1 / 3) and m["actor/ratio_min"] == pytest.approx(0.5)
    assert m["actor/ratio_max"] == pytest.approx(1.5) and close(m["actor/pg_loss"], -0.7 / 3)
    loss.backward()
    # d/dlogp of -A*r/3 = -A*r/3 where unclipped; 0 where clipped or masked
    assert close(logp.grad, [[0.0, -0.5 / 3, 1.1 / 3, 0.0]])


def test_value_loss_by_hand():
    v = T_([[1.0, 2.0, 0.0]])
    old = T_([[0.5, 2.0, 0.0]])
    ret = T_([[2.0, 1.0, 0.5]])
    mask = T_([[1, 1, 0]])
    loss, m = core.value_loss(v, old, ret, mask, value_clip=0.2)
    # t0: (1 - 2)^2 = 1; clipped V = 0.5 + 0.2 = 0.7 -> (0.7 - 2)^2 = 1.69; max 1.69 (clip active)
    # t1: (2 - 1)^2 = 1; clipped V = 2 -> 1; max 1
    # 0.5 * (1.69 + 1) / 2
    assert close(loss, 0.6725) and close(m["critic/vf_clip_frac"], 0.5) and close(m["critic/vpred_mean"], 1.5)
    # explained var: R - V = [1, -1], unbiased var 2; Var(R) = 0.5 -> 1 - 2 / 0.5 = -3
    assert close(m["critic/explained_var"], -3.0)
    loss0, m0 = core.value_loss(v, old, ret, mask, value_clip=0.0)
    assert close(loss0, 0.5 * (1 + 1) / 2) and m0["critic/vf_clip_frac"] == 0.0  # clipping disabled
    with pytest.raises(ValueError, match="value_clip"):
        core.value_loss(v, old, ret, mask, value_clip=-1)


def test_kl_estimators_by_hand():
    logp = T_([[-1.0, -2.0]])
    ref = T_([[-2.0, -1.0]])
    ones = T_([[1, 1]])
    # log r = ref - logp = [-1, 1]
    assert close(core.kl_penalty(logp, ref, ones, "k1"), [[1.0, -1.0]])  # logp - ref
    assert close(core.kl_penalty(logp, ref, ones, "k2"), [[0.5, 0.5]])  # 0.5 * (+-1)^2
    # k3 = e^{log r} - 1 - log r: e^-1 - 1 + 1 = 0.367879;  e - 1 - 1 = 0.718282
    assert close(core.kl_penalty(logp, ref, ones, "k3"), [[math.exp(-1), math.e - 2]])
    assert close(core.kl_penalty(logp, ref, T_([[1, 0]]), "k3"), [[math.exp(-1), 0.0]])  # masked
    loss, m = core.kl_loss(logp, ref, ones, "k3")
    assert close(loss, (math.exp(-1) + math.e - 2) / 2) and close(m["actor/kl"], loss.item())
    with pytest.raises(ValueError, match="valid: k1, k2, k3"):
        core.kl_penalty(logp, ref, ones, "k4")


def test_logprobs_and_entropy_by_hand():
    logits = T_([[0.0, math.log(3.0)]])  # p = [1/4, 3/4]
    assert close(distributions.logprobs_from_logits(logits, T_([1])), [math.log(0.75)])
    # H = -(1/4 ln 1/4 + 3/4 ln 3/4) = 0.562335
    assert close(distributions.entropy_from_logits(logits), [0.562335])
    assert close(distributions.entropy_from_logits(torch.zeros(2, 4)), [math.log(4)] * 2)
    # temperature 2 on [0, 2 ln 3] is the same distribution as above
    hot = T_([[0.0, 2 * math.log(3.0)]])
    assert close(distributions.logprobs_from_logits(hot, T_([1]), temperature=2.0), [math.log(0.75)])
    assert close(distributions.entropy_from_logits(hot, temperature=2.0), [0.562335])
    with pytest.raises(ValueError, match="temperature"):
        distributions.logprobs_from_logits(logits, T_([1]), temperature=0.0)


def test_chunked_logprobs_match_log_softmax_and_trl():
    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(3, 5, 50, generator=gen) * 3
    labels = torch.randint(0, 50, (3, 5), generator=gen)
    ref = torch.log_softmax(logits / 0.7, -1).gather(-1, labels[..., None]).squeeze(-1)
    assert close(distributions.logprobs_from_logits(logits, labels, 0.7, chunk_size=4), ref)
    ent_ref = -(torch.softmax(logits, -1) * torch.log_softmax(logits, -1)).sum(-1)
    assert close(distributions.entropy_from_logits(logits, chunk_size=2), ent_ref)
    trl_utils = pytest.importorskip("trl.trainer.utils")
    assert close(
        distributions.logprobs_from_logits(logits, labels, 0.7), trl_utils.selective_log_softmax(logits, labels, 0.7)
    )
    assert close(distributions.entropy_from_logits(logits), trl_utils.entropy_from_logits(logits))


def test_actor_loss_combines_terms_by_hand():
    logp = T_([[-1.0, -2.0]])
    ref = T_([[-2.0, -1.0]])
    ent = T_([[1.0, 3.0]])
    mask = T_([[1, 1]])
    adv = T_([[1.0, -1.0]])
    loss, m = core.ppo_actor_loss(
        logp, logp.clone(), adv, mask, entropy=ent, entropy_coeff=0.1, ref_logprobs=ref, kl_coef=0.5, kl_estimator="k1"
    )
    # ratio 1: pg = (-1 + 1) / 2 = 0;  entropy mean 2;  k1 mean (1 - 1) / 2 = 0 -> 0 - 0.1*2 + 0.5*0
    assert close(loss, -0.2) and close(m["actor/entropy"], 2.0) and close(m["actor/kl"], 0.0)
    loss2, _ = core.ppo_actor_loss(
        logp, logp.clone(), adv, mask, entropy=ent, ref_logprobs=ref, kl_coef=0.5, kl_estimator="k2"
    )
    # k2 mean = 0.5 -> 0 - 0 + 0.5*0.5
    assert close(loss2, 0.25) and set(m) >= {"actor/pg_loss", "actor/clip_frac", "actor/loss"}
    with pytest.raises(ValueError, match="entropy"):
        core.ppo_actor_loss(logp, logp, adv, mask, entropy_coeff=0.1)
    with pytest.raises(ValueError, match="ref_logprobs"):
        core.ppo_actor_loss(logp, logp, adv, mask, kl_coef=0.1)


# ---------------------------------------------------------------------------------------------------
# one PPO update with a real tiny model
# ---------------------------------------------------------------------------------------------------


def test_one_gradient_step_of_the_combined_loss_lowers_it():
    from harness.ppo.models import (
        TinySpec,
        batch_token_stats,
        build_critic,
        forward_token_stats,
        load_policy,
        make_reference,
        reference_logprobs,
    )

    torch.manual_seed(0)
    policy, tok = load_policy({"model": "tiny", "tiny": TinySpec(num_hidden_layers=2)})
    critic = build_critic(policy, {"init": "policy"})
    reference = make_reference(policy)
    texts = [
        "Plan my trip.\nASK: Which city do you prefer?\nParis, please.\nANSWER: hotel downtown",
        "f(1, 2, 3, 4)?\nASK: f(1, 2, 3, 5)?\nThe value is 11.\nANSWER: 17",
    ]
    enc = tok(texts, padding=True, return_tensors="pt")
    ids, am = enc.input_ids, enc.attention_mask
    # action tokens: the two tagged lines of each text (found by token position of the tags)
    mask = torch.zeros_like(ids)
    for b in range(len(texts)):
        toks = tok.convert_ids_to_tokens(ids[b])
        starts = [i for i, t in enumerate(toks) if t in ("ASK:", "ANSWER:")]
        for s in starts:
            e = s
            while e + 1 < len(toks) and am[b, e + 1] and "Ċ" not in toks[e + 1]:
                e += 1
            mask[b, s : e + 1] = 1
    ends = core.turn_ends(mask)
    rewards = ends * T_([[0.2], [1.0]])  # each turn's reward on its last action token
    old = batch_token_stats(policy, ids, am, critic=critic)
    ref_lp = reference_logprobs(policy, reference, ids, am)
    adv, ret = core.gae_advantages(rewards, old.values, mask, gamma=0.9, lam=0.95)
    adv = core.masked_whiten(adv, mask)
    params = [p for p in list(policy.parameters()) + list(critic.parameters()) if p.requires_grad]
    opt = torch.optim.Adam(params, lr=1e-3)

    def total_loss() -> torch.Tensor:
        st = forward_token_stats(policy, ids, am, critic=critic)
        actor, _ = core.ppo_actor_loss(
            st.logprobs,
            old.logprobs,
            adv,
            mask,
            clip_low=0.2,
            clip_high=0.28,
            entropy=st.entropy,
            entropy_coeff=0.001,
            ref_logprobs=ref_lp,
            kl_coef=0.01,
        )
        vf, _ = core.value_loss(st.values, old.values, ret, mask, value_clip=0.2)
        return actor + vf

    loss0 = total_loss()
    opt.zero_grad()
    loss0.backward()
    assert all(p.grad is not None for p in params[:3])
    opt.step()
    with torch.no_grad():
        loss1 = total_loss()
    assert loss1.item() < loss0.item() - 1e-4, (loss0.item(), loss1.item())


def test_warmup_factor_by_hand():
    assert [core.warmup_factor(n, 4) for n in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    assert core.warmup_factor(0, 0) == 1.0 and core.warmup_factor(5, 1) == 1.0
    assert core.warmup_factor(2, 3) == 1.0 and core.warmup_factor(1, 3) == 2 / 3


def test_collate_keeps_one_token_of_an_episode_that_ended_at_its_prompt():
    """A prompt longer than agent.max_episode_tokens ends the episode before any action: its row trains
    nothing, so it goes into the batch as one token instead of its whole prompt (which would make every
    pass of the update as long as that prompt). The other rows are unchanged."""
    from harness.ppo.batch import collate
    from harness.rollout.engine import Episode

    played = Episode(env=None, group="g", sample=0)
    played.extend([1, 2, 3], False)
    played.extend([4, 5], True)
    played.turn_last_token, played.turn_rewards = [4], [1.0]
    played.logprobs = [0.0, 0.0, 0.0, -0.5, -0.25]
    overflow = Episode(env=None, group="g", sample=1)
    overflow.extend(list(range(10, 40)), False)  # 30 prompt tokens, no turn
    overflow.logprobs = [0.0] * 30
    batch = collate([played, overflow], pad_id=0)
    assert batch.input_ids.shape == (2, 5)  # not 30
    assert batch.input_ids[0].tolist() == [1, 2, 3, 4, 5] and batch.input_ids[1].tolist() == [10, 0, 0, 0, 0]
    assert batch.attention_mask[1].tolist() == [1, 0, 0, 0, 0] and batch.action_mask[1].sum() == 0
    assert batch.action_mask[0].tolist() == [0, 0, 0, 1, 1] and batch.rewards[0, 4] == 1.0
    assert batch.rewards[1].abs().sum() == 0 and batch.rollout_logprobs[0, 3] == -0.5
