"""Procedural colbench tasks: parameterised function families.

A family draws its variant (constants, thresholds, labels, output format) from a seeded
``random.Random`` and returns a :class:`FamilyTask`: a description that states the goal but leaves
out what the collaborator knows (the constants, edge-case behaviour, output format), the reference
implementation, and test calls. Expected values are not stored here: they are what the reference
returns in the sandbox (the gym computes and caches them).

``make_procedural(split, index)`` is task ``index`` of a split; content (reference and calls)
decides the split (``harness.envs.base.split_of``), as for every gym.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass, field
from string import Template
from typing import Any, Callable

from harness.envs.base import split_of, task_seed

GYM = "colbench"


@dataclass(frozen=True)
class FamilyTask:
    """One procedural task.

    family: the family's name. function: the function to write. description: what the agent sees
    (ends with the signature). reference: hidden reference source. calls: test call expressions.
    variant: the drawn constants and choices (for records and tests).
    """

    family: str
    function: str
    description: str
    reference: str
    calls: tuple[str, ...]
    variant: dict[str, Any] = field(default_factory=dict)

    @property
    def content_key(self) -> str:
        return hashlib.sha256(json.dumps([self.reference, list(self.calls)]).encode()).hexdigest()


FAMILIES: dict[str, Callable[[random.Random], FamilyTask]] = {}


def family(fn: Callable[[random.Random], FamilyTask]) -> Callable[[random.Random], FamilyTask]:
    """Register a family under its function name without the ``fam_`` prefix."""
    FAMILIES[fn.__name__.removeprefix("fam_")] = fn
    return fn


def _src(template: str, **values: Any) -> str:
    """The reference: ``$name`` placeholders replaced by ``repr`` of the values (``$$`` is a dollar)."""
    return Template(template.strip("\n")).substitute({k: repr(v) for k, v in values.items()}) + "\n"


def _call(name: str, args: Any) -> str:
    if isinstance(args, dict):
        return f"{name}({', '.join(f'{k}={v!r}' for k, v in args.items())})"
    if not isinstance(args, tuple):
        args = (args,)
    return f"{name}({', '.join(repr(a) for a in args)})"


def _task(
    fam: str, name: str, signature: str, description: str, reference: str, cases: list[Any], **variant: Any
) -> FamilyTask:
    calls = tuple(dict.fromkeys(_call(name, c) for c in cases))
    desc = f"{description.strip()} The signature of the function is: def {name}({signature})"
    return FamilyTask(fam, name, desc, reference, calls, variant)


def _pick(rng: random.Random, options: list[Any]) -> Any:
    return options[rng.randrange(len(options))]


_WORDS = (
    "apple banana cherry delta echo fig grape hotel india juliet kilo lima mango nectar olive "
    "pear quince river stone tiger umbra violet willow xenon yak zebra"
).split()


def _sentence(rng: random.Random, n: int) -> str:
    words = [_pick(rng, _WORDS[: 8 + rng.randrange(10)]) for _ in range(n)]
    return " ".join(w.capitalize() if rng.random() < 0.2 else w for w in words)


# =========================================================================== money and pricing
@family
def fam_bulk_discount(rng: random.Random) -> FamilyTask:
    q, d = _pick(rng, [5, 10, 12, 20]), _pick(rng, [0.05, 0.1, 0.15, 0.2])
    ref = _src(
        """
def bulk_discount(price, quantity):
    if quantity <= 0:
        return 0.0
    total = price * quantity
    if quantity >= $q:
        total = total * (1 - $d)
    return round(total, 2)
""",
        q=q,
        d=d,
    )
    cases = [(9.99, 1), (9.99, q - 1), (9.99, q), (20, q + 5), (3.5, 0), (12.25, 2 * q), (1.1, 3), (100, q)]
    return _task(
        "bulk_discount",
        "bulk_discount",
        "price, quantity",
        "Write a function that computes what a customer pays for some quantity of an item at a unit price. "
        "Large orders get a discount.",
        ref,
        cases,
        threshold=q,
        discount=d,
    )


@family
def fam_shipping_cost(rng: random.Random) -> FamilyTask:
    base, rate, mult = _pick(rng, [3.0, 4.5, 5.0]), _pick(rng, [1.2, 1.5, 2.0, 2.25]), _pick(rng, [1.5, 1.75, 2.0])
    ref = _src(
        """
def shipping_cost(weight_kg, express=False):
    if weight_kg <= 0:
        return 0.0
    cost = $base + $rate * weight_kg
    if express:
        cost = cost * $mult
    return round(cost, 2)
""",
        base=base,
        rate=rate,
        mult=mult,
    )
    cases = [(1,), (2.5,), (0,), (-3,), (10, True), (4.2, True), (0.5, False), (7,)]
    return _task(
        "shipping_cost",
        "shipping_cost",
        "weight_kg, express=False",
        "Write a function that returns the shipping cost of a parcel from its weight; express delivery costs more.",
        ref,
        cases,
        base=base,
        rate=rate,
        express=mult,
    )


@family
def fam_income_tax(rng: random.Random) -> FamilyTask:
    l1 = _pick(rng, [10000, 12000, 15000])
    l2 = l1 + _pick(rng, [20000, 30000, 40000])
    r1, r2, r3 = _pick(rng, [0.0, 0.05, 0.1]), _pick(rng, [0.15, 0.2, 0.25]), _pick(rng, [0.3, 0.35, 0.4])
    ref = _src(
        """
def income_tax(income):
    if income <= 0:
        return 0.0
    tax = 0.0
    if income > $l2:
        tax += (income - $l2) * $r3
        income = $l2
    if income > $l1:
        tax += (income - $l1) * $r2
        income = $l1
    tax += income * $r1
    return round(tax, 2)
""",
        l1=l1,
        l2=l2,
        r1=r1,
        r2=r2,
        r3=r3,
    )
    cases = [0, l1 - 1, l1, l1 + 500, l2, l2 + 12345, 3 * l2, 7777, -50]
    return _task(
        "income_tax",
        "income_tax",
        "income",
        "Write a function that computes the income tax owed for a yearly income using progressive brackets.",
        ref,
        cases,
        limits=[l1, l2],
        rates=[r1, r2, r3],
    )


@family
def fam_electricity_bill(rng: random.Random) -> FamilyTask:
    t1, t2 = _pick(rng, [100, 150, 200]), _pick(rng, [400, 500, 600])
    p1, p2, p3, fee = (
        _pick(rng, [0.1, 0.12]),
        _pick(rng, [0.15, 0.18]),
        _pick(rng, [0.22, 0.25, 0.3]),
        _pick(rng, [5, 8, 10]),
    )
    ref = _src(
        """
def electricity_bill(kwh):
    if kwh < 0:
        return None
    cost = $fee
    if kwh <= $t1:
        cost += kwh * $p1
    elif kwh <= $t2:
        cost += $t1 * $p1 + (kwh - $t1) * $p2
    else:
        cost += $t1 * $p1 + ($t2 - $t1) * $p2 + (kwh - $t2) * $p3
    return round(cost, 2)
""",
        t1=t1,
        t2=t2,
        p1=p1,
        p2=p2,
        p3=p3,
        fee=fee,
    )
    cases = [0, t1 // 2, t1, t1 + 1, (t1 + t2) // 2, t2, t2 + 250, -5, 1000]
    return _task(
        "electricity_bill",
        "electricity_bill",
        "kwh",
        "Write a function that computes a monthly electricity bill from the energy used in kWh. Prices are tiered.",
        ref,
        cases,
        tiers=[t1, t2],
        prices=[p1, p2, p3],
        fee=fee,
    )


@family
def fam_parking_fee(rng: random.Random) -> FamilyTask:
    free, rate, cap = _pick(rng, [0, 1, 2]), _pick(rng, [2.5, 3.0, 4.0]), _pick(rng, [20.0, 25.0, 30.0])
    ref = _src(
        """
