"""What is true of a τ² customer, and the verifier of its replies (``Tau2Env.check_reply``).

A τ² customer states identifying values: its name, email, zip code, street address, user id,
order and reservation ids, phone numbers, payment methods (ids, a card's last four digits, the
kind: "my PayPal"), date of birth. The truth about each kind is the union of

* the **domain database's record** of the task's customer (τ²'s structured data: the user of
  airline and retail, the customer of telecom with its lines; retail adds its orders' shipping
  addresses), as the episode began and as it is now (a reservation booked during the episode is
  the customer's too); and
* everything the task's **scenario** mentions (reason for the call, known and unknown info, task
  instructions), read loosely: a value the customer was told, even one the scenario says is
  wrong ("say there are 3 passengers"), is never held against it.

A reply is wrong when it states a value of a kind whose truth is known and that value is none of
the true ones (``harness.users.fidelity.check_values``). A kind the task knows nothing of (a
retail customer's date of birth) is not checked; a reply that names no value ("I don't remember
my email") is not checked either. The customer is found from the task: tau's ``user_id``; else
the ``user_id``/``customer_id`` of its gold actions, the ids, emails and phone numbers its
scenario gives, or its name with its zip code; a task whose customer cannot be told apart is
checked against its scenario alone.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Iterable, Mapping

from harness.envs.tau2.scenario import first_person
from harness.types import ReplyCheck
from harness.users.fidelity import ValueKind, check_values, stated_values

Truth = dict[str, frozenset[str]]

_MONTHS = "jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec"
_MONTH_NAMES = "january|february|march|april|may|june|july|august|september|october|november|december|" + _MONTHS
_DATE = (
    r"\d{4}-\d{1,2}-\d{1,2}|\d{1,2}/\d{1,2}/\d{4}"
    rf"|(?:{_MONTH_NAMES})\.?\s+\d{{1,2}}(?:st|nd|rd|th)?,?\s+\d{{4}}"
    rf"|\d{{1,2}}(?:st|nd|rd|th)?\s+(?:of\s+)?(?:{_MONTH_NAMES})\.?,?\s+\d{{4}}"
)
_DATE_FORMATS = ("%Y-%m-%d", "%m/%d/%Y", "%B %d %Y", "%b %d %Y", "%d %B %Y", "%d %b %Y")
_STREET_SUFFIX = {
    "street": "st",
    "avenue": "ave",
    "road": "rd",
    "drive": "dr",
    "lane": "ln",
    "boulevard": "blvd",
    "court": "ct",
    "place": "pl",
    "parkway": "pkwy",
    "circle": "cir",
    "terrace": "ter",
    "trail": "trl",
}
_SUFFIXES = "|".join(sorted({*_STREET_SUFFIX, *_STREET_SUFFIX.values(), "way"}, key=len, reverse=True))
_PAY_SOURCES = {
    "paypal": "paypal",
    "gift card": "gift_card",
    "giftcard": "gift_card",
    "credit card": "credit_card",
    "creditcard": "credit_card",
    "debit card": "debit_card",
    "certificate": "certificate",
    "travel certificate": "certificate",
    "visa": "visa",
    "mastercard": "mastercard",
    "master card": "mastercard",
    "amex": "amex",
    "american express": "amex",
    "discover": "discover",
}
_PAY_WORDS = "|".join(sorted((re.escape(k).replace(r"\ ", r"\s?") for k in _PAY_SOURCES), key=len, reverse=True))
_NAME = r"[A-Z][a-z]+(?:-[A-Z][a-z]+)?"


def _names(least: int) -> str:
    """A name of ``least``+1 to 3 capitalized words, not a possessive ("Amelia Ahmed's mother")."""
    return rf"{_NAME}(?:\s+{_NAME}){{{least},2}}(?!\w|['’]s\b)"


# Capitalized words that are not a name ("I am Gold Member", "Thank You."): levels, plans, courtesies, months
_NOT_NAMES = re.compile(
    r"(?:.*\s)?(?:gold|silver|regular|basic|premium|unlimited|member|plan|customer|sorry|not|very|happy|glad|"
    rf"calling|thank|thanks|you|yes|no|sure|okay|ok|hello|hi|hey|great|please|of|course|{_MONTH_NAMES}|"
    r"monday|tuesday|wednesday|thursday|friday|saturday|sunday)(?:\s.*)?"
)


def iso_date(text: str) -> str | None:
    """A written date in ISO form (``June 15, 1985`` -> ``1985-06-15``); None when it is no date."""
    t = re.sub(r"(\d)(st|nd|rd|th)\b", r"\1", text.strip().lower().replace(",", " ").replace(".", " "))
    t = " ".join(w for w in t.split() if w != "of")
    t = re.sub(r"\bsept\b", "sep", t)
    for fmt in _DATE_FORMATS:
        try:
            return datetime.strptime(t, fmt).date().isoformat()  # month names match in any case
        except ValueError:
            continue
    return None


def street(text: str) -> str:
    """A street address in one spelling (``975 Sunset Drive`` -> ``975 sunset dr``)."""
    words = text.lower().replace(".", "").split()
    return " ".join(_STREET_SUFFIX.get(w, w) for w in words)


def phone_digits(text: str) -> str | None:
    digits = re.sub(r"\D", "", text)
    return digits[-10:] if len(digits) >= 10 else None


def order_id(text: str) -> str:
    return "#W" + re.sub(r"\D", "", text)


def pay_source(text: str) -> str | None:
    return _PAY_SOURCES.get(" ".join(text.lower().split())) or _PAY_SOURCES.get(text.lower().replace(" ", ""))


def _rx(pattern: str, flags: int = 0) -> re.Pattern[str]:
    return re.compile(pattern, flags)


# How a reply states each kind of value. Names and dates of birth need a cue next to the value
# ("my name is", "born"): a capitalized pair of words or a date alone says nothing of whose it is.
KINDS: tuple[ValueKind, ...] = (
    ValueKind("email", (_rx(r"(?<![\w.+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+"),)),
    ValueKind("user_id", (_rx(r"\b[a-z]+_[a-z]+_\d{4}\b", re.I),)),
    ValueKind("customer_id", (_rx(r"(?<![\w-])C\d{4}\b"),), normalize=str.upper),
    ValueKind("line_id", (_rx(r"(?<![\w-])L\d{4}\b"),), single=False, normalize=str.upper),
    ValueKind("order_id", (_rx(r"(?<![\w])#?W\d{7}\b"),), single=False, normalize=order_id),
    # τ² airline reservation codes: six capitals and digits; the ones with a digit say what they are,
    # six capitals alone only next to a word for a booking. Flight numbers (HAT001) have the shape too.
    ValueKind(
        "reservation_id",
        (_rx(r"(?<![\w#])(?=[A-Z]{0,5}\d)[A-Z0-9]{6}(?!\w)"),),
        single=False,
        exclude=_rx(r"HAT\d{3}|\d{6}"),
        normalize=str.upper,
    ),
    ValueKind(
        "reservation_id",
        (_rx(r"(?<![\w#])[A-Z]{6}(?!\w)"),),
        about=("reservation", "reservations", "confirmation", "booking"),
        single=False,
        normalize=str.upper,
    ),
    ValueKind(
        "phone",
        (_rx(r"(?<![\w-])(?:\+?1[-. ]?)?\(?\d{3}\)?[-. ]?\d{3}[-. ]\d{4}(?![\w-])"),),
        single=False,
        normalize=phone_digits,
    ),
    ValueKind(
        "zip",
        (_rx(r"(?<![\w#$.,-])(?P<v>\d{5})(?!\w|[.,-]\d)"),),
        about=("zip", "zipcode", "zip code", "postal", "postcode"),
    ),
    ValueKind(
        "street",
        (
            _rx(rf"(?P<v>\b\d{{1,5}}\s+(?:(?:[A-Z][a-z]+|\d+(?:st|nd|rd|th))\s+){{1,3}}(?:{_SUFFIXES})\b)", re.I),
            _rx(r"(?P<v>\b\d{1,5}\s+Broadway\b)", re.I),
        ),
        single=False,
        normalize=street,
    ),
    ValueKind(
        "payment_id", (_rx(r"\b(?:credit_card|gift_card|paypal|certificate|debit_card)_\d+\b", re.I),), single=False
    ),
    ValueKind(
        "card_last_four",
        (_rx(r"(?i:\bending|\bends|\blast (?:four|4))[^\d.!?]{0,25}?(?<![\d/-])(?P<v>\d{4})(?![\d/-])"),),
        single=False,
    ),
    # a bare "1907." answering "the last four digits of your card?"
    ValueKind(
        "card_last_four",
        (_rx(r"^\W*(?P<v>\d{4})\W*$"),),
        about=("last four", "last 4", "ending", "ends"),
        single=False,
    ),
    ValueKind(
        "payment_kind",
        (_rx(rf"(?i:\bmy\s+(?P<v>{_PAY_WORDS}))\b"),),
        single=False,
        normalize=pay_source,
        loose=(_rx(rf"(?i:\b(?P<v>{_PAY_WORDS}))\b"),),
    ),
    # a date of birth is the customer's own only with "my"/"I was born" ("my son was born on ..." is not)
    ValueKind(
        "dob",
        (
            _rx(
                rf"(?i:(?:\bmy (?:date of birth|birth ?date|dob|birthday)(?:\s+is|:)?|\bi was born(?:\s+on)?)\s+(?P<v>{_DATE}))"
            ),
        ),
        normalize=iso_date,
        loose=(_rx(rf"(?i:\b(?P<v>{_DATE}))"),),
    ),
    # a bare "June 15, 1985." answering "what is your date of birth?"
    ValueKind(
        "dob",
        (_rx(rf"(?i:^\W*(?:it's\s+|it is\s+)?(?P<v>{_DATE})\W*$)"),),
        about=("your date of birth", "your birthday", "your dob", "your birth date", "were you born"),
        normalize=iso_date,
    ),
    ValueKind(
        "name",
        (
            _rx(rf"(?i:\bmy (?:full )?name is|\bmy name's|\bname:)\s+(?P<v>{_names(0)})"),
            _rx(rf"(?i:\bi am|\bi'm|\bthis is)\s+(?P<v>{_names(1)})"),
        ),
        words=True,
        exclude=_NOT_NAMES,
    ),
    # a bare "Emma Kim." or "Sure, it's Emma Kim." answering "may I have your name?"
    ValueKind(
        "name",
        (_rx(rf"^\W*(?P<v>{_names(1)})\W*$"), _rx(rf"(?i:\bit's|\bit is)\s+(?P<v>{_names(1)})\W*$")),
        about=("your name", "your full name", "your first and last name"),
        words=True,
        exclude=_NOT_NAMES,
    ),
)


# ------------------------------------------------------------------------------ the customer's record
def _records(domain: str, db: Any) -> Mapping[str, Any]:
    """The domain database's customers by id (telecom's ``customers`` list, the others' ``users``)."""
    if domain == "telecom":
        return {c.customer_id: c for c in db.customers}
    return db.users


