"""Trainer step time against TRL's ``GRPOTrainer`` with ``environment_factory`` (issue "The trainer").

Both sides train the same tiny model (``load_policy({"model": "tiny", "chat_template": "qwen3"})``
after the same cached ``eau sft`` warm start in the ``tool_call`` rendering), on the same gym with
the symbolic user and the repository's knobs, with the same episodes per step (tasks x samples),
the same per-turn and per-episode token budgets, the same turn limit, the same sampling, learning
rate, clipping and micro-batch size, on CPU, in one process, alternating over ``--repeats``:

* harness: ``harness.ppo.trainer.train`` (the ``eau train`` loop) from the tiny preset with
  ``ppo_epochs=1``: rollout with the batched engine (old log-probs, and the shared critic's values,
  recorded while sampling: ``rollout_stats=auto``), GAE, one PPO epoch, logging. Step time = the
  run's ``time_step_s``. By default two critic set-ups are measured: the tiny preset's ``separate``
  critic (a second model: a forward for the old values, a forward and a backward in the update) and
  ``shared`` (a value head on the policy).
* TRL: ``GRPOTrainer(environment_factory=...)``. The environment adapter wraps the same gym:
  ``reset(**row)`` resets it on the row's task and returns the task prompt (the gym's system prompt
  is the dataset's system message); ``interact(choice, content)`` -- the harness's one tool, with
  the gym's description -- renders the call as the gym's ``tool_call`` text and passes it to
  ``env.step``, returning the observation; ``get_reward()`` is the episode's summed turn rewards.
  Step time = wall time between consecutive ``on_step_end`` callbacks.

Differences that cannot be removed (reported, not hidden): GRPO has no critic (with the separate
critic PPO pays the critic's forward and backward, and a value pass before the update for every
mini-batch but the first; in this set-up the update is one mini-batch); TRL's
tool loop ends an episode at the first reply without a well-formed tool call (the harness answers a
malformed call with format feedback and goes on), and only then: after the gym ends an episode (an
answer, or the turn limit) the adapter answers further calls with an error and TRL keeps generating
until the model stops or ``max_tool_calling_iterations`` (= the turn limit) is hit; TRL uses its
prefix-preserving ``qwen3_training`` template. Work per step is reported for both sides (generated
tokens and turns per episode, and the tokens each episode puts through the update: prompt, actions
and observations, the harness's ``episode_tokens_mean``, TRL's counted from the attention masks of
its training forward passes) so the step times can also be read per unit of work.

Same conversation on both sides: TRL renders every tool result, the user's replies included, as a
``tool`` message. By default the harness does the same (``user_replies=tool``) and the warm start is
trained on that rendering (its own cache folder). ``--user-replies user`` measures the harness's
default rendering instead (user replies as user messages, the warm start trained on those), which
TRL shows the warm start in a form it was not trained on.

Learning rate: 1e-5 on both sides by default. A step's work does not depend on it, the next step's
episodes do: at the tiny preset's 1e-3 one update breaks the warm start (the harness's turns all
become format errors, TRL's episodes stop calling tools), and the steps after it time broken policies.

If TRL's ``environment_factory`` path cannot run, the error is reported as ``trl_error``.

    python benchmarks/bench_vs_trl.py [--gym intention] [--steps 5] [--repeats 2] [--threads 1] [--user-replies tool]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import time
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import (
    TINY_EPISODE_TOKENS,
    TINY_MAX_STEPS,
    TINY_TURN_TOKENS,
    alternate,
    bench_knobs,
    emit,
    load_average,
    load_tiny,
    machine,
    median,
    private_knobs,
    set_threads,
    stderr_log,
    summary,
    temp_root,
    warm_start,
)
from transformers import TrainerCallback

TEMPLATE = "qwen3"  # a template TRL can parse tool calls from (TRL's add_response_schema knows it)
RENDERING = "tool_call"  # environment_factory exposes environment methods as tools
TARGET_RATIO = 1.0  # harness step time / TRL step time: not slower


# ---------------------------------------------------------------------------------------------- TRL side
def make_environment_class(gym: str, knobs: Any, samples: int, counters: dict[str, Any]) -> type:
    """The TRL environment adapter class around the harness gym ``gym`` (one instance per rollout)."""
    from harness.agents.scripted import render
    from harness.envs.registry import make as make_gym

    probe = make_gym(gym, knobs=knobs, rendering=RENDERING, split="train")
    schema = probe.tool_schema()["function"]
    props = schema["parameters"]["properties"]
    choices = props["choice"].get("enum", [])

    class GymEnvironment:
        """A harness gym behind TRL's environment protocol (reset / tools / get_reward)."""

        def __init__(self) -> None:
            self.env = make_gym(gym, knobs=knobs, rendering=RENDERING, split="train")

        def reset(self, **row: Any) -> str:
            index = int(row["task_index"])
            sample = counters["resets"].get(index, 0)  # TRL repeats a row num_generations times
            counters["resets"][index] = sample + 1
            obs, _info = self.env.reset(
                seed=index * 31 + sample % samples, options={"task_index": index, "split": "train"}
            )
            counters["episodes"] += 1
            return obs

        def interact(self, choice: str, content: str) -> str:
            if self.env.state.done:
                counters["calls_after_end"] += 1
                raise RuntimeError("the task is over; reply without calling a tool")
            counters["env_steps"] += 1
            obs, _r, _term, _trunc, _info = self.env.step(render(self.env, choice, content))
            return obs

        def get_reward(self) -> float:
            return float(sum(t.reward for t in self.env.state.turns))

    # TRL builds the tool schema from the docstring: give it the gym's own description and arguments.
    GymEnvironment.interact.__doc__ = (
        f"{schema['description']}\n\nArgs:\n"
        f"    choice: {props['choice']['description']} (choices: {json.dumps(choices)})\n"
        f"    content: {props['content']['description']}\n"
    )
    return GymEnvironment