import math

def parking_fee(hours):
    if hours <= $free:
        return 0.0
    fee = math.ceil(hours - $free) * $rate
    return min(fee, $cap)
""",
        free=free,
        rate=rate,
        cap=cap,
    )
    cases = [0, 0.5, free, free + 0.25, free + 1, 3.7, 8, 24, 100]
    return _task(
        "parking_fee",
        "parking_fee",
        "hours",
        "Write a function that returns the parking fee for a stay of some hours.",
        ref,
        cases,
        free=free,
        rate=rate,
        cap=cap,
    )


@family
def fam_tip_amount(rng: random.Random) -> FamilyTask:
    levels = {
        "poor": _pick(rng, [0.05, 0.08, 0.1]),
        "good": _pick(rng, [0.15, 0.18]),
        "excellent": _pick(rng, [0.2, 0.25]),
    }
    default = _pick(rng, [0.1, 0.12, 0.15])
    ref = _src(
        """
def tip_amount(bill, service):
    rates = $levels
    rate = rates.get(service.lower(), $default)
    return round(bill * rate, 2)
""",
        levels=levels,
        default=default,
    )
    cases = [(50, "good"), (80.5, "Excellent"), (23.4, "poor"), (100, "okay"), (0, "good"), (64.99, "GOOD"), (12, "")]
    return _task(
        "tip_amount",
        "tip_amount",
        "bill, service",
        "Write a function that computes the tip for a restaurant bill given how the service was.",
        ref,
        cases,
        levels=levels,
        default=default,
    )


@family
def fam_split_bill(rng: random.Random) -> FamilyTask:
    tip, mode = _pick(rng, [10, 15, 18, 20]), _pick(rng, ["ceil", "round"])
    body = "    return math.ceil(share * 100) / 100" if mode == "ceil" else "    return round(share, 2)"
    ref = (
        _src(
            """
import math

def split_bill(total, people, tip_percent=$tip):
    if people <= 0:
        return 0.0
    share = total * (1 + tip_percent / 100) / people
""",
            tip=tip,
        )
        + body
        + "\n"
    )
    cases = [(100, 3), (59.99, 2), (10, 0), (250, 7, 0), (33.33, 4, 25), (12, 1), (87.5, 6)]
    return _task(
        "split_bill",
        "split_bill",
        f"total, people, tip_percent={tip}",
        "Write a function that splits a restaurant bill, tip included, between some people and returns "
        "each person's share.",
        ref,
        cases,
        tip=tip,
        mode=mode,
    )


@family
def fam_compound_interest(rng: random.Random) -> FamilyTask:
    n = _pick(rng, [1, 4, 12])
    ref = _src(
        """
def compound_interest(principal, rate_percent, years):
    if years <= 0:
        return round(principal, 2)
    amount = principal * (1 + rate_percent / 100 / $n) ** ($n * years)
    return round(amount, 2)
""",
        n=n,
    )
    cases = [(1000, 5, 1), (1000, 5, 10), (2500, 3.5, 4), (100, 0, 5), (500, 7, 0), (1200, 12, 2.5), (1, 100, 1)]
    return _task(
        "compound_interest",
        "compound_interest",
        "principal, rate_percent, years",
        "Write a function that computes the value of an investment after some years of compound interest.",
        ref,
        cases,
        periods=n,
    )


@family
def fam_monthly_payment(rng: random.Random) -> FamilyTask:
    digits = _pick(rng, [2, 0])
    ref = _src(
        """
def monthly_payment(principal, annual_rate, months):
    if months <= 0:
        return None
    r = annual_rate / 12 / 100
    if r == 0:
        return round(principal / months, $digits)
    payment = principal * r / (1 - (1 + r) ** -months)
    return round(payment, $digits)
""",
        digits=digits,
    )
    cases = [(10000, 5, 36), (250000, 3.5, 360), (1200, 0, 12), (5000, 7.9, 0), (800, 12, 6), (15000, 4.25, 60)]
    return _task(
        "monthly_payment",
        "monthly_payment",
        "principal, annual_rate, months",
        "Write a function that computes the monthly payment of a loan.",
        ref,
        cases,
        digits=digits,
    )


@family
def fam_format_currency(rng: random.Random) -> FamilyTask:
    neg = _pick(rng, ["minus", "parens"])
    tail = (
        '    return "-" + text if amount < 0 else text'
        if neg == "minus"
        else '    return "(" + text + ")" if amount < 0 else text'
    )
    ref = (
        _src("""
def format_currency(amount, symbol="$$"):
    text = symbol + "{:,.2f}".format(abs(amount))
""")
        + tail
        + "\n"
    )
    cases = [1234.5, 0, -987654.321, 12, (1e6, "€"), (-0.5, "£"), 999.999, 1000]
    return _task(
        "format_currency",
        "format_currency",
        'amount, symbol="$"',
        "Write a function that formats an amount of money for display.",
        ref,
        cases,
        negative=neg,
    )


@family
def fam_account_balance(rng: random.Random) -> FamilyTask:
    fee, reject = _pick(rng, [15, 25, 35]), rng.random() < 0.5
    rule = "            if amount > balance:\n                continue\n" if reject else ""
    ref = (
        _src(
            """
def account_balance(transactions, overdraft_fee=$fee):
    balance = 0
    for kind, amount in transactions:
        if kind == "deposit":
            balance += amount
        elif kind == "withdraw":
""",
            fee=fee,
        )
        + rule
        + """            balance -= amount
            if balance < 0:
                balance -= overdraft_fee
    return balance
"""
    )
    cases = [
        [("deposit", 100), ("withdraw", 30)],
        [("withdraw", 50)],
        [],
        [("deposit", 20), ("withdraw", 25), ("deposit", 5)],
        ([("deposit", 10), ("fee", 3), ("withdraw", 10)], 5),
        [("deposit", 500), ("withdraw", 200), ("withdraw", 400)],
    ]
    return _task(
        "account_balance",
        "account_balance",
        f"transactions, overdraft_fee={fee}",
        "Write a function that computes a bank account's final balance from a list of transactions.",
        ref,
        [(c,) if isinstance(c, list) else c for c in cases],
        fee=fee,
        reject=reject,
    )


# =========================================================================== health, grades, units
@family
def fam_bmi_category(rng: random.Random) -> FamilyTask:
    cuts = _pick(rng, [(18.5, 25, 30), (18.5, 24, 28), (18.5, 23, 27.5)])
    labels = _pick(rng, [("Underweight", "Normal", "Overweight", "Obese"), ("under", "normal", "over", "obese")])
    ref = _src(
        """
def bmi_category(weight_kg, height_m):
    if height_m <= 0:
        return "invalid"
    bmi = weight_kg / height_m ** 2
    if bmi < $a:
        return $l0
    if bmi < $b:
        return $l1
    if bmi < $c:
        return $l2
    return $l3
""",
        a=cuts[0],
        b=cuts[1],
        c=cuts[2],
        l0=labels[0],
        l1=labels[1],
        l2=labels[2],
        l3=labels[3],
    )
    cases = [(50, 1.8), (70, 1.75), (85, 1.75), (110, 1.7), (60, 0), (72, 1.72), (95, 1.8)]
    return _task(
        "bmi_category",
        "bmi_category",
        "weight_kg, height_m",
        "Write a function that classifies a person's body-mass index from weight and height.",
        ref,
        cases,
        cuts=list(cuts),
        labels=list(labels),
    )


@family
def fam_letter_grade(rng: random.Random) -> FamilyTask:
    cuts = _pick(rng, [(90, 80, 70, 60), (93, 85, 75, 65), (85, 70, 55, 40)])
    ref = _src(
        """
