"""The verifier of τ² and tau customer replies (harness/envs/tau2/customer.py on
harness/users/fidelity.py's value checks): a reply stating a value of the customer that its database
record and its scenario contradict is flagged, a true value or an unknown one never, the symbolic
customer never, and the flag reaches ``user_wrong_rate`` in the metrics rows per gym and arm."""

from __future__ import annotations

import re

from tau2_support import need_tau2, reset_on

need_tau2()

import pytest  # noqa: E402
from gyms_support import env_of, knobs  # noqa: E402
from test_users_support import ChatServer  # noqa: E402

from harness.agents.scripted import run_episode  # noqa: E402
from harness.envs.registry import make  # noqa: E402
from harness.envs.tau2 import domain as dom  # noqa: E402
from harness.envs.tau2.customer import (  # noqa: E402
    KINDS,
    check_customer_reply,
    find_customer,
    iso_date,
    record_values,
    scenario_values,
)
from harness.envs.tau2.gym import scenario_data  # noqa: E402
from harness.runs.metrics import episode_metrics  # noqa: E402
from harness.users import UserFactory  # noqa: E402
from harness.users.backends import OpenAIChatBackend  # noqa: E402
from harness.users.fidelity import ValueKind, check_values, stated_values  # noqa: E402

ZIP = ValueKind("zip", (re.compile(r"(?<!\d)(?P<v>\d{5})(?!\d)"),), about=("zip",))
ORDER = ValueKind("order_id", (re.compile(r"#W\d{7}"),), single=False, normalize=str.upper)
TRUTH = {"zip": frozenset({"19122"}), "order_id": frozenset({"#W2378156", "#W4776164"})}
TELECOM_TASK = dom.split_ids("telecom")["train"][0]


# ------------------------------------------------------------------------------ the value check
@pytest.mark.parametrize(
    "text,question,wrong,checked",
    [
        ("My zip code is 19123.", "", True, True),
        ("It's 19123.", "What is your zip code?", True, True),  # the question says what the number is
        ("My zip code is 19122.", "", False, True),
        ("My zip is 19122, not 19123.", "", False, True),  # the wrong one is denied
        ("My zip is 19122 or maybe 19123.", "", False, True),  # next to the true one: not called wrong
        ("I have 19123 points.", "", False, False),  # a number, not a zip code
        ("I don't remember my zip code.", "What is your zip code?", False, False),
        ("Orders #W2378156 and #W9999999.", "", True, True),  # each order id must be the customer's
        ("#W9999999 is not mine; it's #W4776164.", "", False, True),
    ],
)
def test_check_values_on_hand_written_replies(text, question, wrong, checked):
    res = check_values(text, [ZIP, ORDER], TRUTH, question)
    assert (res.wrong, res.checked) == (wrong, checked)


def test_a_kind_the_task_knows_nothing_of_is_not_checked():
    assert not check_values("My zip code is 19123.", [ZIP], {"zip": frozenset()}).checked
    assert not check_values("My zip code is 19123.", [ZIP], {}).checked


def test_a_wrong_verdict_names_the_kind_the_truth_and_what_was_said():
    res = check_values("My zip code is 19123.", [ZIP], TRUTH)
    assert (res.why, res.expected, res.said) == ("zip: the task says 19122", "19122", "19123")
    assert res.to_flag() == {"wrong": True, "why": "zip: the task says 19122", "expected": "19122", "said": "19123"}


def test_loose_reading_of_a_scenario_keeps_denied_values_and_needs_no_cue():
    said = stated_values("Say your zip is not 19123. You live in 19122.", [ZIP], loose=True)
    assert said == {"zip": {"19122", "19123"}}


