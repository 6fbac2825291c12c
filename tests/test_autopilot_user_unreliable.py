"""Acceptance: eau autopilot acts on an LLM user that contradicts the task, in a live tiny run.

The fault is planted through the LLM user arm: a real OpenAI-compatible server on loopback plays an
intention user who answers each question with the matching hidden detail, its value swapped for
another of the detail's pool ("My budget is $800." when it is $300). The run (``eau train --preset
tiny`` on intention from a short ``eau sft`` warm start, so that the policy asks questions) starts
with ``user.user_strategy_mix`` 0.5. The autopilot, ticking next to it, diagnoses
``user_unreliable`` (the LLM arm flagged), raises ``user.user_strategy_mix`` 0.5 -> 0.75 through
``eau knobs set --author agent``, measures ``user_wrong_rate`` with ``eau effect`` after the lag,
and records a finding.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from analysis_runs import UserModelServer, lying_user

from harness.io import jsonl

REPO = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]
SFT = ["--set", "episodes=96", "--set", "epochs=6", "--set", "lr=3.0e-3", "--set", "gyms=[intention]"]
AGENT = {"lr": 3.0e-4, "kl_coef": 0.02, "lr_warmup_steps": 8, "max_new_tokens_per_turn": 24, "max_episode_tokens": 768}


def test_autopilot_lowers_the_llm_share_of_a_user_that_contradicts_the_task(tmp_path, knobs_dir):
    rdir, pool = tmp_path / "runs", tmp_path / "pool"
    env = {
        **os.environ,
        "EAU_KNOBS_DIR": str(knobs_dir),
        "EAU_RUNS_DIR": str(rdir),
        "EAU_POOL_DIR": str(pool),
        "EAU_TEST_USER_KEY": "sk-test",
        "OMP_NUM_THREADS": "1",
    }
    for name, values in (("agent.yaml", AGENT), ("user.yaml", {"user_strategy_mix": 0.5})):
        doc = yaml.safe_load((knobs_dir / name).read_text())
        doc.update(values)
        (knobs_dir / name).write_text(yaml.safe_dump(doc, sort_keys=False))
    cli = [sys.executable, "-m", "harness.cli.main"]
    sft = subprocess.run(
        [*cli, "sft", "--out", str(tmp_path / "sft"), "--json", *SFT],
        env=env,
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=900,
    )
    assert sft.returncode == 0, sft.stderr[-3000:]
    server = UserModelServer(lying_user)
    user_llm = (
        f"user_llm={{kind: openai, base_url: '{server.base_url}', model: user-sim, "
        "api_key_env: EAU_TEST_USER_KEY, timeout_s: 5.0, retry_backoff_s: 0.01}"
    )
    train_args = [
        *cli, "train", "--preset", "tiny", "--steps", "30", "--run-id", "liar", "--no-progress",
        "--set", f"init_checkpoint={tmp_path / 'sft'}", "--set", "agent_knobs={}", "--set", "env_knobs={}",
        "--set", "tasks_per_step=2", "--set", "samples_per_task=4", "--set", "torch_threads=1",
        "--set", "checkpoint_every=0", "--set", user_llm,
    ]  # fmt: skip
    try:
        with open(tmp_path / "train.log", "w") as log:
            train = subprocess.Popen(
                train_args, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=REPO
            )
        try:
            ap = subprocess.run(
                [
                    *cli,
                    "autopilot",
                    "--run",
                    "liar",
                    "--every",
                    "3",
                    "--window",
                    "3",
                    "--lag",
                    "0",
                    "--effect-window",
                    "3",
                    "--poll",
                    "0.5",
                    "--max-interventions",
                    "1",
                    "--json",
                ],  # fmt: skip
                env=env,
                capture_output=True,
                text=True,
                cwd=REPO,
                timeout=1800,
            )
            assert ap.returncode == 0, ap.stderr[-3000:]
            assert train.wait(timeout=900) == 0, (tmp_path / "train.log").read_text()[-3000:]
        finally:
            if train.poll() is None:
                os.killpg(train.pid, signal.SIGKILL)
    finally:
        server.close()
    run = rdir / "liar"
    doc = json.loads(ap.stdout)
    actions = [t["action"] for t in doc["ticks"]]
    assert doc["applied"] == 1 and "measured" in actions, json.dumps(doc)[:4000]
    first = next(t for t in doc["ticks"] if t["action"] == "applied")
    last = next(t for t in doc["ticks"] if t["action"] == "measured")

    # diagnosed: the LLM arm's replies contradict the task; the table's entry for it applied
    assert "user_unreliable" in first["flagged"]
    assert (first["detector"], first["knob"], first["old"], first["new"]) == (
        "user_unreliable",
        "user.user_strategy_mix",
        0.5,
        0.75,
    )
    assert first["reason"].startswith("autopilot: user_unreliable: user_wrong_rate lower")
    events = jsonl.read(run / "knob_events.jsonl")
    ev = next(e for e in events if e["knob"] == "user.user_strategy_mix" and e["author"] == "agent")
    assert ev["status"] == "accepted" and ev["new"] == 0.75 and ev["id"] == last["event"]

    # the change reached the episodes: every episode from its step on drew its arm with the new mix
    eff = ev["step_effective"]
    for step in (eff - 1, eff):
        eps = jsonl.read(run / "trajectories" / f"step_{step:06d}.jsonl")
        assert {e["knobs"]["user"]["user_strategy_mix"] for e in eps} == {0.75 if step >= eff else 0.5}

    # the LLM arm was flagged wrong and the symbolic arm never, in the run's own metrics
    lines = jsonl.read(run / "metrics.jsonl")
    llm_wrong = [m["arm/llm/user_wrong_rate"] for m in lines if m.get("arm/llm/user_replies")]
    assert llm_wrong and max(llm_wrong) >= 0.5
    assert all(m.get("arm/symbolic/user_wrong_rate", 0.0) == 0.0 for m in lines)

    # measured after the lag on user_wrong_rate (guard success_rate), decided, recorded
    assert last["verdict"] in ("improved", "harmed", "inconclusive") and "user_wrong_rate" in last["measured"]
    show = subprocess.run(
        [*cli, "finding", "show", last["finding"], "--json"], env=env, capture_output=True, text=True, cwd=REPO
    )
    f = json.loads(show.stdout)
    assert f["verdict"] == last["verdict"] and f["knobs"] == ["user.user_strategy_mix"] and f["events"] == [ev["id"]]
    assert {"autopilot", "user_unreliable", "raise"} <= set(f["tags"])
    # a repair: kept unless the measurement says it harmed
    assert (last["reverted"] is None) == (last["verdict"] != "harmed")
