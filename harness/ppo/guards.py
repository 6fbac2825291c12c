"""The trainer watches its own numbers: it never trains on NaN.

Every step's update runs under :class:`NumericGuard`:

* before it: the batch's rewards, old log-probs, reference log-probs, old values, advantages and
  returns must be finite, or the update is not run at all;
* before every optimiser step: the mini-batch's losses, the gradient norms and the learning rates must
  be finite, or the step is not taken and the rest of the update is skipped;
* after it: every trainable parameter must be finite, or the trainable parameters and the optimiser
  state go back to the copy taken before the update. The copy (the trainable parameters and the
  optimiser state: about 3x the trainable parameters) is taken only for an update of more than one
  optimiser step; a one-step update is decided by the checks before its step (an AdamW step with
  finite gradients, learning rate and parameters keeps the parameters finite short of an overflow,
  and should one still happen the run stops without checkpointing them).

The rule (README, "When the numbers go bad"): a bad step applies no update (the policy, the critic
and the optimiser state stay those from before the step), raises a ``non_finite`` alert in
``events.jsonl`` / ``log.txt`` that names what went bad and the latest knob changes (the likely
cause, most recent first) and the run goes on with the next step. After ``MAX_BAD_STEPS``
consecutive bad steps the run stops: a checkpoint of the last good policy, ``status.json`` state
``stopped`` with the reason, a ``stopped`` event, exit code 1 from ``eau train``. A fixing knob edit
within those steps lets the run go on (a good step resets the count).
"""

from __future__ import annotations

import copy
import math
from typing import Any, Callable, Mapping

import torch

from harness.ppo.optim import clip_grads, step_all

MAX_BAD_STEPS = 3  # consecutive steps with no update before the run stops
CAUSES_SHOWN = 3  # knob changes named in an alert
BATCH_FIELDS = ("rewards", "old_logprobs", "ref_logprobs", "old_values", "advantages", "returns")
LOSS_KEYS = ("actor/pg_loss", "critic/vf_loss", "actor/entropy", "actor/kl")


def first_nonfinite_field(batch: Any) -> str | None:
    """What is wrong with a batch, e.g. ``"rewards: 3 non-finite values (nan) in 2 of 8 rows"``; None when finite."""
    mask = batch.attention_mask.bool()
    for name in BATCH_FIELDS:
        t = getattr(batch, name, None)
        if t is None:
            continue
        bad = ~torch.isfinite(t.float()) & mask
        if bad.any():
            example = t[bad][0].item()
            return f"{name}: {int(bad.sum())} non-finite values ({example}) in {int(bad.any(1).sum())} of {len(t)} rows"
    return None


def first_nonfinite_parameter(optimizers: dict[str, torch.optim.Optimizer]) -> str | None:
    for name, opt in optimizers.items():
        for gi, g in enumerate(opt.param_groups):
            for pi, p in enumerate(g["params"]):
                if not bool(torch.isfinite(p.detach()).all()):
                    return f"{name} parameter {pi} of group {gi} (shape {tuple(p.shape)})"
    return None


def recent_knob_changes(records: list[dict[str, Any]], n: int = CAUSES_SHOWN) -> list[dict[str, Any]]:
    """The last ``n`` knob or rule changes in force (the last record of each event id is the one that
    holds), the most recent first."""
    last: dict[str, dict[str, Any]] = {}
    for rec in records:
        if rec.get("id"):
            last.pop(rec["id"], None)
            last[rec["id"]] = rec
    applied = [r for r in last.values() if r.get("status") == "accepted" and isinstance(r.get("step_effective"), int)]
    order = {id(r): i for i, r in enumerate(applied)}
    return sorted(applied, key=lambda r: (r["step_effective"], order[id(r)]), reverse=True)[:n]


def describe_change(rec: dict[str, Any]) -> str:
    gym = f"[{rec['gym']}]" if rec.get("gym") else ""
    return (
        f"{rec['knob']}{gym} changed at step {rec['step_effective']} by {rec.get('author')} "
        f"(event {rec['id']}): {_short(rec.get('old'))} -> {_short(rec.get('new'))}"
    )