@pytest.mark.parametrize(
    "text,question,kind,value",
    [
        ("You can reach me at Emma.Kim3947@example.com.", "", "email", "emma.kim3947@example.com"),
        ("I was born on September 23, 1977.", "", "dob", "1977-09-23"),
        ("It's 09/23/1977.", "What is your date of birth?", "dob", "1977-09-23"),
        ("My card ends in 5241.", "", "card_last_four", "5241"),
        ("5241.", "What are the last four digits of your card?", "card_last_four", "5241"),
        ("Call me at (555) 123-2002.", "", "phone", "5551232002"),
        ("I live at 109 Willow Lane.", "", "street", "109 willow ln"),
        ("I live at 934 Broadway.", "", "street", "934 broadway"),
        ("Please use gift_card_9562694.", "", "payment_id", "gift_card_9562694"),
        ("Put it on my Gift Card.", "", "payment_kind", "gift_card"),
        ("Reservation EHGLP3, please.", "", "reservation_id", "EHGLP3"),
        ("My reservation is MDCLVA.", "", "reservation_id", "MDCLVA"),
        ("I am Emma Kim.", "", "name", "emma kim"),
        ("Sure, it's Emma Kim.", "May I have your name?", "name", "emma kim"),
        ("I'm calling about W2378156.", "", "order_id", "#W2378156"),
        ("It's C1001.", "", "customer_id", "C1001"),
    ],
)
def test_tau2_kinds_read_what_a_customer_writes(text, question, kind, value):
    assert check_customer_reply(text, {kind: frozenset({"x"})}, question).wrong
    assert not check_customer_reply(text, {kind: frozenset({value})}, question).wrong


@pytest.mark.parametrize(
    "text",
    [
        "I fly on May 20, 2024 for my mother's birthday.",  # a date, not the customer's birth
        "My son was born on May 1, 2010.",
        "I am Amelia Ahmed's mother.",  # a possessive, not a name given as one's own
        "I'm Gold Member, you know.",
        "Thank You.",
        "The flight HAT001 leaves at noon.",  # a flight number has a reservation code's shape
        "PLEASE hurry.",  # six capitals alone are a code only next to a booking word
    ],
)
def test_things_that_look_like_values_but_are_not_the_customers_are_not_checked(text):
    truth = {k.key: frozenset({"zzz"}) for k in KINDS}
    assert not check_customer_reply(text, truth).checked, text


def test_iso_date_reads_the_usual_spellings():
    assert {
        iso_date(t) for t in ("1985-06-15", "06/15/1985", "June 15, 1985", "15th of June 1985", "Jun. 15 1985")
    } == {"1985-06-15"}
    assert iso_date("the 15th") is None


# ------------------------------------------------------------------------------ the customer's truth
def test_the_customer_is_found_for_every_task_of_every_domain():
    for domain in dom.DOMAINS:
        db = dom.base_db(domain)
        for t in dom.tasks(domain):
            assert find_customer(domain, scenario_data(domain, t), db) is not None, (domain, t.id)


def test_truth_is_the_database_record_and_the_scenario():
    env = env_of("tau2_retail")
    reset_on(env, "36")  # the scenario gives an email that differs from the database's
    truth = env.customer_truth()
    assert truth["user_id"] == {"daiki_sanchez_3253"} and truth["name"] == {"daiki sanchez"}
    assert truth["email"] == {"daiki.sanchez1479@example.com", "daikisanchez1479@example.com"}
    assert "46236" in truth["zip"] and "#W9348897" in truth["order_id"]
    record = record_values("retail", dom.base_db("retail"), "daiki_sanchez_3253")
    assert record["payment_id"] == {"credit_card_8853416"} and record["card_last_four"] == {"6593"}
    # the scenario's email is what the customer was told: stating it is not wrong
    told = scenario_values(env.task.data)["email"]
    assert told == {"daikisanchez1479@example.com"}


def test_a_value_the_episode_creates_is_the_customers_too():
    """A change the agent made (a new address) is true from then on; the old one stays true."""
    env = env_of("tau2_retail")
    reset_on(env, "36")
    assert "1 new st" not in env.customer_truth()["street"]
    args = {
        "user_id": "daiki_sanchez_3253",
        "address1": "1 New St",
        "address2": "",
        "city": "Austin",
        "state": "TX",
        "country": "USA",
        "zip": "73301",
    }
    env.step(env.render_call("modify_user_address", args))
    truth = env.customer_truth()
    assert {"1 new st", "113 hickory ln"} <= truth["street"] and "73301" in truth["zip"]


