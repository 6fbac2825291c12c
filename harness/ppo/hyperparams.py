"""The agent knobs as the trainer reads them: a frozen, typed object built once per step from the
validated snapshot (:meth:`AgentKnobs.from_snapshot`), read by attribute, never by string key.

Each field is the knob of the same name in ``knobs/agent.yaml``. What it governs, its range and
whether it applies live are in its schema entry (``harness/knobs/defaults/schema/agent.schema.json``,
catalogued in ``skill/references/knobs.md``); its default value is in
``harness/knobs/defaults/agent.yaml`` and nowhere else. A test keeps these fields and the schema in
step (same names, same types). Where each field is used: ``harness/ppo/trainer.py`` (the loop),
``harness/ppo/optim.py`` (learning rates, warm-up, gradient clip), ``harness/runs/metrics.py`` (the
values a step ran with).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Mapping

from harness.knobs.snapshot import KnobSnapshot

CASTS = {"float": float, "int": int, "bool": bool, "str": str}


@dataclass(frozen=True)
class AgentKnobs:
    """The ``agent.*`` knobs in force for one step."""

    lr: float  # policy learning rate (AdamW): core.ppo_actor_loss's gradient step size
    critic_lr: float  # critic learning rate
    lr_warmup_steps: int  # linear warm-up over this many optimiser updates (core.warmup_factor)
    entropy_coeff: float  # entropy bonus weight in core.ppo_actor_loss
    kl_coef: float  # KL-to-reference weight in core.ppo_actor_loss (0: no reference pass)
    kl_estimator: str  # k1 | k2 | k3 (core.kl_penalty)
    clip_ratio: float  # PPO lower clip epsilon
    clip_ratio_high: float  # PPO upper clip epsilon
    value_clip: float  # value-loss clip around the old value (core.value_loss)
    vf_coef: float  # value-loss weight when the critic shares the policy's trunk
    ppo_epochs: int  # passes over each rollout batch
    mini_batch_size: int  # episodes per optimiser step (all processes together)
    micro_batch_size: int  # episodes per forward/backward pass
    max_grad_norm: float  # gradient-norm clip (0: none)
    temperature: float  # sampling temperature, and the one log-probs are scored at
    top_p: float  # nucleus sampling
    gamma: float  # discount across turns (GAE)
    lam: float  # GAE lambda across turns
    token_gamma: float  # discount between action tokens of one turn
    token_lam: float  # GAE lambda between action tokens of one turn
    whiten_advantages: bool  # normalise advantages over the batch's action tokens
    max_new_tokens_per_turn: int  # token budget of one agent turn
    max_episode_tokens: int  # token budget of a whole episode

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> AgentKnobs:
        """From the agent area's resolved values (validated by the knob store); knobs added with
        ``eau knobs add`` that the trainer does not read are left out. KeyError names a missing knob."""
        return cls(**{f.name: CASTS[str(f.type)](values[f.name]) for f in fields(cls)})

    @classmethod
    def from_snapshot(cls, snapshot: KnobSnapshot) -> AgentKnobs:
        return cls.from_values(snapshot.area("agent"))
