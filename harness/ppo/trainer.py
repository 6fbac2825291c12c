"""The PPO trainer loop, readable top to bottom.

    for step in steps:
        knobs   <- poll the knob store at the step boundary (the only place a change lands)
        batch   <- roll out tasks x n episodes (one batched generation per turn)
        scores  <- old log-probs, reference log-probs, values (no gradients; a separate critic's
                   values of the first mini-batch come from its first forward in the update, which
                   runs here: the critic has not stepped yet)
        adv     <- GAE over action tokens, each turn's reward on its last action token
        update  <- PPO epochs over mini-batches (micro-batches accumulate gradients)
        log     <- metrics.jsonl, trajectories, status.json, log.txt; checkpoint every N steps

Data parallel: under ``accelerate launch`` each process rolls out its share of the tasks, gradients
are averaged by DDP, advantage whitening uses global statistics, and process 0 alone polls knobs
(broadcasting what it applied) and writes the run folder.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from harness.envs.registry import make as make_gym
from harness.knobs.events import KnobEvent
from harness.knobs.store import KnobStore
from harness.knobs.watcher import KnobWatcher
from harness.knobs.yamlio import atomic_write_text
from harness.ppo import checkpoint, core
from harness.ppo.config import TrainConfig, config_from_dict
from harness.ppo.models import (CriticSpec, PolicySpec, PolicyWithValueHead, batch_token_stats, build_critic,
                                count_parameters, critic_values, frozen_trunk_depth, trunk_states,
                                forward_token_stats, load_policy, make_reference, reference_logprobs,
                                trainable_parameters)
from harness.rollout.backends import HFBackend, SamplingParams
from harness.rollout.chat import ChatFormat
from harness.rollout.engine import Episode, RolloutEngine
from harness.runs import jsonl
from harness.runs.metrics import episode_metrics
from harness.runs.progress import Progress, fmt_duration
from harness.runs.writer import RunWriter

NOT_APPLIED = "knobs_not_applied.json"  # in a run folder: writes accepted for the run that it never applied


def warm_start_dir(run_dir: Path) -> Path:
    """Where a run's own warm start lives (``policy.pt``, ``sft.json``, ``metrics.jsonl``)."""
    return Path(run_dir) / "warm_start"


# ------------------------------------------------------------------------------------------------ setup

def _updates_done(opt: torch.optim.Optimizer) -> int:
    """Updates an Adam-style optimiser has made: the ``step`` count in its per-parameter state (0
    before the first update, which creates that state)."""
    for st in opt.state.values():
        if "step" in st:
            return int(st["step"])
    return 0


class Dist:
    """Process-group facts (one process without accelerate)."""

    def __init__(self) -> None:
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.accelerator = None
        if self.world > 1:
            from accelerate import Accelerator

            self.accelerator = Accelerator(cpu=not torch.cuda.is_available())
        self.rank = self.accelerator.process_index if self.accelerator else 0
        self.main = self.rank == 0
        self.device = self.accelerator.device if self.accelerator else torch.device(
            "cuda" if torch.cuda.is_available() else "cpu")

    def broadcast(self, obj: Any) -> Any:
        if self.world == 1:
            return obj
        import torch.distributed as td

        box = [obj]
        td.broadcast_object_list(box, src=0)
        return box[0]

    def gather(self, obj: Any) -> list[Any]:
        if self.world == 1:
            return [obj]
        import torch.distributed as td

        out: list[Any] = [None] * self.world
        td.all_gather_object(out, obj)
        return out

    def close(self) -> None:
        """Wait for every rank (rank 0 may still be writing its last checkpoint), then tear the process
        group down: a rank that exits with gloo's threads alive can abort ("terminate called without an
        active exception", SIGABRT: the two-process test failed 2 of 8 times without this, 0 of 12 with it)."""
        if self.accelerator is not None:
            self.accelerator.wait_for_everyone()
            self.accelerator.end_training()

    def all_sum(self, t: torch.Tensor) -> torch.Tensor:
        if self.world == 1:
            return t
        import torch.distributed as td

        t = t.clone()
        td.all_reduce(t)
        return t


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


def default_run_id(preset: str) -> str:
    return f"{preset}-{datetime.now(timezone.utc).strftime('%Y%m%d-%H%M%S')}"


@dataclass
class Batch:
    """Padded tensors of a rollout batch, all ``(B, T)`` (right padding)."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    action_mask: torch.Tensor
    rewards: torch.Tensor  # each turn's reward on its last action token
    turn_ends: torch.Tensor
    old_logprobs: torch.Tensor | None = None
    rollout_logprobs: torch.Tensor | None = None  # recorded while sampling (rollout_stats), 0 off actions
    rollout_values: torch.Tensor | None = None  # the shared critic's values recorded while sampling
    ref_logprobs: torch.Tensor | None = None
    trunk: torch.Tensor | None = None  # (B, T, H) frozen-trunk states (models.trunk_states), when computed
    old_values: torch.Tensor | None = None
    advantages: torch.Tensor | None = None
    returns: torch.Tensor | None = None

    def rows(self, idx: torch.Tensor) -> "Batch":
        pick = {k: (v[idx] if isinstance(v, torch.Tensor) else v) for k, v in self.__dict__.items()}
        return Batch(**pick)


def collate(episodes: list[Episode], pad_id: int) -> Batch:
    """Episodes -> padded tensors. Masks are 0 on padding; action mask 1 on generated tokens only."""
    T = max(len(e.ids) for e in episodes)
    B = len(episodes)
    ids = torch.full((B, T), pad_id, dtype=torch.long)
    am = torch.zeros((B, T), dtype=torch.long)
    act = torch.zeros((B, T), dtype=torch.float32)
    rew = torch.zeros((B, T), dtype=torch.float32)
    ends = torch.zeros((B, T), dtype=torch.float32)
    for i, e in enumerate(episodes):
        n = len(e.ids)
        ids[i, :n] = torch.tensor(e.ids)
        am[i, :n] = 1
        act[i, :n] = torch.tensor(e.action_mask, dtype=torch.float32)
        for t, r in zip(e.turn_last_token, e.turn_rewards):
            rew[i, t] += r
            ends[i, t] = 1.0
    act[:, 0] = 0.0  # the first token has no predecessor: never scored
    batch = Batch(ids, am, act, rew, ends)
    # the rollout's own log-probs / values, when every episode has them (one unscored turn: none used)
    for name in ("logprobs", "values"):
        if all(getattr(e, name) is not None for e in episodes):
            t = torch.zeros((B, T), dtype=torch.float32)
            for i, e in enumerate(episodes):
                t[i, :len(e.ids)] = torch.tensor(getattr(e, name), dtype=torch.float32)
            setattr(batch, f"rollout_{name}", t * act)
    return batch


# ------------------------------------------------------------------------------------------------ trainer
def has_dropout(model: torch.nn.Module) -> bool:
    """Whether a forward in train mode is random: a dropout module, or attention dropout, above 0."""
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout) and m.p > 0:
            return True
        if float(getattr(getattr(m, "config", None), "attention_dropout", 0.0) or 0.0) > 0:
            return True
    return False


def warm_start_format(init: Path) -> dict[str, str] | None:
    """``{"rendering", "user_replies"}`` a warm start was trained on: from its ``sft.json`` (an ``eau
    sft`` output) or its run's ``config.yaml`` (a ``checkpoints/step_N`` folder); None when unknown."""
    if (init / "sft.json").is_file():
        cfg = json.loads((init / "sft.json").read_text()).get("config", {})
    elif (init.parent.parent / "config.yaml").is_file() and init.parent.name == "checkpoints":
        cfg = yaml.safe_load((init.parent.parent / "config.yaml").read_text()) or {}
    else:
        return None
    return {"rendering": str(cfg.get("rendering") or "tagged"), "user_replies": str(cfg.get("user_replies") or "user")}


