"""The PPO trainer loop, readable top to bottom.

    for step in steps:
        knobs    <- the knob store at the step boundary (the only place a change lands)
        episodes <- roll out tasks x n episodes (turns batched across every live episode)
        batch    <- padded tensors; the frozen trunk's states when passes can share them
        score    <- old log-probs (recorded while sampling, or a scoring pass), KL reference
                    log-probs, old values
        adv      <- GAE over action tokens, each turn's reward on its last action token; whitened
        update   <- PPO epochs over mini-batches (micro-batches accumulate gradients)
        log      <- metrics.jsonl, trajectories, status.json, log.txt; checkpoint every N steps

The run's knobs live in its own folder, ``runs/<id>/knobs`` (harness/ppo/run_knobs.py); the agent
knobs reach the loop as a typed object (harness/ppo/hyperparams.py). Around the loop (``session``):
the knob watcher on that folder, and at the end, however the run ends, the knob writes it never
applied logged and its final state. Data parallel under ``accelerate launch``: every process rolls
out its share of the tasks, DDP averages gradients, whitening sums over every process, process 0
alone polls knobs and writes the run folder.
"""

from __future__ import annotations

import contextlib
import functools
import math
import signal
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from harness.envs.registry import make as make_gym
from harness.knobs.watcher import KnobWatcher
from harness.ppo import checkpoint, core
from harness.ppo.batch import Batch, collate, minibatch_plan
from harness.ppo.config import TrainConfig, check_start, default_run_id
from harness.ppo.distributed import Dist, seed_everything
from harness.ppo.guards import NumericGuard
from harness.ppo.hyperparams import AgentKnobs
from harness.ppo.models import (
    PolicyWithValueHead,
    batch_token_stats,
    build_critic,
    count_parameters,
    critic_values,
    forward_token_stats,
    frozen_trunk_depth,
    load_policy,
    make_reference,
    reference_logprobs,
)
from harness.ppo.numerics import describe as describe_numerics
from harness.ppo.numerics import numeric_environment
from harness.ppo.optim import make_optimizers
from harness.ppo.packaged import ensure_model_folder, model_folder
from harness.ppo.run_knobs import RunKnobs
from harness.ppo.warm_start import format_mismatch, make_warm_start, starting_weights
from harness.rollout.backend_choice import make_backend
from harness.rollout.backends import SamplingParams, rollout_records_stats
from harness.rollout.chat import ChatFormat
from harness.rollout.engine import Episode, RolloutEngine
from harness.runs.metrics import prompt_alerts, step_line, step_metrics
from harness.runs.progress import Progress
from harness.runs.writer import RunWriter
from harness.users import UserFactory


def episode_sampling_seed(seed: int, step: int, task_slot: int, sample: int) -> int:
    """The sampling seed of one episode: a function of the run's seed, the step, the task's slot in
    the step and the sample, so an episode's tokens do not depend on its batch-mates, on how many
    processes share the step, or on the global RNG (a resumed run samples as the uninterrupted one)."""
    return int(np.random.SeedSequence([int(seed), int(step), int(task_slot), int(sample)]).generate_state(1)[0])


