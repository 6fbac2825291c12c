"""τ²-bench's premature-stop failure, checked on the symbolic customer of every τ² gym and tau: it
never ends the conversation as satisfied while a requested write or a required output is missing,
even when the agent confirms one action, does it and then asks "anything else?" at every turn.
The checks are the stop benchmark's (``benchmarks/bench_tau2.py --parts premature``)."""

from __future__ import annotations

import sys
from pathlib import Path

from tau2_support import need_tau2

need_tau2()

import pytest  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_tau2 as bench  # noqa: E402  (benchmarks/ is put on sys.path just above)

from harness.agents.scripted import run_episode  # noqa: E402
from harness.envs.registry import make  # noqa: E402

GYMS = ("tau2_airline", "tau2_retail", "tau2_telecom", "tau")


def _several_requests(env, limit: int) -> list[tuple[str, int]]:
    out = []
    for split, i in bench._tasks(env):
        env.reset(seed=i, options={"task_index": i, "split": split})
        if len(bench.requested_writes(env)) + len(env.outputs()) >= 2:
            out.append((split, i))
        if len(out) >= limit:
            break
    return out


@pytest.mark.parametrize("gym", GYMS)
def test_the_customer_does_not_stop_while_a_request_is_left(gym):
    env = make(gym)
    tasks = _several_requests(env, 4)
    assert tasks, "every gym has tasks with several requests"
    for split, i in tasks:
        rec = run_episode(env, bench.closes_after_first_write, seed=i, options={"task_index": i, "split": split})
        stop = bench.stop_check(env, rec)
        assert stop is None or not stop["missing"] or stop["reason"] != "done", (env.task.task_id, stop)
        assert not rec["success"], env.task.task_id  # the agent left a request undone: no reward
        rec = run_episode(env, "oracle", seed=i, options={"task_index": i, "split": split})
        stop = bench.stop_check(env, rec)
        assert rec["success"] and stop is not None and stop["reason"] == "done" and not stop["missing"]


def test_stop_check_sees_a_stop_with_a_request_left():
    """The check itself: a stop planted while a write is pending (the customer's flags as a τ²
    user simulator that says ###STOP### right after confirming would set them) is reported."""
    env = make("tau2_retail")
    env.reset(seed=0, options={"task_index": 0, "split": "train"})
    env.step(env.render_message("I will exchange the items of order #W2378156. Do you confirm (yes/no)?"))
    rec = env.episode_record()
    rec["tau2"] = {"end": "user_stop", "score": {"checks": {"not_communicated": []}}}
    rec["turns"][-1]["user_reply"]["flags"]["stop"] = "done"
    stop = bench.stop_check(env, rec)
    assert stop == {"reason": "done", "missing": ["exchange_delivered_order_items"], "after_confirming": True}