# ------------------------------------------------------------------------------ through the gyms
def llm_env(gym: str, server: ChatServer):
    backend = OpenAIChatBackend(server.base_url, "m", api_key="k", timeout_s=5, retry_backoff_s=0.01)
    return make(gym, knobs=knobs(user={"user_strategy_mix": 0.0}), user_factory=UserFactory(backend))


CASES = [  # gym, task, question, a wrong answer, the true answer
    ("tau2_retail", "5", "What is your zip code?", "My zip code is 10001.", "My zip code is 28236."),
    ("tau2_airline", "0", "What is your user id?", "It's emma_kim_4489.", "It's emma_kim_9957."),
    (
        "tau2_telecom",
        TELECOM_TASK,
        "What is your email?",
        "It's jon.smith@example.com.",
        "It's john.smith@example.com.",
    ),
    ("tau", 3, "What is your email?", "sofia.k@example.com", "sofia.kovacs4505@example.com"),
]


@pytest.mark.parametrize("gym,task,question,wrong,true", CASES)
def test_an_llm_customer_stating_a_wrong_value_is_flagged_the_true_and_unknown_are_not(
    gym, task, question, wrong, true
):
    answers = iter([wrong, true, "Sorry, I don't remember that."])
    with ChatServer(lambda req: next(answers)) as srv:
        env = llm_env(gym, srv)
        if gym == "tau":
            env.reset(seed=0, options={"task_index": task})
        else:
            reset_on(env, task)
        assert env.arm == "llm"
        for _ in range(3):
            env.step(env.render_message(question))
    flags = [t.user_reply.flags.get("check") for t in env.state.turns]
    assert flags[0]["wrong"] and flags[0]["said"] in wrong.lower() and flags[0]["expected"]
    assert flags[1] == {"wrong": False}
    assert flags[2] is None  # no value stated: nothing to check


@pytest.mark.parametrize("gym", ["tau2_airline", "tau2_retail", "tau2_telecom", "tau"])
def test_the_symbolic_customer_is_never_flagged(gym):
    env = env_of(gym)
    checked = 0
    questions = [
        "May I have your full name?",
        "What is your user id?",
        "What is your email address and zip code?",
        "What is your phone number?",
        "What is the order or reservation number?",
    ]
    for seed in range(6):
        for agent in ("oracle", "random"):
            rec = run_episode(env, agent, seed, {"task_index": seed})
            for t in rec["turns"]:
                assert not ((t.get("user_reply") or {}).get("flags", {}).get("check") or {}).get("wrong"), t
        env.reset(seed=seed, options={"task_index": seed})
        for q in questions:
            _, _, _, _, info = env.step(env.render_message(q))
            check = info["turn"]["user_reply"]["flags"].get("check")
            checked += check is not None
            assert not (check or {}).get("wrong"), info["turn"]["user_reply"]
    assert checked >= 6


def test_metrics_rows_of_a_tau2_gym_carry_user_wrong_rate_per_gym_and_arm():
    """A lying LLM customer and the symbolic one on tau2_retail: the metrics rows split the rate."""
    episodes = []
    with ChatServer(lambda req: "My zip code is 10001 and my email is nobody@example.com.") as srv:
        env = llm_env("tau2_retail", srv)
        for seed in range(2):
            env.reset(seed=seed, options={"task_index": seed})
            for q in ("What is your zip code?", "Anything else I should know?"):
                env.step(q)
            episodes.append(env.episode_record())
    env = env_of("tau2_retail")
    for seed in range(2):
        env.reset(seed=seed, options={"task_index": seed})
        env.step("What is your zip code?")
        episodes.append(env.episode_record())
    m = episode_metrics(episodes)
    assert m["arm/llm/user_replies"] == 4 and m["arm/llm/user_wrong_rate"] == 1.0
    assert m["arm/symbolic/user_replies"] == 2 and m["arm/symbolic/user_wrong_rate"] == 0.0
    assert m["arm/symbolic/user_checked_rate"] == 1.0  # the symbolic customer stated its zip code
    assert m["gym/tau2_retail/user_wrong_rate"] == pytest.approx(4 / 6)
    assert m["user_wrong_rate"] == pytest.approx(4 / 6)