class StepTimer(TrainerCallback):
    """A GRPOTrainer callback: the wall time of every step (between ``on_step_end`` calls, the first from
    ``on_train_begin``) in ``times``, and every log dict in ``logs``."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.logs: list[dict[str, Any]] = []

    def on_train_begin(self, *a: Any, **k: Any) -> None:
        self.t = time.perf_counter()

    def on_step_end(self, *a: Any, **k: Any) -> None:
        now = time.perf_counter()
        self.times.append(now - self.t)
        self.t = now

    def on_log(self, _args: Any, _state: Any, _control: Any, logs_: dict | None = None, **k: Any) -> None:
        if logs_ is None:
            logs_ = k.get("logs")
        if logs_:
            self.logs.append(dict(logs_))


def trl_run(
    args: argparse.Namespace, sft_dir: str, knobs: Any, system_prompt: str, max_completion: int, root: Path, seed: int
) -> dict[str, Any]:
    """One GRPOTrainer run of ``args.steps`` steps: per-step wall times and work counters."""
    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    counters: dict[str, Any] = {"resets": {}, "episodes": 0, "env_steps": 0, "calls_after_end": 0}
    env_cls = make_environment_class(args.gym, knobs, args.samples, counters)
    model, tok = load_tiny(sft_dir, TEMPLATE)  # fresh: TRL mutates the tokenizer (response schema)
    agent = knobs.area("agent")
    episodes = args.tasks * args.samples
    rows = args.tasks * args.steps
    data = Dataset.from_dict(
        {
            "prompt": [[{"role": "system", "content": system_prompt}, {"role": "user", "content": ""}]] * rows,
            "task_index": [args.first_task + 100_000 * seed + i for i in range(rows)],
        }
    )
    cfg = GRPOConfig(
        output_dir=str(root / "trl"),
        use_cpu=True,
        bf16=False,
        fp16=False,
        seed=seed,
        max_steps=args.steps,
        per_device_train_batch_size=args.micro_batch,
        gradient_accumulation_steps=episodes // args.micro_batch,
        num_generations=args.samples,
        num_iterations=1,
        beta=0.0,
        epsilon=float(agent["clip_ratio"]),
        learning_rate=args.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        optim="adamw_torch",
        max_grad_norm=float(agent["max_grad_norm"]),
        temperature=float(agent["temperature"]),
        top_p=float(agent["top_p"]),
        top_k=0,
        max_completion_length=max_completion,
        generation_kwargs={"max_new_tokens": args.turn_tokens},  # per turn, as the harness's budget
        max_tool_calling_iterations=args.max_steps,
        shuffle_dataset=False,
        disable_dropout=True,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        dataloader_num_workers=0,
    )
    timer = StepTimer()
    times, logs = timer.times, timer.logs

    trained = [0]  # tokens (prompt, completion and tool results) through the update's forward passes

    def count_trained(_module: Any, _args: Any, kwargs: dict[str, Any]) -> None:
        mask = kwargs.get("attention_mask")
        if mask is not None and torch.is_grad_enabled() and _module.training:  # not generation, not scoring
            trained[0] += int(mask.sum())

    hook = model.register_forward_pre_hook(count_trained, with_kwargs=True)
    # transformers' Trainer prints its log dicts on stdout: keep stdout for this benchmark's JSON alone
    with warnings.catch_warnings(), contextlib.redirect_stdout(sys.stderr):
        warnings.simplefilter("ignore")
        try:
            trainer = GRPOTrainer(
                model=model,
                args=cfg,
                train_dataset=data,
                processing_class=tok,
                environment_factory=env_cls,
                callbacks=[timer],
            )
            trainer.train()
        finally:
            hook.remove()
    step_logs = [x for x in logs if "loss" in x or "reward" in x]
    n_ep = max(1, counters["episodes"])
    return {
        "step_s": times,
        "episodes": counters["episodes"],
        "env_steps_per_episode": counters["env_steps"] / n_ep,
        "calls_after_end_per_episode": counters["calls_after_end"] / n_ep,
        "model_tokens_per_episode": median([x.get("completions/mean_length", 0.0) for x in step_logs]),
        "trained_tokens_per_episode": trained[0] / n_ep,
        "tool_calls_per_episode": median([x.get("tools/call_frequency", 0.0) for x in step_logs]),
        "reward_mean": median([x.get("reward", 0.0) for x in step_logs]),
    }


# ------------------------------------------------------------------------------------------ harness side
def harness_run(args: argparse.Namespace, sft_dir: str, critic: str, root: Path, seed: int) -> dict[str, Any]:
    """One harness training run (the ``eau train`` loop, in process): per-step times and work."""
    from harness.ppo.config import build_config
    from harness.ppo.trainer import train

    kdir = private_knobs(root / f"{critic}-{seed}")
    rdir = root / f"{critic}-{seed}" / "runs"
    overrides = {
        "steps": args.steps,
        "run_id": "bench",
        "seed": seed,
        "gyms": [args.gym],
        "rendering": RENDERING,
        "user_replies": args.user_replies,
        "tasks_per_step": args.tasks,
        "samples_per_task": args.samples,
        "policy": {"model": "tiny", "chat_template": TEMPLATE},
        "init_checkpoint": sft_dir,
        "critic": {"mode": critic} if critic == "shared" else {"mode": "separate", "init": "policy"},
        "checkpoint_every": 0,
        "progress": False,
        "agent_knobs.lr": args.lr,
        "agent_knobs.critic_lr": args.lr,
        "agent_knobs.ppo_epochs": 1,
        "agent_knobs.mini_batch_size": args.tasks * args.samples,
        "agent_knobs.micro_batch_size": args.micro_batch,
        "agent_knobs.max_new_tokens_per_turn": args.turn_tokens,
        "agent_knobs.max_episode_tokens": args.episode_tokens,
        "env_knobs.max_steps": args.max_steps,
    }
    cfg = build_config("tiny", None, overrides)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = train(cfg, rdir, kdir)
    ms = [json.loads(x) for x in (trainer.run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return {
        "step_s": [m["time_step_s"] for m in ms],
        "rollout_s": [m["time_rollout_s"] for m in ms],
        "update_s": [m["time_update_s"] for m in ms],
        "harness_s": [m["time_harness_s"] for m in ms],
        "model_tokens_per_episode": median([m["turns_mean"] * m["response_tokens_mean"] for m in ms]),
        "trained_tokens_per_episode": median([m["episode_tokens_mean"] for m in ms]),
        "turns_per_episode": median([m["turns_mean"] for m in ms]),
        "reward_mean": median([m["reward_mean"] for m in ms]),
    }


def prompt_tokens(gym: str, knobs: Any, sft_dir: str) -> tuple[str, int]:
    """The gym's system prompt and the longest initial prompt (tokens) the harness renders for it."""
    from harness.envs.registry import make as make_gym
    from harness.rollout.chat import ChatFormat

    _model, tok = load_tiny(None, TEMPLATE)
    env = make_gym(gym, knobs=knobs, rendering=RENDERING, split="train")
    chat = ChatFormat(tok, RENDERING)
    longest = 0
    for i in range(20):
        obs, info = env.reset(seed=i, options={"task_index": i, "split": "train"})
        chat.tools = info["tools"]
        msgs = [{"role": "system", "content": info["system_prompt"]}, {"role": "user", "content": obs}]
        longest = max(longest, len(chat.prompt_ids(msgs)))
    return info["system_prompt"], longest


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__
    )
    ap.add_argument("--gym", default="intention", help="gym of both sides (default intention)")
    ap.add_argument("--tasks", type=int, default=8, help="tasks per step (default 8, the tiny preset's)")
    ap.add_argument("--samples", type=int, default=2, help="episodes per task = GRPO num_generations (default 2)")
    ap.add_argument("--steps", type=int, default=5, help="training steps per run (default 5; step 0 is excluded)")
    ap.add_argument("--repeats", type=int, default=2, help="alternating runs of every side (default 2)")
    ap.add_argument(
        "--critics",
        default="separate,shared",
        help="harness critic set-ups to measure, comma-separated (default separate,shared)",
    )
    ap.add_argument("--micro-batch", type=int, default=8, help="episodes per forward/backward (default 8)")
    # A step's work does not depend on the learning rate, but the next step's episodes do: at the
    # tiny preset's 1e-3 one update of the shared-critic harness turned every later turn into a format
    # error (format_error_rate 0.32 -> 1.0, every episode at the turn limit), so the steps after it
    # timed a broken policy. A small rate keeps both sides playing the warm start's episodes.
    ap.add_argument(
        "--lr",
        type=float,
        default=1e-5,
        help="learning rate of both sides (default 1e-5: the warm start's behaviour stays; tiny preset: 1e-3)",
    )
    ap.add_argument("--max-steps", type=int, default=TINY_MAX_STEPS, help="turn limit (tiny preset: 6)")
    # The tiny preset's 48 / 1,024 cut tool calls: in the tiny tokenizer an interact call is ~30-60
    # tokens and the qwen3 prompt with its tool block ~580, so both budgets are doubled here.
    ap.add_argument("--turn-tokens", type=int, default=2 * TINY_TURN_TOKENS, help="max new tokens per turn (96)")
    ap.add_argument("--episode-tokens", type=int, default=2 * TINY_EPISODE_TOKENS, help="max tokens per episode (2048)")
    ap.add_argument(
        "--user-replies",
        choices=("tool", "user"),
        default="tool",
        help="how the harness renders the user's replies (and the warm start learned them): tool "
        "(default) = as the interact call's result, as TRL renders every result; user = as user "
        "messages (the harness's default), which TRL cannot render",
    )
    ap.add_argument("--first-task", type=int, default=5000, help="first task index of the TRL dataset")
    ap.add_argument("--sft-dir", default=None, help="warm-start folder (default: a cache under $EAU_CACHE_DIR)")
    ap.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads (default 1: stable on a shared 2-core box; 0 = torch's default)",
    )
    args = ap.parse_args()
    episodes = args.tasks * args.samples
    if episodes % args.micro_batch:
        ap.error(f"tasks x samples ({episodes}) must be a multiple of --micro-batch ({args.micro_batch})")
    critics = [c.strip() for c in args.critics.split(",") if c.strip()]
    bad = [c for c in critics if c not in ("separate", "shared")]
    if bad:
        ap.error(f"--critics: unknown {bad}; allowed: separate, shared")

    load_start = load_average()
    threads = set_threads(args.threads)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    ws = warm_start(RENDERING, TEMPLATE, directory=args.sft_dir, log=stderr_log, user_replies=args.user_replies)
    knobs = bench_knobs(args.max_steps)
    system_prompt, prompt_len = prompt_tokens(args.gym, knobs, ws["dir"])
    # TRL's max_completion_length bounds everything after the prompt (actions and tool results):
    # the harness's per-episode budget minus the prompt
    max_completion = args.episode_tokens - prompt_len
    root = temp_root("bench_vs_trl_")
    trl_error = None
    sides: dict[str, Callable[[int], Any]] = {}
    for c in critics:
        sides[f"harness_{c}_critic"] = lambda r, c=c: harness_run(args, ws["dir"], c, root, r)

    def trl_side(r: int) -> dict[str, Any] | None:
        nonlocal trl_error
        if trl_error is not None:
            return None
        try:
            return trl_run(args, ws["dir"], knobs, system_prompt, max_completion, root / f"trl-{r}", r)
        except Exception as exc:  # noqa: BLE001 -- report why TRL's path cannot run here, as the issue asks
            trl_error = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=6)}"
            return None

    sides["trl_grpo"] = trl_side
    stderr_log(
        f"{episodes} episodes/step on {args.gym}, {args.steps} steps x {args.repeats} repeats, "
        f"sides {list(sides)}, torch threads {threads}"
    )
    try:
        runs = alternate(sides, args.repeats, log=stderr_log)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    def steady(rs: list[dict[str, Any]]) -> list[float]:
        return [t for r in rs if r for t in (r["step_s"][1:] if len(r["step_s"]) > 1 else r["step_s"])]

    result: dict[str, Any] = {
        "benchmark": "vs_trl",
        "command": " ".join(["python", *sys.argv]),
        "machine": {**machine(), "load_average_start": load_start},
        "setup": {
            "gym": args.gym,
            "episodes_per_step": episodes,
            "tasks": args.tasks,
            "samples": args.samples,
            "steps_per_run": args.steps,
            "repeats": args.repeats,
            "micro_batch": args.micro_batch,
            "lr": args.lr,
            "max_steps": args.max_steps,
            "turn_tokens": args.turn_tokens,
            "episode_tokens": args.episode_tokens,
            "harness_prompt_tokens_max": prompt_len,
            "trl_max_completion_length": max_completion,
            "chat_template": TEMPLATE,
            "rendering": RENDERING,
            "user_replies": args.user_replies,
            "warm_start": ws,
            "trl": __import__("trl").__version__,
            "step_time": "median over steps 1.. of every run (step 0 warms up)",
        },
        "sides": {},
    }
    for name, rs in runs.items():
        rs = [r for r in rs if r]
        if not rs:
            continue
        side = {
            "step_s": summary(steady(rs)),
            "reward_mean": round(median([r["reward_mean"] for r in rs]), 3),
            "model_tokens_per_episode": round(median([r["model_tokens_per_episode"] for r in rs]), 1),
            "trained_tokens_per_episode": round(median([r["trained_tokens_per_episode"] for r in rs]), 1),
        }
        if name.startswith("harness"):
            side["rollout_s"] = round(median([x for r in rs for x in r["rollout_s"][1:] or r["rollout_s"]]), 3)
            side["update_s"] = round(median([x for r in rs for x in r["update_s"][1:] or r["update_s"]]), 3)
            side["turns_per_episode"] = round(median([r["turns_per_episode"] for r in rs]), 2)
        else:
            side["tool_calls_per_episode"] = round(median([r["tool_calls_per_episode"] for r in rs]), 2)
            side["env_steps_per_episode"] = round(median([r["env_steps_per_episode"] for r in rs]), 2)
            side["calls_after_episode_end_per_episode"] = round(
                median([r["calls_after_end_per_episode"] for r in rs]), 2
            )
        result["sides"][name] = side
    trl = result["sides"].get("trl_grpo")
    if trl_error:
        result["trl_error"] = trl_error
    if trl:
        result["ratios"] = {}
        for name, side in result["sides"].items():
            if name == "trl_grpo":
                continue
            ratio = side["step_s"]["median"] / trl["step_s"]["median"]

            def per(key: str, side: dict = side) -> float:  # step time per token of that kind, harness over TRL
                return (side["step_s"]["median"] / max(1e-9, side[key])) / (
                    trl["step_s"]["median"] / max(1e-9, trl[key])
                )

            per_token, per_trained = per("model_tokens_per_episode"), per("trained_tokens_per_episode")
            result["ratios"][name] = {
                "step_time_vs_trl": round(ratio, 3),
                "step_time_per_generated_token_vs_trl": round(per_token, 3),
                "step_time_per_trained_token_vs_trl": round(per_trained, 3),
                "target": f"<= {TARGET_RATIO}",
                "meets_target": ratio <= TARGET_RATIO,
            }
    result["machine"]["load_average_end"] = load_average()
    emit(result)


if __name__ == "__main__":
    main()
