"""The trainer's numeric guard (harness/ppo/guards.py) on real tiny runs, in process.

Non-finite numbers are brought in the way a validation hole would let them in: a knob value of NaN
put in force through the knob store's own apply path (an accepted event by author agent, the checks
skipped), read by the real reward model and optimiser. Every other part is the real trainer.
"""

from __future__ import annotations

import json
import math

import pytest
import torch

from harness.io import jsonl
from harness.knobs.snapshot import resolve
from harness.knobs.writes import apply_value
from harness.ppo import checkpoint
from harness.ppo.config import build_config
from harness.ppo.guards import MAX_BAD_STEPS
from harness.ppo.trainer import train

SMALL = {
    "tasks_per_step": 2,
    "samples_per_task": 2,
    "env_knobs.max_steps": 3,
    "checkpoint_every": 0,
    "agent_knobs.max_new_tokens_per_turn": 12,
    "agent_knobs.max_episode_tokens": 512,
    "agent_knobs.mini_batch_size": 4,
    "agent_knobs.micro_batch_size": 4,
    "policy.tiny.num_hidden_layers": 2,
    "policy.tiny.hidden_size": 64,
    "policy.tiny.intermediate_size": 128,
    "progress": False,
}


def force_value(store, name: str, value, step: int) -> str:
    """Put ``value`` in force as an accepted write by agent without the store's checks (a validation
    hole): the store's own apply path, so the event log has it like any applied write. Its event id."""
    spec = store.spec(name)
    old = store.raw(name)
    evs = apply_value(
        store,
        spec,
        value,
        [(None, resolve(old, None), value)],
        {
            "knob": name,
            "author": "agent",
            "reason": "test: a value validation let through",
            "file": str(store.dir / f"{spec.area}.yaml"),
            "step_written": step,
            "source": "cli",
        },
        step_effective=step,
    )
    return evs[0]["id"]


def trainable(trainer) -> list[torch.Tensor]:
    return [p.detach().clone() for o in trainer.optimizers.values() for g in o.param_groups for p in g["params"]]


def same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b))


class Plan:
    """Runs a trainer with ``actions[step](trainer)`` at each step boundary, and keeps the trainable
    parameters after every step."""

    def __init__(self, actions):
        self.actions, self.after, self.ids = actions, {}, {}

    def attach(self, trainer):
        poll, log_step = trainer.poll_knobs, trainer._log_step

        def poll_knobs(step):
            if step in self.actions:
                self.ids[step] = self.actions[step](trainer, step)
            return poll(step)

        def record(step, *a, **kw):
            self.after[step] = trainable(trainer)
            return log_step(step, *a, **kw)

        trainer.poll_knobs, trainer._log_step = poll_knobs, record


def run_with(tmp_path, knobs_dir, steps, actions, monkeypatch):
    plan = Plan(actions)
    from harness.ppo import trainer as trainer_mod

    real_init = trainer_mod.Trainer.__init__

    def init(self, *a, **kw):
        real_init(self, *a, **kw)
        plan.attach(self)

    monkeypatch.setattr(trainer_mod.Trainer, "__init__", init)
    cfg = build_config("tiny", None, {**SMALL, "steps": steps, "run_id": "guard"})
    trainer = train(cfg, tmp_path / "runs", knobs_dir)
    return trainer, plan


def test_nan_rewards_skip_the_update_alert_names_the_knob_and_a_fix_lets_training_go_on(
    tmp_path, knobs_dir, monkeypatch
):
    def poison(trainer, step):  # the clip of the issue: min(nan, x) is nan, so every turn reward is NaN
        return force_value(trainer.store, "reward.turn_reward_clip", [-1.0, float("nan")], step)

    def fix(trainer, step):
        res = trainer.store.set(
            "reward.turn_reward_clip",
            [-1.0, 2.0],
            author="human",
            reason="test: put the clip back",
            step_written=step,
            skip_delta=True,
        )
        assert res.ok, res.event
        return res.event["id"]

    trainer, plan = run_with(tmp_path, knobs_dir, 6, {2: poison, 4: fix}, monkeypatch)
    run = trainer.run_dir
    metrics = jsonl.read(run / "metrics.jsonl")
    assert [m["step"] for m in metrics] == list(range(6))
    assert [m["update_skipped"] for m in metrics] == [0.0, 0.0, 1.0, 1.0, 0.0, 0.0]
    assert not math.isfinite(float(metrics[2]["reward_mean"]))  # the rewards really were NaN
    # the policy from before the bad steps is kept, exactly; training goes on after the fix
    assert same(plan.after[2], plan.after[1]) and same(plan.after[3], plan.after[1])
    assert not same(plan.after[4], plan.after[3])
    assert all(bool(torch.isfinite(p).all()) for p in plan.after[5])
    alerts = [e for e in jsonl.read(run / "events.jsonl") if e["event"] == "alert" and e["alert"] == "non_finite"]
    assert len(alerts) == 2 and "step 3: rewards" in alerts[1]["message"]
    first = alerts[0]
    assert first["problem"].startswith("rewards: ")
    assert f"reward.turn_reward_clip changed at step 2 by agent (event {plan.ids[2]})" in first["message"], first[
        "message"
    ]
    assert first["knob_events"][0] == plan.ids[2] and first["consecutive"] == 1 and not first["stops"]
    assert "the update was not run" in first["message"] and f"1 of {MAX_BAD_STEPS}" in first["message"]
    assert "ALERT non_finite: step 2: rewards" in (run / "log.txt").read_text()
    assert json.loads((run / "status.json").read_text())["state"] == "finished"


