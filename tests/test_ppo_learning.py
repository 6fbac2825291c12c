"""PPO learns on a real gym (slow: minutes of CPU).

The learning benchmark (``benchmarks/bench_ppo_learning.py``): a warm start with ``eau sft``, then
``eau train --preset tiny-warm`` with PPO from it, then the held-out (eval split) episodes of the warm
start and of the final checkpoint on the same tasks with the same sampling seed. The issue's target:
+0.3 held-out *success* within 10 minutes, 3 seeds (BENCHMARKS.md). Two tests:

* the benchmark's own setting for one seed (the give-up warm start, ~15 minutes, then 10 minutes of
  PPO, ~27 minutes in all): held-out success rises by the target;
* a short one (public-planner warm start, 10 PPO steps, ~4 minutes): held-out reward rises far above
  the noise (48 episodes: standard error of a mean reward ~0.07).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_ppo_raises_held_out_reward_of_the_warm_start(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "bench_ppo_learning.py"),
            "--seeds",
            "0",
            "--minutes",
            "12",
            "--ppo-steps",
            "10",
            "--sft-episodes",
            "256",
            "--sft-epochs",
            "4",
            "--demonstrator",
            "public",
            "--give-up",
            "0",
            "--threads",
            "1",
            # a weak warm start and no KL anchor: the regime where 10 steps move the reward most
            "--set",
            "agent_knobs.kl_coef=0.0",
            "--set",
            "agent_knobs.lr_warmup_steps=0",
            "--tasks",
            "48",
            "--work",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=1700,
        cwd=REPO,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    res = json.loads(out.stdout)["results"][0]
    before, after = res["held_out_before"], res["held_out_after"]
    assert res["ppo_steps"] == 10, res
    assert before["format_error_rate"] < 0.1  # the warm start writes the action format
    assert after["reward_mean"] >= before["reward_mean"] + 0.15, (before, after)
    # the gain is covered details (the gym's own score), not the rule bonuses; with the default
    # intention_deadlock rule the policy does not buy it by asking until the limit (questions 6.0 -> 5.9)
    assert after["task_score_mean"] > before["task_score_mean"], (before, after)
    assert after["deadlock_rate"] <= before["deadlock_rate"] + 0.1, (before, after)


@pytest.mark.slow
@pytest.mark.timeout(2700)
def test_ppo_lifts_held_out_success_of_the_give_up_warm_start_by_the_target(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "bench_ppo_learning.py"),
            "--seeds",
            "0",
            "--minutes",
            "10",
            "--work",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=2600,
        check=False,
        cwd=REPO,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    res = json.loads(out.stdout)["results"][0]
    before, after = res["held_out_before"], res["held_out_after"]
    # the target, for this seed (BENCHMARKS.md has the 3 seeds)
    assert after["success_rate"] >= before["success_rate"] + 0.3, (before, after)
    assert after["turns_mean"] >= before["turns_mean"] + 2.0, (before, after)  # it learned to keep asking
    assert after["format_error_rate"] <= before["format_error_rate"] + 0.05, (before, after)
