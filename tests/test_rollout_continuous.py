"""Continuous batching (HFBackend.run_turns): the episodes of one generate per turn, in fewer model calls."""

from __future__ import annotations

import pytest
import torch

from harness.envs.registry import make
from harness.knobs.folder import defaults_dir
from harness.knobs.snapshot import KnobSnapshot
from harness.ppo.models import load_policy
from harness.rollout.backends import (
    HFBackend,
    SamplingParams,
    _sample_next,
    _sampling_warpers,
    distinct_rows,
    inverse_cdf_sample,
    shared_prefix_len,
)
from harness.rollout.chat import ChatFormat
from harness.rollout.engine import RolloutEngine

SMALL = {"model": "tiny", "tiny": {"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128}}
MIXED = ("intention", "travel", "telepathy", "function")


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    return load_policy(SMALL)


class CountingBackend(HFBackend):
    """HFBackend that counts the model's forward calls (prefill and every decode step)."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.forwards = 0
        self.model.register_forward_pre_hook(self._count)

    def _count(self, _module, _args):
        self.forwards += 1


def rollout(
    model, tok, continuous: bool, gyms=MIXED, n=6, tokens=12, episode_tokens=900, temperature=0.0, seeds=None, first=0
):
    chat = ChatFormat(tok, "tagged")
    backend = CountingBackend(model, tok, continuous=continuous)
    snap = KnobSnapshot.read_dir(defaults_dir())
    ids = range(first, first + n)
    envs = [make(gyms[i % len(gyms)], knobs=snap) for i in ids]
    turns: list[tuple[int, int]] = []
    res = RolloutEngine(backend, chat).run(
        envs,
        [{"seed": i, "options": {"task_index": i}} for i in ids],
        [str(i) for i in ids],
        [0] * n,
        params=SamplingParams(temperature, 1.0, tuple(chat.stop_ids)),
        max_new_tokens_per_turn=tokens,
        max_episode_tokens=episode_tokens,
        on_turn=lambda t, live: turns.append((t, live)),
        seeds=seeds,
    )
    hooks = list(model._forward_pre_hooks)
    for h in hooks:  # the module-scoped model must not keep counting for the next test
        model._forward_pre_hooks.pop(h)
    return res, backend, turns


@pytest.mark.parametrize("gyms,n,tokens", [(MIXED, 6, 12), (("intention",), 5, 24)])
def test_greedy_episodes_are_those_of_one_generate_per_turn(tiny, gyms, n, tokens):
    model, tok = tiny
    per_turn, b0, _ = rollout(model, tok, False, gyms, n, tokens)
    cont, b1, turns = rollout(model, tok, True, gyms, n, tokens)
    assert [e.ids for e in cont.episodes] == [e.ids for e in per_turn.episodes]
    assert [e.action_mask for e in cont.episodes] == [e.action_mask for e in per_turn.episodes]
    assert [e.turn_last_token for e in cont.episodes] == [e.turn_last_token for e in per_turn.episodes]
    assert [e.turn_rewards for e in cont.episodes] == [e.turn_rewards for e in per_turn.episodes]
    assert [e.record["num_turns"] for e in cont.episodes] == [e.record["num_turns"] for e in per_turn.episodes]
    assert cont.generated_tokens == per_turn.generated_tokens
    n_turns = sum(len(e.turn_rewards) for e in cont.episodes)
    assert len(turns) == n_turns and turns[-1] == (n_turns, 0)  # on_turn after every episode's turn
    # (an untrained model writes every turn to its budget, so both take the same number of model calls
    # here; the saving when rows stop early is tested below with budgets)
    assert len({len(e.ids) for e in per_turn.episodes}) > 1
    assert b1.forwards - b1.shared_prefix_calls <= b0.forwards


def test_episode_token_budget_ends_episodes_as_one_generate_per_turn_does(tiny):
    model, tok = tiny
    per_turn, _, _ = rollout(model, tok, False, n=4, tokens=16, episode_tokens=260)
    cont, _, _ = rollout(model, tok, True, n=4, tokens=16, episode_tokens=260)
    assert any(e.token_truncated for e in per_turn.episodes)
    assert [e.ids for e in cont.episodes] == [e.ids for e in per_turn.episodes]
    assert [e.token_truncated for e in cont.episodes] == [e.token_truncated for e in per_turn.episodes]


@pytest.mark.parametrize("packed", [True, False])
def test_run_turns_hands_over_each_turn_at_its_budget_and_decodes_rows_independently(tiny, packed):
    model, tok = tiny
    b = CountingBackend(model, tok)
    b.pack_observations = packed
    seen: list[tuple[int, list[int]]] = []
    second = {0: 1, 1: 4}  # row 0: turns of 4 then 1 tokens; row 1: 1 then 4

    def on_turn_end(row, ids):
        seen.append((row, list(ids)))
        if sum(r == row for r, _ in seen) == 2:
            return None
        return [7, 8, 9], second[row]

    params = SamplingParams(0.0, 1.0, ())  # no stop ids: every turn runs to its budget
    calls = b.run_turns([[5, 6, 7, 8], [11, 12]], [4, 1], params, on_turn_end)
    if packed:
        # call 1: both prompts; 2: row 1's observation packed with row 0's next token; 3-4: both decode
        # (row 0's turn ends at 4); 5: row 0's observation packed with row 1's token (both episodes end)
        assert [(r, len(ids)) for r, ids in seen] == [(1, 1), (0, 4), (0, 1), (1, 4)]  # in order of the calls
        assert calls == b.forwards == 5
    else:
        # call 1: both prompts; 2: row 1's observation alone (row 0 waits); 3-5: both decode (row 0's turn
        # and row 1's episode end at 5); 6: row 0's observation and its last token
        assert [(r, len(ids)) for r, ids in seen] == [(1, 1), (0, 4), (1, 4), (0, 1)]
        assert calls == b.forwards == 6
    # one generate per turn would take max(4, 1) + max(1, 4) = 8
    b2 = CountingBackend(model, tok, continuous=False)
    first = b2.generate([[5, 6, 7, 8], [11, 12]], [4, 1], params)
    then = b2.generate([[5, 6, 7, 8] + first[0] + [7, 8, 9], [11, 12] + first[1] + [7, 8, 9]], [1, 4], params)
    assert b2.forwards == 8
    # and the tokens are the same (greedy)
    assert [ids for r, ids in seen if r == 0] == [first[0], then[0]]
    assert [ids for r, ids in seen if r == 1] == [first[1], then[1]]
    for h in list(model._forward_pre_hooks):
        model._forward_pre_hooks.pop(h)


def test_prompts_of_one_token_are_encoded_with_the_others(tiny):
    """The first call encodes every prompt, whatever its length (a 1-token prompt looks like a row
    that only decodes)."""
    model, tok = tiny
    params = SamplingParams(0.0, 1.0, ())
    seen = {}
    HFBackend(model, tok).run_turns(
        [[5], [6, 7, 8], [9, 10]], [3, 3, 3], params, lambda row, ids: seen.setdefault(row, list(ids)) and None
    )
    ref = HFBackend(model, tok, continuous=False).generate([[5], [6, 7, 8], [9, 10]], [3, 3, 3], params)
    assert [seen[r] for r in range(3)] == ref


def test_sampling_is_generates_temperature_then_top_p():
    logits = torch.tensor([[2.0, 1.0, 0.0, -10.0]])
    warpers = _sampling_warpers(SamplingParams(0.5, 1.0, ()))
    assert torch.allclose(warpers(None, logits.clone()), logits / 0.5)
    # top_p 0.5: token 0 alone holds softmax mass 0.66 > 0.5, so it is the only token ever drawn
    nucleus = _sampling_warpers(SamplingParams(1.0, 0.5, ()))
    torch.manual_seed(0)
    draws = torch.stack([_sample_next(logits.repeat(64, 1), nucleus) for _ in range(4)])
    assert (draws == 0).all()
    full = _sampling_warpers(SamplingParams(1.0, 1.0, ()))
    torch.manual_seed(0)
    draws = _sample_next(logits.repeat(4000, 1), full)
    share = torch.bincount(draws, minlength=4).float() / 4000
    assert torch.allclose(share, torch.softmax(logits[0], -1), atol=0.03)  # 0.665 / 0.245 / 0.090 / 0
    assert _sampling_warpers(SamplingParams(0.0, 1.0, ())) is None
    assert _sample_next(logits, None).tolist() == [0]


def test_an_episode_seeded_on_its_own_samples_the_same_tokens_alone_or_in_a_batch(tiny):
    model, tok = tiny
    seeds = [101, 202, 303, 404, 505, 606]
    batch, _, _ = rollout(model, tok, True, n=6, tokens=12, temperature=1.0, seeds=seeds)
    torch.manual_seed(12345)  # the global RNG plays no part
    alone = [
        rollout(model, tok, True, n=1, first=i, tokens=12, temperature=1.0, seeds=[seeds[i]])[0].episodes[0]
        for i in range(6)
    ]
    assert [e.ids for e in batch.episodes] == [e.ids for e in alone]
    assert len({len(e.ids) for e in alone}) > 1  # sampled episodes of different lengths, not one fixed path
    other, _, _ = rollout(model, tok, True, n=6, tokens=12, temperature=1.0, seeds=[s + 1 for s in seeds])
    assert [e.ids for e in other.episodes] != [e.ids for e in batch.episodes]
    with pytest.raises(ValueError, match="seeds need continuous decoding"):
        rollout(model, tok, False, n=2, temperature=1.0, seeds=[1, 2])


def test_a_prompt_shared_by_several_episodes_is_encoded_once_and_each_samples_on_its_own(tiny):
    model, tok = tiny
    params = SamplingParams(1.0, 1.0, ())
    prompts = [[5, 6, 7, 8], [9, 10], [5, 6, 7, 8], [5, 6, 7, 8]]  # a task's three samples, another task
    seeds = [11, 22, 33, 44]
    shapes: list[tuple[int, ...]] = []
    hook = model.register_forward_pre_hook(
        lambda _m, _a, kw: shapes.append(tuple(kw["input_ids"].shape)), with_kwargs=True
    )
    try:
        seen: dict[int, list[int]] = {}
        HFBackend(model, tok).run_turns(
            prompts, [6] * 4, params, lambda row, ids: seen.setdefault(row, list(ids)) and None, seeds=seeds
        )
        first = shapes[0]
        alone = []
        for p, sd in zip(prompts, seeds):
            one: dict[int, list[int]] = {}
            HFBackend(model, tok).run_turns(
                [p], [6], params, lambda row, ids, one=one: one.setdefault(row, list(ids)) and None, seeds=[sd]
            )
            alone.append(one[0])
    finally:
        hook.remove()
    assert first == (2, 4)  # the two distinct prompts, not four rows
    assert [seen[r] for r in range(4)] == alone  # each sample draws its own tokens, as if alone
    assert len({tuple(seen[r]) for r in (0, 2, 3)}) > 1  # and the shared prompt's samples differ
    assert distinct_rows(prompts) == ([0, 1], [0, 1, 0, 0])
    assert distinct_rows([[1], [2], [1, 2]]) == ([0, 1, 2], [0, 1, 2])


def test_shared_prefix_len_on_hand_cases():
    assert shared_prefix_len([[1, 2, 3, 4], [1, 2, 5], [1, 2, 3]]) == 2
    assert shared_prefix_len([[7, 8], [7, 8, 9]]) == 1  # each keeps a token of its own to feed
    assert shared_prefix_len([[7, 8, 9], [7, 8, 9]]) == 2
    assert shared_prefix_len([[1, 2], [3, 2]]) == 0
    assert shared_prefix_len([[1, 2, 3]]) == 0  # one prompt shares with no one
    assert shared_prefix_len([[5], [5, 6]]) == 0


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_prefix_shared_by_distinct_prompts_is_encoded_once_and_changes_no_token(tiny, temperature):
    model, tok = tiny
    params = SamplingParams(temperature, 1.0, ())
    system = list(range(20, 60))  # 40 tokens every prompt starts with (a gym's system prompt)
    prompts = [system + [5, 6, 7], system + [9, 10], system + [5, 6, 7], system + [9, 11, 12, 13]]
    seeds = [11, 22, 33, 44]

    def run(share: bool):
        b = HFBackend(model, tok)
        b.share_prompt_prefix = share
        shapes: list[tuple[int, ...]] = []
        hook = model.register_forward_pre_hook(
            lambda _m, _a, kw: shapes.append(tuple(kw["input_ids"].shape)), with_kwargs=True
        )
        seen: dict[int, list[list[int]]] = {}

        def on_turn_end(row, ids):
            seen.setdefault(row, []).append(list(ids))
            return ([7, 8, 9], 3) if len(seen[row]) < 2 else None

        try:
            calls = b.run_turns(prompts, [4, 2, 5, 3], params, on_turn_end, seeds=seeds)
        finally:
            hook.remove()
        return seen, shapes, calls, b

    shared, shapes, calls, b = run(True)
    whole, shapes_whole, calls_whole, b_whole = run(False)
    # the prefix once, on one row; then the three distinct prompts' rests (right-aligned, 4 wide)
    assert shapes[:2] == [(1, 40), (3, 4)] and shapes_whole[0] == (3, 44)
    assert b.shared_prefix_calls == 1 and b_whole.shared_prefix_calls == 0
    assert calls == len(shapes) == calls_whole + 1 == len(shapes_whole) + 1
    assert b.encoded_tokens == b_whole.encoded_tokens - 2 * 40  # two of the three prefixes not encoded
    assert shared == whole  # the same turns, token for token


def test_inverse_cdf_sampling_picks_the_token_whose_cdf_interval_holds_the_draw():
    probs = torch.tensor([[0.0, 0.25, 0.0, 0.75, 0.0]]).repeat(5, 1)
    u = torch.tensor([[0.0], [0.2499], [0.25], [0.9], [1 - 1e-9]])
    # cdf 0, .25, .25, 1, 1: token 0 and 2 (probability 0) are never drawn, not even at u = 0 or at an
    # interval's edge; a draw that rounds up to the total stays on the last token with a chance (3, not 4)
    assert inverse_cdf_sample(probs, u).tolist() == [1, 1, 3, 3, 3]
    assert inverse_cdf_sample(torch.tensor([[0.3, 0.7]]), torch.tensor([[0.3]])).tolist() == [1]


def test_engine_refuses_continuous_decoding_on_a_backend_without_it(tiny):
    class TurnOnly:
        def generate(self, prompts, max_new_tokens, params):
            return [[] for _ in prompts]

        def sync_weights(self, model):
            pass

        def clear_cache(self):
            pass

    model, tok = tiny
    with pytest.raises(ValueError, match="TurnOnly has no run_turns"):
        RolloutEngine(TurnOnly(), ChatFormat(tok, "tagged"), continuous=True)
    assert RolloutEngine(TurnOnly(), ChatFormat(tok, "tagged")).continuous is False
    assert RolloutEngine(HFBackend(model, tok), ChatFormat(tok, "tagged")).continuous is True
    assert RolloutEngine(HFBackend(model, tok, continuous=False), ChatFormat(tok, "tagged")).continuous is False


def test_backend_config_takes_continuous_and_names_what_it_does_not_know():
    from harness.ppo.config import build_config

    assert build_config("tiny", None, ["backend.continuous=false"]).backend.continuous is False
    with pytest.raises(ValueError, match=r"backend: unknown key\(s\) contnuous; allowed: name, continuous"):
        build_config("tiny", None, ["backend.contnuous=false"])
    with pytest.raises(ValueError, match=r"backend \(hf\) takes name and continuous; port are vllm options"):
        build_config("tiny", None, ["backend.port=8000"])
    with pytest.raises(ValueError, match="backend.continuous must be true or false; got 'maybe'"):
        build_config("tiny", None, ["backend.continuous=maybe"])


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_recorded_logprobs_and_values_are_those_of_a_scoring_pass(tiny, temperature):
    """run(with_stats=True): each action token's log-prob at the sampling temperature and the shared
    critic's value of the state it was sampled in, as one forward over the finished episodes gives
    them (what the trainer's scoring pass would compute); 0 on every other token."""
    from harness.ppo.batch import collate
    from harness.ppo.models import PolicyWithValueHead, forward_token_stats

    model, tok = tiny
    torch.manual_seed(1)
    critic = PolicyWithValueHead(model, head_init_std=0.5)  # a non-zero head: values vary per state
    chat = ChatFormat(tok, "tagged")
    backend = HFBackend(model, tok)
    backend.value_fn = critic.values_from_hidden
    snap = KnobSnapshot.read_dir(defaults_dir())
    envs = [make(MIXED[i % len(MIXED)], knobs=snap) for i in range(5)]
    res = RolloutEngine(backend, chat).run(
        envs,
        [{"seed": i, "options": {"task_index": i}} for i in range(5)],
        [str(i) for i in range(5)],
        [0] * 5,
        params=SamplingParams(temperature, 0.9, tuple(chat.stop_ids)),
        max_new_tokens_per_turn=12,
        max_episode_tokens=900,
        with_stats=True,
    )
    batch = collate(res.episodes, tok.pad_token_id)
    assert batch.rollout_logprobs is not None and batch.rollout_values is not None
    with torch.no_grad():
        st = forward_token_stats(critic, batch.input_ids, batch.attention_mask, temperature=temperature)
    act = batch.action_mask
    assert act.sum() > 20
    torch.testing.assert_close(batch.rollout_logprobs, st.logprobs * act, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(batch.rollout_values, st.values * act, atol=1e-4, rtol=1e-4)
    assert (batch.rollout_logprobs[act == 1] < 0).all() and batch.rollout_values[act == 1].std() > 0


def test_recorded_stats_need_continuous_decoding_and_a_positive_temperature(tiny):
    model, tok = tiny
    chat = ChatFormat(tok, "tagged")
    env = make("intention", knobs=KnobSnapshot.read_dir(defaults_dir()))
    kw = dict(
        params=SamplingParams(1.0, 1.0, tuple(chat.stop_ids)),
        max_new_tokens_per_turn=4,
        max_episode_tokens=600,
        with_stats=True,
    )
    with pytest.raises(ValueError, match="with_stats needs continuous decoding"):
        RolloutEngine(HFBackend(model, tok, continuous=False), chat).run([env], [{"seed": 0}], ["g"], [0], **kw)
    kw["params"] = SamplingParams(0.0, 1.0, tuple(chat.stop_ids))
    with pytest.raises(ValueError, match="log-probs need a temperature > 0, got 0.0"):
        RolloutEngine(HFBackend(model, tok), chat).run([env], [{"seed": 0}], ["g"], [0], **kw)


def test_an_unscored_action_drops_the_episodes_recorded_stats():
    from harness.rollout.backends import TurnStats
    from harness.rollout.engine import Episode

    ep = Episode(env=None, group="g", sample=0, logprobs=[], values=[])
    ep.extend([1, 2], is_action=False)
    ep.extend([3, 4], is_action=True, stats=TurnStats([-0.5, -0.25], [0.1, 0.2]))
    assert ep.logprobs == [0.0, 0.0, -0.5, -0.25] and ep.values == [0.0, 0.0, 0.1, 0.2]
    ep.extend([5], is_action=True)  # e.g. the stop token recorded for an empty output
    assert ep.logprobs is None and ep.values is None and ep.ids == [1, 2, 3, 4, 5]
    ep.extend([6], is_action=False)
    assert ep.logprobs is None
    # scored without values where values were expected: the values go, the log-probs stay
    ep = Episode(env=None, group="g", sample=0, logprobs=[], values=[])
    ep.extend([1], is_action=False)
    ep.extend([3], is_action=True, stats=TurnStats([-0.5], None))
    assert ep.logprobs == [0.0, -0.5] and ep.values is None
