"""Token bookkeeping of a multi-turn episode with a chat template.

The policy's own tokens are never re-tokenised: each turn appends the generated ids as they are
(action tokens), then the *observation* ids — the rest of the assistant block the template adds
(e.g. ``<end_of_turn>\\n`` when generation stopped early) plus the next user/tool block and the
generation prompt — computed by rendering the conversation with and without the observation and
tokenising only the difference. Log-probs recorded during the rollout therefore belong to exactly
the tokens the loss later sees.

Observation roles: in the tagged rendering every observation is a ``user`` message prefixed by its
source (``[search]``, ``[environment]``); in the tool-call rendering search results and environment
feedback are ``tool`` messages, and user replies are ``user`` messages (``user_replies="user"``, the
default) or ``tool`` messages, the result of the call that asked (``user_replies="tool"``: how TRL's
``environment_factory`` and UserRL's interact tool render them).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Sequence

from harness.rollout.chat_templates import stop_token_ids

RENDER_MEMO_SIZE = 256  # renders ChatFormat remembers (an episode's next turn starts from its last one)


def _common_prefix_len(a: str, b: str) -> int:
    """Length of the longest common prefix: a binary search over slice comparisons (each in C; a
    character loop in Python took ~0.1 ms a turn on a 2k-character conversation)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


USER_REPLIES = ("user", "tool")


def check_user_replies(rendering: str, user_replies: str) -> None:
    """ValueError unless ``user_replies`` is allowed with ``rendering`` (``tool`` needs ``tool_call``)."""
    if user_replies not in USER_REPLIES:
        raise ValueError(f"user_replies must be user or tool, got {user_replies!r}")
    if user_replies == "tool" and rendering != "tool_call":
        raise ValueError(
            f"user_replies=tool renders user replies as tool results, which needs "
            f"rendering=tool_call; got rendering={rendering!r}"
        )


@dataclass
class ChatFormat:
    """Renders an episode's messages with a tokenizer's chat template.

    tokenizer: a transformers tokenizer with a chat template.
    rendering: ``tagged`` or ``tool_call`` (the action rendering of the gyms).
    tools: tool schemas passed to the template in the tool-call rendering.
    user_replies: message role of the user's replies in the tool-call rendering (``user`` | ``tool``).
    """

    tokenizer: Any
    rendering: str = "tagged"
    tools: Sequence[dict[str, Any]] | None = None
    user_replies: str = "user"
    _stop_texts: list[str] = field(default_factory=list)
    _memo: dict[str, str] = field(default_factory=dict, compare=False, repr=False)  # text by (messages, gen. prompt)

    def __post_init__(self) -> None:
        check_user_replies(self.rendering, self.user_replies)

        self.stop_ids = stop_token_ids(self.tokenizer)
        self._stop_texts = [self.tokenizer.decode([i]) for i in self.stop_ids]

    def render(self, messages: list[dict[str, Any]], generation_prompt: bool) -> str:
        """The template's text of ``messages``. Remembered (the last :data:`RENDER_MEMO_SIZE`
        renders): each turn's :meth:`observation_ids` starts from the conversation its previous turn
        rendered, so a template render per turn is saved."""
        key = json.dumps([messages, generation_prompt], sort_keys=True, default=repr)
        text = self._memo.get(key)
        if text is None:
            kw: dict[str, Any] = {}
            if self.rendering == "tool_call" and self.tools:
                kw["tools"] = list(self.tools)
            text = self.tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=generation_prompt, **kw
            )
            if len(self._memo) >= RENDER_MEMO_SIZE:
                del self._memo[next(iter(self._memo))]  # the oldest
            self._memo[key] = text
        return text

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def prompt_ids(self, messages: list[dict[str, Any]]) -> list[int]:
        """Ids of the conversation so far, ending with the generation prompt."""
        return self.encode(self.render(messages, generation_prompt=True))

    def observation_message(self, role: str, text: str) -> dict[str, Any]:
        """The chat message carrying an observation of ``role`` (user | tool | env)."""
        if self.rendering == "tool_call":
            return {"role": self.user_replies if role == "user" else "tool", "content": text}
        prefix = {"user": "", "tool": "[search] ", "env": "[environment] "}.get(role, "")
        return {"role": "user", "content": prefix + text}

    def observation_ids(
        self, messages: list[dict[str, Any]], generated_ids: Sequence[int], assistant_text: str, obs: dict[str, Any]
    ) -> list[int]:
        """Ids that follow the generated ids: the end of the assistant block, the observation message and
        the next generation prompt. ``messages`` ends before the assistant message."""
        before = self.render(messages, generation_prompt=True)
        with_assistant = self.render(
            messages + [{"role": "assistant", "content": assistant_text}], generation_prompt=False
        )
        full = self.render(messages + [{"role": "assistant", "content": assistant_text}, obs], generation_prompt=True)
        cut = _common_prefix_len(with_assistant, full)
        # the closing of the assistant block (after its content), minus what generation already produced
        closing = (
            with_assistant[len(before) + len(assistant_text) :]
            if with_assistant.startswith(before + assistant_text)
            else ""
        )
        if generated_ids and int(generated_ids[-1]) in self.stop_ids:
            stop_text = self.tokenizer.decode([int(generated_ids[-1])])
            if closing.startswith(stop_text):
                closing = closing[len(stop_text) :]
        return self.encode(closing + full[cut:])

    def decode_action(self, generated_ids: Sequence[int]) -> str:
        """The turn's text as the gym parses it (special tokens such as the stop token removed)."""
        return self.tokenizer.decode(list(generated_ids), skip_special_tokens=True)
