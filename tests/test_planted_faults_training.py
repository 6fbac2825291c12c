"""Planted-fault tests with real training runs of the ``tiny`` preset (slow).

tests/test_analysis_detectors.py checks the detectors on runs played by a scripted learner; here
every run is a real ``eau train --preset tiny`` (PPO on the tiny model, warm-started with ``eau sft``
once per session), read back with ``eau diagnose --json``. One healthy run, and one run per
detector with its fault planted only through the run's knob files and rule files (a private copy of
``knobs/``) or, for arm disparity, through the LLM user arm (a real OpenAI-compatible server on
loopback, tests/analysis_runs.py, playing a user that never helps).

Every run trains on intention except the tool-failure run, which trains on travel (the gym with a
search tool). Three warm starts: the learning benchmark's (512 oracle intention demonstrations x 10
epochs, ~9 minutes: the policy asks well-formed questions and solves some tasks) for every intention
run, a short mixed one (intention and travel demonstrations, ~1 minute) for the near-greedy run, and
a short travel one for the travel run. Why the strong one: from the short warm start the healthy run solved nothing in
its window (unreachable_tasks flagged a healthy run), and a user-arm fault did not show because the
weak policy got almost nothing out of either arm (window rewards 0.23 vs 0.01, sd 0.93). Why the
near-greedy run keeps the short one: from the oracle warm start a near-greedy policy still asks
task-specific questions (distinct-2 0.07 against the floor 0.05, the same top opening as the healthy
run): its turns converge without collapsing onto one template within 6 steps (measured).
All agent and env values come from the knob files: the preset's ``agent_knobs`` and ``env_knobs``
are emptied and their values written into the copy instead, so a planted value is not overwritten
at run start.

Base knobs shared by every run (not faults): the learning benchmark's agent values after a warm
start (lr 3e-4, kl_coef 0.02, a warm-up over the first 8 updates; at the preset's lr 1e-3 without a
KL anchor the oracle warm start's language eroded within 6 steps and the healthy run deadlocked on
malformed turns; the warm-up keeps the first update from being the largest, a KL of 65 without it),
24 tokens per turn, ``max_steps`` 8 (the demonstrations ask up to 6 questions, then answer) and
intention's ``success_threshold`` 0.3, so a warm-started tiny policy solves tasks within a few steps.

What a tiny policy trained for 6 steps can show, measured: it stops calling a tool that always fails
within a step or two (so the tool run is diagnosed over all its steps); it learns to ask less from a
question penalty over several steps (so that run trains 8 steps and compares halves). Detector fixes
found here: tests/test_analysis_real_run_fixes.py.

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
from analysis_runs import UserModelServer, chatty_user, farming_rules, lying_user, unhelpful_user

from harness.knobs.folder import defaults_dir

# the runs are built in a module fixture: its setup (about 15 minutes) counts against every test's timeout
pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]

REPO = Path(__file__).resolve().parents[1]
# a short warm start that writes intention's questions and travel's search calls, and the learning
# benchmark's (benchmarks/bench_ppo_learning.py: held-out success 0.13 at threshold 0.7, 4.9 turns)
SFT = {
    "short": [
        "--set",
        "episodes=128",
        "--set",
        "epochs=6",
        "--set",
        "lr=3.0e-3",
        "--set",
        "gyms=[intention,intention,travel]",
    ],
    "oracle": ["--set", "episodes=512", "--set", "epochs=10", "--set", "gyms=[intention]"],
    # the tool-failure run's: travel only, so that the policy searches the oracle's way ("flight
    # options") often enough for one argument to be judged. From the short mixed one it searched 5
    # times in 6 steps, each with other words, and no argument group reached the detector's 5 calls.
    "travel": ["--set", "episodes=128", "--set", "epochs=6", "--set", "lr=3.0e-3", "--set", "gyms=[travel]"],
}
SFT_REUSE = {
    "short": "EAU_PLANTED_SFT_DIR",
    "oracle": "EAU_PLANTED_ORACLE_SFT_DIR",
    "travel": "EAU_PLANTED_TRAVEL_SFT_DIR",
}
STEPS = 6
WINDOW = 3  # diagnose the last 3 steps; the question-rate test compares them with the 3 before
TRAIN = [
    "--preset",
    "tiny",
    "--no-progress",
    "--json",
    "--set",
    "tasks_per_step=2",
    "--set",
    "samples_per_task=4",
    "--set",
    "torch_threads=1",
    "--set",
    "agent_knobs={}",
    "--set",
    "env_knobs={}",
    "--set",
    "checkpoint_every=0",
    "--set",
    "keep_checkpoints=1",
]
# after a warm start (see above), written into agent.yaml (24 tokens a turn keeps a step to seconds)
BASE_AGENT = {
    "lr": 3.0e-4,
    "critic_lr": 1.0e-3,
    "lr_warmup_steps": 8,
    "entropy_coeff": 0.001,
    "kl_coef": 0.02,
    "mini_batch_size": 16,
    "micro_batch_size": 8,
    "ppo_epochs": 2,
    "max_new_tokens_per_turn": 24,
    "max_episode_tokens": 1024,
}
BASE_ENV = {"max_steps": {"default": 8}, "success_threshold": 0.3}


def _env(threads: int = 1) -> dict[str, str]:
    return {
        **os.environ,
        "OMP_NUM_THREADS": str(threads),
        "MKL_NUM_THREADS": str(threads),
        "PYTHONPATH": str(REPO / "tests"),
        "EAU_TEST_USER_KEY": "sk-test",  # the LLM user's key, read from the variable user_llm.api_key_env names
    }


def eau(
    args: list[str], knobs: Path, runs: Path, timeout: float = 600, threads: int = 1
) -> subprocess.CompletedProcess:
    env = {**_env(threads), "EAU_KNOBS_DIR": str(knobs), "EAU_RUNS_DIR": str(runs)}
    return subprocess.run(
        [sys.executable, "-m", "harness.cli.main", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        check=False,
    )


def _update_yaml(path: Path, values: dict[str, Any]) -> None:
    doc = yaml.safe_load(path.read_text())
    doc.update(values)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def knobs_copy(
    dst: Path,
    *,
    agent: dict | None = None,
    env: dict | None = None,
    user: dict | None = None,
    user_rules: dict[str, dict] | None = None,
    reward_rules: dict[str, dict] | None = None,
) -> Path:
    """The repository's knobs with the base values, then the plant's values and rule files, written in."""
    shutil.copytree(defaults_dir(), dst, ignore=shutil.ignore_patterns(".pending", ".history"))
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
    """A rule file charging every question (the schema's largest penalty): PPO learns to answer sooner.
    Measured over 8 steps: -1.0 took questions per episode 3.75 -> 1.78 (first 4 steps vs last 4);
    -0.4 only 3.50 -> 2.56 (27%, at the threshold)."""
    return {
        "description": "planted: charges every question",
        "rules": [{"name": "ask_penalty", "predicate": "question_asked", "value": -1.0}],
    }


HEALTHY = "healthy"
# name -> knobs_copy keyword arguments, plus gyms (train --set gyms=) and llm (the run needs the LLM user)
PLANTS: dict[str, Callable[[], dict[str, Any]]] = {
    HEALTHY: dict,
    # 4 turns, 3 questions required before an answer is accepted: earlier answers are refused
    "deadlock": lambda: {"env": {"max_steps": {"default": 4}, "min_questions": 3}},
    # every episode goes to an LLM user that pastes every fact it was told into each reply (the symbolic
    # user cannot be made to: its replies carry at most facts_per_reply matched facts, whatever the knobs)
    "user_leakage": lambda: {"user": {"user_strategy_mix": 0.0}, "llm": chatty_user},
    # a rule paying 0.6 for every question, next to the default rules (at 0.3 the policy farmed as well,
    # 4.0 -> 7.8 questions per episode in 8 steps, but the bonus earned 42% of |reward|, under the 50%)
    "reward_hacking": lambda: {"reward_rules": {"farm": farming_rules(0.6)}},
    # near-greedy sampling: token entropy (measured at the sampling temperature) collapses, and the
    # policy repeats its most likely turn. One run serves both detectors (SHARED_RUN): at 0.05 the
    # turn texts collapsed in one session and not in the next. From the short warm start (see above).
    "entropy_collapse": lambda: {"agent": {"temperature": 0.02}, "warm": "short"},
    # travel with every search failing, from the travel warm start (the oracle one knows only intention)
    "silent_tool_failures": lambda: {"env": {"search_failure_interval": 1}, "gyms": "[travel]", "warm": "travel"},
    # intention's only fact kind is filtered out: nothing is ever disclosed, nothing can succeed
    "unreachable_tasks": lambda: {"user": {"reveal_kinds": ["preference", "probe"]}},
    # half the episodes go to an LLM user that never helps
    "arm_disparity": lambda: {"user": {"user_strategy_mix": 0.5}, "llm": unhelpful_user},
    # half the episodes go to an LLM user that states each detail with a wrong value
    "user_unreliable": lambda: {"user": {"user_strategy_mix": 0.5}, "llm": lying_user},
    # a rule charging every question
    "question_rate_drop": lambda: {"reward_rules": {"ask": question_penalty()}},
}
SHARED_RUN = {"template_collapse": "entropy_collapse"}
PLANTED = tuple(n for n in PLANTS if n != HEALTHY) + tuple(SHARED_RUN)
# PPO stops calling a tool that always fails within one or two steps (measured: 26 failed searches at
# step 0, then 1, 2, 0, 0, 0): the last WINDOW steps hold no call left to judge, so this run is
# diagnosed over all its steps. Likewise PPO soon stops answering before the third question (measured
# 2026-12-07: 4 refused early answers over the run's 6 steps, none in its last 3), so the deadlock run's
# refusals, the evidence that names min_questions, are read over all its steps too.
RUN_WINDOW = {"silent_tool_failures": STEPS, "deadlock": STEPS, "question_rate_drop": 4, "reward_hacking": 4}
# A reward rule acts from step 0 and PPO (lr 3e-4 after a warm-up) needs a few steps to learn from it
# (measured, question penalty: 4.0, 4.0, 3.1, 3.9, 2.6, 2.3 questions per episode over steps 0-5;
# question bonus: 4.0, 4.1, 3.9, 4.1, 5.3, 6.3, with ask_bonus 37% of the reward over steps 3-5):
# those runs train 8 steps and are diagnosed over the last 4 (the question test compares them with
# the first 4).
RUN_STEPS = {"question_rate_drop": 8, "reward_hacking": 8}
# Second flags a planted fault really causes (not false positives), with the reason:
COLLATERAL: dict[str, set[str]] = {
    # the user pastes every fact: asking stops paying and the agent asks less (measured: 4.0 -> 2.8
    # questions per episode, disclosures held 9.7 -> 9.2, so the detector names the user)
    "user_leakage": {"question_rate_drop"},
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
    # the lying user states a detail whatever was asked (unasked disclosures: user_leakage), and its
    # arm covers details by wrong values (measured on the live autopilot run: user_leakage flagged
    # next to user_unreliable; arm_disparity when the arms' rewards part)
    "user_unreliable": {"user_leakage", "arm_disparity"},
}
# Detector checks a run may fail without a defect (flags outside COLLATERAL); the test asserts the count.
# Measured (one session): 10 of 71 checks before the detector fixes and the shared run; what remains
# is the weak tiny policy, described truly by the detectors but not caused by the plant: in travel it
# solves nothing, asks to the turn limit and earns mostly new_fact_disclosed (4 flags on the tool run),
# on intention it may solve nothing in the window (unreachable_tasks on the healthy and arm runs).
# 2026-12-03, arm run from the oracle warm start: 4 of 63 (deadlock, reward_hacking, unreachable_tasks on
# the tool run, unreachable_tasks on the healthy run); the arm run flags arm_disparity alone.
# Later that day, every intention run from the oracle warm start with the knobs after a warm start:
# 3 of 62, all on the travel tool run (the short warm start's weak travel policy); the healthy run
# is flagged by nothing (397 s for the 12 tests with both warm starts reused). The same three flag a
# travel run with nothing planted (measured), so they are the policy's, not the plant's; an oracle
# travel warm start (512 x 10, 15 min) did not help: its healthy travel run still solved nothing and
# deadlocked (travel is beyond the tiny model at this budget).
MAX_FALSE_POSITIVES = 5


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
    proc = eau(
        ["sft", "--out", str(out), "--json", *SFT[kind]],
        knobs_copy(work / f"knobs-sft-{kind}"),
        work / "runs",
        timeout=1200,
        threads=os.cpu_count() or 1,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    print(
        f"warm start {kind}: loss {doc['loss_first']:.2f} -> {doc['loss_last']:.2f} in {time.perf_counter() - t0:.0f}s"
    )
    return out


@pytest.fixture(scope="module")
def warm_start(work: Path) -> dict[str, Path]:
    return {kind: _warm_start(kind, work) for kind in SFT}


def train_and_diagnose(name: str, work: Path, warm: dict[str, Path]) -> dict[str, Any]:
    spec = PLANTS[name]()
    steps = RUN_STEPS.get(name, STEPS)
    gyms = spec.pop("gyms", "[intention]")
    sft = warm[spec.pop("warm", "oracle")]
    llm = spec.pop("llm", None)
    knobs = knobs_copy(work / f"knobs-{name}", **spec)
    runs = work / "runs"
    extra = ["--set", f"gyms={gyms}", "--set", f"init_checkpoint={sft}", "--run-id", name, "--steps", str(steps)]
    server = UserModelServer(llm) if llm is not None else None
    if server is not None:
        extra += [
            "--set",
            (
                f"user_llm={{kind: openai, base_url: '{server.base_url}', model: user-sim, "
                "api_key_env: EAU_TEST_USER_KEY, timeout_s: 5.0, retry_backoff_s: 0.01}"
            ),
        ]
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
        ids = {
            json.loads(line)["episode_id"]
            for p in (Path(reports[name_run]["run_dir"]) / "trajectories").glob("*.jsonl")
            for line in p.read_text().splitlines()
            if line.strip()
        }
        assert set(f["evidence"]["episodes"]) <= ids, (name, f["evidence"]["episodes"])


def test_healthy_run_is_not_flagged(reports):
    doc = reports[HEALTHY]
    assert doc["flagged"] == [], [finding(doc, n)["summary"] for n in doc["flagged"]]
    # and it was not flagged for want of data: the detectors that need episodes ran on them
    for name in ("deadlock", "reward_hacking", "template_collapse", "unreachable_tasks", "question_rate_drop"):
        assert not finding(doc, name).get("skipped"), finding(doc, name)


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
    q = finding(reports["question_rate_drop"], "question_rate_drop")
    m = q["evidence"]["metrics"]
    assert "questions_per_episode" in m["flagged_by"] and m["questions_per_episode"]["relative_drop"] >= 0.25, m
    # the penalty cut disclosures with the questions: the policy asks less, not a user that gives more
    assert q["component"] == "policy" and not m["disclosures_held"], m
    leak = finding(reports["user_leakage"], "question_rate_drop")
    if leak["flagged"]:  # collateral of the leaking user: attributed to it
        assert leak["component"] == "user" and leak["evidence"]["metrics"]["disclosures_held"], leak["summary"]
    e = finding(reports["entropy_collapse"], "entropy_collapse")["evidence"]["metrics"]
    assert e["temperature"] == 0.02 and e["entropy_now"] < 0.05