def letter_grade(score):
    if score < 0 or score > 100:
        return "Invalid"
    if score >= $a:
        return "A"
    if score >= $b:
        return "B"
    if score >= $c:
        return "C"
    if score >= $d:
        return "D"
    return "F"
""",
        a=cuts[0],
        b=cuts[1],
        c=cuts[2],
        d=cuts[3],
    )
    cases = [100, cuts[0], cuts[0] - 1, cuts[1], cuts[2] + 2, cuts[3], cuts[3] - 0.5, 0, 101, -3]
    return _task(
        "letter_grade",
        "letter_grade",
        "score",
        "Write a function that turns an exam score into a letter grade.",
        ref,
        cases,
        cuts=list(cuts),
    )


@family
def fam_convert_temperature(rng: random.Random) -> FamilyTask:
    digits = _pick(rng, [1, 2])
    ref = _src(
        """
def convert_temperature(celsius, unit):
    unit = unit.upper()
    if unit == "F":
        return round(celsius * 9 / 5 + 32, $digits)
    if unit == "K":
        return round(celsius + 273.15, $digits)
    return None
""",
        digits=digits,
    )
    cases = [(0, "F"), (100, "f"), (-40, "F"), (36.6, "K"), (-273.15, "k"), (25, "X"), (21.3, "F")]
    return _task(
        "convert_temperature",
        "convert_temperature",
        "celsius, unit",
        "Write a function that converts a temperature given in Celsius to another unit.",
        ref,
        cases,
        digits=digits,
    )


@family
def fam_average_rating(rng: random.Random) -> FamilyTask:
    lo, hi, empty = 1, _pick(rng, [5, 10]), _pick(rng, [0.0, None])
    ref = _src(
        """
def average_rating(ratings):
    valid = [r for r in ratings if $lo <= r <= $hi]
    if not valid:
        return $empty
    return round(sum(valid) / len(valid), 1)
""",
        lo=lo,
        hi=hi,
        empty=empty,
    )
    cases = [[4, 5, 3], [], [0, 11, -2], [1, hi, hi + 1, 2], [3.5, 4.25], [hi] * 4, [2, 2, 3, 0]]
    return _task(
        "average_rating",
        "average_rating",
        "ratings",
        "Write a function that computes the average of product ratings.",
        ref,
        [(c,) for c in cases],
        high=hi,
        empty=empty,
    )


@family
def fam_weighted_average(rng: random.Random) -> FamilyTask:
    default = _pick(rng, [0, 1])
    ref = _src(
        """
def weighted_average(scores, weights):
    total = 0
    weight_sum = 0
    for name, score in scores.items():
        w = weights.get(name, $default)
        total += score * w
        weight_sum += w
    if weight_sum == 0:
        return 0.0
    return round(total / weight_sum, 2)
""",
        default=default,
    )
    cases = [
        ({"math": 90, "art": 70}, {"math": 2, "art": 1}),
        ({"a": 50}, {}),
        ({}, {"x": 3}),
        ({"a": 80, "b": 60, "c": 100}, {"a": 0.5, "c": 0.25}),
        ({"q": 10, "r": 20}, {"q": 0, "r": 0}),
    ]
    return _task(
        "weighted_average",
        "weighted_average",
        "scores, weights",
        "Write a function that computes a weighted average of named scores.",
        ref,
        cases,
        default=default,
    )


@family
def fam_temperature_alerts(rng: random.Random) -> FamilyTask:
    inclusive = rng.random() < 0.5
    lo_op, hi_op = ("<=", ">=") if inclusive else ("<", ">")
    ref = f"""def temperature_alerts(readings, low, high):
    alerts = []
    for i, value in enumerate(readings):
        if value {lo_op} low:
            alerts.append((i, "low"))
        elif value {hi_op} high:
            alerts.append((i, "high"))
    return alerts
"""
    cases = [([20, 35, -5, 18], 0, 30), ([], 0, 10), ([0, 10, 5], 0, 10), ([12.5, 99.9, 40], 15, 40), ([7] * 3, 7, 8)]
    return _task(
        "temperature_alerts",
        "temperature_alerts",
        "readings, low, high",
        "Write a function that flags sensor readings that are too low or too high.",
        ref,
        cases,
        inclusive=inclusive,
    )


@family
def fam_scale_recipe(rng: random.Random) -> FamilyTask:
    digits = _pick(rng, [1, 2])
    ref = _src(
        """
def scale_recipe(ingredients, servings, new_servings):
    if servings <= 0:
        return {}
    factor = new_servings / servings
    scaled = {}
    for name, qty in ingredients.items():
        amount = round(qty * factor, $digits)
        if amount > 0:
            scaled[name] = amount
    return scaled
""",
        digits=digits,
    )
    cases = [
        ({"flour": 200, "egg": 2}, 4, 6),
        ({"salt": 0.01, "water": 500}, 10, 1),
        ({"x": 1}, 0, 3),
        ({}, 2, 4),
        ({"sugar": 75, "milk": 250.5}, 3, 3),
    ]
    return _task(
        "scale_recipe",
        "scale_recipe",
        "ingredients, servings, new_servings",
        "Write a function that scales a recipe's ingredient quantities to a different number of servings.",
        ref,
        cases,
        digits=digits,
    )


# =========================================================================== text
@family
def fam_word_frequencies(rng: random.Random) -> FamilyTask:
    min_len = _pick(rng, [1, 3, 4])
    ref = _src(
        """