def _name(domain: str, rec: Any) -> str:
    return rec.full_name if domain == "telecom" else f"{rec.name.first_name} {rec.name.last_name}"


def _zip(domain: str, rec: Any) -> str:
    return rec.address.zip_code if domain == "telecom" else rec.address.zip


def _phones(domain: str, db: Any, rec: Any) -> set[str]:
    if domain != "telecom":
        return set()
    lines = {ln.line_id: ln for ln in db.lines}
    return {rec.phone_number} | {lines[i].phone_number for i in rec.line_ids if i in lines}


def find_customer(domain: str, data: Mapping[str, Any], db: Any) -> str | None:
    """The id of the task's customer in ``db`` (see the module docstring), or None."""
    records = _records(domain, db)
    if data.get("user_id") in records:  # tau's tasks name it
        return str(data["user_id"])
    gold = {
        str(v) for g in data.get("gold") or [] for k, v in g["arguments"].items() if k in ("user_id", "customer_id")
    } & set(records)
    if len(gold) == 1:
        return gold.pop()
    said = stated_values(scenario_text(data), KINDS, loose=True)
    named = [
        {k for k in records if k.lower() in said.get("user_id", set()) | said.get("customer_id", set())},
        {k for k, r in records.items() if r.email.lower() in said.get("email", set())},
        {k for k, r in records.items() if {phone_digits(p) for p in _phones(domain, db, r)} & said.get("phone", set())},
    ]
    text = scenario_text(data).lower()
    by_name = {k for k, r in records.items() if _name(domain, r).lower() in text}
    named.append({k for k in by_name if _zip(domain, records[k]) in said.get("zip", set())})
    named.append(by_name)
    for ids in named:
        if len(ids) == 1:
            return ids.pop()
    return None


