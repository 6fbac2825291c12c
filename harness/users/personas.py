"""The eight user personas (``persona`` knob) and how each one phrases a reply.

Both arms honour the persona: the symbolic user wraps its template reply with the persona's
phrasing (:meth:`Persona.style`); the LLM user gets the persona's ``description`` in its prompt.
A persona only changes *how* a reply reads: fact texts are kept verbatim, so what a reply
discloses does not depend on the persona.

A user rule file may override the phrasing of any persona under ``personas:`` (fields as in
:class:`Persona`; see ``knobs/schema/user_rules.schema.json``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

import numpy as np

PERSONA_NAMES = ("neutral", "terse", "verbose", "impatient", "friendly", "vague", "precise", "skeptical")


@dataclass(frozen=True)
class Persona:
    """Phrasing of one persona.

    name: the ``persona`` knob value.
    description: how the user talks, told to the LLM user.
    prefixes / suffixes: one of each is drawn (seeded) and put around every reply; "" is allowed.
    fact_joiner: how several disclosed facts are joined (e.g. " " or "\\n- ").
    bare: reply with the disclosed facts only, leaving out the template's pleasantries (terse).
    """

    name: str
    description: str
    prefixes: tuple[str, ...] = ("",)
    suffixes: tuple[str, ...] = ("",)
    fact_joiner: str = " "
    bare: bool = False

    def join_facts(self, texts: Sequence[str]) -> str:
        """The disclosed fact texts as one string, in this persona's layout."""
        if self.fact_joiner.startswith("\n- ") and len(texts) > 1:
            return "- " + self.fact_joiner.join(texts)
        return self.fact_joiner.join(texts)

    def style(self, body: str, rng: np.random.Generator, facts_text: str | None = None) -> str:
        """Wrap a reply ``body`` (a filled template) in this persona's phrasing.

        facts_text: the joined fact texts of the reply, if it disclosed any; a ``bare`` persona
        answers with these alone.
        """
        if self.bare and facts_text:
            return facts_text
        pre = self.prefixes[int(rng.integers(len(self.prefixes)))] if len(self.prefixes) > 1 else self.prefixes[0]
        suf = self.suffixes[int(rng.integers(len(self.suffixes)))] if len(self.suffixes) > 1 else self.suffixes[0]
        return " ".join(p for p in (pre, body, suf) if p).strip()


DEFAULT_PERSONAS: dict[str, Persona] = {
    "neutral": Persona("neutral", "You answer plainly and politely."),
    "terse": Persona("terse", "You answer in as few words as possible, no greetings or small talk.", bare=True),
    "verbose": Persona(
        "verbose",
        "You are chatty: you add context and a remark or two around every answer.",
        prefixes=(
            "Well, let me think about that for a moment.",
            "That's a good question, actually.",
            "Okay, so, here is how I see it.",
        ),
        suffixes=(
            "I hope that gives you a clearer picture of what I have in mind.",
            "Let me know if you want me to say more about it.",
        ),
    ),
    "impatient": Persona(
        "impatient",
        "You are in a hurry and want the assistant to get on with the task.",
        prefixes=("Come on.", "Quickly:", "Look,"),
        suffixes=("Can we move on?", "Let's get this done.", ""),
    ),
    "friendly": Persona(
        "friendly",
        "You are warm and encouraging.",
        prefixes=("Happy to help!", "Sure thing!", "Great question!"),
        suffixes=("Thanks for checking!", "You're doing great.", ""),
    ),
    "vague": Persona(
        "vague",
        "You are a little unsure and hedge what you say, but you never invent facts.",
        prefixes=("Hmm, I think", "I'm not totally sure, but", "If I remember right,"),
        suffixes=("I guess.", "or something like that.", ""),
    ),
    "precise": Persona(
        "precise",
        "You answer exactly and in a structured way, one point per line.",
        prefixes=("Precisely:", "To be exact:"),
        fact_joiner="\n- ",
    ),
    "skeptical": Persona(
        "skeptical",
        "You are skeptical of the assistant and want it to justify its questions.",
        prefixes=("Why do you need that? Anyway,", "I'm not sure this is the right question, but", "Fine,"),
        suffixes=("I hope you know what you're doing.", "Do you really need more than that?", ""),
    ),
}

_OVERRIDABLE = ("description", "prefixes", "suffixes", "fact_joiner", "bare")


def persona_table(overrides: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, Persona]:
    """The persona table with a rule file's ``personas:`` overrides applied (already validated)."""
    table = dict(DEFAULT_PERSONAS)
    for name, fields in (overrides or {}).items():
        changes = {k: (tuple(v) if isinstance(v, list) else v) for k, v in fields.items() if k in _OVERRIDABLE}
        table[name] = replace(table[name], **changes)
    return table


def get_persona(name: str, table: Mapping[str, Persona] | None = None) -> Persona:
    """The persona called ``name``; a clear error lists the valid names."""
    table = table or DEFAULT_PERSONAS
    if name not in table:
        raise ValueError(f"user knob persona={name!r} is not a persona; allowed: {', '.join(PERSONA_NAMES)}")
    return table[name]


__all__ = ["PERSONA_NAMES", "Persona", "DEFAULT_PERSONAS", "persona_table", "get_persona"]