def word_frequencies(text):
    counts = {}
    for raw in text.lower().split():
        word = raw.strip(".,!?;:\\"'()")
        if len(word) < $min_len:
            continue
        counts[word] = counts.get(word, 0) + 1
    return counts
""",
        min_len=min_len,
    )
    cases = ["The cat and the hat.", "", "a an A the, THE! the?", _sentence(rng, 12), "Hi hi hi; oh (oh) yes"]
    return _task(
        "word_frequencies",
        "word_frequencies",
        "text",
        "Write a function that counts how often each word occurs in a text.",
        ref,
        cases,
        min_len=min_len,
    )


@family
def fam_top_words(rng: random.Random) -> FamilyTask:
    ref = """def top_words(text, k):
    counts = {}
    for word in text.lower().split():
        counts[word] = counts.get(word, 0) + 1
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return [word for word, _ in ranked[:k]]
"""
    s = _sentence(rng, 20)
    cases = [(s, 3), ("b a c a b a", 2), ("", 5), ("x y z", 0), (s, 10), ("Tie tie TIE b B", 1)]
    return _task(
        "top_words",
        "top_words",
        "text, k",
        "Write a function that returns the most frequent words of a text.",
        ref,
        cases,
    )


@family
def fam_slugify(rng: random.Random) -> FamilyTask:
    sep, max_len = _pick(rng, ["-", "_"]), _pick(rng, [20, 30, 40])
    ref = _src(
        """
import re

def slugify(title, max_length=$max_len):
    slug = re.sub(r"[^a-z0-9]+", $sep, title.lower()).strip($sep)
    return slug[:max_length].rstrip($sep)
""",
        sep=sep,
        max_len=max_len,
    )
    cases = [
        "Hello, World!",
        "  Spaces   everywhere  ",
        "Already-a-slug",
        "",
        "Ünïcödé & Symbols #1",
        ("A very long title that keeps going and going forever", 15),
        "123 Go",
    ]
    return _task(
        "slugify",
        "slugify",
        f"title, max_length={max_len}",
        "Write a function that turns a title into a URL slug.",
        ref,
        cases,
        sep=sep,
        max_len=max_len,
    )


@family
def fam_caesar_shift(rng: random.Random) -> FamilyTask:
    sign = _pick(rng, [1, -1])
    ref = _src(
        """
def caesar_shift(text, shift):
    out = []
    for ch in text:
        if ch.isalpha() and ch.isascii():
            base = ord("A") if ch.isupper() else ord("a")
            out.append(chr((ord(ch) - base + $sign * shift) % 26 + base))
        else:
            out.append(ch)
    return "".join(out)
""",
        sign=sign,
    )
    cases = [("Hello, World!", 3), ("abcxyz", 1), ("", 5), ("Zebra 123", 27), ("MiXeD", -2), ("no change", 0)]
    return _task(
        "caesar_shift",
        "caesar_shift",
        "text, shift",
        "Write a function that applies a Caesar cipher to a text.",
        ref,
        cases,
        direction=sign,
    )


@family
def fam_run_length_encode(rng: random.Random) -> FamilyTask:
    count_first, skip_ones = rng.random() < 0.5, rng.random() < 0.5
    piece = "str(count) + prev" if count_first else "prev + str(count)"
    emit = (
        f"            out.append(prev if count == 1 else {piece})" if skip_ones else f"            out.append({piece})"
    )
    ref = f"""def run_length_encode(text):
    if not text:
        return ""
    out = []
    prev, count = text[0], 1
    for ch in text[1:] + "\\0":
        if ch == prev:
            count += 1
        else:
{emit}
            prev, count = ch, 1
    return "".join(out)
"""
    cases = ["aaabbc", "", "abc", "zzzzzzzzzzzz", "aabbaa", "x"]
    return _task(
        "run_length_encode",
        "run_length_encode",
        "text",
        "Write a function that compresses a string with run-length encoding.",
        ref,
        cases,
        count_first=count_first,
        skip_ones=skip_ones,
    )


@family
def fam_is_palindrome(rng: random.Random) -> FamilyTask:
    strict = rng.random() < 0.5
    clean = (
        '    cleaned = text.replace(" ", "")'
        if strict
        else '    cleaned = "".join(ch.lower() for ch in text if ch.isalnum())'
    )
    ref = f"""def is_palindrome(text):
{clean}
    return cleaned == cleaned[::-1]
"""
    cases = ["racecar", "A man, a plan, a canal: Panama", "Abba", "", "step on no pets", "hello", "No lemon, no melon"]
    return _task(
        "is_palindrome",
        "is_palindrome",
        "text",
        "Write a function that checks whether a text is a palindrome.",
        ref,
        cases,
        strict=strict,
    )


@family
def fam_count_vowels(rng: random.Random) -> FamilyTask:
    vowels = _pick(rng, ["aeiou", "aeiouy"])
    ref = _src(
        """
def count_vowels(text):
    return sum(1 for ch in text.lower() if ch in $vowels)
""",
        vowels=vowels,
    )
    cases = ["Hello World", "", "rhythm", "AEIOUY", "Python is fun, yes!", "bcd"]
    return _task(
        "count_vowels",
        "count_vowels",
        "text",
        "Write a function that counts the vowels in a text.",
        ref,
        cases,
        vowels=vowels,
    )


@family
def fam_make_acronym(rng: random.Random) -> FamilyTask:
    skip, dots = _pick(rng, [("of", "and", "the"), ("of", "the", "a", "an", "for")]), rng.random() < 0.5
    join = '    return "".join(c + "." for c in letters)' if dots else '    return "".join(letters)'
    ref = (
        _src(
            """
def make_acronym(phrase):
    small = $skip
    letters = [w[0].upper() for w in phrase.split() if w.lower() not in small]
""",
            skip=skip,
        )
        + join
        + "\n"
    )
    cases = [
        "National Aeronautics and Space Administration",
        "the lord of the rings",
        "",
        "Portable Network Graphics",
        "a tale for an age",
        "Of",
    ]
    return _task(
        "make_acronym",
        "make_acronym",
        "phrase",
        "Write a function that builds an acronym from a phrase.",
        ref,
        cases,
        skip=list(skip),
        dots=dots,
    )


@family
def fam_smart_title(rng: random.Random) -> FamilyTask:
    small = _pick(rng, [("a", "an", "the", "of", "and"), ("a", "an", "the", "in", "on", "of", "to")])
    last_cap = rng.random() < 0.5
    cond = "i == 0 or i == len(words) - 1" if last_cap else "i == 0"
    ref = (
        _src(
            """
def smart_title(text):
    small = $small
    words = text.lower().split()
    out = []
    for i, word in enumerate(words):
""",
            small=small,
        )
        + f"""        if {cond} or word not in small:
            out.append(word.capitalize())
        else:
            out.append(word)
    return " ".join(out)
"""
    )
    cases = [
        "the lord of the rings",
        "a tale of two cities",
        "",
        "WAR AND PEACE",
        "what it is all about of",
        "gone with the wind",
    ]
    return _task(
        "smart_title",
        "smart_title",
        "text",
        "Write a function that converts a text to title case.",
        ref,
        cases,
        small=list(small),
        last=last_cap,
    )


@family
def fam_email_domains(rng: random.Random) -> FamilyTask:
    as_pairs = rng.random() < 0.5
    ret = "    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))" if as_pairs else "    return counts"
    ref = (
        """def email_domains(emails):
    counts = {}
    for email in emails:
        parts = email.strip().lower().split("@")
        if len(parts) != 2 or not parts[0] or "." not in parts[1]:
            continue
        counts[parts[1]] = counts.get(parts[1], 0) + 1
"""
        + ret
        + "\n"
    )
    cases = [
        ["a@x.com", "B@X.com", "c@y.org"],
        [],
        ["bad", "@x.com", "a@b@c.com", "ok@z.io"],
        ["p@q.net", " r@q.net "],
        ["x@nodot", "y@ok.com", "z@OK.com"],
        ["solo@one.org"],
    ]
    return _task(
        "email_domains",
        "email_domains",
        "emails",
        "Write a function that counts how many e-mail addresses belong to each domain.",
        ref,
        [(c,) for c in cases],
        pairs=as_pairs,
    )


@family
def fam_extract_numbers(rng: random.Random) -> FamilyTask:
    negative, floats = rng.random() < 0.5, rng.random() < 0.5
    pattern = ("-?" if negative else "") + (r"\d+(?:\.\d+)?" if floats else r"\d+")
    conv = "float(m) if '.' in m else int(m)" if floats else "int(m)"
    ref = f"""import re

def extract_numbers(text):
    return [{conv} for m in re.findall(r"{pattern}", text)]
"""
    cases = [
        "I have 3 apples and 12 pears",
        "",
        "-5 degrees and 2.5 liters",
        "no digits",
        "10-20-30",
        "3.14 is pi, -1.5 not",
    ]
    return _task(
        "extract_numbers",
        "extract_numbers",
        "text",
        "Write a function that extracts the numbers from a text.",
        ref,
        cases,
        negative=negative,
        floats=floats,
    )


@family
def fam_mask_card(rng: random.Random) -> FamilyTask:
    keep, char = _pick(rng, [4, 3]), _pick(rng, ["*", "#", "X"])
    ref = _src(
        """
def mask_card(number):
    digits = "".join(ch for ch in str(number) if ch.isdigit())
    if len(digits) <= $keep:
        return digits
    return $char * (len(digits) - $keep) + digits[-$keep:]
""",
        keep=keep,
        char=char,
    )
    cases = ["4111 1111 1111 1111", "1234", "", 5500000000000004, "12-34-56", "98765"]
    return _task(
        "mask_card",
        "mask_card",
        "number",
        "Write a function that masks a payment card number for display.",
        ref,
        cases,
        keep=keep,
        char=char,
    )


@family
def fam_valid_username(rng: random.Random) -> FamilyTask:
    lo, hi, dash = _pick(rng, [3, 4, 5]), _pick(rng, [12, 16, 20]), rng.random() < 0.5
    extra = ' or ch == "-"' if dash else ""
    ref = (
        _src(
            """
def valid_username(name):
    if not $lo <= len(name) <= $hi:
        return False
    if not name[0].isalpha():
        return False
""",
            lo=lo,
            hi=hi,
        )
        + f"""    return all(ch.isalnum() or ch == "_"{extra} for ch in name)
"""
    )
    cases = ["alice", "ab", "9lives", "john_doe", "jane-doe", "x" * 25, "Bob42", "", "_under"]
    return _task(
        "valid_username",
        "valid_username",
        "name",
        "Write a function that checks whether a username is valid.",
        ref,
        cases,
        low=lo,
        high=hi,
        dash=dash,
    )


@family
def fam_password_strength(rng: random.Random) -> FamilyTask:
    min_len, symbols = _pick(rng, [8, 10, 12]), _pick(rng, ["!@#$%", "!@#$%^&*", "!?.-_"])
    ref = _src(
        """
def password_strength(password):
    score = 0
    if len(password) >= $min_len:
        score += 1
    if any(ch.isdigit() for ch in password):
        score += 1
    if any(ch.isupper() for ch in password):
        score += 1
    if any(ch in $symbols for ch in password):
        score += 1
    if score <= 1:
        return "weak"
    if score <= 3:
        return "medium"
    return "strong"
""",
        min_len=min_len,
        symbols=symbols,
    )
    cases = [
        "abc",
        "abcdefghijkl",
        "Abcdefghijk1",
        "Abcdefghijk1!",
        "P@ss1",
        "12345678901234",
        "",
        "Aa1" + symbols[0] * 9,
    ]
    return _task(
        "password_strength",
        "password_strength",
        "password",
        "Write a function that rates the strength of a password.",
        ref,
        cases,
        min_len=min_len,
        symbols=symbols,
    )


@family
def fam_group_anagrams(rng: random.Random) -> FamilyTask:
    fold = rng.random() < 0.5
    key = "''.join(sorted(word.lower()))" if fold else "''.join(sorted(word))"
    ref = f"""def group_anagrams(words):
    groups = {{}}
    for word in words:
        groups.setdefault({key}, []).append(word)
    return sorted(sorted(g) for g in groups.values())
"""
    cases = [["eat", "tea", "tan", "ate", "nat", "bat"], [], ["Listen", "silent", "enlist"], ["a"], ["ab", "ba", "AB"]]
    return _task(
        "group_anagrams",
        "group_anagrams",
        "words",
        "Write a function that groups words that are anagrams.",
        ref,
        [(c,) for c in cases],
        fold=fold,
    )


@family
def fam_parse_duration(rng: random.Random) -> FamilyTask:
    unit = _pick(rng, ["seconds", "minutes"])
    ret = "    return total" if unit == "seconds" else "    return round(total / 60, 2)"
    ref = (
        """import re

def parse_duration(text):
    total = 0
    for value, unit in re.findall(r"(\\d+)\\s*([hms])", text.lower()):
        total += int(value) * {"h": 3600, "m": 60, "s": 1}[unit]
"""
        + ret
        + "\n"
    )
    cases = ["1h30m", "45s", "", "2H 5M 10S", "90m", "1h1s", "abc"]
    return _task(
        "parse_duration",
        "parse_duration",
        "text",
        "Write a function that parses a duration such as '1h30m' into a number.",
        ref,
        cases,
        unit=unit,
    )


@family
def fam_to_seconds(rng: random.Random) -> FamilyTask:
    bad = _pick(rng, [-1, None])
    ref = _src(
        """
def to_seconds(clock):
    parts = clock.split(":")
    if not 2 <= len(parts) <= 3 or not all(p.isdigit() for p in parts):
        return $bad
    total = 0
    for p in parts:
        total = total * 60 + int(p)
    return total
""",
        bad=bad,
    )
    cases = ["01:02:03", "10:00", "0:0", "1:2:3:4", "ab:cd", "", "23:59:59"]
    return _task(
        "to_seconds",
        "to_seconds",
        "clock",
        "Write a function that converts a clock time string to seconds.",
        ref,
        cases,
        bad=bad,
    )


# =========================================================================== lists and numbers
@family
def fam_moving_average(rng: random.Random) -> FamilyTask:
    digits = _pick(rng, [1, 2, 3])
    ref = _src(
        """
def moving_average(values, window):
    if window <= 0 or window > len(values):
        return []
    out = []
    for i in range(len(values) - window + 1):
        out.append(round(sum(values[i:i + window]) / window, $digits))
    return out
""",
        digits=digits,
    )
    cases = [([1, 2, 3, 4, 5], 2), ([10, 20, 30], 3), ([1, 2], 5), ([], 1), ([3, 1, 4, 1, 5, 9, 2, 6], 3), ([5], 0)]
    return _task(
        "moving_average",
        "moving_average",
        "values, window",
        "Write a function that computes the moving average of a list of numbers.",
        ref,
        cases,
        digits=digits,
    )


@family
def fam_normalize_scores(rng: random.Random) -> FamilyTask:
    flat = _pick(rng, [0.0, 0.5, 1.0])
    ref = _src(
        """
def normalize_scores(scores):
    if not scores:
        return []
    lo, hi = min(scores), max(scores)
    if hi == lo:
        return [$flat for _ in scores]
    return [round((s - lo) / (hi - lo), 3) for s in scores]
""",
        flat=flat,
    )
    cases = [[1, 2, 3], [], [5, 5, 5], [10, -10, 0, 7], [3.3]]
    return _task(
        "normalize_scores",
        "normalize_scores",
        "scores",
        "Write a function that rescales a list of scores to the range from 0 to 1.",
        ref,
        [(c,) for c in cases],
        flat=flat,
    )


@family
def fam_chunk_list(rng: random.Random) -> FamilyTask:
    keep = rng.random() < 0.5
    stop = "len(items)" if keep else "len(items) - size + 1"
    ref = f"""def chunk_list(items, size):
    if size <= 0:
        return []
    return [items[i:i + size] for i in range(0, {stop}, size)]
"""
    cases = [([1, 2, 3, 4, 5], 2), ([1, 2, 3, 4], 2), ([], 3), ([1, 2], 0), (list("abcdefg"), 3), ([1], 5)]
    return _task(
        "chunk_list",
        "chunk_list",
        "items, size",
        "Write a function that splits a list into chunks.",
        ref,
        cases,
        keep_remainder=keep,
    )


@family
def fam_flatten_list(rng: random.Random) -> FamilyTask:
    tuples = rng.random() < 0.5
    kinds = "(list, tuple)" if tuples else "list"
    ref = f"""def flatten_list(nested):
    out = []
    for item in nested:
        if isinstance(item, {kinds}):
            out.extend(flatten_list(item))
        else:
            out.append(item)
    return out
"""
    cases = [[1, [2, [3, [4]]]], [], [[], [[]]], [1, (2, 3), [4, (5, [6])]], ["a", ["b"]]]
    return _task(
        "flatten_list",
        "flatten_list",
        "nested",
        "Write a function that flattens a nested list.",
        ref,
        [(c,) for c in cases],
        tuples=tuples,
    )


@family
def fam_merge_inventories(rng: random.Random) -> FamilyTask:
    drop = rng.random() < 0.5
    ret = "    return {k: v for k, v in merged.items() if v > 0}" if drop else "    return merged"
    ref = (
        """def merge_inventories(first, second):
    merged = dict(first)
    for item, count in second.items():
        merged[item] = merged.get(item, 0) + count
"""
        + ret
        + "\n"
    )
    cases = [
        ({"apple": 3}, {"apple": 2, "pear": 1}),
        ({}, {}),
        ({"x": 1}, {"x": -1}),
        ({"a": 5, "b": 0}, {"c": -2}),
        ({"k": 1}, {}),
        ({}, {"n": 4, "m": 0}),
    ]
    return _task(
        "merge_inventories",
        "merge_inventories",
        "first, second",
        "Write a function that merges two inventories (item to count).",
        ref,
        cases,
        drop=drop,
    )


@family
def fam_group_by_length(rng: random.Random) -> FamilyTask:
    alpha, str_keys = rng.random() < 0.5, rng.random() < 0.5
    key = "str(len(word))" if str_keys else "len(word)"
    fin = "    return {k: sorted(v) for k, v in groups.items()}" if alpha else "    return groups"
    ref = (
        f"""def group_by_length(words):
    groups = {{}}
    for word in words:
        groups.setdefault({key}, []).append(word)
"""
        + fin
        + "\n"
    )
    cases = [
        ["hi", "to", "cat", "a", "dog"],
        [],
        ["same", "size", "word"],
        ["b", "a", "ccc"],
        ["zeta", "alpha", "be"],
        ["x"],
    ]
    return _task(
        "group_by_length",
        "group_by_length",
        "words",
        "Write a function that groups words by their length.",
        ref,
        [(c,) for c in cases],
        alpha=alpha,
        str_keys=str_keys,
    )


@family
def fam_find_duplicates(rng: random.Random) -> FamilyTask:
    ordered = rng.random() < 0.5
    ret = "    return dups" if ordered else "    return sorted(dups)"
    ref = (
        """def find_duplicates(items):
    seen = set()
    dups = []
    for item in items:
        if item in seen and item not in dups:
            dups.append(item)
        seen.add(item)
"""
        + ret
        + "\n"
    )
    cases = [[3, 1, 3, 2, 1], [], [1, 2, 3], ["b", "a", "b", "a", "a"], [5, 5, 5, 5]]
    return _task(
        "find_duplicates",
        "find_duplicates",
        "items",
        "Write a function that finds the duplicated items of a list.",
        ref,
        [(c,) for c in cases],
        ordered=ordered,
    )


@family
def fam_second_largest(rng: random.Random) -> FamilyTask:
    ref = """def second_largest(numbers):
    distinct = sorted(set(numbers), reverse=True)
    if len(distinct) < 2:
        return None
    return distinct[1]
"""
    cases = [[1, 2, 3], [5, 5, 5], [], [10, 9, 10, 8], [-1, -2], [4]]
    return _task(
        "second_largest",
        "second_largest",
        "numbers",
        "Write a function that returns the second largest number.",
        ref,
        [(c,) for c in cases],
    )


@family
def fam_median_value(rng: random.Random) -> FamilyTask:
    lower = rng.random() < 0.5
    even = "        return s[mid - 1]" if lower else "        return (s[mid - 1] + s[mid]) / 2"
    ref = (
        """def median_value(numbers):
    if not numbers:
        return None
    s = sorted(numbers)
    mid = len(s) // 2
    if len(s) % 2 == 0:
"""
        + even
        + "\n    return s[mid]\n"
    )
    cases = [[3, 1, 2], [4, 1, 3, 2], [], [7], [1.5, 2.5], [9, 9, 1, 1, 5, 5]]
    return _task(
        "median_value",
        "median_value",
        "numbers",
        "Write a function that returns the median of a list of numbers.",
        ref,
        [(c,) for c in cases],
        lower=lower,
    )


@family
def fam_most_common_values(rng: random.Random) -> FamilyTask:
    ref = """def most_common_values(numbers):
    counts = {}
    for n in numbers:
        counts[n] = counts.get(n, 0) + 1
    if not counts:
        return []
    best = max(counts.values())
    return sorted(n for n, c in counts.items() if c == best)
"""
    cases = [[1, 2, 2, 3], [], [1, 1, 2, 2, 3], [7], [0, 0, -1, -1, -1]]
    return _task(
        "most_common_values",
        "most_common_values",
        "numbers",
        "Write a function that returns the most common values of a list.",
        ref,
        [(c,) for c in cases],
    )


@family
def fam_rotate_list(rng: random.Random) -> FamilyTask:
    right = rng.random() < 0.5
    body = "    return items[-k:] + items[:-k]" if right else "    return items[k:] + items[:k]"
    ref = (
        """def rotate_list(items, k):
    if not items:
        return []
    k = k % len(items)
"""
        + body
        + "\n"
    )
    cases = [([1, 2, 3, 4, 5], 2), ([1, 2, 3], 0), ([], 3), (["a", "b"], 5), ([1, 2, 3, 4], -1)]
    return _task(
        "rotate_list",
        "rotate_list",
        "items, k",
        "Write a function that rotates a list by k positions.",
        ref,
        cases,
        right=right,
    )


@family
def fam_transpose_matrix(rng: random.Random) -> FamilyTask:
    ragged = _pick(rng, [None, []])
    ref = _src(
        """
def transpose_matrix(matrix):
    if not matrix:
        return []
    width = len(matrix[0])
    if any(len(row) != width for row in matrix):
        return $ragged
    return [[row[i] for row in matrix] for i in range(width)]
""",
        ragged=ragged,
    )
    cases = [[[1, 2, 3], [4, 5, 6]], [], [[1], [2]], [[1, 2], [3]], [[7]]]
    return _task(
        "transpose_matrix",
        "transpose_matrix",
        "matrix",
        "Write a function that transposes a matrix.",
        ref,
        [(c,) for c in cases],
        ragged=ragged,
    )


@family
def fam_diagonal_sum(rng: random.Random) -> FamilyTask:
    mode = _pick(rng, ["primary", "secondary", "both"])
    body = {
        "primary": "    return sum(matrix[i][i] for i in range(n))",
        "secondary": "    return sum(matrix[i][n - 1 - i] for i in range(n))",
        "both": "    total = sum(matrix[i][i] + matrix[i][n - 1 - i] for i in range(n))\n"
        "    if n % 2 == 1:\n        total -= matrix[n // 2][n // 2]\n    return total",
    }[mode]
    ref = "def diagonal_sum(matrix):\n    n = len(matrix)\n" + body + "\n"
    cases = [[[1, 2], [3, 4]], [[1, 2, 3], [4, 5, 6], [7, 8, 9]], [], [[5]], [[2, 0, 0, 1]] * 4]
    return _task(
        "diagonal_sum",
        "diagonal_sum",
        "matrix",
        "Write a function that sums the diagonal of a square matrix.",
        ref,
        [(c,) for c in cases],
        mode=mode,
    )


@family
def fam_clamp_values(rng: random.Random) -> FamilyTask:
    swap = rng.random() < 0.5
    pre = "    if low > high:\n        low, high = high, low\n" if swap else "    if low > high:\n        return []\n"
    ref = "def clamp_values(values, low, high):\n" + pre + "    return [min(max(v, low), high) for v in values]\n"
    cases = [
        ([1, 5, 10], 2, 8),
        ([], 0, 1),
        ([-5, 0, 5], 3, -3),
        ([1.5, 2.5], 2, 2),
        ([100, -100], -1, 1),
        ([3, 4], 10, 0),
    ]
    return _task(
        "clamp_values",
        "clamp_values",
        "values, low, high",
        "Write a function that limits every value of a list to a range.",
        ref,
        cases,
        swap=swap,
    )


@family
def fam_restock_list(rng: random.Random) -> FamilyTask:
    target = _pick(rng, [None, 10, 20])
    if target is None:
        body = "    return sorted(item for item, count in stock.items() if count < threshold)"
    else:
        body = f"    return {{item: {target} - count for item, count in stock.items() if count < threshold}}"
    ref = "def restock_list(stock, threshold):\n" + body + "\n"
    cases = [
        ({"pens": 3, "paper": 40, "ink": 0}, 5),
        ({}, 10),
        ({"a": 5}, 5),
        ({"x": 1, "y": 2, "z": 3}, 100),
        ({"b": 9, "a": 1}, 2),
        ({"only": 0}, 1),
    ]
    return _task(
        "restock_list",
        "restock_list",
        "stock, threshold",
        "Write a function that tells which items of an inventory need restocking.",
        ref,
        cases,
        target=target,
    )


# =========================================================================== number theory and dates
@family
def fam_leap_year(rng: random.Random) -> FamilyTask:
    words = rng.random() < 0.5
    ret = '    return "Leap" if leap else "Common"' if words else "    return leap"
    ref = (
        """def leap_year(year):
    leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
"""
        + ret
        + "\n"
    )
    cases = [2000, 1900, 2024, 2023, 1600, 2100, 4]
    return _task(
        "leap_year",
        "leap_year",
        "year",
        "Write a function that tells whether a year is a leap year.",
        ref,
        cases,
        words=words,
    )


@family
def fam_days_between(rng: random.Random) -> FamilyTask:
    signed, inclusive = rng.random() < 0.5, rng.random() < 0.5
    diff = "(b - a).days" if signed else "abs((b - a).days)"
    extra = " + 1" if inclusive else ""
    ref = f"""from datetime import date

def days_between(start, end):
    a = date.fromisoformat(start)
    b = date.fromisoformat(end)
    return {diff}{extra}
"""
    cases = [
        ("2024-01-01", "2024-01-31"),
        ("2024-03-01", "2024-02-01"),
        ("2023-12-31", "2023-12-31"),
        ("2020-02-28", "2020-03-01"),
        ("1999-12-31", "2000-01-01"),
    ]
    return _task(
        "days_between",
        "days_between",
        "start, end",
        "Write a function that computes the number of days between two dates given as 'YYYY-MM-DD' strings.",
        ref,
        cases,
        signed=signed,
        inclusive=inclusive,
    )


@family
def fam_to_roman(rng: random.Random) -> FamilyTask:
    lower = rng.random() < 0.5
    ret = "    return out.lower()" if lower else "    return out"
    ref = (
        """def to_roman(number):
    if number < 1 or number > 3999:
        return ""
    table = [(1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"),
             (50, "L"), (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I")]
    out = ""
    for value, numeral in table:
        while number >= value:
            out += numeral
            number -= value
"""
        + ret
        + "\n"
    )
    cases = [1, 4, 9, 14, 40, 1994, 3999, 0, 4000]
    return _task(
        "to_roman",
        "to_roman",
        "number",
        "Write a function that converts a number to Roman numerals.",
        ref,
        cases,
        lower=lower,
    )


@family
def fam_to_binary(rng: random.Random) -> FamilyTask:
    width = _pick(rng, [8, 4, 16])
    ref = _src(
        """
def to_binary(number, width=$width):
    if number < 0:
        return "-" + to_binary(-number, width)
    return bin(number)[2:].zfill(width)
""",
        width=width,
    )
    cases = [5, 0, 255, -3, (1023, 4), (7, 0), 65536]
    return _task(
        "to_binary",
        "to_binary",
        f"number, width={width}",
        "Write a function that converts an integer to a binary string.",
        ref,
        cases,
        width=width,
    )


@family
def fam_collatz_steps(rng: random.Random) -> FamilyTask:
    bad = _pick(rng, [-1, 0, None])
    ref = _src(
        """
def collatz_steps(n):
    if n <= 0:
        return $bad
    steps = 0
    while n != 1:
        n = n // 2 if n % 2 == 0 else 3 * n + 1
        steps += 1
    return steps
""",
        bad=bad,
    )
    cases = [1, 6, 27, 0, -5, 97, 1024]
    return _task(
        "collatz_steps",
        "collatz_steps",
        "n",
        "Write a function that counts the steps of the Collatz sequence.",
        ref,
        cases,
        bad=bad,
    )


@family
def fam_fibonacci_sequence(rng: random.Random) -> FamilyTask:
    first, second = _pick(rng, [(0, 1), (1, 1), (2, 1)])
    ref = _src(
        """
def fibonacci_sequence(n):
    if n <= 0:
        return []
    seq = [$first, $second]
    while len(seq) < n:
        seq.append(seq[-1] + seq[-2])
    return seq[:n]
""",
        first=first,
        second=second,
    )
    cases = [0, 1, 2, 5, 10, -1, 20]
    return _task(
        "fibonacci_sequence",
        "fibonacci_sequence",
        "n",
        "Write a function that returns the first n Fibonacci-style numbers.",
        ref,
        cases,
        start=[first, second],
    )


@family
def fam_prime_factors(rng: random.Random) -> FamilyTask:
    unique = rng.random() < 0.5
    ret = "    return sorted(set(factors))" if unique else "    return factors"
    ref = (
        """def prime_factors(n):
    factors = []
    d = 2
    while n >= 2 and d * d <= n:
        while n % d == 0:
            factors.append(d)
            n //= d
        d += 1
    if n >= 2:
        factors.append(n)
"""
        + ret
        + "\n"
    )
    cases = [12, 1, 97, 360, 0, 1001, 2**10]
    return _task(
        "prime_factors",
        "prime_factors",
        "n",
        "Write a function that returns the prime factors of a number.",
        ref,
        cases,
        unique=unique,
    )


@family
def fam_gcd_and_lcm(rng: random.Random) -> FamilyTask:
    as_dict = rng.random() < 0.5
    ret = '    return {"gcd": g, "lcm": l}' if as_dict else "    return g, l"
    ref = (
        """import math

def gcd_and_lcm(a, b):
    g = math.gcd(a, b)
    l = abs(a * b) // g if g else 0
"""
        + ret
        + "\n"
    )
    cases = [(12, 18), (7, 5), (0, 9), (0, 0), (-4, 6), (100, 75)]
    return _task(
        "gcd_and_lcm",
        "gcd_and_lcm",
        "a, b",
        "Write a function that returns the greatest common divisor and the least common multiple of two integers.",
        ref,
        cases,
        as_dict=as_dict,
    )


@family
def fam_digit_sum(rng: random.Random) -> FamilyTask:
    repeated = rng.random() < 0.5
    body = (
        "    while n >= 10:\n        n = sum(int(d) for d in str(n))\n    return n"
        if repeated
        else "    return sum(int(d) for d in str(n))"
    )
    ref = "def digit_sum(n):\n    n = abs(n)\n" + body + "\n"
    cases = [0, 5, 38, 999999, -123, 1000000001]
    return _task(
        "digit_sum",
        "digit_sum",
        "n",
        "Write a function that sums the digits of an integer.",
        ref,
        cases,
        repeated=repeated,
    )


@family
def fam_fizz_buzz(rng: random.Random) -> FamilyTask:
    a, b = _pick(rng, [(3, 5), (2, 7), (4, 6)])
    wa, wb = _pick(rng, [("Fizz", "Buzz"), ("Foo", "Bar")])
    ref = _src(
        """
def fizz_buzz(n):
    out = []
    for i in range(1, n + 1):
        word = ""
        if i % $a == 0:
            word += $wa
        if i % $b == 0:
            word += $wb
        out.append(word or str(i))
    return out
""",
        a=a,
        b=b,
        wa=wa,
        wb=wb,
    )
    cases = [15, 0, 1, 7, 30]
    return _task(
        "fizz_buzz",
        "fizz_buzz",
        "n",
        "Write a function that plays FizzBuzz up to n.",
        ref,
        cases,
        divisors=[a, b],
        words=[wa, wb],
    )


@family
def fam_running_total(rng: random.Random) -> FamilyTask:
    reset_negative = rng.random() < 0.5
    rule = "        if total < 0:\n            total = 0\n" if reset_negative else ""
    ref = (
        "def running_total(values):\n    total = 0\n    out = []\n    for v in values:\n        total += v\n"
        + rule
        + "        out.append(total)\n    return out\n"
    )
    cases = [[1, 2, 3], [], [5, -10, 3], [-1, -1, 4], [0.5, 0.25]]
    return _task(
        "running_total",
        "running_total",
        "values",
        "Write a function that returns the running totals of a list.",
        ref,
        [(c,) for c in cases],
        reset_negative=reset_negative,
    )


@family
def fam_pairs_with_sum(rng: random.Random) -> FamilyTask:
    ref = """def pairs_with_sum(numbers, target):
    found = set()
    seen = set()
    for n in numbers:
        if target - n in seen:
            found.add((min(n, target - n), max(n, target - n)))
        seen.add(n)
    return sorted(found)
"""
    cases = [([1, 2, 3, 4, 5], 6), ([], 3), ([3, 3, 3], 6), ([-1, 7, 8, 0], 7), ([2, 4], 100)]
    return _task(
        "pairs_with_sum",
        "pairs_with_sum",
        "numbers, target",
        "Write a function that finds the pairs of numbers in a list that add up to a target.",
        ref,
        cases,
    )


@family
def fam_count_by_category(rng: random.Random) -> FamilyTask:
    key = _pick(rng, ["category", "type", "kind"])
    ref = _src(
        """
def count_by_category(records):
    counts = {}
    for record in records:
        cat = record.get($key, "unknown")
        counts[cat] = counts.get(cat, 0) + 1
    return counts
""",
        key=key,
    )
    cases = [
        [{key: "a"}, {key: "b"}, {key: "a"}],
        [],
        [{"other": 1}, {key: "z"}],
        [{key: "q", "n": 1}] * 3,
        [{"a": 1}, {"b": 2}],
        [{key: "x"}, {key: "y"}, {key: "x"}, {key: "unknown"}],
    ]
    return _task(
        "count_by_category",
        "count_by_category",
        "records",
        "Write a function that counts records (dictionaries) per category.",
        ref,
        [(c,) for c in cases],
        key=key,
    )


@family
def fam_top_students(rng: random.Random) -> FamilyTask:
    cut = _pick(rng, [50, 60, 70])
    ref = _src(
        """
def top_students(students, n):
    passing = [s for s in students if s["score"] >= $cut]
    ranked = sorted(passing, key=lambda s: (-s["score"], s["name"]))
    return [s["name"] for s in ranked[:n]]
""",
        cut=cut,
    )
    roster = [
        {"name": "ann", "score": 88},
        {"name": "bob", "score": cut},
        {"name": "cy", "score": cut - 1},
        {"name": "dee", "score": 88},
        {"name": "eve", "score": 95},
    ]
    cases = [(roster, 3), ([], 2), (roster, 0), (roster, 10), (roster[2:3], 1)]
    return _task(
        "top_students",
        "top_students",
        "students, n",
        "Write a function that returns the names of the best students (each a dict with name and score).",
        ref,
        cases,
        cut=cut,
    )


@family
def fam_order_total(rng: random.Random) -> FamilyTask:
    tax, free_over, ship = _pick(rng, [0.07, 0.08, 0.2]), _pick(rng, [50, 75, 100]), _pick(rng, [4.99, 5.99, 7.5])
    ref = _src(
        """
def order_total(items):
    subtotal = sum(item["price"] * item.get("qty", 1) for item in items)
    if subtotal == 0:
        return 0.0
    shipping = 0 if subtotal >= $free_over else $ship
    return round(subtotal * (1 + $tax) + shipping, 2)
""",
        tax=tax,
        free_over=free_over,
        ship=ship,
    )
    cases = [
        [{"price": 10, "qty": 2}],
        [],
        [{"price": free_over}],
        [{"price": 19.99, "qty": 3}, {"price": 5}],
        [{"price": free_over - 0.01}],
        [{"price": 0, "qty": 9}],
    ]
    return _task(
        "order_total",
        "order_total",
        "items",
        "Write a function that computes the total of a shopping-cart order (items with a price and an "
        "optional quantity).",
        ref,
        [(c,) for c in cases],
        tax=tax,
        free_over=free_over,
        shipping=ship,
    )


@family
def fam_sensor_status(rng: random.Random) -> FamilyTask:
    warn, crit = _pick(rng, [(70, 90), (60, 85), (75, 95)])
    ref = _src(
        """
def sensor_status(readings):
    if not readings:
        return "no data"
    peak = max(readings)
    if peak >= $crit:
        return "critical"
    if peak >= $warn:
        return "warning"
    return "ok"
""",
        warn=warn,
        crit=crit,
    )
    cases = [[10, 20], [], [warn], [crit + 1, 0], [warn - 1, warn - 2], [crit]]
    return _task(
        "sensor_status",
        "sensor_status",
        "readings",
        "Write a function that reports the status of a sensor from its readings.",
        ref,
        [(c,) for c in cases],
        warn=warn,
        crit=crit,
    )


@family
def fam_hash_id(rng: random.Random) -> FamilyTask:
    algo, length = _pick(rng, ["md5", "sha1", "sha256"]), _pick(rng, [8, 10, 12])
    ref = _src(
        """
import hashlib

def hash_id(text):
    digest = hashlib.new($algo, text.strip().lower().encode()).hexdigest()
    return digest[:$length]
""",
        algo=algo,
        length=length,
    )
    cases = ["hello", " Hello ", "", "user@example.com", "ÄÖÜ"]
    return _task(
        "hash_id",
        "hash_id",
        "text",
        "Write a function that derives a short identifier from a text by hashing it.",
        ref,
        cases,
        algo=algo,
        length=length,
    )


@family
def fam_random_sample(rng: random.Random) -> FamilyTask:
    ref = """import random

def random_sample(items, k):
    if k <= 0 or not items:
        return []
    return random.sample(items, min(k, len(items)))
"""
    cases = [(list(range(10)), 3), ([], 2), (["a", "b"], 5), ([1, 2, 3], 0), (list("abcdefgh"), 4), ([7], 1)]
    return _task(
        "random_sample",
        "random_sample",
        "items, k",
        "Write a function that draws a random sample of items from a list.",
        ref,
        cases,
    )


def family_names() -> list[str]:
    """Registered family names, sorted."""
    return sorted(FAMILIES)


def build(name: str, rng: random.Random) -> FamilyTask:
    """Draw one task of family ``name``."""
    try:
        return FAMILIES[name](rng)
    except KeyError:
        raise KeyError(f"unknown colbench family {name!r}; known: {', '.join(family_names())}") from None


def make_procedural(split: str, index: int) -> FamilyTask:
    """Procedural task ``index`` of ``split``: deterministic; redrawn until its content hashes into ``split``."""
    names = family_names()
    attempt = 0
    while True:
        rng = random.Random(task_seed(GYM, split, index, attempt))
        task = build(names[rng.randrange(len(names))], rng)
        if split_of(task.content_key) == split:
            return task
        attempt += 1
