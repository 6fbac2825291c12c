"""``travel``: preference elicitation over a trip of 1-3 aspects (flight, hotel, restaurant, car, tour).

A task hides the user's preferences (facts of kind ``preference``; 1-2 per aspect), each a
constraint on one option attribute. ``search`` lists an aspect's options; the best option of an
aspect is the cheapest one that meets every preference of that aspect. The answer names one option
id per aspect.

Search query form: any text naming an aspect, by its name or a synonym (``flights``, ``hotel``,
``places to eat``, ``rental car``, ``tours``...). Naming several aspects lists each. A query that
names no aspect of the trip gets a message listing the searchable aspects (not a tool failure: the
tool worked, the query was off). Every ``search_failure_interval``-th search of an episode fails
(``ok=False``, "no results"), whatever the query.

Options per aspect: the best one, ``noise_choice_number`` options that meet every preference but
cost more than the best, and ``wrong_choice_number`` options that violate at least one preference
(at any price, so some are cheaper than the best: traps for an agent that did not ask).

Scoring (per aspect, averaged): the best option 1.0; an option meeting every preference but not
the cheapest 0.8; anything else 0 (a violating option, no id, an unknown id, or two different ids
for the same aspect). Success: the best option for every aspect. The answer ends the episode.

Elicitation (``after_turn``): after ``elicitation_interval`` agent turns in a row in which no new
preference was disclosed, the user volunteers the first preference not yet disclosed. It obeys the
user knobs ``reveal_kinds`` (nothing is volunteered when ``preference`` is not listed) and
``max_reveals`` (the volunteer counts against it like any disclosure).
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from dataclasses import dataclass
from typing import Any

from harness.envs.base import UserCentricEnv, split_of, task_seed
from harness.envs.registry import register
from harness.types import AnswerResult, Fact, ReplyCheck, Task, ToolResult, TurnRecord, UserReply
from harness.users.fidelity import Claim, check_claims

GYM = "travel"
SUCCESS_REWARD, COMPLIANT_REWARD = 1.0, 0.8


@dataclass(frozen=True)
class Attribute:
    """One option attribute of an aspect.

    kind: ``cat`` (preference: equals one value), ``min`` (at least a value), ``max`` (at most a
        value) or ``bool`` (preference: must be true).
    values: the values options draw from (ordered ascending for ``min``/``max``).
    words: words a question about this attribute is likely to use (fact keywords).
    """

    name: str
    kind: str
    values: tuple[Any, ...]
    words: tuple[str, ...]
    label: str  # how the option listing and the preference text call it
    need: str = ""  # bool attributes: what the user asks for ("a pool")


@dataclass(frozen=True)
class Aspect:
    """One bookable part of a trip: its id prefix, search synonyms, price range and attributes."""

    name: str
    prefix: str
    synonyms: tuple[str, ...]
    price_range: tuple[int, int]
    price_unit: str
    attributes: tuple[Attribute, ...]


ASPECTS: dict[str, Aspect] = {
    a.name: a
    for a in (
        Aspect(
            "flight",
            "F",
            ("flight", "flights", "fly", "plane", "airline", "airfare", "airfares"),
            (90, 900),
            "",
            (
                Attribute(
                    "airline",
                    "cat",
                    ("SkyJet", "AeroNova", "BlueWing", "Horizon Air"),
                    ("airline", "carrier", "company"),
                    "airline",
                ),
                Attribute("stops", "max", (0, 1, 2), ("stops", "stop", "layover", "nonstop", "direct"), "stops"),
                Attribute(
                    "departure",
                    "cat",
                    ("morning", "afternoon", "evening", "night"),
                    ("departure", "depart", "time", "leave"),
                    "departure",
                ),
                Attribute(
                    "cabin", "cat", ("economy", "premium economy", "business"), ("cabin", "class", "seat"), "cabin"
                ),
                Attribute(
                    "bag",
                    "bool",
                    (True, False),
                    ("baggage", "bag", "luggage", "checked"),
                    "checked bag included",
                    "a checked bag included",
                ),
            ),
        ),
        Aspect(
            "hotel",
            "H",
            ("hotel", "hotels", "accommodation", "lodging", "stay", "room", "rooms"),
            (50, 450),
            " per night",
            (
                Attribute("stars", "min", (2, 3, 4, 5), ("stars", "star", "class", "standard"), "stars"),
                Attribute(
                    "area",
                    "cat",
                    ("downtown", "old town", "beach", "airport"),
                    ("area", "location", "neighborhood", "where"),
                    "area",
                ),
                Attribute(
                    "breakfast",
                    "bool",
                    (True, False),
                    ("breakfast", "morning", "meal"),
                    "breakfast included",
                    "breakfast included",
                ),
                Attribute("pool", "bool", (True, False), ("pool", "swimming", "swim"), "pool", "a pool"),
                Attribute("wifi", "bool", (True, False), ("wifi", "internet", "wireless"), "free wifi", "free wifi"),
            ),
        ),
        Aspect(
            "restaurant",
            "R",
            ("restaurant", "restaurants", "dinner", "dining", "eat", "food", "meal"),
            (12, 140),
            " per person",
            (
                Attribute(
                    "cuisine",
                    "cat",
                    ("Italian", "Japanese", "Mexican", "Indian", "French", "Thai"),
                    ("cuisine", "food", "kind", "type"),
                    "cuisine",
                ),
                Attribute(
                    "vegetarian",
                    "bool",
                    (True, False),
                    ("vegetarian", "veggie", "meat", "diet"),
                    "vegetarian menu",
                    "a vegetarian menu",
                ),
                Attribute("rating", "min", (3, 4, 5), ("rating", "rated", "reviews", "quality"), "rating"),
                Attribute(
                    "outdoor",
                    "bool",
                    (True, False),
                    ("outdoor", "outside", "terrace", "seating"),
                    "outdoor seating",
                    "outdoor seating",
                ),
            ),
        ),
        Aspect(
            "car",
            "C",
            ("car", "cars", "rental", "rent", "vehicle", "drive"),
            (20, 160),
            " per day",
            (
                Attribute("type", "cat", ("compact", "sedan", "SUV", "van"), ("type", "kind", "size", "model"), "type"),
                Attribute(
                    "transmission",
                    "cat",
                    ("automatic", "manual"),
                    ("transmission", "gearbox", "automatic", "manual"),
                    "transmission",
                ),
                Attribute("seats", "min", (2, 4, 5, 7), ("seats", "seat", "passengers", "people"), "seats"),
                Attribute(
                    "fuel", "cat", ("petrol", "hybrid", "electric"), ("fuel", "electric", "petrol", "engine"), "fuel"
                ),
            ),
        ),
        Aspect(
            "tour",
            "T",
            ("tour", "tours", "activity", "activities", "excursion", "sightseeing", "guide"),
            (15, 220),
            " per person",
            (
                Attribute(
                    "theme",
                    "cat",
                    ("museum", "hiking", "boat", "food tasting", "city walk"),
                    ("theme", "kind", "type", "activity"),
                    "theme",
                ),
                Attribute("hours", "max", (2, 3, 4, 6, 8), ("hours", "long", "duration", "length"), "hours"),
                Attribute(
                    "slot", "cat", ("morning", "afternoon", "evening"), ("time", "slot", "start", "when"), "time"
                ),
                Attribute("group", "max", (6, 10, 20, 40), ("group", "size", "people", "crowd"), "group size"),
            ),
        ),
    )
}

CITIES = (
    "Lisbon",
    "Kyoto",
    "Oaxaca",
    "Edinburgh",
    "Cape Town",
    "Reykjavik",
    "Hanoi",
    "Vienna",
    "Cusco",
    "Marrakesh",
    "Vancouver",
    "Seville",
    "Istanbul",
    "Melbourne",
    "Prague",
    "Tbilisi",
    "Valparaiso",
    "Bergen",
    "Naples",
    "Chiang Mai",
)

_ID_RE = re.compile(r"\b([A-Za-z])-?(\d{1,3})\b")


# ---------------------------------------------------------------------------- preferences
def _pref_value_ok(attr: Attribute, target: Any, value: Any) -> bool:
    """Whether an option's ``value`` meets a preference with ``target`` on ``attr``."""
    if attr.kind == "min":
        return value >= target
    if attr.kind == "max":
        return value <= target
    return value == target  # cat and bool (target True)


