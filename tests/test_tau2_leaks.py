"""The τ² and tau customers leak nothing they were not given: no reply states an unknown value, and a
confirmation of an id the customer was not given gets the same reply whether the id is right or has
one digit changed (else a policy could search ids through the customer, one bit per question).
The probes are the leak benchmark's (``benchmarks/bench_tau2.py``), on a sample of every gym's tasks."""

from __future__ import annotations

import sys
from pathlib import Path

from tau2_support import need_tau2

need_tau2()

import pytest  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_tau2 as bench  # noqa: E402  (benchmarks/ is put on sys.path just above)

from harness.envs.registry import make  # noqa: E402
from harness.envs.tau2.scenario import id_tokens  # noqa: E402

GYMS = ("tau2_airline", "tau2_retail", "tau2_telecom", "tau")


def test_one_digit_changed():
    assert bench.one_digit_changed("#W2378156") == "#W2378157"
    assert bench.one_digit_changed("4983901480") == "4983901481"
    assert bench.one_digit_changed("credit_card_9513929") == "credit_card_9513920"
    assert bench.one_digit_changed("HAT170") == "HAT171"


def test_the_reports_probe_right_and_wrong_item_ids_get_the_same_reply():
    """tau2_retail task 0 wants item 4983901480 exchanged; the customer was never told that id. It
    answered Yes to it and No when one digit changed."""
    env = make("tau2_retail")
    env.reset(seed=0, options={"task_index": 0, "split": "train"})
    assert env.task.data["tau2_id"] == "0"
    assert "4983901480" not in id_tokens(env.task.data["known_corpus"], env.user.scenario.ids)
    msg = "To confirm: I will exchange using {} as we discussed. Yes or no?"
    right = bench._reply(env, "train", 0, msg.format("4983901480"))
    wrong = bench._reply(env, "train", 0, msg.format("4983901481"))
    assert right.text == wrong.text and right.flags["confirmed"] == wrong.flags["confirmed"]


@pytest.mark.parametrize("gym", GYMS)
def test_no_reply_states_an_unknown_value_and_no_confirmation_tells_a_right_id_from_a_wrong_one(gym):
    """Every 7th task of both splits: every identifier or number of a reply (to info questions and to
    confirmations that carry the gold arguments) that is in the unknown info or a gold action's
    arguments is one the customer knows; and every confirmation pair gets one reply."""
    res = bench.leaks(gym, step=7)
    assert res["replies_stating_an_unknown_value"] == 0, res["examples"]
    assert res["pairs_answered_differently"] == 0, res["examples"]
    assert res["value_probes"] >= 10 * res["tasks"]
    if gym != "tau2_telecom":  # telecom's writes are mostly the customer's own phone actions
        assert res["confirmation_pairs"] >= 20, res


def test_a_known_id_is_still_checked():
    """An id the customer was given is judged: task 0's customer knows its order #W2378156, so an
    exchange of that order gets yes and of an order one digit off (an id it was not given) no."""
    env = make("tau2_retail")
    msg = "I will exchange the items of order {} as discussed. Do you confirm (yes/no)?"
    ok = bench._reply(env, "train", 0, msg.format("#W2378156"))
    assert ok.flags["confirmed"] == "exchange_delivered_order_items"
    assert bench._reply(env, "train", 0, msg.format("#W2378157")).flags["confirmed"] is None
    assert bench._reply(env, "train", 0, msg.format("#W0000000")).flags["confirmed"] is None