class Trainer:
    """Owns the models, optimisers, gyms, knob store and run folder of one run.

    Construction order: knobs (the run's values lent to the knobs folder), the run folder (so
    ``status.json`` and ``log.txt`` show what happens from the start), the policy and its starting
    weights (``init_checkpoint``, or a warm start the run makes itself), critic, reference and
    optimisers, the rollout engine, then on resume the checkpoint. If any of it fails, the lent
    knob values are given back before the error propagates."""

    def __init__(self, cfg: TrainConfig, runs_dir: Path, knobs_dir: Path, *, resume: bool = False,
                 echo: bool = False, progress: Progress | None = None):
        self.cfg = cfg
        self.dist = Dist()
        self.runs_dir, self.knobs_dir = Path(runs_dir), Path(knobs_dir)
        self.run_id = cfg.run_id or default_run_id(cfg.preset)
        cfg.run_id = self.run_id
        self.run_dir = self.runs_dir / self.run_id
        self.echo = echo
        self.progress = progress if progress is not None and self.dist.main else Progress(enabled=False)
        self.resuming = resume
        if cfg.tasks_per_step % self.dist.world:
            raise ValueError(f"tasks_per_step={cfg.tasks_per_step} must divide evenly over {self.dist.world} processes")
        if cfg.torch_threads > 0:
            torch.set_num_threads(cfg.torch_threads)
        if cfg.device != "auto":
            self.dist.device = torch.device(cfg.device)
        seed_everything(cfg.seed + self.dist.rank)
        self.task_rng = np.random.default_rng(cfg.seed)  # identical on every rank: ranks slice the same draw
        self.start_step = 0
        self.stop_requested = False
        self.writer: RunWriter | None = None
        self.lease = None
        if cfg.init_checkpoint and not (Path(cfg.init_checkpoint) / "policy.pt").exists():
            # before the knob files are touched or a model is loaded (a packaged model takes a while)
            raise ValueError(f"init_checkpoint {cfg.init_checkpoint}: no policy.pt there; make a warm start with "
                             f"`eau sft --preset tiny --out {cfg.init_checkpoint}` or point it at an `eau sft` output "
                             "or a run's checkpoints/step_N folder")
        ck = checkpoint.latest(self.run_dir) if resume else None
        self.resume_state = checkpoint.read_state(ck) if ck is not None else None

        # knobs: the store serves this run (scope checks use its gyms); the run's own values are lent
        self.store = KnobStore(self.knobs_dir, events_path=None, run_gyms=cfg.gyms)  # in memory until the folder exists
        self.store.live_run = True
        if self.dist.main:
            self.lease = self._lend_knobs()
        try:
            self._build(resume)
        except BaseException as exc:
            if self.dist.main:
                self.end_knobs()
                if self.writer is not None:
                    self.writer.finish("failed", error=f"{type(exc).__name__}: {exc}")
            raise

    def _build(self, resume: bool) -> None:
        cfg = self.cfg
        # run folder (process 0)
        if self.dist.main:
            if resume:
                offsets = (self.resume_state or {}).get("offsets", {})
                next_step = int((self.resume_state or {}).get("next_step", 0))
                self.writer = RunWriter.reopen(self.run_dir, offsets, next_step, echo=self.echo)
            else:
                self.writer = RunWriter.create(self.run_dir, cfg.to_dict(), self.knobs_dir, cfg.gyms, cfg.steps,
                                               echo=self.echo)
            self.store.attach_log(self.run_dir / "knob_events.jsonl")
            if not resume:
                self.writer.knobs_in_force(self.store.in_force_document())
                self.writer.log(f"run {self.run_id}: preset {cfg.preset}, gyms {cfg.gyms}, "
                                f"{cfg.tasks_per_step}x{cfg.samples_per_task} episodes/step, {cfg.steps} steps")
            self._log_lease()

        # models
        pspec = PolicySpec.from_dict(cfg.policy)
        self._phase_status("loading model")
        with self.progress.phase(f"loading policy {pspec.model}") as ph:
            self.policy, self.tokenizer = load_policy(pspec, log=self._note)
            ph.info = f"{count_parameters(self.policy) / 1e6:.0f}M parameters"
        self.policy.to(self.dist.device)
        start = self._starting_weights()
        if start is not None:
            checkpoint.load_trainable(self.policy, torch.load(start / "policy.pt", weights_only=True), str(start))
            if self.dist.main and not resume and cfg.init_checkpoint and (start / checkpoint.STATE).exists():
                checkpoint.pin(start, cfg.run_id)  # the parent run's pruning must keep what this run came from
        elif cfg.warm_start is not None:
            self._warm_start()
        cspec = CriticSpec.from_dict(cfg.critic)
        self.critic = build_critic(self.policy, cspec).to(self.dist.device)
        self.shared_critic = isinstance(self.critic, PolicyWithValueHead)
        self._first_values_in_update = not self.shared_critic and not has_dropout(self.critic)
        # the KL anchor is the starting policy: with LoRA adapters already trained (a warm start) it is
        # a frozen copy with them merged; else the base with adapters off (LoRA) or a frozen copy
        self.reference = make_reference(self.policy, trained_adapters=start is not None or cfg.warm_start is not None)
        self.trunk_depth = frozen_trunk_depth(self.policy)
        agent = self.store.snapshot().area("agent")
        if self.shared_critic:
            params = trainable_parameters(self.critic)  # policy adapters + value head, one optimiser
            self.optimizers = {"policy": torch.optim.AdamW(params, lr=agent["lr"])}
        else:
            self.optimizers = {"policy": torch.optim.AdamW(trainable_parameters(self.policy), lr=agent["lr"]),
                               "critic": torch.optim.AdamW(trainable_parameters(self.critic), lr=agent["critic_lr"])}
        self.train_policy, self.train_critic = self.policy, self.critic
        if self.dist.accelerator is not None:
            acc = self.dist.accelerator
            if self.shared_critic:
                self.train_critic, self.optimizers["policy"] = acc.prepare(self.critic, self.optimizers["policy"])
            else:
                (self.train_policy, self.train_critic, self.optimizers["policy"],
                 self.optimizers["critic"]) = acc.prepare(self.policy, self.critic, self.optimizers["policy"],
                                                          self.optimizers["critic"])

        # rollout
        self.chat = ChatFormat(self.tokenizer, cfg.rendering, user_replies=cfg.user_replies)
        self.backend = self._make_backend()
        self.engine = RolloutEngine(self.backend, self.chat)
        self.rollout_stats = self._use_rollout_stats()
        if self.rollout_stats and self.shared_critic:
            self.backend.value_fn = self.critic.values_from_hidden
        from harness.users import UserFactory

        self.user_factory = UserFactory(llm=cfg.user_llm) if cfg.user_llm else UserFactory()
        if resume:
            self._resume()
        elif self.dist.main:
            self._check_warm_start_format()
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0

    # ------------------------------------------------------------------ knobs lent to the folder
    def lent_values(self) -> dict[str, Any]:
        """The knob values this run sets (its config's agent_knobs / env_knobs); on resume, the values
        its last checkpoint had in force for those knobs (changes made while it ran included)."""
        values = {f"agent.{k}": v for k, v in (self.cfg.agent_knobs or {}).items()}
        values.update({f"env.{k}": v for k, v in (self.cfg.env_knobs or {}).items()})
        in_force = ((self.resume_state or {}).get("knob_state") or {}).get("values") or {}
        for name in values:
            area, _, knob = name.partition(".")
            if knob in in_force.get(area, {}):
                values[name] = in_force[area][knob]
        return values

    def _lend_knobs(self) -> Any:
        """Lend this run's knob values to the knobs folder (harness.knobs.lease): give back a lease
        left by a run that died, refuse to share the folder with another live run."""
        from harness.knobs.lease import Lease, lend, lease_is_live, read_lease, settle_stale_lease

        held = read_lease(self.knobs_dir)
        if held is not None and held.run_id != self.run_id:
            if lease_is_live(held):
                raise ValueError(f"run {held.run_id} (pid {held.pid}) is live on the knobs folder {self.knobs_dir}; "
                                 "a second run needs a knobs folder of its own: --knobs-dir DIR (eau knobs init DIR)")
            settle_stale_lease(self.knobs_dir, log=self._note)
            self.store = KnobStore(self.knobs_dir, events_path=None, run_gyms=self.cfg.gyms)
            self.store.live_run = True
            held = None
        lease = held or Lease(run_id=self.run_id, run_dir=str(self.run_dir.resolve()), pid=os.getpid())
        lease.pid = os.getpid()
        why = (f"run {self.run_id} resumed: its values lent again" if self.resuming
               else f"preset {self.cfg.preset}: lent to run {self.run_id}")
        try:
            lend(self.store, lease, self.lent_values(), reason=why)
        except ValueError as exc:
            from harness.knobs.lease import give_back

            give_back(self.store, lease, reason=f"run {self.run_id} did not start: lent values given back")
            raise ValueError(f"preset {self.cfg.preset}: {exc}") from None
        return lease

    def _log_lease(self) -> None:
        if self.lease is None or not self.lease.knobs:
            return
        changed = [f"{k} {json.dumps(v['before'])} -> {json.dumps(v['lent'])}" for k, v in self.lease.knobs.items()
                   if v["before"] != v["lent"]]
        if changed:
            self.writer.log(f"knobs lent to this run (given back when it ends): {'; '.join(changed)}")

    def end_knobs(self) -> None:
        """At the end of the run (any end): report the writes it accepted but never applied (kept in
        ``knobs_not_applied.json`` for a resume), then give the lent values back to the knobs folder."""
        from harness.knobs.lease import give_back

        try:
            left = self.store.unapplied_writes()
        except Exception as exc:  # a report must not hide the run's own error
            left = []
            self._note(f"knobs: could not check for unapplied writes: {exc}")
        if left and self.writer is not None:
            for w in left:
                rec = self.store.log.append(KnobEvent(
                    knob=w["knob"], gym=w["gym"], old=w["in_force"], new=w["written"], author=w["author"],
                    reason=w["reason"], status="not_applied", source=w["source"], file=w["file"],
                    step_written=w["step_written"], message="accepted for this run, which ended before its next step "
                    "boundary: `eau train --resume` applies it"))
                w["event"] = rec["id"]
                self.writer.log(f"knob {w['knob']}{'[' + w['gym'] + ']' if w['gym'] else ''} = "
                                f"{json.dumps(w['written'])} NOT APPLIED: the run ended before its next step boundary "
                                f"({w['author']}: {w['reason']}); `eau train --resume {self.run_id}` applies it")
            atomic_write_text(self.run_dir / NOT_APPLIED, json.dumps(left, indent=1, default=str))
        if self.lease is not None:
            back = give_back(self.store, self.lease, reason=f"run {self.run_id} ended: the values it lent go back")
            self.lease = None
            given = [f"{e['knob']} -> {json.dumps(e['new'])}" for e in back if e.get("status") == "accepted"]
            if given and self.writer is not None:
                self.writer.log(f"knobs given back to {self.knobs_dir}: {'; '.join(given)}")

    def _reissue_not_applied(self) -> None:
        """On resume: writes the run accepted but never applied are written again; the first step
        boundary applies them (with their author and reason)."""
        path = self.run_dir / NOT_APPLIED
        if not path.is_file():
            return
        for w in json.loads(path.read_text()):
            res = self.store.set(w["knob"], w["written"], gym=w["gym"], author=w["author"], reason=w["reason"],
                                 step_written=self.start_step, run_live=True, source=w.get("source") or "cli",
                                 skip_requires=True)
            state = "written again" if res.ok else f"refused now: {res.event.get('message')}"
            self.writer.log(f"knob {w['knob']} = {json.dumps(w['written'])} (not applied before the run ended): {state}")
        path.unlink()

    # ------------------------------------------------------------------ starting weights
    def _starting_weights(self) -> Path | None:
        """The folder whose ``policy.pt`` the run starts from: ``init_checkpoint``, or the run's own
        finished warm start (on resume); None when a warm start is still to be made (or none is set)."""
        if self.cfg.init_checkpoint:
            return Path(self.cfg.init_checkpoint)
        if self.cfg.warm_start is not None and (warm_start_dir(self.run_dir) / "policy.pt").is_file():
            return warm_start_dir(self.run_dir)
        return None

    def _warm_start(self) -> None:
        """Train the loaded policy on scripted demonstrations (``eau sft``) into runs/<id>/warm_start/.
        Process 0 trains and writes it; the others wait and load it."""
        from harness.ppo.sft import SFTConfig, run_sft

        out = warm_start_dir(self.run_dir)
        if self.dist.main:
            cfg = SFTConfig(policy=self.cfg.policy, gyms=list(self.cfg.gyms), rendering=self.cfg.rendering,
                            user_replies=self.cfg.user_replies, seed=self.cfg.seed, **self.cfg.warm_start)
            self._phase_status("warm start")
            self.writer.log(f"warm start: {cfg.episodes} {cfg.demonstrator} demonstrations x {cfg.epochs} epochs "
                            f"(give_up {cfg.give_up}) -> {out}")
            phases: dict[str, Any] = {}
            labels = {"demonstrations": ("warm start: playing demonstrations", "episodes"),
                      "updates": ("warm start", "updates")}

            def on_progress(stage: str, done: int, total: int, info: dict[str, Any]) -> None:
                if stage not in phases:
                    for other in phases.values():
                        other.close()
                    phases.clear()
                    phases[stage] = self.progress.phase(labels[stage][0], total=total, unit=labels[stage][1])
                ph = phases[stage]
                ph.set(done, f"loss {info['loss']:.3f}" if "loss" in info else None)
                if stage == "updates" and done == 0:
                    return
                self.writer.write_status(phase=labels[stage][0], phase_done=done, phase_total=total,
                                         phase_eta_s=ph.eta())
                if stage == "updates":
                    self.writer.warm_start_metrics({"update": done, "updates": total, **info,
                                                    "time_s": round(ph.elapsed(), 1)})
                    if done in (1, total) or done % max(1, total // 8) == 0:
                        eta = ph.eta()
                        self.writer.log(f"warm start: update {done}/{total} loss {info['loss']:.3f}"
                                        + (f" (ETA {fmt_duration(eta)})" if eta is not None and done < total else ""))

            try:
                summary = run_sft(cfg, self.store.snapshot(), out, log=self.writer.log, model=self.policy,
                                  tokenizer=self.tokenizer, progress=on_progress)
            finally:
                for ph in phases.values():
                    ph.close()
            self.writer.event("warm_start", **{k: v for k, v in summary.items() if k != "config"})
        self.dist.broadcast(None)  # every rank waits for the warm start on disk
        if not self.dist.main:
            checkpoint.load_trainable(self.policy, torch.load(out / "policy.pt", weights_only=True), str(out))

    def _phase_status(self, phase: str) -> None:
        if self.writer is not None:
            self.writer.write_status(phase=phase, phase_done=None, phase_total=None, phase_eta_s=None)

    def _note(self, line: str) -> None:
        """A line for the person watching: in log.txt (when the run folder exists) and on the display."""
        if self.writer is not None:
            self.writer.log(line)
        if not self.echo or self.writer is None:
            self.progress.plain(line)

    def _check_warm_start_format(self) -> None:
        """Alert when the warm start learned another conversation format than this run plays (a
        tagged warm start under the tool-call rendering, or user replies rendered another way)."""
        if not self.cfg.init_checkpoint:
            return
        learned = warm_start_format(Path(self.cfg.init_checkpoint))
        plays = {"rendering": self.cfg.rendering, "user_replies": self.cfg.user_replies}
        if learned is not None and learned != plays:
            self.writer.alert("warm_start_format", f"init_checkpoint {self.cfg.init_checkpoint} was trained on "
                              f"{learned} but this run plays {plays}: the policy starts on a format it did not learn",
                              learned=learned, plays=plays)

    def _make_backend(self) -> Any:
        b = dict(self.cfg.backend)
        if b.pop("name", "hf") == "vllm":
            from harness.rollout.backends import VLLMBackend

            path = b.pop("model_path", None) or self.cfg.policy.get("model")
            from harness.ppo.packaged import MODELS, cache_dir

            if path in MODELS:  # vLLM reads the de-quantised cache the harness made of the package's GGUF
                path = str(cache_dir(path, self.cfg.policy.get("cache_dir")))
            return VLLMBackend(path, seed=self.cfg.seed, **b)
        return HFBackend(self.policy, self.tokenizer, self.dist.device, continuous=bool(b.get("continuous", True)))

    def _use_rollout_stats(self) -> bool:
        """Whether old log-probs (and shared-critic values) are taken from the rollout (cfg.rollout_stats)."""
        mode = self.cfg.rollout_stats
        if mode == "recompute" or not isinstance(self.backend, HFBackend) or not self.engine.continuous:
            return False
        return mode == "rollout" or next(self.policy.parameters()).dtype == torch.float32

    def _resume(self) -> None:
        """Load the latest checkpoint's tensors, RNG and knob state (the run folder was reopened at
        the same checkpoint's log offsets)."""
        ck = checkpoint.latest(self.run_dir)
        if ck is None:
            state = {"next_step": 0, "offsets": {}, "knob_state": None}
        else:
            opt = {k: o for k, o in self.optimizers.items()}
            state = checkpoint.load(ck, policy=self.policy, critic=None if self.shared_critic else self.critic,
                                    optimizers=opt, task_rng=self.task_rng)
            if self.shared_critic:  # the value head lives in the wrapper's state dict
                critic_file = ck / "critic.pt"
                if critic_file.exists():
                    checkpoint.load_trainable(self.critic, torch.load(critic_file, weights_only=True), str(critic_file))
            seed_everything(self.cfg.seed + self.dist.rank + 7919 * int(state["next_step"]))
        self.start_step = int(state["next_step"])
        self.store.restore(state.get("knob_state"))  # files are re-validated against it at the first poll
        if self.dist.main:
            self.writer.event("resumed", from_checkpoint=str(ck) if ck else None, next_step=self.start_step)
            self.writer.log(f"resumed at step {self.start_step}" + (f" from {ck.name}" if ck else " (no checkpoint)"))
            self._reissue_not_applied()

    # ------------------------------------------------------------------ one step's stages
    def poll_knobs(self, step: int) -> dict[str, Any]:
        """Apply knob changes at the step boundary (process 0 decides, every process applies)."""
        t0 = time.perf_counter()
        info: dict[str, Any] = {"applied": 0}
        if self.dist.main:
            self.store.current_step = step
            recent = jsonl.tail(self.run_dir / "metrics.jsonl", self.cfg.metrics_window)
            res = self.store.poll(step, recent, rescan=(step == self.start_step))
            for e in res.applied:
                self.writer.log(f"knob {e['knob']}{'[' + e['gym'] + ']' if e.get('gym') else ''} "
                                f"{e.get('old')} -> {e.get('new')} in force from step {step} ({e['author']}: {e['reason']})")
            for e in res.refused:
                self.writer.log(f"knob edit REFUSED {e['knob']} ({e.get('rule')}): {e.get('message')}")
            if res.applied or res.refused or step == self.start_step:
                self.writer.knobs_in_force(self.store.in_force_document())
            info["applied"] = len(res.applied)
            snap = self.store.snapshot()
        else:
            snap = None
        snap = self.dist.broadcast(snap)
        self.snapshot = snap
        self.knobs = snap.area("agent")  # lr and critic_lr are set before every optimiser update (warm-up)
        info["time_s"] = time.perf_counter() - t0
        return info

    def rollout(self, step: int, bar: Any = None) -> tuple[list[Episode], dict[str, float]]:
        """This process's share of the step's tasks, ``samples_per_task`` episodes each. ``bar``: a
        progress phase told how many of the step's episodes have finished."""
        cfg = self.cfg
        draws = self.task_rng.integers(0, 2**31 - 1, size=cfg.tasks_per_step)  # same on every rank
        mine = [i for i in range(cfg.tasks_per_step) if i % self.dist.world == self.dist.rank]
        envs, kws, groups, samples, seeds = [], [], [], [], []
        for i in mine:
            gym = cfg.gyms[(step * cfg.tasks_per_step + i) % len(cfg.gyms)]
            for s in range(cfg.samples_per_task):
                env = make_gym(gym, knobs=self.snapshot, rendering=cfg.rendering, user_factory=self.user_factory,
                               split="train")
                seed = int(draws[i]) * 31 + s
                envs.append(env)
                kws.append({"seed": seed, "options": {"task_index": int(draws[i]), "split": "train"}})
                groups.append(f"{gym}/train/{int(draws[i])}")
                samples.append(s)
                seeds.append(episode_sampling_seed(cfg.seed, step, i, s))
        params = SamplingParams(temperature=float(self.knobs["temperature"]), top_p=float(self.knobs["top_p"]),
                                stop_ids=tuple(self.chat.stop_ids))
        t0 = time.perf_counter()
        n = len(envs)

        def on_turn(_turns: int, live: int) -> None:
            if bar is not None:
                bar.set(step, f"step {step}: rollout {n - live}/{n} episodes")

        res = self.engine.run(envs, kws, groups, samples, params=params,
                              max_new_tokens_per_turn=int(self.knobs["max_new_tokens_per_turn"]),
                              max_episode_tokens=int(self.knobs["max_episode_tokens"]),
                              with_stats=self.rollout_stats and params.temperature > 0,
                              seeds=seeds if self.engine.continuous else None, on_turn=on_turn)
        dt = time.perf_counter() - t0
        return res.episodes, {"time_rollout_s": dt, "time_generate_s": res.time_generate_s,
                              "time_env_s": res.time_env_s, "generated_tokens": float(res.generated_tokens)}

    @torch.no_grad()
    def frozen_trunk(self, batch: Batch) -> None:
        """With LoRA on the top layers only (``policy.lora.top_layers``), the layers below are the same
        in every pass over this batch: their output is computed once (``batch.trunk``) when the step
        makes two passes or more (PPO epochs, the KL reference, a scoring pass), and each pass runs the
        top layers alone. Exact (tests/test_models.py)."""
        k = self.knobs
        passes = int(k["ppo_epochs"]) + (float(k["kl_coef"]) > 0) + (batch.rollout_logprobs is None)
        if self.trunk_depth and passes >= 2:
            self.policy.eval()
            batch.trunk = trunk_states(self.policy, batch.input_ids.to(self.dist.device),
                                       batch.attention_mask.to(self.dist.device), self.trunk_depth,
                                       int(k["micro_batch_size"])).cpu()
            self.policy.train()

    def _trunk(self, rows: Batch, sl: slice | torch.Tensor | None = None) -> tuple[torch.Tensor, int] | None:
        if rows.trunk is None:
            return None
        states = rows.trunk if sl is None else rows.trunk[sl]
        return states.to(self.dist.device), self.trunk_depth

    @torch.no_grad()
    def score(self, batch: Batch, values_later: torch.Tensor | None = None) -> dict[str, float]:
        """Old log-probs (the rollout policy), reference log-probs (KL) and old values. ``values_later``:
        rows whose old values :meth:`critic_first_minibatch` gives instead (separate critic; 0 here)."""
        k = self.knobs
        T = float(k["temperature"])
        mb = int(k["micro_batch_size"])
        dev = self.dist.device
        # rows by length, so each micro-batch is cut to the span of rows of similar length (less padding
        # computed); `back` restores the batch's order
        order = torch.argsort(batch.attention_mask.sum(1), stable=True)
        back = torch.argsort(order)
        ids, am = batch.input_ids[order].to(dev), batch.attention_mask[order].to(dev)
        sm = batch.action_mask[order].to(dev)  # only action tokens are scored (the vocabulary projection is the cost)
        self.policy.eval()
        self.critic.eval()
        from_rollout = batch.rollout_logprobs is not None and (batch.rollout_values is not None or not self.shared_critic)
        if from_rollout:  # recorded while sampling (rollout_stats): only a separate critic still needs its pass
            batch.old_logprobs, batch.old_values = batch.rollout_logprobs, batch.rollout_values
        elif self.shared_critic:
            st = batch_token_stats(self.critic, ids, am, temperature=T, micro_batch_size=mb, score_mask=sm,
                                   trunk=self._trunk(batch, order))
            batch.old_logprobs, batch.old_values = st.logprobs.cpu()[back], st.values.cpu()[back]
        else:
            batch.old_logprobs = batch_token_stats(self.policy, ids, am, temperature=T, micro_batch_size=mb,
                                                   score_mask=sm, trunk=self._trunk(batch, order)).logprobs.cpu()[back]
        if not self.shared_critic:
            batch.old_values = torch.zeros(batch.input_ids.shape)
            need = torch.arange(len(order)) if values_later is None \
                else (~torch.isin(order, values_later)).nonzero()[:, 0]  # positions in `order`: still by length
            if need.numel():
                batch.old_values[order[need]] = torch.cat([critic_values(self.critic, i, a) for i, a in
                                                           zip(ids[need].split(mb), am[need].split(mb))]).cpu()
        if float(k["kl_coef"]) > 0:
            batch.ref_logprobs = reference_logprobs(self.policy, self.reference, ids, am, temperature=T,
                                                    micro_batch_size=mb, score_mask=sm,
                                                    trunk=self._trunk(batch, order)).cpu()[back]
        self.policy.train()
        self.critic.train()
        m = batch.action_mask
        s = self.dist.all_sum(torch.stack([(batch.old_logprobs * m).sum(), m.sum()]))
        return {"logprob_mean": float(s[0] / s[1].clamp(min=1)), "old_logprobs_from_rollout": float(from_rollout)}

    def advantages(self, batch: Batch) -> dict[str, float]:
        """GAE over action tokens; whitening with statistics over every process's action tokens."""
        k = self.knobs
        adv, ret = self._estimate(batch.rewards, batch.old_values, batch.action_mask, batch.turn_ends)
        m = batch.action_mask
        s = self.dist.all_sum(torch.stack([(adv * m).sum(), (adv * adv * m).sum(), m.sum()]))
        mean = s[0] / s[2].clamp(min=1)
        var = (s[1] / s[2].clamp(min=1) - mean**2).clamp(min=0)
        raw_std = float(var.sqrt())
        if k["whiten_advantages"]:
            adv = (adv - mean) / (var.sqrt() + 1e-8) * m
        batch.advantages, batch.returns = adv, ret
        return {"advantage_std": raw_std, "return_mean": float(core.masked_mean(ret, m)) if m.sum() > 0 else 0.0}

    def _estimate(self, rewards: torch.Tensor, values: torch.Tensor, action_mask: torch.Tensor,
                  turn_ends: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(advantages, returns) of the configured estimator, row by row (rows are independent episodes)."""
        k = self.knobs
        est = core.get_adv_estimator(self.cfg.adv_estimator)
        return est(rewards, values * action_mask, action_mask, gamma=float(k["gamma"]), lam=float(k["lam"]),
                   token_gamma=float(k["token_gamma"]), token_lam=float(k["token_lam"]), turn_end_mask=turn_ends)

    def minibatch_plan(self, batch: Batch) -> list[list[torch.Tensor]]:
        """The update's mini-batches, epoch by epoch: shuffled rows (seeded by run seed and step), each
        mini-batch sorted by length (micro-batches of similar lengths pad less; their gradients sum to
        the same mini-batch's)."""
        k = self.knobs
        B = batch.input_ids.shape[0]
        mini = max(1, min(int(k["mini_batch_size"]) // self.dist.world or 1, B))
        gen = torch.Generator().manual_seed(self.cfg.seed * 1000 + int(self._step))
        lengths = batch.attention_mask.sum(1)
        plan = []
        for _epoch in range(int(k["ppo_epochs"])):
            order = torch.randperm(B, generator=gen)
            plan.append([idx[torch.argsort(lengths[idx], stable=True)] for idx in order.split(mini)])
        return plan

    def first_values_in_update(self) -> bool:
        """Whether a separate critic's old values of the update's first mini-batch come from that
        mini-batch's own critic forward instead of a scoring pass. Exact: the critic has not stepped
        yet, and without dropout a forward in train mode gives the scoring pass's values."""
        return self._first_values_in_update

    def _denominator(self, mb: Batch) -> torch.Tensor:
        """The loss mode's divisor over a whole mini-batch (all processes): micro-batch losses add up."""
        return self.dist.all_sum(core.agg_denominator(mb.action_mask, self.cfg.loss_agg).reshape(1))[0] \
            .clamp(min=1.0) / self.dist.world

    def critic_first_minibatch(self, batch: Batch, rows: torch.Tensor) -> dict[str, list[float]]:
        """The separate critic's part of the update's first mini-batch (``rows``), run before the
        advantages: each micro-batch's forward gives its rows' old values (``batch.old_values``) and
        returns, and its value loss is backpropagated; the gradients wait for the first optimiser step
        (:meth:`update` then skips the critic there). Saves the scoring pass's critic forward on them."""
        k = self.knobs
        micro = max(1, min(int(k["micro_batch_size"]), len(rows)))
        dev = self.dist.device
        mb = batch.rows(rows)
        denom = self._denominator(mb)
        self.optimizers["critic"].zero_grad(set_to_none=True)
        stats: dict[str, list[float]] = {}
        for ms in range(0, len(rows), micro):
            sl = slice(ms, ms + micro)
            ids, am, mask = mb.input_ids[sl].to(dev), mb.attention_mask[sl].to(dev), mb.action_mask[sl].to(dev)
            values = critic_values(self.train_critic, ids, am)
            old = values.detach()
            _, ret = self._estimate(mb.rewards[sl].to(dev), old, mask, mb.turn_ends[sl].to(dev))
            vloss, vm = core.value_loss(values, old, ret, mask, float(k["value_clip"]), self.cfg.loss_agg, denom)
            vloss.backward()
            batch.old_values[rows[sl]] = old.cpu()
            for key, v in vm.items():
                stats.setdefault(key, []).append(v)
        return stats

    def update(self, batch: Batch, plan: list[list[torch.Tensor]] | None = None,
               critic_done: dict[str, list[float]] | None = None) -> dict[str, float]:
        """PPO epochs over the mini-batches of ``plan`` (default :meth:`minibatch_plan`); micro-batches
        accumulate gradients. ``critic_done``: the stats of :meth:`critic_first_minibatch`, whose
        critic gradients the first mini-batch's step applies."""
        k = self.knobs
        plan = self.minibatch_plan(batch) if plan is None else plan
        T = float(k["temperature"])
        dev = self.dist.device
        stats: dict[str, list[float]] = {key: list(v) for key, v in (critic_done or {}).items()}
        for epoch, minis in enumerate(plan):
            for j, idx in enumerate(minis):
                skip_critic = critic_done is not None and epoch == 0 and j == 0
                micro = max(1, min(int(k["micro_batch_size"]), len(idx)))
                mb = batch.rows(idx)
                denom = self._denominator(mb)
                for name, opt in self.optimizers.items():
                    if not (skip_critic and name == "critic"):
                        opt.zero_grad(set_to_none=True)
                for ms in range(0, len(idx), micro):
                    sl = slice(ms, ms + micro)
                    ids, am = mb.input_ids[sl].to(dev), mb.attention_mask[sl].to(dev)
                    mask = mb.action_mask[sl].to(dev)
                    if self.shared_critic:
                        st = forward_token_stats(self.train_critic, ids, am, temperature=T, score_mask=mask,
                                                 trunk=self._trunk(mb, sl))
                    else:
                        st = forward_token_stats(self.train_policy, ids, am, temperature=T, score_mask=mask,
                                                 trunk=self._trunk(mb, sl))
                    loss, metrics = core.ppo_actor_loss(
                        st.logprobs, mb.old_logprobs[sl].to(dev), mb.advantages[sl].to(dev), mask,
                        clip_low=float(k["clip_ratio"]), clip_high=float(k["clip_ratio_high"]),
                        entropy=st.entropy, entropy_coeff=float(k["entropy_coeff"]),
                        ref_logprobs=mb.ref_logprobs[sl].to(dev) if mb.ref_logprobs is not None else None,
                        kl_coef=float(k["kl_coef"]), kl_estimator=str(k["kl_estimator"]),
                        agg_mode=self.cfg.loss_agg, denom=denom)
                    if self.shared_critic:
                        vloss, vm = core.value_loss(st.values, mb.old_values[sl].to(dev), mb.returns[sl].to(dev), mask,
                                                    float(k["value_clip"]), self.cfg.loss_agg, denom)
                        (loss + float(k["vf_coef"]) * vloss).backward()
                    else:
                        loss.backward()
                        vm = {}
                        if not skip_critic:
                            values = critic_values(self.train_critic, ids, am)
                            vloss, vm = core.value_loss(values, mb.old_values[sl].to(dev), mb.returns[sl].to(dev),
                                                        mask, float(k["value_clip"]), self.cfg.loss_agg, denom)
                            vloss.backward()
                    for key, v in {**metrics, **vm}.items():
                        stats.setdefault(key, []).append(v)
                gn = self._clip_and_step()
                for key, v in gn.items():
                    stats.setdefault(key, []).append(v)
        return {key: float(np.mean(v)) for key, v in stats.items()}

    def _clip_and_step(self) -> dict[str, float]:
        out = {}
        max_norm = float(self.knobs["max_grad_norm"])
        for name, opt in self.optimizers.items():
            params = [p for g in opt.param_groups for p in g["params"] if p.grad is not None]
            if not params:
                continue
            norm = torch.nn.utils.clip_grad_norm_(params, max_norm if max_norm > 0 else float("inf"))
            out["grad_norm" if name == "policy" else "critic_grad_norm"] = float(norm)
            # the warm-up counts this optimiser's own updates (its state travels in checkpoints)
            factor = core.warmup_factor(_updates_done(opt), int(self.knobs.get("lr_warmup_steps", 0) or 0))
            base = float(self.knobs["lr"] if name == "policy" else self.knobs["critic_lr"])
            for g in opt.param_groups:
                g["lr"] = base * factor
            out["lr_warmup_factor" if name == "policy" else "critic_lr_warmup_factor"] = factor
            opt.step()
        return out

    # ------------------------------------------------------------------ the loop
    def train(self) -> dict[str, Any]:
        """The PPO steps from ``start_step`` to ``cfg.steps`` (or until SIGTERM); the last metrics."""
        cfg = self.cfg
        self._install_signal_handlers()
        last: dict[str, Any] = {}
        bar = self.progress.phase("train", total=cfg.steps, unit="steps")
        bar.set(self.start_step)
        try:
            for step in range(self.start_step, cfg.steps):
                self._step = step
                t_step = time.perf_counter()
                if self.dist.main:
                    self.writer.write_status(step=step, phase="rollout", phase_done=None, phase_total=None,
                                             phase_eta_s=None)
                knob_info = self.poll_knobs(step)                       # 1. knobs at the boundary
                episodes, rollout_t = self.rollout(step, bar)           # 2. rollout
                if self.dist.main:
                    self.writer.write_status(phase="update")
                    bar.set(step, f"step {step}: update")
                t_upd = time.perf_counter()
                batch = collate(episodes, self.pad_id)
                self.frozen_trunk(batch)                                # states below the trained layers
                plan = self.minibatch_plan(batch)                       # the update's mini-batches
                first = plan[0][0] if self.first_values_in_update() else None
                adv_stats = self.score(batch, values_later=first)       # 3. old/ref log-probs, values
                done = self.critic_first_minibatch(batch, first) if first is not None else None
                adv_stats.update(self.advantages(batch))                # 4. GAE over action tokens
                upd = self.update(batch, plan, critic_done=done)        # 5. PPO update
                if self.cfg.backend.get("name", "hf") != "hf":
                    self.backend.sync_weights(self.policy)
                time_update = time.perf_counter() - t_upd
                t_h = time.perf_counter()                               # 6. log
                records = self._records(step, episodes, batch)
                all_records = [r for part in self.dist.gather(records) for r in part]
                upd_all = self.dist.gather(upd)
                if self.dist.main:
                    last = self._log_step(step, all_records, upd_all, adv_stats, rollout_t, time_update,
                                          knob_info, t_step, t_h)
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
        """The run's lifetime around :meth:`train` (and anything done with the policy after it): the
        knob watcher on process 0, and at the end, however it ends, the run's final state in
        ``status.json``, unapplied knob writes reported and lent knob values given back."""
        watcher = KnobWatcher(self.store) if self.dist.main else contextlib.nullcontext()
        try:
            with watcher:
                yield self
        except BaseException as exc:
            if self.dist.main:
                self.end_knobs()
                state = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
                self.writer.finish(state, error=f"{type(exc).__name__}: {exc}")
            self.progress.close()
            raise
        if self.dist.main:
            self.end_knobs()  # before the final line: `tail -f log.txt` ends with the run's state
            if self.stop_requested:
                self.writer.finish("interrupted", reason="signal")
            else:
                self.writer.finish("finished", steps=self.cfg.steps)

    def _should_checkpoint(self, step: int) -> bool:
        every = self.cfg.checkpoint_every
        return step + 1 == self.cfg.steps or self.stop_requested or (every > 0 and (step + 1) % every == 0)

    def save_checkpoint(self, step: int) -> None:
        if not self.dist.main:
            return
        path = checkpoint.save(self.run_dir, step, next_step=step + 1, policy=self.policy, critic=self.critic,
                               optimizers=self.optimizers, task_rng=self.task_rng,
                               knob_state=self.store.in_force_document(), offsets=self.writer.offsets(),
                               keep=self.cfg.keep_checkpoints, extra={"run_id": self.run_id})
        self.writer.write_status(last_checkpoint=step)
        self.writer.event("checkpoint", path=str(path), next_step=step + 1)
        self.writer.log(f"checkpoint {path.name} saved (resume continues at step {step + 1})")

    def _install_signal_handlers(self) -> None:
        def request_stop(signum: int, _frame: Any) -> None:
            self.stop_requested = True

        try:
            signal.signal(signal.SIGTERM, request_stop)
        except ValueError:  # not the main thread (tests)
            pass

    def _records(self, step: int, episodes: list[Episode], batch: Batch) -> list[dict[str, Any]]:
        out = []
        for i, ep in enumerate(episodes):
            rec = dict(ep.record)
            rec["step"] = step
            rec["rank"] = self.dist.rank
            out.append(rec)
        return out

    def _log_step(self, step: int, records: list[dict[str, Any]], upd_all: list[dict[str, float]],
                  adv_stats: dict[str, float], rollout_t: dict[str, float], time_update: float,
                  knob_info: dict[str, Any], t_step: float, t_h: float) -> dict[str, Any]:
        for i, r in enumerate(records):
            r["index"] = i
            r["episode_id"] = f"s{step:06d}-e{i:03d}"
        upd = {k: float(np.mean([u[k] for u in upd_all if k in u])) for k in upd_all[0]}
        k = self.knobs
        m: dict[str, Any] = {"step": step, "time": datetime.now(timezone.utc).isoformat(timespec="seconds")}
        m.update(episode_metrics(records))
        m.update({
            "entropy": upd.get("actor/entropy", 0.0),
            "kl": upd.get("actor/kl", 0.0), "policy_loss": upd.get("actor/pg_loss", 0.0),
            "value_loss": upd.get("critic/vf_loss", 0.0), "clip_frac": upd.get("actor/clip_frac", 0.0),
            "approx_kl": upd.get("actor/approx_kl", 0.0), "grad_norm": upd.get("grad_norm", 0.0),
            "critic_grad_norm": upd.get("critic_grad_norm", upd.get("grad_norm", 0.0)),
            "value_mean": upd.get("critic/vpred_mean", 0.0), "explained_var": upd.get("critic/explained_var", 0.0),
            "lr": k["lr"], "critic_lr": k["critic_lr"], "lr_warmup_factor": upd.get("lr_warmup_factor", 1.0),
            "entropy_coeff": k["entropy_coeff"], "kl_coef": k["kl_coef"], "temperature": k["temperature"], **adv_stats,
            "time_rollout_s": rollout_t["time_rollout_s"], "time_generate_s": rollout_t["time_generate_s"],
            "time_env_s": rollout_t["time_env_s"], "time_update_s": time_update,
            "rollout_tokens_per_s": rollout_t["generated_tokens"] / max(rollout_t["time_generate_s"], 1e-9),
            "knob_version": self.snapshot.version, "knob_changes": knob_info["applied"],
        })
        self.writer.trajectories(step, records)
        harness_s = knob_info["time_s"] + (time.perf_counter() - t_h)
        m["time_harness_s"] = harness_s
        m["time_step_s"] = time.perf_counter() - t_step
        self.writer.metrics(m)
        eta = (self.cfg.steps - step - 1) * m["time_step_s"]
        self.writer.write_status(step=step + 1, phase="between steps", eta_s=eta,
                                 last_metrics={x: m[x] for x in ("reward_mean", "success_rate", "entropy", "kl")})
        self.writer.log(f"step {step}: reward {m['reward_mean']:.3f} success {m['success_rate']:.2f} "
                        f"turns {m['turns_mean']:.1f} entropy {m['entropy']:.3f} kl {m['kl']:.4f} "
                        f"vloss {m['value_loss']:.4f} ({m['time_step_s']:.1f}s)")
        return m


def episode_sampling_seed(seed: int, step: int, task_slot: int, sample: int) -> int:
    """The sampling seed of one episode (continuous decoding draws each episode's tokens from its own
    generator): a function of the run's seed, the step, the task's slot in the step and the sample,
    so an episode's tokens do not depend on the other episodes of its batch, on how many processes
    share the step, or on the global RNG's state (a resumed run samples as the uninterrupted one)."""
    return int(np.random.SeedSequence([int(seed), int(step), int(task_slot), int(sample)]).generate_state(1)[0])


def train(cfg: TrainConfig, runs_dir: Path, knobs_dir: Path, *, resume: bool = False, echo: bool = False,
          progress: Progress | None = None) -> Trainer:
    """Build a trainer and run its PPO steps in a session (watcher, final state, knobs given back)."""
    trainer = Trainer(cfg, runs_dir, knobs_dir, resume=resume, echo=echo, progress=progress)
    with trainer.session():
        trainer.train()
    return trainer


def resume_config(run_dir: Path) -> TrainConfig:
    import yaml

    data = yaml.safe_load((Path(run_dir) / "config.yaml").read_text())
    return config_from_dict(data)