def _pref_text(aspect: Aspect, attr: Attribute, target: Any) -> str:
    """How the user states a preference."""
    a = aspect.name
    if attr.kind == "bool":
        return f"For the {a}, I need {attr.need}."
    if attr.kind == "min":
        return f"For the {a}, the {attr.label} should be at least {target}."
    if attr.kind == "max":
        if attr.name == "stops" and target == 0:
            return f"For the {a}, I want a nonstop flight (0 stops)."
        return f"For the {a}, the {attr.label} should be at most {target}."
    return f"For the {a}, I want the {attr.label} to be {target}."


def _draw_target(attr: Attribute, rng: random.Random) -> Any:
    """A preference target that both some values meet and some values violate."""
    if attr.kind == "bool":
        return True
    if attr.kind == "min":
        return rng.choice(attr.values[1:])
    if attr.kind == "max":
        return rng.choice(attr.values[:-1])
    return rng.choice(attr.values)


def _format_value(attr: Attribute, value: Any) -> str:
    if attr.kind == "bool":
        return "yes" if value else "no"
    return str(value)


# ---------------------------------------------------------------------------- options
def _draw_option(aspect: Aspect, prefs: dict[str, Any], rng: random.Random, violate: set[str]) -> dict[str, Any]:
    """Attribute values of one option: meets every preference except those named in ``violate``."""
    values: dict[str, Any] = {}
    for attr in aspect.attributes:
        if attr.name in prefs:
            target = prefs[attr.name]
            want_ok = attr.name not in violate
            pool = [v for v in attr.values if _pref_value_ok(attr, target, v) == want_ok]
            values[attr.name] = rng.choice(pool)
        else:
            values[attr.name] = rng.choice(attr.values)
    return values


