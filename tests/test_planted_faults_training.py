"""Planted-fault tests with real training runs of the ``tiny`` preset (slow).

tests/test_analysis_detectors.py checks the detectors on runs played by a scripted learner; here
every run is a real ``eau train --preset tiny`` (PPO on the tiny model, warm-started with ``eau sft``
once per session), read back with ``eau diagnose --json``. One healthy run, and one run per
detector with its fault planted only through the run's knob files and rule files (a private copy of
``knobs/``) or, for arm disparity, through the LLM user arm (a real OpenAI-compatible server on
loopback, tests/analysis_runs.py, playing a user that never helps).

Every run trains on intention except the tool-failure run, which trains on travel (the gym with a
search tool). Two warm starts: a short mixed one (intention and travel demonstrations, ~1 minute)
for every run but arm disparity's, which starts from the learning benchmark's (512 oracle intention
demonstrations x 10 epochs, ~9 minutes). A user-arm fault only shows when the policy can get
something out of the working arm: from the short warm start it elicited almost nothing from either
arm (window rewards 0.23 vs 0.01 with a standard deviation of 0.93: effect 0.3 sd, success 0.07 vs
0.00). The stronger warm start is not used everywhere because under the base knobs (lr 1e-3, no KL)
its language erodes within 6 steps: the healthy run then deadlocks on malformed turns (measured).
All agent and env values come from the knob files: the preset's ``agent_knobs`` and ``env_knobs``
are emptied and their values written into the copy instead, so a planted value is not overwritten
at run start.

Base knobs shared by every run (not faults): the preset's agent values with 24 tokens per turn,
``max_steps`` 8 (the warm start's demonstrations ask up to 6 questions, then answer) and intention's
``success_threshold`` 0.3, so a warm-started tiny policy solves some tasks (at the default 0.7 it
solves none in a few steps, and every run would look like one with unreachable tasks).

What a tiny policy trained for 6 steps can show, measured: it may solve nothing in a window (then
unreachable_tasks flags even the healthy run); it stops calling a tool that always fails within a
step or two (so the tool run is diagnosed over all its steps). Detector fixes found here:
tests/test_analysis_real_run_fixes.py.

Runs are sequential (one CPU core each); set ``EAU_PLANTED_SFT_DIR`` (the short warm start) and
``EAU_PLANTED_ORACLE_SFT_DIR`` to reuse existing warm starts.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from analysis_runs import UserModelServer, chatty_user, farming_rules, unhelpful_user

# the runs are built in a module fixture: its setup (about 15 minutes) counts against every test's timeout
pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]

REPO = Path(__file__).resolve().parents[1]
# a short warm start that writes intention's questions and travel's search calls, and the learning
# benchmark's (benchmarks/bench_ppo_learning.py: held-out success 0.13 at threshold 0.7, 4.9 turns)
SFT = {"short": ["--set", "episodes=128", "--set", "epochs=6", "--set", "lr=3.0e-3",
                 "--set", "gyms=[intention,intention,travel]"],
       "oracle": ["--set", "episodes=512", "--set", "epochs=10", "--set", "gyms=[intention]"]}
SFT_REUSE = {"short": "EAU_PLANTED_SFT_DIR", "oracle": "EAU_PLANTED_ORACLE_SFT_DIR"}
STEPS = 6
WINDOW = 3  # diagnose the last 3 steps; the question-rate test compares them with the 3 before
TRAIN = ["--preset", "tiny", "--no-progress", "--json", "--steps", str(STEPS), "--set", "tasks_per_step=2",
         "--set", "samples_per_task=4", "--set", "torch_threads=1", "--set", "agent_knobs={}",
         "--set", "env_knobs={}", "--set", "checkpoint_every=0", "--set", "keep_checkpoints=1"]
# the tiny preset's agent_knobs, written into agent.yaml (24 tokens a turn keeps a step to seconds)
BASE_AGENT = {"lr": 1.0e-3, "critic_lr": 1.0e-3, "entropy_coeff": 0.001, "kl_coef": 0.0, "mini_batch_size": 16,
              "micro_batch_size": 8, "ppo_epochs": 2, "max_new_tokens_per_turn": 24, "max_episode_tokens": 1024}
BASE_ENV = {"max_steps": {"default": 8}, "success_threshold": 0.3}


def _env(threads: int = 1) -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
            "PYTHONPATH": str(REPO / "tests")}


def eau(args: list[str], knobs: Path, runs: Path, timeout: float = 600, threads: int = 1) -> subprocess.CompletedProcess:
    env = {**_env(threads), "EAU_KNOBS_DIR": str(knobs), "EAU_RUNS_DIR": str(runs)}
    return subprocess.run([sys.executable, "-m", "harness.cli.main", *args], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=REPO, check=False)


def _update_yaml(path: Path, values: dict[str, Any]) -> None:
    doc = yaml.safe_load(path.read_text())
    doc.update(values)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def knobs_copy(dst: Path, *, agent: dict | None = None, env: dict | None = None, user: dict | None = None,
               user_rules: dict[str, dict] | None = None, reward_rules: dict[str, dict] | None = None) -> Path:
    """The repository's knobs with the base values, then the plant's values and rule files, written in."""
    shutil.copytree(REPO / "knobs", dst, ignore=shutil.ignore_patterns(".pending", ".history"))
    _update_yaml(dst / "agent.yaml", {**BASE_AGENT, **(agent or {})})
    _update_yaml(dst / "env.yaml", {**BASE_ENV, **(env or {})})
    if user:
        _update_yaml(dst / "user.yaml", user)
    for gym, rules in (user_rules or {}).items():
        (dst / "rules" / "users" / f"{gym}.yaml").write_text(yaml.safe_dump(rules, sort_keys=False))
    for stem, rules in (reward_rules or {}).items():
        (dst / "rules" / "rewards" / f"{stem}.yaml").write_text(yaml.safe_dump(rules, sort_keys=False))
    return dst


# ---------------------------------------------------------------------------- plants
def question_penalty() -> dict[str, Any]:
    """A rule file charging every question: PPO learns to answer sooner (the question rate drops)."""
    return {"description": "planted: charges every question",
            "rules": [{"name": "ask_penalty", "predicate": "question_asked", "value": -0.4}]}


HEALTHY = "healthy"
# name -> knobs_copy keyword arguments, plus gyms (train --set gyms=) and llm (the run needs the LLM user)
PLANTS: dict[str, Callable[[], dict[str, Any]]] = {
    HEALTHY: dict,
    # 4 turns, 3 questions required before an answer is accepted: earlier answers are refused
    "deadlock": lambda: {"env": {"max_steps": {"default": 4}, "min_questions": 3}},
    # every episode goes to an LLM user that pastes every fact it was told into each reply (the symbolic
    # user cannot be made to: its replies carry at most facts_per_reply matched facts, whatever the knobs)
    "user_leakage": lambda: {"user": {"user_strategy_mix": 0.0}, "llm": chatty_user},
    # a rule paying for every question, next to the default rules
    "reward_hacking": lambda: {"reward_rules": {"farm": farming_rules()}},
    # near-greedy sampling: token entropy (measured at the sampling temperature) collapses, and the
    # policy repeats its most likely turn. One run serves both detectors (SHARED_RUN): at 0.05 the
    # turn texts collapsed in one session and not in the next.
    "entropy_collapse": lambda: {"agent": {"temperature": 0.02}},
    # travel with every search failing
    "silent_tool_failures": lambda: {"env": {"search_failure_interval": 1}, "gyms": "[travel]"},
    # intention's only fact kind is filtered out: nothing is ever disclosed, nothing can succeed
    "unreachable_tasks": lambda: {"user": {"reveal_kinds": ["preference", "probe"]}},
    # half the episodes go to an LLM user that never helps (from the stronger warm start: see above)
    "arm_disparity": lambda: {"user": {"user_strategy_mix": 0.5}, "llm": unhelpful_user, "warm": "oracle"},
    # a rule charging every question
    "question_rate_drop": lambda: {"reward_rules": {"ask": question_penalty()}},
}
SHARED_RUN = {"template_collapse": "entropy_collapse"}
PLANTED = tuple(n for n in PLANTS if n != HEALTHY) + tuple(SHARED_RUN)
# PPO stops calling a tool that always fails within one or two steps (measured: 26 failed searches at
# step 0, then 1, 2, 0, 0, 0): the last WINDOW steps hold no call left to judge, so this run is
# diagnosed over all its steps.
RUN_WINDOW = {"silent_tool_failures": STEPS}
# Second flags a planted fault really causes (not false positives), with the reason:
COLLATERAL: dict[str, set[str]] = {
    # no answer is accepted before the last turn: most tasks are never solved
    "deadlock": {"unreachable_tasks"},
    # the policy learns to ask until the turn limit and never answers (as in test_analysis_detectors)
    "reward_hacking": {"deadlock", "unreachable_tasks"},
    # near-greedy sampling: the policy repeats its most likely turn, a question, until the turn limit;
    # token entropy and turn texts collapse together (one fault, both symptoms)
    "entropy_collapse": {"template_collapse", "deadlock", "unreachable_tasks", "question_rate_drop"},
    # nothing is ever disclosed: asking never pays, so PPO stops asking (or asks to the turn limit)
    "unreachable_tasks": {"deadlock", "question_rate_drop"},
    # a policy that stops asking learns nothing about the task and solves none
    "question_rate_drop": {"unreachable_tasks"},
}
# Detector checks a run may fail without a defect (flags outside COLLATERAL); the test asserts the count.
# Measured (one session): 10 of 71 checks before the detector fixes and the shared run; what remains
# is the weak tiny policy, described truly by the detectors but not caused by the plant: in travel it
# solves nothing, asks to the turn limit and earns mostly new_fact_disclosed (4 flags on the tool run),
# on intention it may solve nothing in the window (unreachable_tasks on the healthy and arm runs).
# 2026-12-03, arm run from the oracle warm start: 4 of 63 (deadlock, reward_hacking, unreachable_tasks on
# the tool run, unreachable_tasks on the healthy run); the arm run flags arm_disparity alone.
MAX_FALSE_POSITIVES = 8


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("planted-training")


def _warm_start(kind: str, work: Path) -> Path:
    reuse = os.environ.get(SFT_REUSE[kind])
    if reuse and (Path(reuse) / "policy.pt").exists():
        return Path(reuse)
    out = work / f"sft-{kind}"
    t0 = time.perf_counter()
    # nothing else runs yet: every core
    proc = eau(["sft", "--out", str(out), "--json", *SFT[kind]], knobs_copy(work / f"knobs-sft-{kind}"), work / "runs",
               timeout=1200, threads=os.cpu_count() or 1)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    print(f"warm start {kind}: loss {doc['loss_first']:.2f} -> {doc['loss_last']:.2f} in {time.perf_counter() - t0:.0f}s")
    return out


@pytest.fixture(scope="module")
def warm_start(work: Path) -> dict[str, Path]:
    return {kind: _warm_start(kind, work) for kind in SFT}


def train_and_diagnose(name: str, work: Path, warm: dict[str, Path]) -> dict[str, Any]:
    spec = PLANTS[name]()
    gyms = spec.pop("gyms", "[intention]")
    sft = warm[spec.pop("warm", "short")]
    llm = spec.pop("llm", None)
    knobs = knobs_copy(work / f"knobs-{name}", **spec)
    runs = work / "runs"
    extra = ["--set", f"gyms={gyms}", "--set", f"init_checkpoint={sft}", "--run-id", name]
    server = UserModelServer(llm) if llm is not None else None
    if server is not None:
        extra += ["--set", (f"user_llm={{kind: openai, base_url: '{server.base_url}', model: user-sim, "
                  "api_key: sk-test, timeout_s: 5.0, retry_backoff_s: 0.01}")]
    t0 = time.perf_counter()
    try:
        proc = eau(["train", *TRAIN, *extra], knobs, runs)
    finally:
        if server is not None:
            server.close()
    assert proc.returncode == 0, proc.stderr[-3000:]
    train_s = time.perf_counter() - t0
    window = RUN_WINDOW.get(name, WINDOW)
    diag = eau(["diagnose", "--run", name, "--runs-dir", str(runs), "--json", "--window", str(window)], knobs, runs)
    assert diag.returncode == 0, diag.stderr[-3000:]
    doc = json.loads(diag.stdout)
    doc["train_s"] = round(train_s, 1)
    doc["run_dir"] = str(runs / name)
    if server is not None:
        doc["llm_calls"] = server.calls
    return doc


@pytest.fixture(scope="module")
def reports(work: Path, warm_start: dict[str, Path]) -> dict[str, dict[str, Any]]:
    out = {}
    for name in PLANTS:  # one at a time: each run uses one core
        out[name] = train_and_diagnose(name, work, warm_start)
        print(f"{name}: trained in {out[name]['train_s']}s, flagged {out[name]['flagged']}")
    return out


def finding(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return next(f for f in doc["findings"] if f["name"] == name)


@pytest.mark.parametrize("name", PLANTED)
def test_planted_fault_is_flagged_with_evidence(reports, name):
    name_run = SHARED_RUN.get(name, name)
    f = finding(reports[name_run], name)
    assert f["flagged"], json.dumps(f, indent=1)[:3000]
    assert f["severity"] in ("medium", "high") and f["summary"] and f["suggestion"]
    assert f["evidence"]["metrics"], f
    if name != "entropy_collapse":  # a metric-only detector: its evidence is the entropy series
        assert f["evidence"]["episodes"], f
        ids = {json.loads(line)["episode_id"] for p in (Path(reports[name_run]["run_dir"]) / "trajectories").glob("*.jsonl")
               for line in p.read_text().splitlines() if line.strip()}
        assert set(f["evidence"]["episodes"]) <= ids, (name, f["evidence"]["episodes"])


def test_healthy_run_is_not_flagged(reports):
    """No detector flags the healthy run, except unreachable_tasks when the tiny policy solved nothing
    at all in the window: then "no task solved" is literally true, and no detector can tell a policy
    that never succeeds from tasks nobody can solve (it is counted as a false positive below)."""
    doc = reports[HEALTHY]
    assert set(doc["flagged"]) <= {"unreachable_tasks"}, [finding(doc, n)["summary"] for n in doc["flagged"]]
    if doc["flagged"]:
        per_gym = finding(doc, "unreachable_tasks")["evidence"]["metrics"]["per_gym"]
        assert all(g["success_rate"] == 0 for g in per_gym.values()), per_gym


def test_false_positives_counted(reports):
    detectors = [f["name"] for f in reports[HEALTHY]["findings"]]
    assert set(PLANTED) == set(detectors), "each detector needs one planted run"
    planted_by = {run: {run} | {d for d, r in SHARED_RUN.items() if r == run} for run in reports}
    table: dict[str, list[str]] = {}
    checks = 0
    for run, doc in reports.items():
        expected = planted_by[run] | COLLATERAL.get(run, set())
        checks += len([d for d in detectors if d not in expected])
        table[run] = sorted(set(doc["flagged"]) - expected)
    fp = sum(len(v) for v in table.values())
    per_detector = {d: sum(d in v for v in table.values()) for d in detectors}
    print("\nrun                    flagged (planted fault first)                       false positives")
    for run, doc in reports.items():
        print(f"{run:22} {', '.join(doc['flagged']) or '-':50} {', '.join(table[run]) or '-'}")
    print(f"false positives per detector: {per_detector}")
    print(f"false positives: {fp} of {checks} detector checks")
    assert fp <= MAX_FALSE_POSITIVES, table


def test_evidence_names_the_planted_cause(reports):
    d = finding(reports["deadlock"], "deadlock")["evidence"]["metrics"]
    assert d["min_questions"] == [3] and d["with_refused_early_answer"] > 0
    r = finding(reports["reward_hacking"], "reward_hacking")["evidence"]["metrics"]
    assert max(r["rule_shares"], key=r["rule_shares"].get) == "ask_bonus"
    t = finding(reports["silent_tool_failures"], "silent_tool_failures")["evidence"]["metrics"]
    assert t["worst_groups"] and all(g["tool"] == "search" and g["fail_share"] >= 0.9 for g in t["worst_groups"])
    u = finding(reports["unreachable_tasks"], "unreachable_tasks")["evidence"]["metrics"]["per_gym"]["intention"]
    assert u["disclosures_mean_of_unsolved"] == 0.0
    assert reports["arm_disparity"]["llm_calls"] > 0 and reports["user_leakage"]["llm_calls"] > 0
    # the LLM user never helps: whatever the tiny policy solves, the symbolic arm earns more
    a = finding(reports["arm_disparity"], "arm_disparity")["evidence"]["metrics"]["gaps"]["all"]
    assert a["reward_symbolic_minus_llm"] > 0 and a["flagged_by"], a
    q = finding(reports["question_rate_drop"], "question_rate_drop")["evidence"]["metrics"]["question_rate"]
    assert q["relative_drop"] >= 0.25
    e = finding(reports["entropy_collapse"], "entropy_collapse")["evidence"]["metrics"]
    assert e["temperature"] == 0.02 and e["entropy_now"] < 0.05
