"""A tiny causal LM and its tokenizer, built locally in seconds (tests, the seconds-scale preset).

The tokenizer is a byte-level BPE trained with the ``tokenizers`` library on a small built-in corpus
(the gyms' vocabulary, user replies, code, the tagged action format): byte-level, so any text
round-trips and nothing maps to an unknown token. ``ASK:``, ``SEARCH:``, ``ANSWER:``,
``<tool_call>`` and ``</tool_call>`` are single tokens, so a small policy meets the action format as
one choice. It is wrapped as a ``PreTrainedTokenizerFast`` with pad/bos/eos tokens and the ``turns``
chat template. The model is a Llama-style decoder (about 1M parameters with the defaults).
Everything is deterministic given the seed, and ``save_pretrained`` works for both parts.
"""

from __future__ import annotations

import itertools
from typing import Any, Mapping

import torch
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from harness.envs.intention import REQUESTS
from harness.ppo.specs import TinySpec
from harness.rollout.chat_templates import END_OF_TURN, START_OF_TURN, ensure_chat_template, stop_token_ids

PAD, BOS, EOS = "<pad>", "<bos>", "<eos>"
SPECIAL_TOKENS = (PAD, BOS, EOS, START_OF_TURN, END_OF_TURN)
# Not special: they are ordinary text the model writes and the decoder must keep.
ACTION_TOKENS = ("ASK:", "SEARCH:", "ANSWER:", "<tool_call>", "</tool_call>")


# ----------------------------------------------------------------------------------------------------
# built-in corpus
# ----------------------------------------------------------------------------------------------------

_TOPICS = {
    "travel": "flight hotel car restaurant activity airline airport departure arrival layover nonstop economy "
    "business cabin baggage luggage breakfast downtown beach museum hiking budget price cheap "
    "expensive stars rating city neighborhood night morning afternoon evening cuisine vegetarian",
    "function": "function rule input output value probe integer variable sum product difference constant "
    "test case a b c d f equals result",
    "code": "def return if else elif for while in range len list dict str int float import class self "
    "None True False print sorted append raise ValueError lambda yield try except",
    "user": "prefer like want need would please thanks sure maybe definitely important preference "
    "requirement detail answer question yes no not really care about",
    "shape": "signature shape edge case constant type argument parameter string number empty negative",
    "general": "the be to of and a in that have it for not on with he as you do at this but his by from they "
    "we say her she or an will my one all there their what so up out about who get which go me "
    "when make can time just him know take people into year your good some could them see other "
    "than then now look only come its over think also back after use two how our work first well "
    "way even new want because any these give day most us is are was were has had been being did "
    "does done said made went gone got found told asked called tried left kept began seemed "
    "helped showed heard played ran moved lived believed brought happened wrote provided sat "
    "stood lost paid met included continued set learned changed led understood watched followed "
    "stopped created spoke read allowed added spent grew opened walked won offered remembered "
    "loved considered appeared bought waited served died sent expected built stayed fell cut "
    "reached killed remained suggested raised passed sold required reported decided pulled "
    "friend family group problem hand part place case week company system program number night "
    "point home water room mother area money story fact month lot right study book eye job word "
    "business issue side kind head house service father power hour game line end member law car "
    "name president team minute idea kid body information school face others level office door "
    "health person art war history party result change morning reason research girl guy moment "
    "air teacher force education first last long great little own old big high different small "
    "large next early young important few public bad same able late hard major better economic "
    "strong possible whole free military true federal international full special easy clear "
    "recent certain personal open red difficult available likely short single medical current "
    "wrong private past foreign fine common poor natural significant similar hot dead central "
    "happy serious ready simple left physical general environmental financial blue democratic "
    "dark various entire close legal religious cold final main green nice huge popular "
    "traditional cultural today hello welcome correct incorrect success failure error format "
    "again instead already still never always often sometimes usually enough very really quite "
    "monday tuesday wednesday thursday friday saturday sunday january february march april may "
    "june july august september october november december paris london tokyo rome berlin madrid",
}
_QUESTIONS = (
    "What {w} do you prefer?",
    "Do you have a preference for the {w}?",
    "How important is the {w}?",
    "Which {w} would you like?",
    "Is the {w} important to you?",
    "Could you tell me about the {w}?",
    "What should the {w} be?",
    "Any requirement on the {w}?",
)
_REPLIES = (
    "I prefer a {w}.",
    "The {w} matters a lot to me.",
    "I don't care about the {w}.",
    "I would like the {w} to be cheap.",
    "Not really, the {w} is fine.",
    "Yes, the {w} is important.",
)
_ACTIONS = (
    "ASK: What {w} do you prefer?",
    "SEARCH: {w} options",
    "ANSWER: {w}",
    "I should ask first.\nASK: Which {w}?",
    "I have enough information.\nANSWER: {w}",
    "SEARCH: cheap {w} downtown",
    '<tool_call>{{"name": "interact", "arguments": {{"choice": "ask", "content": "Which {w}?"}}}}</tool_call>',
    '<tool_call>{{"name": "interact", "arguments": {{"choice": "answer", "content": "{w}"}}}}</tool_call>',
)
_CODE = (
    "def solve(a, b):\n    return a + b\n",
    "def f(x):\n    if x < 0:\n        return -x\n    return x * 2\n",
    "def count(items):\n    total = 0\n    for item in items:\n        total += len(item)\n    return total\n",
    "import math\n\ndef area(r):\n    return math.pi * r ** 2\n",
    "f(1, 2, 3, 4) = 10\nf(3, 1, 4, 1) = 17\n",
)