def _short(value: Any) -> str:
    text = str(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _finite(value: Any) -> bool:
    return not isinstance(value, float) or math.isfinite(value)


class NumericGuard:
    """The numeric guard of one trainer (see the module docstring). It holds what it needs, not the
    trainer: the optimisers (``optimizers``, set once they are built), the process group (``dist``:
    every process skips when any one saw a problem), where alerts go (``alert``: the run writer's, on
    process 0; None elsewhere) and where the latest knob changes are read (``knob_events``)."""

    def __init__(
        self,
        dist: Any,
        alert: Callable[..., Any] | None = None,
        knob_events: Callable[[], list[dict[str, Any]]] = list,
        max_bad_steps: int = MAX_BAD_STEPS,
    ):
        self.dist, self.alert, self.knob_events, self.max_bad_steps = dist, alert, knob_events, max_bad_steps
        self.optimizers: dict[str, torch.optim.Optimizer] = {}
        self.consecutive = 0
        self.problem: str | None = None  # what went bad in the update in progress
        self.stopped: str | None = None  # why the run stopped (None: it did not)
        self.unrecoverable = False  # parameters went bad after a step that had no copy to go back to
        self.steps_taken = 0  # optimiser steps of the update in progress

    # ------------------------------------------------------------------ around one update
    def update(
        self, step: int, batch: Any, run_update: Callable[[Any, int], dict[str, float]], optimizer_steps: int
    ) -> dict[str, float]:
        """``run_update(batch, step)`` when the batch is finite, undone when it produced non-finite numbers. The
        update's statistics, with ``update_skipped`` 1.0 for a bad step. ``optimizer_steps``: how many
        optimiser steps the update may take: the copy to undo it is kept only for more than one (a single
        step is checked before it is taken: gradients, losses, learning rates)."""
        self.problem, self.steps_taken = self._agreed(first_nonfinite_field(batch)), 0
        if self.problem is not None:
            self._bad_step(step, "the update was not run")
            return {"update_skipped": 1.0}
        before = self._copy_state() if optimizer_steps > 1 else None
        stats = run_update(batch, step)
        if self.problem is None:
            self.problem = first_nonfinite_parameter(self.optimizers)
        self.problem = self._agreed(self.problem)
        if self.problem is None:
            self.consecutive = 0
            return {**stats, "update_skipped": 0.0}
        if before is not None:
            self._restore_state(before)
            done = "the update was undone: parameters and optimiser state are those from before the step"
        elif self.steps_taken == 0:
            self._zero(self.optimizers)
            done = "the update's optimiser step was not taken: parameters and optimiser state are those from before"
        else:  # a one-step update whose finite gradients still gave non-finite parameters (an overflow)
            self.unrecoverable = True
            done = "it cannot be undone (a one-step update keeps no copy); the run stops with its last checkpoint"
        self._bad_step(step, done)
        return {**stats, "update_skipped": 1.0}

    def clip_and_step(
        self, optimizers: dict[str, torch.optim.Optimizer], knobs: Any, losses: Mapping[str, float] | None = None
    ) -> dict[str, float]:
        """Clip, and step only when every loss of the mini-batch, every gradient norm and every learning
        rate is finite (else zero the gradients and skip the rest of this update's optimiser steps)."""
        bad = [k for k in LOSS_KEYS if not _finite((losses or {}).get(k, 0.0))]
        if self.problem is None and bad:
            self.problem = "loss: " + ", ".join(f"{k} = {losses[k]}" for k in bad)
        rates = {"agent.lr": knobs.lr, "agent.critic_lr": knobs.critic_lr}
        if self.problem is None and not all(math.isfinite(v) for v in rates.values()):
            self.problem = "learning rate: " + ", ".join(f"{k} = {v}" for k, v in rates.items())
        if self.problem is not None:
            self._zero(optimizers)
            return {}
        norms = clip_grads(optimizers, knobs)
        bad_norms = {k: v for k, v in norms.items() if not math.isfinite(v)}
        if bad_norms:
            self.problem = "gradient: " + ", ".join(f"{k} = {v}" for k, v in bad_norms.items())
            self._zero(optimizers)
            return norms
        self.steps_taken += 1
        return {**norms, **step_all(optimizers, knobs)}

    # ------------------------------------------------------------------ state
    def _copy_state(self) -> tuple[list[torch.Tensor], dict[str, Any]]:
        """The tensors an update changes: trainable parameters and optimiser state."""
        params = [p.detach().clone() for opt in self.optimizers.values() for g in opt.param_groups for p in g["params"]]
        return params, {k: copy.deepcopy(o.state_dict()) for k, o in self.optimizers.items()}

    def _restore_state(self, saved: tuple[list[torch.Tensor], dict[str, Any]]) -> None:
        params, states = saved
        live = [p for opt in self.optimizers.values() for g in opt.param_groups for p in g["params"]]
        with torch.no_grad():
            for p, old in zip(live, params):
                p.copy_(old)
        for k, o in self.optimizers.items():
            o.load_state_dict(states[k])
        self._zero(self.optimizers)

    @staticmethod
    def _zero(optimizers: dict[str, torch.optim.Optimizer]) -> None:
        for opt in optimizers.values():
            opt.zero_grad(set_to_none=True)

    def _agreed(self, problem: str | None) -> str | None:
        """Every process skips when any one saw a problem (data parallel: they must stay identical)."""
        if self.dist.world == 1:
            return problem
        n = float(self.dist.all_sum(torch.tensor([1.0 if problem else 0.0], device=self.dist.device))[0])
        return problem or ("another process saw non-finite numbers" if n > 0 else None)

    # ------------------------------------------------------------------ what the person sees
    def _bad_step(self, step: int, what_was_done: str) -> None:
        self.consecutive += 1
        stop = self.consecutive >= self.max_bad_steps or self.unrecoverable
        if stop:
            self.stopped = (
                f"non-finite numbers in {self.consecutive} consecutive steps (last: step {step}, "
                f"{self.problem}); the checkpoint holds the last good policy"
            )
        if self.alert is None:
            return
        changes = recent_knob_changes(self.knob_events())
        cause = (
            "likely cause, the latest knob changes first: " + "; ".join(describe_change(c) for c in changes)
            if changes
            else "no knob change is on record in this run; look at the reward rules and the data"
        )
        then = (
            f"the run stops now ({self.consecutive} consecutive bad steps)"
            if stop
            else f"the run goes on ({self.consecutive} of {self.max_bad_steps} consecutive bad steps before it stops)"
        )
        self.alert(
            "non_finite",
            f"step {step}: {self.problem}; {what_was_done}; {then}; {cause}",
            problem=self.problem,
            consecutive=self.consecutive,
            stops=stop,
            knob_events=[c["id"] for c in changes],
        )

    def end_state(self) -> dict[str, Any]:
        """How a run that stopped early ends (``RunWriter.finish`` arguments)."""
        if self.stopped:
            return {"state": "stopped", "reason": self.stopped}
        return {"state": "interrupted", "reason": "signal"}