def build_options(
    aspect: Aspect, prefs: dict[str, Any], noise: int, wrong: int, rng: random.Random
) -> tuple[list[dict[str, Any]], str]:
    """Options of one aspect and the id of the best one.

    One best option (meets every preference, cheapest such), ``noise`` compliant options that cost
    strictly more, ``wrong`` options that violate at least one preference at any price.
    """
    lo, hi = aspect.price_range
    span = hi - lo
    best_price = rng.randint(lo, lo + span // 2)
    used = {best_price}

    def fresh_price(low: int, high: int) -> int:
        for _ in range(200):
            p = rng.randint(low, high)
            if p not in used:
                used.add(p)
                return p
        p = max(used) + 1  # the range is exhausted: step past it (still distinct, still above low)
        used.add(p)
        return p

    raw = [{"values": _draw_option(aspect, prefs, rng, set()), "price": best_price, "role": "best"}]
    for _ in range(noise):
        raw.append(
            {
                "values": _draw_option(aspect, prefs, rng, set()),
                "price": fresh_price(best_price + 1, max(hi, best_price + 2 * (noise + 1))),
                "role": "noise",
            }
        )
    names = sorted(prefs)
    for _ in range(wrong):
        k = rng.randint(1, len(names))
        raw.append(
            {
                "values": _draw_option(aspect, prefs, rng, set(rng.sample(names, k))),
                "price": fresh_price(lo, hi + wrong),
                "role": "wrong",
            }
        )
    rng.shuffle(raw)
    options, best_id = [], ""
    for i, opt in enumerate(raw, start=1):
        oid = f"{aspect.prefix}{i}"
        options.append({"id": oid, "price": opt["price"], **opt["values"]})
        if opt["role"] == "best":
            best_id = oid
    return options, best_id


def option_complies(aspect: Aspect, prefs: dict[str, Any], option: dict[str, Any]) -> bool:
    """Whether ``option`` meets every preference of its aspect."""
    attrs = {a.name: a for a in aspect.attributes}
    return all(_pref_value_ok(attrs[n], t, option[n]) for n, t in prefs.items())


def render_options(aspect: Aspect, options: list[dict[str, Any]]) -> str:
    """The search tool's listing of an aspect's options, one per line."""
    lines = [f"{aspect.name.capitalize()} options (price{aspect.price_unit}):"]
    for opt in options:
        attrs = " | ".join(f"{a.label}: {_format_value(a, opt[a.name])}" for a in aspect.attributes)
        lines.append(f"{opt['id']}: ${opt['price']} | {attrs}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------- tasks
def _draw_content(rng: random.Random) -> dict[str, Any]:
    """The knob-independent part of a task: city, aspects and hidden preferences."""
    n_aspects = rng.choice((1, 2, 2, 3, 3))
    aspects = rng.sample(sorted(ASPECTS), n_aspects)
    aspects.sort(key=list(ASPECTS).index)  # canonical order: flight, hotel, restaurant, car, tour
    prefs: dict[str, dict[str, Any]] = {}
    for name in aspects:
        asp = ASPECTS[name]
        chosen = rng.sample(asp.attributes, rng.choice((1, 2)))
        prefs[name] = {a.name: _draw_target(a, rng) for a in sorted(chosen, key=asp.attributes.index)}
    return {"city": rng.choice(CITIES), "days": rng.randint(2, 9), "aspects": aspects, "prefs": prefs}


def make_task(split: str, index: int, noise: int, wrong: int) -> Task:
    """Task ``index`` of ``split`` with ``noise``/``wrong`` options per aspect (deterministic)."""
    attempt = 0
    while True:
        seed = task_seed(GYM, split, index, attempt)
        rng = random.Random(seed)
        content = _draw_content(rng)
        key = json.dumps(content, sort_keys=True)
        if split_of(key) == split:
            break
        attempt += 1
    # Options come from their own stream so that the knobs change the options, never the content.
    opt_rng = random.Random(seed ^ 0x5EED)
    facts, options, best = [], {}, {}
    for name in content["aspects"]:
        asp = ASPECTS[name]
        attrs = {a.name: a for a in asp.attributes}
        for attr_name, target in content["prefs"][name].items():
            attr = attrs[attr_name]
            facts.append(
                Fact(
                    key=f"pref.{name}.{attr_name}",
                    kind="preference",
                    text=_pref_text(asp, attr, target),
                    keywords=(name, *attr.words),
                )
            )
        options[name], best[name] = build_options(asp, content["prefs"][name], noise, wrong, opt_rng)
    names = [f"a {a}" for a in content["aspects"]]
    items = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    ids = ", ".join(f"<{a} id>" for a in content["aspects"])
    prompt = (
        f"I'm planning a {content['days']}-day trip to {content['city']}. Please pick {items} for me. "
        f"Search to see the options, and answer with one option id per item ({ids})."
    )
    task_id = f"{GYM}-{hashlib.sha256(key.encode()).hexdigest()[:10]}"
    secret = ", ".join(best[a] for a in content["aspects"])
    return Task(
        gym=GYM,
        task_id=task_id,
        split=split,
        prompt=prompt,
        facts=facts,
        secret=secret,
        data={"content": content, "options": options, "best": best},
    )


def claims_of(task: Task) -> list[Claim]:
    """The hidden preferences as claims a reply is checked against (``harness.users.fidelity``): a
    sentence about the attribute (one of its words) that names an option value the
    preference rules out (another category; a number below a minimum or above a maximum), or that
    negates a need ("no pool"), contradicts the task. A sentence naming a part of the trip is checked
    against that part's preferences only."""
    out = []
    for aspect, prefs in task.data["content"]["prefs"].items():
        attrs = {a.name: a for a in ASPECTS[aspect].attributes}
        for name, target in prefs.items():
            attr = attrs[name]
            key = f"pref.{aspect}.{name}"
            if attr.kind == "bool":
                need = tuple(w for w in re.findall(r"[a-z]+", attr.need.lower()) if w in attr.words) or attr.words[:1]
                out.append(Claim(key, need, need, need=True, where=(aspect,)))
                continue
            others = [v for v in attr.values if v != target and not _pref_value_ok(attr, target, v)]
            out.append(Claim(key, attr.words, (str(target),), tuple(str(v) for v in others), where=(aspect,)))
    return out


def aspects_in_query(query: str) -> list[str]:
    """Aspect names a search query mentions, in canonical order."""
    words = set(re.findall(r"[a-z]+", query.lower()))
    return [name for name, asp in ASPECTS.items() if words & set(asp.synonyms)]


def score_answer(task: Task, content: str) -> AnswerResult:
    """Score an answer naming option ids (see the module docstring)."""
    data = task.data
    aspects: list[str] = data["content"]["aspects"]
    by_prefix = {ASPECTS[a].prefix: a for a in aspects}
    named: dict[str, set[str]] = {a: set() for a in aspects}
    unknown: list[str] = []
    for letter, num in _ID_RE.findall(content):
        oid = f"{letter.upper()}{int(num)}"
        aspect = by_prefix.get(letter.upper())
        if aspect and any(o["id"] == oid for o in data["options"][aspect]):
            named[aspect].add(oid)
        elif letter.upper() in {a.prefix for a in ASPECTS.values()}:
            unknown.append(oid)
    per_aspect: dict[str, dict[str, Any]] = {}
    for a in aspects:
        ids = sorted(named[a])
        if len(ids) != 1:
            per_aspect[a] = {
                "chosen": ids,
                "score": 0.0,
                "why": "no option named" if not ids else "several options named",
            }
            continue
        opt = next(o for o in data["options"][a] if o["id"] == ids[0])
        if ids[0] == data["best"][a]:
            score, why = SUCCESS_REWARD, "best"
        elif option_complies(ASPECTS[a], data["content"]["prefs"][a], opt):
            score, why = COMPLIANT_REWARD, "meets every preference but is not the cheapest"
        else:
            score, why = 0.0, "violates a preference"
        per_aspect[a] = {"chosen": ids, "score": score, "why": why}
    reward = sum(p["score"] for p in per_aspect.values()) / len(aspects)
    success = all(p["why"] == "best" for p in per_aspect.values())
    parts = "; ".join(f"{a}: {', '.join(p['chosen']) or '-'} ({p['why']})" for a, p in per_aspect.items())
    feedback = f"Booked. {parts}. Score {reward:.2f}."
    return AnswerResult(
        task_reward=reward,
        success=success,
        terminal=True,
        feedback=feedback,
        details={"per_aspect": per_aspect, "unknown_ids": unknown},
    )


# ---------------------------------------------------------------------------- the gym
@register
class TravelEnv(UserCentricEnv):
    """Preference elicitation: ask about hidden preferences, search options, book the best ones."""

    name = GYM
    allowed_choices = ("ask", "search", "answer")
    fact_kinds = ("preference",)
    description = (
        "Travel planning: the user has preferences for each part of the trip that they have "
        "not stated. Ask about them; search by naming a part of the trip (e.g. 'SEARCH: hotels') "
        "to list its options; answer with one option id per part (e.g. 'ANSWER: F<n>, H<n>')."
    )

    def generate_task(self, split: str, index: int) -> Task:
        return make_task(
            split, index, int(self.env_knobs["noise_choice_number"]), int(self.env_knobs["wrong_choice_number"])
        )

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, info = super().reset(seed=seed, options=options)
        self._turns_without_pref = 0
        return obs, info

    def check_reply(self, question: str, reply: UserReply) -> ReplyCheck:
        """A reply that states a preference value the task rules out (:func:`claims_of`)."""
        assert self.task is not None
        return check_claims(reply.text, claims_of(self.task))

    def on_search(self, query: str) -> ToolResult:
        interval = int(self.env_knobs["search_failure_interval"])
        if self.state.searches % interval == 0:
            return ToolResult(
                "Search failed: no results were returned. Try again.",
                ok=False,
                data={"failure": "interval", "search_number": self.state.searches},
            )
        assert self.task is not None
        trip = self.task.data["content"]["aspects"]
        named = aspects_in_query(query)
        found = [a for a in named if a in trip]
        if not found:
            off = f" This trip has no {', '.join(named)}." if named else ""
            return ToolResult(
                f"No options match that query.{off} Name a part of the trip to search: {', '.join(trip)}.",
                ok=True,
                data={"aspects": [], "error": "unknown_aspect"},
            )
        text = "\n\n".join(render_options(ASPECTS[a], self.task.data["options"][a]) for a in found)
        return ToolResult(text, ok=True, data={"aspects": found})

    def on_answer(self, content: str) -> AnswerResult:
        assert self.task is not None
        return score_answer(self.task, content)

    def after_turn(self, record: TurnRecord) -> str | None:
        """Volunteer a preference after ``elicitation_interval`` turns without a new one."""
        if "new_fact" in record.events:
            self._turns_without_pref = 0
            return None
        self._turns_without_pref += 1
        if self._turns_without_pref < int(self.env_knobs["elicitation_interval"]):
            return None
        assert self.task is not None
        if "preference" not in self.user_knobs.get("reveal_kinds", ["preference"]):
            return None
        if self.state.disclosures >= int(self.user_knobs.get("max_reveals", 1 << 30)):
            return None
        pending = [f for f in self.task.facts if f.key not in self.state.revealed]
        if not pending:
            return None
        fact = pending[0]
        self._account_reply(
            UserReply(text=fact.text, revealed=[fact], flags={"elicitation": True}), record, volunteered=True
        )
        record.events.append("elicitation")
        self._turns_without_pref = 0
        return fact.text