def _intention_lines() -> list[str]:
    """The intention gym's requests, details and detail keywords: each keyword then becomes one or
    two tokens, so a small policy names a detail in one choice instead of spelling it out (measured:
    278 of its 346 keywords took several tokens before, and a sampled tiny policy garbled them)."""
    lines = []
    for req in REQUESTS:
        lines.append(req.prompt)
        for d in req.details:
            lines += [d.text.replace("{v}", v) for v in d.values]
            lines += [f"What should I know about the {k}?" for k in d.keywords] * 3
            lines += [f"ASK: What should I know about the {k}?" for k in d.keywords]
    return lines


def tiny_corpus() -> list[str]:
    """The built-in training text of the tiny tokenizer (deterministic, a few thousand lines)."""
    words = [w for text in _TOPICS.values() for w in text.split()]
    lines: list[str] = []
    for w, (q, r, a) in zip(words, itertools.cycle(zip(_QUESTIONS, _REPLIES, _ACTIONS))):
        lines += [q.format(w=w), r.format(w=w), a.format(w=w)]
    for w in words:  # every word in every form, so each gets merged into few tokens
        lines += [t.format(w=w) for t in _QUESTIONS + _REPLIES + _ACTIONS]
    lines += _intention_lines()
    lines += [" ".join(str(n) for n in range(i, i + 20)) for i in range(0, 200, 20)]
    lines += list(_CODE) * 20
    return lines


# ----------------------------------------------------------------------------------------------------
# builders
# ----------------------------------------------------------------------------------------------------


def build_tiny_tokenizer(
    vocab_size: int = TinySpec.vocab_size, chat_template: str | None = None
) -> PreTrainedTokenizerFast:
    """Train the byte-level BPE on :func:`tiny_corpus` and wrap it for transformers.

    ``chat_template``: a template name or path (see :mod:`harness.rollout.chat_templates`); None sets
    ``turns``.
    """
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(ACTION_TOKENS),
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(tiny_corpus(), trainer=trainer)
    tok.add_tokens([AddedToken(t, normalized=False, single_word=False) for t in ACTION_TOKENS])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=PAD,
        bos_token=BOS,
        eos_token=EOS,
        padding_side="right",
        clean_up_tokenization_spaces=False,
    )
    return ensure_chat_template(fast, chat_template)


def build_tiny(
    spec: TinySpec | Mapping[str, Any] | None = None, seed: int | None = None, chat_template: str | None = None
) -> tuple[LlamaForCausalLM, PreTrainedTokenizerFast]:
    """Build the tiny model and its tokenizer: ``(model, tokenizer)``.

    ``seed`` overrides ``spec.seed``. The global torch RNG is left as it was (initialisation runs
    in a forked RNG), so building a model does not shift a run's sampling.
    """
    spec = spec if isinstance(spec, TinySpec) else TinySpec.from_dict(spec)
    seed = spec.seed if seed is None else seed
    tokenizer = build_tiny_tokenizer(spec.vocab_size, chat_template)
    config = LlamaConfig(
        vocab_size=-(-len(tokenizer) // 64) * 64,  # rounded up to a multiple of 64 (matmul-friendly)
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=spec.tie_word_embeddings,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=stop_token_ids(tokenizer), pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id
    )
    model.eval()
    return model, tokenizer