@pytest.mark.slow  # ~35 s: a second real run (the NaN-reward test above is the default suite's)
def test_consecutive_bad_steps_stop_the_run_with_the_last_good_policy_checkpointed(tmp_path, knobs_dir, monkeypatch):
    def poison(trainer, step):  # a NaN learning rate: finite gradients, non-finite parameters after the step
        return force_value(trainer.store, "agent.lr", float("nan"), step)

    trainer, plan = run_with(tmp_path, knobs_dir, 8, {1: poison}, monkeypatch)
    run = trainer.run_dir
    last_bad = MAX_BAD_STEPS  # steps 1..MAX_BAD_STEPS are bad; the run stops after the last of them
    metrics = jsonl.read(run / "metrics.jsonl")
    assert [m["step"] for m in metrics] == list(range(last_bad + 1))
    assert [m["update_skipped"] for m in metrics] == [0.0] + [1.0] * last_bad
    for s in range(1, last_bad + 1):
        assert same(plan.after[s], plan.after[0])
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "stopped" and "consecutive steps" in status["reason"], status
    assert trainer.guard.stopped and trainer.stop_requested
    ck = checkpoint.latest(run)
    assert ck is not None and ck.name == f"step_{last_bad:06d}"
    saved = torch.load(ck / "policy.pt", weights_only=True)
    live = checkpoint.trainable_state_dict(trainer.policy)
    assert saved.keys() == live.keys() and all(torch.equal(saved[k], live[k]) for k in saved)
    assert all(bool(torch.isfinite(v).all()) for v in saved.values())
    events = jsonl.read(run / "events.jsonl")
    alerts = [e for e in events if e["event"] == "alert"]
    assert len(alerts) == last_bad and alerts[-1]["stops"] and "the run stops now" in alerts[-1]["message"]
    assert "agent.lr changed at step 1 by agent" in alerts[0]["message"]
    assert events[-1]["event"] == "stopped" and events[-1]["reason"] == status["reason"]


@pytest.mark.parametrize("field", ["rewards", "advantages"])
def test_a_batch_with_one_non_finite_value_is_named(field):
    from harness.ppo.guards import first_nonfinite_field

    class B:
        attention_mask = torch.ones(3, 4)
        rewards = torch.zeros(3, 4)
        advantages = torch.zeros(3, 4)

    b = B()
    assert first_nonfinite_field(b) is None
    getattr(b, field)[1, 2] = float("inf")
    assert first_nonfinite_field(b) == f"{field}: 1 non-finite values (inf) in 1 of 3 rows"


def _tiny_update(guard, opt, model, losses_per_step, knobs):
    """An update of ``len(losses_per_step)`` optimiser steps on a real linear model; a NaN entry makes
    that step's loss (and gradients) NaN."""

    def run(_batch, _step):
        stats = {}
        for bad in losses_per_step:
            opt.zero_grad(set_to_none=True)
            loss = model(torch.ones(2, 3)).sum() * (float("nan") if bad else 1.0)
            loss.backward()
            stats = guard.clip_and_step({"policy": opt}, knobs, {"actor/pg_loss": float(loss.detach())})
        return stats

    return run


def _guard_and_model():
    from types import SimpleNamespace

    from harness.ppo.guards import NumericGuard

    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    guard = NumericGuard(SimpleNamespace(world=1, main=True))
    guard.optimizers = {"policy": opt}
    copies = []
    real = guard._copy_state
    guard._copy_state = lambda: copies.append(1) or real()
    knobs = SimpleNamespace(lr=0.1, critic_lr=0.1, max_grad_norm=1.0, lr_warmup_steps=0)
    batch = SimpleNamespace(attention_mask=torch.ones(1, 1), rewards=torch.zeros(1, 1))
    return guard, model, opt, copies, knobs, batch


def test_a_bad_second_step_undoes_the_whole_update_from_the_copy():
    guard, model, opt, copies, knobs, batch = _guard_and_model()
    guard.update(0, batch, _tiny_update(guard, opt, model, [False], knobs), optimizer_steps=1)  # state exists
    before = [p.detach().clone() for p in model.parameters()]
    state = {k: v.clone() for k, v in opt.state[next(model.parameters())].items()}
    out = guard.update(1, batch, _tiny_update(guard, opt, model, [False, True], knobs), optimizer_steps=2)
    assert out["update_skipped"] == 1.0 and guard.problem.startswith("loss: actor/pg_loss = nan")
    assert copies == [1]  # one copy: the update had two optimiser steps
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    after = opt.state[next(model.parameters())]
    assert all(torch.equal(state[k], after[k]) for k in state)  # the optimiser state too


def test_a_one_step_update_keeps_no_copy_and_its_bad_step_is_not_taken():
    guard, model, opt, copies, knobs, batch = _guard_and_model()
    guard.update(0, batch, _tiny_update(guard, opt, model, [False], knobs), optimizer_steps=1)
    before = [p.detach().clone() for p in model.parameters()]
    out = guard.update(1, batch, _tiny_update(guard, opt, model, [True], knobs), optimizer_steps=1)
    assert out["update_skipped"] == 1.0 and copies == [] and not guard.unrecoverable
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    knobs.lr = float("nan")  # a learning rate a validation hole let through: the step is not taken
    out = guard.update(2, batch, _tiny_update(guard, opt, model, [False], knobs), optimizer_steps=1)
    assert out["update_skipped"] == 1.0 and guard.problem.startswith("learning rate: agent.lr = nan")
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters())) and copies == []
