"""``eau sft``: a short supervised warm start on scripted demonstrations.

A fresh tiny model cannot find the action format by sampling, so PPO would see format errors only.
A scripted agent (``harness.envs.scripted``: the oracle, or the public planner) plays train-split
episodes through the real gyms and
users; each transcript is tokenised exactly as the rollout engine tokenises an episode
(``ChatFormat``), and the policy is trained with cross-entropy on the action tokens only. The
result is a ``policy.pt`` that ``eau train --set init_checkpoint=DIR`` starts from.

Keep it short on purpose: the warm start should teach the format and a rough behaviour, leaving the
task success for PPO to raise.
"""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from harness.envs.registry import make as make_gym
from harness.envs.scripted import impatient, oracle_action, public_action, run_episode
from harness.knobs.snapshot import KnobSnapshot
from harness.rollout.chat import ChatFormat, check_user_replies


@dataclass
class SFTConfig:
    """Warm-start settings (every field overridable with ``eau sft --set key=value``)."""

    policy: dict[str, Any] = field(default_factory=lambda: {"model": "tiny"})  # harness.ppo.models.PolicySpec
    gyms: list[str] = field(default_factory=lambda: ["intention"])  # gyms the demonstrations come from
    # scripted agent that plays the demonstrations: "oracle" (privileged: it sees the hidden facts;
    # every gym) or "public" (sees only what the agent sees; intention only). A student imitating the
    # oracle learns to stop asking as early as the oracle, which knew when every hidden fact was in.
    demonstrator: str = "oracle"
    # probability that the demonstrator gives up at a turn and answers at once (with what it knows):
    # the student learns the demonstrator's questions at every position but stops at a random point,
    # so what PPO has to learn is when to stop asking (0: the demonstrator as it is)
    give_up: float = 0.0
    episodes: int = 64  # demonstration episodes (train split), spread over the gyms
    epochs: int = 2  # passes over the demonstrations
    batch_size: int = 8  # episodes per optimiser step
    lr: float = 1e-3  # AdamW learning rate
    rendering: str = "tagged"  # action rendering of the demonstrations
    user_replies: str = "user"  # tool_call rendering: user replies as user messages or tool results (user | tool)
    max_episode_tokens: int = 1024  # demonstrations longer than this are cut
    seed: int = 0  # demonstration draws and shuffling

    def __post_init__(self) -> None:
        check_user_replies(self.rendering, self.user_replies)


def demonstrations(cfg: SFTConfig, knobs: KnobSnapshot) -> list[dict[str, Any]]:
    """Oracle episode records (train split) with the system prompt each started with."""
    if cfg.demonstrator not in ("oracle", "public"):
        raise ValueError(f"sft demonstrator must be oracle or public; got {cfg.demonstrator!r}")
    rng = np.random.default_rng(cfg.seed)
    planner = {"oracle": oracle_action, "public": public_action}[cfg.demonstrator]
    # a separate stream, so give_up=0 draws exactly the tasks it drew before the option existed
    act = impatient(planner, cfg.give_up, np.random.default_rng([cfg.seed, 1]))
    demos = []
    for i in range(cfg.episodes):
        gym = cfg.gyms[i % len(cfg.gyms)]
        env = make_gym(gym, knobs=knobs, rendering=cfg.rendering, split="train")
        index = int(rng.integers(0, 2**31 - 1))
        rec = run_episode(env, act, seed=index, options={"task_index": index, "split": "train", "arm": "symbolic"})
        rec["system_prompt"] = env.system_prompt()
        demos.append(rec)
    return demos


def tokenize_demo(chat: ChatFormat, rec: dict[str, Any], max_tokens: int) -> tuple[list[int], list[int]]:
    """(ids, action mask) of a demonstration, laid out as the rollout engine lays out an episode."""
    messages = [{"role": "system", "content": rec["system_prompt"]}, {"role": "user", "content": rec["task"]["prompt"]}]
    ids = chat.prompt_ids(messages)
    mask = [0] * len(ids)
    stop = chat.stop_ids[-1:] if chat.stop_ids else []
    for turn in rec["turns"]:
        text = turn["action"]["raw"]
        act = chat.encode(text) + stop
        ids += act
        mask += [1] * len(act)
        obs = chat.observation_message(turn["obs_role"], turn["observation"])
        obs_ids = chat.observation_ids(messages, act, text, obs)
        messages = messages + [{"role": "assistant", "content": text}, obs]
        ids += obs_ids
        mask += [0] * len(obs_ids)
    return ids[:max_tokens], mask[:max_tokens]


def run_sft(cfg: SFTConfig, knobs: KnobSnapshot, out_dir: Path, log=print) -> dict[str, Any]:
    """Train on demonstrations; writes ``out_dir/policy.pt`` and ``out_dir/sft.json``."""
    from harness.ppo.checkpoint import trainable_state_dict
    from harness.ppo.models import forward_token_stats, load_policy, trainable_parameters

    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    t0 = time.perf_counter()
    model, tok = load_policy(cfg.policy)
    chat = ChatFormat(tok, cfg.rendering, user_replies=cfg.user_replies)
    demos = demonstrations(cfg, knobs)
    data = [tokenize_demo(chat, d, cfg.max_episode_tokens) for d in demos]
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    opt = torch.optim.AdamW(trainable_parameters(model), lr=cfg.lr)
    losses = []
    order_rng = random.Random(cfg.seed)
    model.train()
    for epoch in range(cfg.epochs):
        order = list(range(len(data)))
        order_rng.shuffle(order)
        for s in range(0, len(order), cfg.batch_size):
            rows = [data[i] for i in order[s:s + cfg.batch_size]]
            T = max(len(r[0]) for r in rows)
            ids = torch.full((len(rows), T), pad, dtype=torch.long)
            am = torch.zeros((len(rows), T), dtype=torch.long)
            mask = torch.zeros((len(rows), T))
            for i, (x, m) in enumerate(rows):
                ids[i, :len(x)] = torch.tensor(x)
                am[i, :len(x)] = 1
                mask[i, :len(m)] = torch.tensor(m, dtype=torch.float32)
            mask[:, 0] = 0
            st = forward_token_stats(model, ids, am, with_entropy=False, score_mask=mask)
            loss = -(st.logprobs * mask).sum() / mask.sum().clamp(min=1)  # action tokens only
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(trainable_parameters(model), 1.0)
            opt.step()
            losses.append(float(loss.detach()))
        log(f"sft epoch {epoch}: loss {np.mean(losses[-max(1, math.ceil(len(data) / cfg.batch_size)):]):.3f}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.save(trainable_state_dict(model), out_dir / "policy.pt")
    summary = {"config": asdict(cfg), "demonstrations": len(demos),
               "demo_success": float(np.mean([d["success"] for d in demos])),
               "action_tokens": int(sum(sum(m) for _, m in data)), "loss_first": losses[0], "loss_last": losses[-1],
               "time_s": time.perf_counter() - t0, "out_dir": str(out_dir)}
    (out_dir / "sft.json").write_text(json.dumps(summary, indent=1))
    return summary