class Trainer:
    """Owns the models, optimisers, gyms, knob store and run folder of one run.

    Built in this order: the run's knobs folder (checked before anything else is made), the run
    folder (so that ``status.json`` and ``log.txt`` show every phase), the policy and its starting
    weights, critic, KL reference and optimisers, the rollout engine, then on resume the checkpoint.
    If any of it fails, the run folder says so before the error propagates."""

    def __init__(
        self,
        cfg: TrainConfig,
        runs_dir: Path,
        knobs_dir: Path,
        *,
        resume: bool = False,
        echo: bool = False,
        progress: Progress | None = None,
    ):
        self.cfg, self.dist, self.echo = cfg, Dist(), echo
        self.run_id = cfg.run_id = cfg.run_id or default_run_id(cfg.preset)
        self.runs_dir, self.knobs_dir = Path(runs_dir), Path(knobs_dir)
        self.run_dir = self.runs_dir / self.run_id
        self.progress = progress if progress is not None and self.dist.main else Progress(enabled=False)
        check_start(cfg, self.dist.world)  # before the knobs folder is made or a model is loaded
        if cfg.torch_threads > 0:
            torch.set_num_threads(cfg.torch_threads)
        if cfg.device != "auto":
            self.dist.device = torch.device(cfg.device)
        seed_everything(cfg.seed + self.dist.rank)
        self.task_rng = np.random.default_rng(cfg.seed)  # identical on every rank: ranks slice the same draw
        self.start_step, self.stop_requested, self.writer = 0, False, None
        ck = checkpoint.latest(self.run_dir) if resume else None
        self.resume_state = checkpoint.read_state(ck) if ck is not None else None

        # knobs: the run's own folder, runs/<id>/knobs (harness/ppo/run_knobs.py), made now for a new run
        self.knobs_link = RunKnobs(self.run_dir, cfg.gyms, llm_user=bool(cfg.user_llm))
        if self.dist.main:
            st = self.resume_state or {}
            if resume:
                self.knobs_link.resume(st.get("knob_state"), int(st.get("next_step", 0)))
            else:
                self.knobs_link.start(cfg, self.knobs_dir, self.runs_dir)
        self.store = self.knobs_link.store  # the run's knob store (process 0; None elsewhere)
        self.snapshot = self.dist.broadcast(self.knobs_link.snapshot() if self.dist.main else None)
        self.knobs = AgentKnobs.from_snapshot(self.snapshot)
        try:
            self._build(resume)
        except BaseException as exc:
            if getattr(self, "user_factory", None) is not None:
                self.user_factory.close()  # a vLLM server the run started
            self._finish("failed", error=f"{type(exc).__name__}: {exc}")
            raise

    def _build(self, resume: bool) -> None:
        cfg = self.cfg
        if self.dist.main:  # the run folder
            if resume:
                st = self.resume_state or {}
                self.writer = RunWriter.reopen(
                    self.run_dir, st.get("offsets", {}), int(st.get("next_step", 0)), echo=self.echo
                )
            else:
                self.writer = RunWriter.create(
                    self.run_dir,
                    cfg.to_dict(),
                    self.knobs_link.dir,
                    cfg.gyms,
                    cfg.steps,
                    echo=self.echo,
                    project_knobs_dir=self.knobs_dir,
                )
                self.writer.log(
                    f"run {self.run_id}: preset {cfg.preset}, gyms {cfg.gyms}, "
                    f"{cfg.tasks_per_step}x{cfg.samples_per_task} episodes/step, {cfg.steps} steps"
                )
            numerics = numeric_environment()  # a resume may run on another processor: recorded each time
            self.writer.event("numerics", **numerics)
            self.writer.log(describe_numerics(numerics))
            self.knobs_link.attach(self.writer, resumed=resume)

        self._phase("loading model")
        with self.progress.phase(f"loading policy {cfg.policy.model}") as ph:  # the policy and where it starts
            self.policy, self.tokenizer = load_policy(cfg.policy, log=self._note)
            ph.info = f"{count_parameters(self.policy) / 1e6:.0f}M parameters"
        self.policy.to(self.dist.device)
        start = starting_weights(cfg, self.run_dir)
        if start is not None:
            checkpoint.load_trainable(self.policy, torch.load(start / "policy.pt", weights_only=True), str(start))
            if self.dist.main and not resume and cfg.init_checkpoint and (start / checkpoint.STATE).exists():
                checkpoint.pin(start, cfg.run_id)  # the parent run's pruning must keep what this run came from
        elif cfg.warm_start is not None:
            if self.dist.main:
                make_warm_start(
                    cfg, self.policy, self.tokenizer, self.snapshot, self.run_dir, self.writer, self.progress
                )
            self.dist.broadcast(None)  # every rank waits for the warm start on disk
            if not self.dist.main:
                ws = starting_weights(cfg, self.run_dir)
                checkpoint.load_trainable(self.policy, torch.load(ws / "policy.pt", weights_only=True), str(ws))

        self.critic = build_critic(self.policy, cfg.critic).to(self.dist.device)
        self.shared_critic = isinstance(self.critic, PolicyWithValueHead)
        # the KL anchor is the starting policy: with LoRA adapters already trained (a warm start) a
        # frozen copy with them merged; else the base with adapters off (LoRA) or a frozen copy
        self.reference = make_reference(self.policy, trained_adapters=start is not None or cfg.warm_start is not None)
        self.trunk_depth = frozen_trunk_depth(self.policy)
        self.optimizers, self.train_policy, self.train_critic = make_optimizers(
            self.policy, self.critic, self.shared_critic, self.knobs, self.dist.accelerator
        )

        self.chat = ChatFormat(self.tokenizer, cfg.rendering, user_replies=cfg.user_replies)  # the rollout
        self.backend = make_backend(
            cfg.backend.options(),
            self.policy,
            self.tokenizer,
            self.dist.device,
            cfg.seed,
            model_folder(cfg.policy.model, cfg.policy.cache_dir),
        )
        self.engine = RolloutEngine(self.backend, self.chat)
        self.rollout_stats = rollout_records_stats(cfg.rollout_stats, self.backend, self.engine, self.policy)
        if self.rollout_stats and self.shared_critic:
            self.backend.value_fn = self.critic.values_from_hidden
        self.user_factory = UserFactory()  # the LLM user's kind vllm: a server the run starts now, stops at its end
        if cfg.user_llm:
            log = self.run_dir / "user_llm_server.log" if self.dist.main else None
            folder = functools.partial(ensure_model_folder, log=self._note)
            server = {"device": self.dist.device.type, "log_path": None if log is None else str(log)}
            if cfg.user_llm.kind == "vllm":
                self._note(f"user_llm: starting a vLLM server for {cfg.user_llm.model} (log: {log})")
            self.user_factory = UserFactory(llm=cfg.user_llm.options(folder, **server))
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        alert = self.writer.alert if self.dist.main else None  # no update on non-finite numbers (guards.py)
        self.guard = NumericGuard(self.dist, alert, lambda: self.store.log.read())
        self.guard.optimizers = self.optimizers
        self._prompt_alerts: set[tuple[str, int]] = set()  # (gym, budget) pairs already alerted
        if resume:
            self._resume()
        elif self.dist.main and (alert := format_mismatch(cfg)) is not None:  # the warm start's format
            self.writer.alert("warm_start_format", alert["message"], learned=alert["learned"], plays=alert["plays"])

    def _resume(self) -> None:
        """The latest checkpoint's tensors, RNG and knob state (the run folder was reopened at the same
        checkpoint's log offsets)."""
        ck = checkpoint.latest(self.run_dir)
        state: dict[str, Any] = {"next_step": 0, "knob_state": None}
        if ck is not None:  # a shared critic's value head is in critic.pt, loaded into the wrapper
            state = checkpoint.load(
                ck, policy=self.policy, critic=self.critic, optimizers=self.optimizers, task_rng=self.task_rng
            )
            seed_everything(self.cfg.seed + self.dist.rank + 7919 * int(state["next_step"]))
        self.start_step = int(state["next_step"])
        if self.dist.main:
            self.writer.event("resumed", from_checkpoint=str(ck) if ck else None, next_step=self.start_step)
            self.writer.log(f"resumed at step {self.start_step}" + (f" from {ck.name}" if ck else " (no checkpoint)"))

    # ------------------------------------------------------------------ the loop
    def train(self) -> dict[str, Any]:
        """The PPO steps from ``start_step`` to ``cfg.steps`` (or until SIGTERM); the last metrics."""
        cfg = self.cfg
        if threading.current_thread() is threading.main_thread():  # SIGTERM: finish the step, then stop
            signal.signal(signal.SIGTERM, lambda _signum, _frame: setattr(self, "stop_requested", True))
        last: dict[str, Any] = {}
        bar = self.progress.phase("train", total=cfg.steps, unit="steps")
        bar.set(self.start_step)
        try:
            for step in range(self.start_step, cfg.steps):
                t_step = time.perf_counter()
                self._phase("rollout", step=step)
                knob_info = self.poll_knobs(step)  # 1. knobs at the boundary
                episodes, rollout_t = self.rollout(step, bar)  # 2. rollout
                self._phase("update")
                bar.set(step, f"step {step}: update")
                t_upd = time.perf_counter()
                batch = collate(episodes, self.pad_id)
                self.share_trunk(batch)  # 3. states below the trained layers
                score_stats = self.score(batch)  # 4. old/ref log-probs, old values
                score_stats.update(self.advantages(batch))  # 5. GAE over action tokens
                upd = self._guarded_update(step, batch)  # 6. PPO update (guarded)
                time_update, t_sync = time.perf_counter() - t_upd, time.perf_counter()
                score_stats.update(self.backend.sync_weights(self.policy))  # (vLLM: sent and checked, or raises)
                score_stats["time_weight_sync_s"] = time.perf_counter() - t_sync
                t_log = time.perf_counter()  # 7. log
                records = [r for part in self.dist.gather(self._records(step, episodes)) for r in part]
                updates = self.dist.gather(upd)
                if self.dist.main:
                    last = self._log_step(
                        step, records, updates, score_stats, rollout_t, time_update, knob_info, t_step, t_log
                    )
                    bar.set(step + 1, f"reward {last['reward_mean']:.3f} success {last['success_rate']:.2f}")
                if self._should_checkpoint(step):
                    self.save_checkpoint(step)
                if self.stop_requested:
                    break
        finally:
            bar.close()
        self.dist.close()
        return last

    @contextlib.contextmanager
    def session(self):
        """The run's lifetime around :meth:`train` (and what is done with the policy after it): the knob
        watcher on its knobs folder (process 0), and at the end, however it ends, :meth:`_finish`."""
        watcher = KnobWatcher(self.store) if self.dist.main else contextlib.nullcontext()
        try:
            with watcher, contextlib.closing(self.user_factory):  # closing: a vLLM server the run started
                yield self
        except BaseException as exc:
            state = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
            self._finish(state, error=f"{type(exc).__name__}: {exc}")
            self.progress.close()
            raise
        if self.stop_requested:
            self._finish(**self.guard.end_state())
        else:
            self._finish("finished", steps=self.cfg.steps)

    def _finish(self, state: str, **fields: Any) -> None:
        """The run's final state (process 0), after the knob writes it never applied are logged, under
        its knobs folder's write lock: a command writing after it sees a stopped run."""
        if self.dist.main:
            with self.knobs_link.ending():
                if self.writer is not None:
                    self.writer.finish(state, **fields)

    # ------------------------------------------------------------------ one step's stages
    def poll_knobs(self, step: int) -> dict[str, Any]:
        """Apply knob changes at the step boundary (process 0 decides, every process applies)."""
        t0 = time.perf_counter()
        snapshot, applied = None, 0
        if self.dist.main:
            snapshot, applied = self.knobs_link.poll(step, self.cfg.metrics_window, first=step == self.start_step)
        self.snapshot = self.dist.broadcast(snapshot)
        self.knobs = AgentKnobs.from_snapshot(self.snapshot)  # lr, critic_lr set before every optimiser update
        return {"applied": applied, "time_s": time.perf_counter() - t0}

    def rollout(self, step: int, bar: Any = None) -> tuple[list[Episode], dict[str, float]]:
        """This process's share of the step's tasks, ``samples_per_task`` episodes each. ``bar``: a
        progress phase told how many of the step's episodes have finished."""
        cfg = self.cfg
        draws = self.task_rng.integers(0, 2**31 - 1, size=cfg.tasks_per_step)  # same on every rank
        envs, kws, groups, samples, seeds = [], [], [], [], []
        gym_kw = dict(knobs=self.snapshot, rendering=cfg.rendering, user_factory=self.user_factory, split="train")
        for i in range(self.dist.rank, cfg.tasks_per_step, self.dist.world):
            gym = cfg.gyms[(step * cfg.tasks_per_step + i) % len(cfg.gyms)]
            for s in range(cfg.samples_per_task):
                envs.append(make_gym(gym, **gym_kw))
                kws.append({"seed": int(draws[i]) * 31 + s, "options": {"task_index": int(draws[i]), "split": "train"}})
                groups.append(f"{gym}/train/{int(draws[i])}")
                samples.append(s)
                seeds.append(episode_sampling_seed(cfg.seed, step, i, s))
        params = SamplingParams(self.knobs.temperature, self.knobs.top_p, stop_ids=tuple(self.chat.stop_ids))
        n = len(envs)

        def on_turn(_turns: int, live: int) -> None:
            if bar is not None:
                bar.set(step, f"step {step}: rollout {n - live}/{n} episodes")

        t0 = time.perf_counter()
        res = self.engine.run(
            envs,
            kws,
            groups,
            samples,
            params=params,
            max_new_tokens_per_turn=self.knobs.max_new_tokens_per_turn,
            max_episode_tokens=self.knobs.max_episode_tokens,
            with_stats=self.rollout_stats and params.temperature > 0,
            seeds=seeds if self.engine.continuous or self.backend.per_request_seeds else None,
            on_turn=on_turn,
        )
        return res.episodes, {
            "time_rollout_s": time.perf_counter() - t0,
            "time_generate_s": res.time_generate_s,
            "time_env_s": res.time_env_s,
            "generated_tokens": float(res.generated_tokens),
        }

    def share_trunk(self, batch: Batch) -> None:
        """The frozen trunk's states, once for every pass this step makes over the batch (LoRA on the top
        layers only): PPO epochs, the KL reference, a scoring pass."""
        k = self.knobs
        passes = k.ppo_epochs + (k.kl_coef > 0) + (batch.rollout_logprobs is None)
        batch.share_frozen_trunk(self.policy, self.trunk_depth, passes, k.micro_batch_size, self.dist.device)

    @torch.no_grad()
    def score(self, batch: Batch) -> dict[str, float]:
        """Old log-probs (the rollout policy's), reference log-probs (the KL term) and old values."""
        micro, dev = self.knobs.micro_batch_size, self.dist.device
        # rows by length: each micro-batch is cut to the span of rows of similar length (less padding)
        order = torch.argsort(batch.attention_mask.sum(1), stable=True)
        back = torch.argsort(order)
        ids, am = batch.input_ids[order].to(dev), batch.attention_mask[order].to(dev)
        # action tokens only (the vocabulary projection is the cost), below them the frozen trunk's states
        passes = dict(
            temperature=self.knobs.temperature,
            micro_batch_size=micro,
            score_mask=batch.action_mask[order].to(dev),
            trunk=batch.trunk_for(order, dev),
        )
        self.policy.eval()
        self.critic.eval()
        from_rollout = batch.rollout_logprobs is not None and (
            batch.rollout_values is not None or not self.shared_critic
        )
        if from_rollout:  # recorded while sampling (rollout_stats): only a separate critic still needs its pass
            batch.old_logprobs, batch.old_values = batch.rollout_logprobs, batch.rollout_values
        else:
            st = batch_token_stats(self.critic if self.shared_critic else self.policy, ids, am, **passes)
            batch.old_logprobs = st.logprobs.cpu()[back]
            if self.shared_critic:
                batch.old_values = st.values.cpu()[back]
        if not self.shared_critic:
            batch.old_values = torch.cat(
                [critic_values(self.critic, i, a) for i, a in zip(ids.split(micro), am.split(micro))]
            ).cpu()[back]
        if self.knobs.kl_coef > 0:
            batch.ref_logprobs = reference_logprobs(self.policy, self.reference, ids, am, **passes).cpu()[back]
        self.policy.train()
        self.critic.train()
        m = batch.action_mask
        s = self.dist.all_sum(torch.stack([(batch.old_logprobs * m).sum(), m.sum()]))
        return {"logprob_mean": float(s[0] / s[1].clamp(min=1)), "old_logprobs_from_rollout": float(from_rollout)}

    def advantages(self, batch: Batch) -> dict[str, float]:
        """GAE over action tokens; whitened with the moments of every process's action tokens."""
        k = self.knobs
        estimate = core.get_adv_estimator(self.cfg.adv_estimator)
        m = batch.action_mask
        adv, ret = estimate(
            batch.rewards,
            batch.old_values * m,
            m,
            gamma=k.gamma,
            lam=k.lam,
            token_gamma=k.token_gamma,
            token_lam=k.token_lam,
            turn_end_mask=batch.turn_ends,
        )
        mean, var = core.moments_from_sums(self.dist.all_sum(core.masked_sums(adv, m)))
        if k.whiten_advantages:
            adv = core.whiten(adv, m, mean, var)
        batch.advantages, batch.returns = adv, ret
        return {
            "advantage_std": float(var.sqrt()),
            "return_mean": float(core.masked_mean(ret, m)) if m.sum() > 0 else 0.0,
        }

    def _guarded_update(self, step: int, batch: Batch) -> dict[str, float]:
        """:meth:`update` under the numeric guard (which keeps a copy to undo it only when it makes more
        than one optimiser step); the run stops when the guard says so."""
        k = self.knobs
        size = max(1, k.mini_batch_size // self.dist.world)
        plan = minibatch_plan(batch.attention_mask.sum(1), size, k.ppo_epochs, self.cfg.seed * 1000 + step)
        steps = sum(len(minibatches) for minibatches in plan)
        upd = self.guard.update(step, batch, lambda b, s: self.update(b, s, plan), optimizer_steps=steps)
        self.stop_requested = self.stop_requested or bool(self.guard.stopped)
        return upd

    def update(self, batch: Batch, step: int, plan: list[list[Any]]) -> dict[str, float]:
        """PPO epochs over mini-batches (``plan``: shuffled by run seed and step); micro-batches
        accumulate gradients, one optimiser step per mini-batch."""
        k, dev = self.knobs, self.dist.device
        stats: dict[str, list[float]] = {}
        for minibatches in plan:
            for idx in minibatches:
                mini = batch.rows(idx)
                denom = self._denominator(mini)
                if denom is None:  # no action token on any process: e.g. every episode ended at its prompt
                    continue
                for opt in self.optimizers.values():
                    opt.zero_grad(set_to_none=True)
                micro, losses = max(1, min(k.micro_batch_size, len(idx))), {}
                for start in range(0, len(idx), micro):
                    rows = slice(start, start + micro)
                    ids, am = mini.input_ids[rows].to(dev), mini.attention_mask[rows].to(dev)
                    mask = mini.action_mask[rows].to(dev)
                    net = self.train_critic if self.shared_critic else self.train_policy
                    st = forward_token_stats(
                        net, ids, am, temperature=k.temperature, score_mask=mask, trunk=mini.trunk_for(rows, dev)
                    )
                    loss, metrics = core.ppo_actor_loss(
                        st.logprobs,
                        mini.old_logprobs[rows].to(dev),
                        mini.advantages[rows].to(dev),
                        mask,
                        clip_low=k.clip_ratio,
                        clip_high=k.clip_ratio_high,
                        entropy=st.entropy,
                        entropy_coeff=k.entropy_coeff,
                        ref_logprobs=mini.ref_logprobs[rows].to(dev) if mini.ref_logprobs is not None else None,
                        kl_coef=k.kl_coef,
                        kl_estimator=k.kl_estimator,
                        agg_mode=self.cfg.loss_agg,
                        denom=denom,
                    )
                    values = st.values if self.shared_critic else critic_values(self.train_critic, ids, am)
                    vloss, vm = core.value_loss(
                        values,
                        mini.old_values[rows].to(dev),
                        mini.returns[rows].to(dev),
                        mask,
                        k.value_clip,
                        self.cfg.loss_agg,
                        denom,
                    )
                    if not (loss.requires_grad or vloss.requires_grad):
                        # these rows hold no token with a predecessor (one-token rows of episodes that
                        # ended at their prompt): nothing to learn from them. Under DDP a rank with such
                        # a micro-batch alone would stall the others' gradient sync; the mini-batch
                        # check above makes that need a whole micro-batch of them on one rank.
                        continue
                    if self.shared_critic:
                        (loss + k.vf_coef * vloss).backward()
                    else:  # a separate critic may still get a gradient where the policy has none
                        for part in (loss, vloss):
                            if part.requires_grad:
                                part.backward()
                    for key, v in {**metrics, **vm}.items():
                        stats.setdefault(key, []).append(v)
                        if math.isfinite(losses.get(key, 0.0)):  # a mini-batch's first non-finite loss is kept
                            losses[key] = v
                for key, v in self.guard.clip_and_step(self.optimizers, k, losses).items():
                    stats.setdefault(key, []).append(v)
        return {key: float(np.mean(v)) for key, v in stats.items()}

    def _denominator(self, mini: Batch) -> torch.Tensor | None:
        """The loss mode's divisor over a whole mini-batch (all processes): micro-batch losses add up.
        None when no process's rows hold an action token (all processes agree: the sum is shared)."""
        local = core.agg_denominator(mini.action_mask, self.cfg.loss_agg).reshape(1)
        total = self.dist.all_sum(local)[0]
        return None if total <= 0 else total / self.dist.world

    # ------------------------------------------------------------------ checkpoints, records, log
    def _should_checkpoint(self, step: int) -> bool:
        if self.guard.unrecoverable:  # non-finite parameters: the last checkpoint keeps the good ones
            return False
        every = self.cfg.checkpoint_every
        return step + 1 == self.cfg.steps or self.stop_requested or (every > 0 and (step + 1) % every == 0)

    def save_checkpoint(self, step: int) -> None:
        if not self.dist.main:
            return
        path = checkpoint.save(
            self.run_dir,
            step,
            next_step=step + 1,
            policy=self.policy,
            critic=self.critic,
            optimizers=self.optimizers,
            task_rng=self.task_rng,
            knob_state=self.store.in_force_document(),
            offsets=self.writer.offsets(),
            keep=self.cfg.keep_checkpoints,
            extra={"run_id": self.run_id},
        )
        self.writer.write_status(last_checkpoint=step)
        self.writer.event("checkpoint", path=str(path), next_step=step + 1)
        self.writer.log(f"checkpoint {path.name} saved (resume continues at step {step + 1})")

    def _records(self, step: int, episodes: list[Episode]) -> list[dict[str, Any]]:
        return [{**ep.record, "step": step, "rank": self.dist.rank} for ep in episodes]

    def _log_step(
        self,
        step: int,
        records: list[dict[str, Any]],
        updates: list[dict[str, float]],
        score_stats: dict[str, float],
        rollout_t: dict[str, float],
        time_update: float,
        knob_info: dict[str, Any],
        t_step: float,
        t_log: float,
    ) -> dict[str, Any]:
        for i, r in enumerate(records):
            r["index"], r["episode_id"] = i, f"s{step:06d}-e{i:03d}"
        self.writer.episode_errors(step, records)
        for message, fields in prompt_alerts(step, records, self.knobs.max_episode_tokens, self._prompt_alerts):
            self.writer.alert("prompt_over_budget", message, **fields)  # once per gym and budget
        version, applied = self.snapshot.version, knob_info["applied"]  # the knobs the step ran with
        m = step_metrics(step, records, updates, self.knobs, score_stats, rollout_t, time_update, version, applied)
        self.writer.trajectories(step, records)
        m["time_harness_s"] = knob_info["time_s"] + (time.perf_counter() - t_log)
        m["time_step_s"] = time.perf_counter() - t_step
        self.writer.metrics(m)
        self.writer.write_status(
            step=step + 1,
            phase="between steps",
            eta_s=(self.cfg.steps - step - 1) * m["time_step_s"],
            last_metrics={x: m[x] for x in ("reward_mean", "success_rate", "entropy", "kl")},
        )
        self.writer.log(step_line(m))
        return m

    # ------------------------------------------------------------------ what the person sees
    def _phase(self, phase: str, **fields: Any) -> None:
        if self.writer is not None:
            self.writer.write_status(phase=phase, phase_done=None, phase_total=None, phase_eta_s=None, **fields)

    def _note(self, line: str) -> None:
        """A line for the person watching: in log.txt (once the run folder exists) and on the display."""
        if self.writer is not None:
            self.writer.log(line)
        if not self.echo or self.writer is None:
            self.progress.plain(line)


def train(
    cfg: TrainConfig,
    runs_dir: Path,
    knobs_dir: Path,
    *,
    resume: bool = False,
    echo: bool = False,
    progress: Progress | None = None,
) -> Trainer:
    """Build a trainer and run its PPO steps in a session (watcher, unapplied knob writes, final state)."""
    trainer = Trainer(cfg, runs_dir, knobs_dir, resume=resume, echo=echo, progress=progress)
    with trainer.session():
        trainer.train()
    return trainer
