"""``eau sft``: a short supervised warm start on scripted demonstrations.

A fresh tiny model cannot find the action format by sampling, so PPO would see format errors only.
A scripted agent (``harness.agents.scripted``: the oracle, or the public planner) plays train-split
episodes through the real gyms and
users; each transcript is tokenised exactly as the rollout engine tokenises an episode
(``ChatFormat``), and the policy is trained with cross-entropy on the action tokens only. The
result is a ``policy.pt`` that ``eau train --set init_checkpoint=DIR`` starts from.

Keep it short on purpose: the warm start should teach the format and a rough behaviour, leaving the
task success for PPO to raise.
"""

from __future__ import annotations

import contextlib
import json
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from harness.agents.scripted import impatient, oracle_action, public_action, run_episode
from harness.envs.registry import make as make_gym
from harness.knobs.snapshot import KnobSnapshot
from harness.ppo.checkpoint import trainable_state_dict
from harness.ppo.models import forward_token_stats, frozen_trunk_depth, load_policy, trainable_parameters, trunk_capture
from harness.ppo.specs import PolicySpec, WarmStartSpec, doc
from harness.rollout.chat import ChatFormat, check_user_replies


@dataclass
class SFTConfig(WarmStartSpec):
    """Warm-start settings (every field overridable with ``eau sft --set key=value``): the
    demonstrations and optimisation of :class:`~harness.ppo.specs.WarmStartSpec` (a run config's
    ``warm_start``) plus what a run gives its own warm start."""

    policy: PolicySpec = doc(help="the policy trained", factory=PolicySpec)
    gyms: list[str] = doc(help="gyms the demonstrations come from", factory=lambda: ["intention"])
    rendering: str = doc("tagged", help="action rendering of the demonstrations")
    user_replies: str = doc(
        "user", help="tool_call rendering: user replies as user messages or tool results (user | tool)"
    )
    seed: int = doc(0, help="demonstration draws and shuffling")

    def __post_init__(self) -> None:
        check_user_replies(self.rendering, self.user_replies)


def demonstrations(cfg: SFTConfig, knobs: KnobSnapshot, on_demo=None) -> list[dict[str, Any]]:
    """Scripted episode records (train split) with the system prompt each started with;
    ``on_demo(n)`` after each."""
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
        if on_demo is not None:
            on_demo(len(demos))
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


def batches_by_length(lengths: list[int], batch_size: int, rng: random.Random, pool: int = 8) -> list[list[int]]:
    """One epoch's batches of row indices: rows shuffled, then each pool of ``pool`` batches' worth
    sorted by length and cut into batches (rows of similar length pad less), batch order shuffled.
    Every row appears exactly once."""
    order = list(range(len(lengths)))
    rng.shuffle(order)
    batches = []
    for s in range(0, len(order), batch_size * pool):
        chunk = sorted(order[s : s + batch_size * pool], key=lambda i: lengths[i])
        batches += [chunk[b : b + batch_size] for b in range(0, len(chunk), batch_size)]
    rng.shuffle(batches)
    return batches


def run_sft(
    cfg: SFTConfig, knobs: KnobSnapshot, out_dir: Path, log=print, model=None, tokenizer=None, progress=None
) -> dict[str, Any]:
    """Train on demonstrations; writes ``out_dir/policy.pt`` and ``out_dir/sft.json``.

    ``model``/``tokenizer``: train this already loaded policy in place (``eau train``'s warm start)
    instead of loading ``cfg.policy``. ``progress(stage, done, total, info)`` reports each stage:
    ``demonstrations`` (episodes played) and ``updates`` (``info``: epoch and loss)."""
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    t0 = time.perf_counter()
    if model is None:
        model, tok = load_policy(cfg.policy)
    else:
        tok = tokenizer
    chat = ChatFormat(tok, cfg.rendering, user_replies=cfg.user_replies)
    report = progress or (lambda stage, done, total, info: None)
    demos = demonstrations(cfg, knobs, on_demo=lambda done: report("demonstrations", done, cfg.episodes, {}))
    data = [tokenize_demo(chat, d, cfg.max_episode_tokens) for d in demos]
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    opt = torch.optim.AdamW(trainable_parameters(model), lr=cfg.lr)
    losses = []
    order_rng = random.Random(cfg.seed)
    plan = [batches_by_length([len(x) for x, _ in data], cfg.batch_size, order_rng) for _ in range(cfg.epochs)]
    total = sum(len(p) for p in plan)
    tokens_per_batch = max(1.0, sum(sum(m) for _, m in data) / max(1, len(plan[0]) if plan else 1))
    # with LoRA on the top layers only, the frozen layers below give every demonstration the same
    # states in every epoch: the first epoch's full passes record them, later epochs run the top layers
    depth = frozen_trunk_depth(model) if cfg.epochs > 1 else 0
    states: list[torch.Tensor | None] = [None] * len(data)
    model.train()
    report("updates", 0, total, {})
    done = 0
    for epoch, batches in enumerate(plan):
        for rows_idx in batches:
            rows = [data[i] for i in rows_idx]
            T = max(len(r[0]) for r in rows)
            ids = torch.full((len(rows), T), pad, dtype=torch.long)
            am = torch.zeros((len(rows), T), dtype=torch.long)
            mask = torch.zeros((len(rows), T))
            for i, (x, m) in enumerate(rows):
                ids[i, : len(x)] = torch.tensor(x)
                am[i, : len(x)] = 1
                mask[i, : len(m)] = torch.tensor(m, dtype=torch.float32)
            mask[:, 0] = 0
            if depth and all(states[r] is not None for r in rows_idx):
                trunk = (torch.zeros(len(rows), T, states[rows_idx[0]].shape[-1]), depth)
                for i, r in enumerate(rows_idx):
                    trunk[0][i, : len(states[r])] = states[r]
                st = forward_token_stats(model, ids, am, with_entropy=False, score_mask=mask, trunk=trunk)
            else:
                with trunk_capture(model, depth) if depth else contextlib.nullcontext([]) as grabbed:
                    st = forward_token_stats(model, ids, am, with_entropy=False, score_mask=mask)
                for i, r in enumerate(rows_idx):  # every row starts at column 0: the pass's span is [0, T)
                    if grabbed:
                        states[r] = grabbed[-1][i, : len(data[r][0])].clone()
            # action tokens only, each weighing the same whatever batch it falls in: batches of similar
            # length would otherwise give a short demonstration's tokens (an early answer) a larger share
            loss = -(st.logprobs * mask).sum() / tokens_per_batch
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(trainable_parameters(model), 1.0)
            opt.step()
            losses.append(float(loss.detach()))
            done += 1
            report("updates", done, total, {"epoch": epoch, "loss": losses[-1]})
        log(f"sft epoch {epoch}: loss {np.mean(losses[-len(batches) :]):.3f}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.save(trainable_state_dict(model), out_dir / "policy.pt")
    summary = {
        "config": asdict(cfg),
        "demonstrations": len(demos),
        "demo_success": float(np.mean([d["success"] for d in demos])),
        "action_tokens": int(sum(sum(m) for _, m in data)),
        "loss_first": losses[0],
        "loss_last": losses[-1],
        "time_s": time.perf_counter() - t0,
        "out_dir": str(out_dir),
    }
    (out_dir / "sft.json").write_text(json.dumps(summary, indent=1))
    return summary