def _card(pm: Any) -> tuple[str, str | None, str | None]:
    """(kind, brand, last four) of a payment method of any domain."""
    if hasattr(pm, "method_type"):  # telecom: an enum whose value is "Credit Card", "PayPal", ...
        return pay_source(_text(pm.method_type)) or "", None, getattr(pm, "account_number_last_4", None)
    return (
        pay_source(_text(pm.source).replace("_", " ")) or "",
        getattr(pm, "brand", None),
        getattr(pm, "last_four", None),
    )


def _text(value: Any) -> str:
    """An enum's value or a plain value, as text."""
    return str(getattr(value, "value", value))


def record_values(domain: str, db: Any, key: str | None) -> dict[str, set[str]]:
    """The true values of each kind in ``db``'s record of customer ``key`` (empty for None or an
    id ``db`` does not hold)."""
    rec = _records(domain, db).get(key) if key is not None else None
    if rec is None:
        return {}
    out: dict[str, set[str]] = {
        "email": {rec.email.lower()},
        "name": {_name(domain, rec).lower()},
        "zip": {_zip(domain, rec)},
    }
    if domain == "telecom":
        out["customer_id"] = {rec.customer_id}
        out["line_id"] = set(rec.line_ids)
        out["phone"] = {d for d in map(phone_digits, _phones(domain, db, rec)) if d}
        out["street"] = {street(rec.address.street)}
        out["dob"] = {str(rec.date_of_birth)}
        methods = list(rec.payment_methods)
    else:
        out["user_id"] = {rec.user_id}
        out["street"] = {street(rec.address.address1)}
        out["payment_id"] = {str(p).lower() for p in rec.payment_methods}
        methods = list(rec.payment_methods.values())
        if domain == "airline":
            out["dob"] = {str(rec.dob)}
            out["reservation_id"] = {str(r).upper() for r in rec.reservations}
        else:
            out["order_id"] = {str(o) for o in rec.orders}
            for o in rec.orders:  # the addresses the customer's orders ship to are its addresses too
                order = db.orders.get(o)
                if order is not None:
                    out["street"].add(street(order.address.address1))
                    out["zip"].add(order.address.zip)
    for pm in methods:
        kind, brand, last4 = _card(pm)
        out.setdefault("payment_kind", set()).update(x for x in (kind, brand and str(brand).lower()) if x)
        if last4:
            out.setdefault("card_last_four", set()).add(str(last4))
    return out


