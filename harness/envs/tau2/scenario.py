"""A τ² task's user scenario as the simulated user holds it: pure text functions, no τ² import.

A scenario (``user_scenario.instructions`` of a τ² task) has a reason for the call, known info,
unknown info and task instructions. What the user *knows* (its known corpus) is everything in the
scenario except the unknown info: the reason for the call, the known info and the task
instructions. The symbolic user states only values from that corpus; tests check it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from harness.types import Fact

_SENT_RE = re.compile(r"(?<=[.!?])\s+|\n+")
# Sentences of the reason for the call that are private instructions to the user, not things a
# caller says: conditions ("If the agent ..."), behaviour ("Do not ...", "Make sure ..."), persona.
_PRIVATE_RE = re.compile(
    r"^\s*(if|when|whenever|unless|do not|don't|never|always|make sure|be sure|try to|insist|"
    r"you are (a|an|very|extremely|quite|reactive|polite|private|detail)|you (do not|don't) want to (mention|reveal))\b",
    re.IGNORECASE,
)
_PRONOUNS = (
    (r"\byou are\b", "I am"),
    (r"\byou're\b", "I'm"),
    (r"\byou were\b", "I was"),
    (r"\byou've\b", "I've"),
    (r"\byou'd\b", "I'd"),
    (r"\byou'll\b", "I'll"),
    (r"\byourself\b", "myself"),
    (r"\byours\b", "mine"),
    (r"\byour\b", "my"),
    (r"\byou\b", "I"),
)


def first_person(text: str) -> str:
    """Second-person scenario text in the caller's own voice ("You want X" -> "I want X").

    >>> first_person("You name is Ivan Khan and your zip code is 28243.")
    'My name is Ivan Khan and my zip code is 28243.'
    """
    out = re.sub(r"\byou name\b", "your name", text, flags=re.IGNORECASE)  # a typo in τ²'s retail data
    for pat, rep in _PRONOUNS:
        out = re.sub(pat, rep, out, flags=re.IGNORECASE)
    return re.sub(r"(^|[.!?]\s+)([a-z])", lambda m: m.group(1) + m.group(2).upper(), out.strip())


def sentences(text: str | None) -> list[str]:
    return [s.strip() for s in _SENT_RE.split(text or "") if s.strip()]


def opening_message(reason: str | None) -> str:
    """The caller's first message: the reason for the call in the first person, without the
    sentences that are private instructions to the role."""
    said = [first_person(s) for s in sentences(reason) if not _PRIVATE_RE.match(s)]
    body = " ".join(said) or "I need some help with my account."
    return f"Hi! {body}"


# Words an agent uses when it asks for a kind of known info; a fact's keywords (for matching).
_KIND_WORDS = {
    r"@|\bemail\b": ("email", "e-mail", "mail", "address"),
    r"\bzip\b|\bzipcode\b|\bpostal\b": ("zip", "zipcode", "postal", "code"),
    r"\bname\b|\bi am [A-Z]|\bi'm [A-Z]": ("name", "first", "last", "full", "who", "identity"),
    r"\buser id\b|\b[a-z]+_[a-z]+_\d{3,}\b": ("user", "id", "username", "account", "identify", "identity"),
    r"\bphone\b|\d{3}-\d{3}-\d{4}": ("phone", "number", "line", "mobile", "cell"),
    r"\border\b|#w\d": ("order", "number", "id"),
    r"\breservation\b|\bconfirmation\b|\bbooking\b": ("reservation", "booking", "confirmation", "number", "code"),
    r"\baddress\b|\bstreet\b|\bsuite\b|\bapt\b": ("address", "street", "ship", "shipping", "live", "where"),
    r"\babroad\b|\bcountry\b|\btravel": ("where", "location", "abroad", "country", "travel", "located"),
    r"\bpayment\b|\bcard\b|\bpaypal\b|\bgift\b|\bcertificate\b": ("payment", "pay", "card", "method", "refund"),
    r"\bbirth|\bdob\b": ("birth", "birthday", "date", "dob"),
}


def known_facts(known_info: str | None, prefix: str = "known") -> list[Fact]:
    """One fact per sentence of the known info (first person), kind ``detail``, with the words an
    agent's question about it is likely to contain as keywords."""
    facts = []
    for i, sent in enumerate(sentences(known_info)):
        text = first_person(sent)
        words: list[str] = []
        for pat, kw in _KIND_WORDS.items():
            if re.search(pat, text, re.IGNORECASE):
                words += [w for w in kw if w not in words]
        facts.append(Fact(key=f"{prefix}.{i}", kind="detail", text=text, keywords=tuple(words)))
    return facts


def known_corpus(instructions: dict[str, Any]) -> str:
    """Everything the user knows, as one text (the scenario without its unknown info)."""
    parts = [instructions.get(k) for k in ("reason_for_call", "known_info", "task_instructions")]
    return "\n".join(str(p) for p in parts if p)


def flat_values(value: Any) -> list[str]:
    """Every scalar inside a tool call's arguments, as text."""
    if isinstance(value, dict):
        return [v for x in value.values() for v in flat_values(x)]
    if isinstance(value, (list, tuple)):
        return [v for x in value for v in flat_values(x)]
    return [] if value is None or isinstance(value, bool) else [str(value)]


def id_tokens(text: str, patterns: Sequence[re.Pattern[str]]) -> set[str]:
    """The identifiers (order, item, reservation, payment-method ids, ...) ``text`` mentions,
    lower-cased; ``patterns``: the rule file's ``scenario.id_patterns``."""
    return {m.group(0).lower() for p in patterns for m in p.finditer(text or "")}


@dataclass(frozen=True)
class GoldAction:
    """A gold action as the user wants it done (from the task's evaluation criteria)."""

    name: str
    arguments: dict[str, Any]
    requestor: str
    compare_args: tuple[str, ...] | None

    def matches(self, name: str, arguments: dict[str, Any]) -> bool:
        """τ²'s rule: same name, and equal values on ``compare_args`` (all of the call's when None)."""
        if name != self.name:
            return False
        keys = self.compare_args if self.compare_args is not None else tuple(arguments)
        call = {k: arguments[k] for k in keys if k in arguments}
        gold = {k: self.arguments[k] for k in keys if k in self.arguments}
        return call == gold

    def verb(self) -> str:
        """The action word of the tool (``return_delivered_order_items`` -> ``return``)."""
        return self.name.split("_", 1)[0]


def pending(gold: Iterable[GoldAction], done: Iterable[tuple[str, dict[str, Any]]]) -> list[GoldAction]:
    """Gold actions no successful call of ``done`` (name, arguments) has matched yet."""
    done = list(done)
    return [g for g in gold if not any(g.matches(n, a) for n, a in done)]
