"""`eau sft` and a run's own warm start (config warm_start): batches by length without a bias to short
demonstrations, the frozen trunk reused across epochs, and the run that starts from it."""

from __future__ import annotations

import json
import random

import pytest
import torch

from harness.knobs.snapshot import KnobSnapshot
from harness.ppo.sft import SFTConfig, batches_by_length, run_sft


def test_batches_by_length_cover_every_row_once_and_group_similar_lengths():
    lengths = [random.Random(i).randint(10, 500) for i in range(100)]
    batches = batches_by_length(lengths, 8, random.Random(0))
    assert sorted(i for b in batches for i in b) == list(range(100))
    spread = [max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in batches]
    assert sum(spread) / len(spread) < 100  # random batches of 8 from 10..500 spread ~380


LORA_TOP = {
    "model": "tiny",
    "tiny": {"num_hidden_layers": 3, "hidden_size": 32, "intermediate_size": 64},
    "lora": {"r": 4, "alpha": 8, "top_layers": 1},
}


def test_reusing_the_frozen_trunk_trains_exactly_as_full_passes(tmp_path, knobs_dir, monkeypatch):
    """Top-layer LoRA: epochs after the first feed the recorded trunk states to the top layer; the
    losses and the weights match a run that makes every pass in full (the trunk switched off)."""
    import harness.ppo.sft as sft

    snap = KnobSnapshot.read_dir(knobs_dir)
    cfg = SFTConfig(policy=LORA_TOP, episodes=6, epochs=3, batch_size=2, lr=1e-2)
    a = run_sft(cfg, snap, tmp_path / "a", log=lambda m: None)
    monkeypatch.setattr(sft, "frozen_trunk_depth", lambda m: 0)
    b = run_sft(cfg, snap, tmp_path / "b", log=lambda m: None)
    assert a["loss_first"] == pytest.approx(b["loss_first"], abs=1e-6)
    assert a["loss_last"] == pytest.approx(b["loss_last"], abs=1e-5)
    wa, wb = torch.load(tmp_path / "a" / "policy.pt"), torch.load(tmp_path / "b" / "policy.pt")
    assert all(torch.allclose(wa[k], wb[k], atol=1e-5) for k in wa)


def test_every_action_token_weighs_the_same_whatever_its_batch(tmp_path, knobs_dir, monkeypatch):
    """The loss of a batch is its action tokens' summed negative log-likelihood over the epoch's mean
    action tokens per batch: a batch of short demonstrations (early answers) gets no larger weight per
    token. Checked on the numbers the updates see."""
    import harness.ppo.sft as sft

    seen = []
    orig = sft.forward_token_stats

    def spy(model, ids, am, **kw):
        st = orig(model, ids, am, **kw)
        seen.append((st.logprobs.detach(), kw["score_mask"].clone()))
        return st

    monkeypatch.setattr(sft, "forward_token_stats", spy)
    cfg = SFTConfig(
        policy={"model": "tiny", "tiny": {"num_hidden_layers": 1, "hidden_size": 32, "intermediate_size": 64}},
        episodes=6,
        epochs=1,
        batch_size=2,
        lr=0.0,
        give_up=0.5,
        demonstrator="public",
    )
    out = run_sft(cfg, KnobSnapshot.read_dir(knobs_dir), tmp_path / "s", log=lambda m: None)
    tokens = [float(m.sum()) for _, m in seen]
    per_batch = sum(tokens) / len(tokens)
    first = float(-(seen[0][0] * seen[0][1]).sum()) / per_batch
    assert out["loss_first"] == pytest.approx(first, rel=1e-5)
    assert len(set(tokens)) > 1  # batches of unequal token counts: the case the normalisation is for


def test_a_run_makes_its_own_warm_start_and_starts_from_it(tmp_path, knobs_dir):
    """config warm_start: the run trains the loaded policy on demonstrations into runs/<id>/warm_start/,
    logs its progress, and PPO and `eau eval --checkpoint init` start from it; a resume reuses it."""
    import os
    import subprocess
    import sys

    env = {
        **os.environ,
        "EAU_KNOBS_DIR": str(knobs_dir),
        "EAU_RUNS_DIR": str(tmp_path / "runs"),
        "EAU_EVAL_DIR": str(tmp_path / "eval"),
    }
    args = [
        "train",
        "--preset",
        "tiny",
        "--steps",
        "1",
        "--run-id",
        "w",
        "--no-progress",
        "--set",
        "warm_start={demonstrator: public, episodes: 4, epochs: 2, batch_size: 2}",
        "--set",
        "tasks_per_step=1",
        "--set",
        "samples_per_task=2",
        "--set",
        "env_knobs.max_steps=3",
        "--set",
        "policy.tiny.num_hidden_layers=1",
        "--set",
        "checkpoint_every=1",
    ]
    out = subprocess.run(
        [sys.executable, "-m", "harness.cli.main", *args], env=env, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr[-3000:]
    run = tmp_path / "runs" / "w"
    ws = run / "warm_start"
    assert (ws / "policy.pt").is_file() and json.loads((ws / "sft.json").read_text())["demonstrations"] == 4
    lines = [json.loads(x) for x in (ws / "metrics.jsonl").read_text().splitlines()]
    assert [x["update"] for x in lines] == [1, 2, 3, 4] and all(x["updates"] == 4 for x in lines)
    log = (run / "log.txt").read_text()
    assert "warm start: 4 public demonstrations x 2 epochs" in log and "warm start: update 1/4 loss" in log
    assert "warm_start" in [json.loads(x)["event"] for x in (run / "events.jsonl").read_text().splitlines()]
    # eau eval rebuilds the starting policy from the run's own warm start
    ev = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.cli.main",
            "eval",
            "--run",
            "w",
            "--checkpoint",
            "init",
            "--protocol",
            "eval/protocol-cpu.yaml",
            "--json",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert ev.returncode == 0, ev.stderr[-2000:]
    # a resume does not train the warm start again
    before = (ws / "policy.pt").read_bytes()
    res = subprocess.run(
        [sys.executable, "-m", "harness.cli.main", "train", "--resume", "w", "--steps", "2", "--no-progress"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    assert (ws / "policy.pt").read_bytes() == before
    assert (run / "log.txt").read_text().count("warm start: 4 public demonstrations") == 1


def test_warm_start_and_init_checkpoint_are_exclusive_and_keys_are_checked():
    from harness.ppo.config import build_config

    with pytest.raises(ValueError, match="either init_checkpoint"):
        build_config("tiny", None, ["warm_start={episodes: 4}", "init_checkpoint=/x"])
    with pytest.raises(ValueError, match="warm_start: unknown key"):
        build_config("tiny", None, ["warm_start={episode: 4}"])
    with pytest.raises(ValueError, match="evaluation: unknown key"):
        build_config("tiny", None, ["evaluation={protocol: eval/protocol-cpu.yaml, when: now}"])