# ------------------------------------------------------------------------------ the scenario
def scenario_text(data: Mapping[str, Any]) -> str:
    """Everything the task's scenario says (the unknown info too: it is the task's truth)."""
    parts = [data.get(k) for k in ("reason_for_call", "known_info", "unknown_info", "task_instructions")]
    return "\n".join(str(p) for p in parts if p)


def scenario_values(data: Mapping[str, Any]) -> dict[str, set[str]]:
    """Every value of each kind the scenario mentions, as told and in the customer's own voice
    ("You are Emma Kim" -> "I am Emma Kim"), denied or not."""
    text = scenario_text(data)
    out = stated_values(text, KINDS, loose=True)
    for k, v in stated_values(first_person(text), KINDS, loose=True).items():
        out.setdefault(k, set()).update(v)
    return out


def merge(*parts: Mapping[str, Iterable[str]]) -> Truth:
    """The union of true values per kind."""
    out: dict[str, set[str]] = {}
    for part in parts:
        for k, v in part.items():
            out.setdefault(k, set()).update(v)
    return {k: frozenset(v) for k, v in out.items() if v}


def check_customer_reply(text: str, truth: Mapping[str, frozenset[str]], question: str = "") -> ReplyCheck:
    """The verdict on a customer's reply ``text`` to the agent's ``question`` (see the module docstring)."""
    return check_values(text, KINDS, truth, question)
