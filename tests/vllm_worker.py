"""The vLLM side of tests/test_vllm.py: each check builds a real vLLM engine (colocated, or a server on
loopback) in this process, measures, and prints ONE JSON line; the test asserts on it.

    python tests/vllm_worker.py colocate|lora|server

Run by ``tests/vllm_support.run_worker`` with the Python that has vLLM (never inside pytest: the engine
binds this process's threads).
"""

from __future__ import annotations

import json
import sys
import tempfile
import time

import torch

import harness.rollout.vllm_backend as vllm_backend
from harness.envs.registry import make
from harness.knobs.folder import defaults_dir
from harness.knobs.snapshot import KnobSnapshot
from harness.ppo.models import load_policy
from harness.rollout.backends import SamplingParams
from harness.rollout.chat import ChatFormat
from harness.rollout.engine import RolloutEngine
from harness.rollout.vllm_backend import VLLMBackend, write_model_folder
from harness.rollout.vllm_engine import BACKEND
from harness.rollout.weight_sync import WeightSyncError, engine_weights, policy_logprobs
from harness.users.vllm_server import VLLMServer

TINY = {"model": "tiny", "tiny": {"num_hidden_layers": 2}}  # head_dim 32: vLLM's CPU attention has no kernel for 16
SEEDS = [11, 12, 13, 14]


def episodes(backend, chat, tasks, seeds, continuous):
    """Token ids of intention episodes ``tasks`` sampled at temperature 1 with ``seeds``."""
    snap = KnobSnapshot.read_dir(defaults_dir())
    res = RolloutEngine(backend, chat, continuous=continuous).run(
        [make("intention", knobs=snap) for _ in tasks],
        [{"seed": t, "options": {"task_index": t}} for t in tasks],
        [str(t) for t in tasks],
        [0] * len(tasks),
        params=SamplingParams(1.0, 1.0, tuple(chat.stop_ids)),
        max_new_tokens_per_turn=12,
        max_episode_tokens=600,
        seeds=seeds,
    )
    return [e.ids for e in res.episodes]


def seeded_rollouts(backend, tok) -> dict:
    """The same episode alone and among others, on both decoding paths of the engine."""
    chat = ChatFormat(tok, "tagged")
    tasks = [0, 1, 2, 3]
    out = {}
    for name, continuous in (("continuous", True), ("per_turn", False)):
        batch = episodes(backend, chat, tasks, SEEDS, continuous)
        alone = [episodes(backend, chat, [tasks[i]], [SEEDS[i]], continuous)[0] for i in (0, 2)]
        other_seed = episodes(backend, chat, [tasks[0]], [999], continuous)[0]
        out[name] = {"batch": batch, "alone": alone, "other_seed": other_seed}
    return out


def step(policy, ids, lr):
    """One real optimiser update of the trainable weights: raise the log-likelihood of ``ids``."""
    params = [p for p in policy.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=lr)
    x = torch.tensor([ids])
    loss = -policy(input_ids=x).logits[0, :-1].log_softmax(-1).gather(1, x[0, 1:, None]).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()


def sync_check(backend, policy, sequences, lr) -> dict:
    """Engine log-probs of fixed sequences before and after an update, and the policy's after it."""
    before = [backend.engine_logprobs(s) for s in sequences]
    policy_before = [policy_logprobs(policy, s) for s in sequences]
    step(policy, sequences[-1], lr)
    t = time.perf_counter()
    stats = backend.sync_weights(policy)
    sync_s = time.perf_counter() - t
    after = [backend.engine_logprobs(s) for s in sequences]
    policy_after = [policy_logprobs(policy, s) for s in sequences]
    return {
        "sync_stats": stats,
        "sync_s": sync_s,
        "engine_vs_policy_after": max(float((a - p).abs().max()) for a, p in zip(after, policy_after)),
        "engine_moved": min(float((a - b).abs().mean()) for a, b in zip(after, before)),
        "policy_moved": min(float((a - b).abs().mean()) for a, b in zip(policy_after, policy_before)),
        "tolerance": backend.tolerance,
    }


def faults(backend, policy, sequence) -> dict:
    """A sync whose weights are the pre-update ones (not taken), and one that leaves a parameter out."""
    stale = [(n, t.clone()) for n, t in engine_weights(policy)]
    step(policy, sequence, 1e-2)
    real = vllm_backend.engine_weights
    out = {}
    try:
        vllm_backend.engine_weights = lambda model: iter(stale)
        try:
            backend.sync_weights(policy)
            out["stale"] = "no error"
        except WeightSyncError as exc:
            out["stale"] = str(exc)
        vllm_backend.engine_weights = lambda model: iter(list(real(model))[1:])
        try:
            backend.sync_weights(policy)
            out["partial"] = "no error"
        except Exception as exc:  # noqa: BLE001 -- the message is the result
            out["partial"] = f"{type(exc).__name__}: {exc}"
    finally:
        vllm_backend.engine_weights = real
    return out


def colocate() -> dict:
    torch.manual_seed(0)
    policy, tok = load_policy(TINY)
    backend = VLLMBackend("tiny", policy, tok)
    result = {"rollouts": seeded_rollouts(backend, tok), "initial_sync": backend._policy_probe is not None}
    seqs = [backend.probe, result["rollouts"]["continuous"]["batch"][1][:64]]
    result["full"] = sync_check(backend, policy, seqs, 1e-3)
    result["faults"] = faults(backend, policy, seqs[1])
    return result


def lora() -> dict:
    torch.manual_seed(0)
    policy, tok = load_policy({**TINY, "lora": {"r": 4, "alpha": 8}})
    backend = VLLMBackend("tiny", policy, tok, continuous=False)
    base = {n: p.detach().clone() for n, p in policy.named_parameters() if not p.requires_grad}
    seqs = [backend.probe, tok.encode("ASK: which budget do you have in mind for the hotel?")]
    result = sync_check(backend, policy, seqs, 1e-2)
    result["base_untouched"] = all(torch.equal(p, base[n]) for n, p in policy.named_parameters() if n in base)
    result["adapters"] = sum(1 for n, _ in policy.named_parameters() if "lora_" in n)
    return result


def server() -> dict:
    torch.manual_seed(0)
    policy, tok = load_policy(TINY)
    with tempfile.TemporaryDirectory() as folder:
        write_model_folder(policy, tok, folder)
        srv = VLLMServer(
            folder,
            served_name="tiny",
            dtype="float32",
            extra_args=["--weight-transfer-config", json.dumps({"backend": BACKEND})],
            env={"VLLM_SERVER_DEV_MODE": "1"},
        )
        with srv:
            backend = VLLMBackend("unused", policy, tok, mode="server", port=srv.port, continuous=False)
            chat = ChatFormat(tok, "tagged")
            batch = episodes(backend, chat, [0, 1, 2], SEEDS[:3], False)
            alone = episodes(backend, chat, [1], [SEEDS[1]], False)[0]
            result = {"batch": batch, "alone": alone, "transfer": backend.transfer}
            result["sync"] = sync_check(backend, policy, [backend.probe, batch[0][:48]], 1e-3)
        result["stopped"] = not srv.healthy()
    return result


if __name__ == "__main__":
    check = sys.argv[1]
    result = {"colocate": colocate, "lora": lora, "server": server}[check]()
    print(json.dumps(result))
    sys.stdout.flush()
