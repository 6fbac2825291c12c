"""Run configuration: presets (commented YAML files in ``harness/ppo/presets/``) plus overrides.

One precedence rule: preset < ``--config FILE`` < ``--set key=value`` (dotted keys, YAML values).
Unknown keys and wrong types are errors that name the dotted key and what is allowed. The parts with
parts of their own (policy, critic, backend, user_llm, warm_start, evaluation) are typed specs
(:mod:`harness.ppo.specs`), every field documented where it is defined. Optimisation hyperparameters
that may change while the run is live are *knobs* (``knobs/agent.yaml``): a preset's ``agent_knobs``
and ``env_knobs`` are lent to the knob folder for the run's lifetime (:mod:`harness.knobs.lease`).
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import yaml

from harness.ppo.specs import (
    BackendSpec,
    CriticSpec,
    EvaluationSpec,
    PolicySpec,
    UserLLMSpec,
    WarmStartSpec,
    doc,
    field_docs,
    from_mapping,
    to_plain,
)
from harness.rollout.chat import check_user_replies

PRESET_DIR = Path(__file__).parent / "presets"


@dataclass
class TrainConfig:
    """Everything about a run that is fixed for its lifetime (``runs/<id>/config.yaml``). Values that
    may change while the run is live (learning rates, KL and entropy coefficients, clip ranges, token
    budgets, ...) are knobs instead (``knobs/agent.yaml``, ``knobs/env.yaml``)."""

    preset: str = doc("tiny", help="preset this config started from (informational)")
    run_id: str | None = doc(None, help="run folder name; null: <preset>-<UTC time>")
    seed: int = doc(0, help="seeds task draws, user arms, sampling and model init")
    steps: int = doc(20, help="PPO steps (one rollout batch and its update each)")
    gyms: list[str] = doc(help="gyms trained on (tasks round-robin)", factory=lambda: ["intention"])
    tasks_per_step: int = doc(8, help="distinct tasks per step, over all processes")
    samples_per_task: int = doc(2, help="episodes per task; they form a group sharing the task")
    rendering: str = doc("tagged", help="action rendering: tagged (ASK:/SEARCH:/ANSWER:) or tool_call (native "
                                        "tool calls)")
    user_replies: str = doc("user", help="tool_call rendering only: the user's replies as user messages (user) or "
                                         "as the result of the tool call that asked (tool; as TRL and UserRL do)")
    policy: PolicySpec = doc(help="the policy model", factory=PolicySpec)
    critic: CriticSpec = doc(help="the learned value model", factory=CriticSpec)
    backend: BackendSpec = doc(help="the rollout's generation backend", factory=BackendSpec)
    user_llm: UserLLMSpec | None = doc(None, help="the LLM user's backend; null: symbolic users only")
    init_checkpoint: str | None = doc(None, help="policy weights to start from (an eau sft output or a run "
                                                 "checkpoint folder)")
    warm_start: WarmStartSpec | None = doc(None, help="a supervised warm start made by the run itself before PPO, "
                                                      "written to runs/<id>/warm_start/ (reused on resume); null: none")
    evaluation: EvaluationSpec | None = doc(None, help="held-out evaluation before and after training; null: none")
    agent_knobs: dict[str, Any] = doc(help="agent.* knob values the run lends to the knob folder for its lifetime",
                                      factory=dict)
    env_knobs: dict[str, Any] = doc(help="env.* knob values the run lends to the knob folder for its lifetime",
                                    factory=dict)
    checkpoint_every: int = doc(10, help="steps between checkpoints (0: only at the end)")
    keep_checkpoints: int = doc(3, help="most recent checkpoints kept")
    adv_estimator: str = doc("gae", help="advantage estimator (harness.ppo.core registry): gae | reinforce")
    rollout_stats: str = doc("auto", help=(
        "where PPO's old log-probs (and a shared critic's old values) come from. rollout: recorded while "
        "sampling (hf continuous decoding), so scoring skips that forward; recompute: one more forward before "
        "the update (vLLM, per-turn decoding); auto: rollout for a float32 policy decoded continuously, else "
        "recompute (in bf16 the rollout's and the update's kernels round differently)"))
    loss_agg: str = doc("token-mean", help="loss aggregation (harness.ppo.core.agg_loss)")
    metrics_window: int = doc(20, help="recent metric lines given to knob checks (x-requires)")
    progress: bool = doc(True, help="live progress display on a terminal (log.txt is written either way)")
    device: str = doc("auto", help="auto | cpu | cuda")
    torch_threads: int = doc(0, help="CPU threads for torch (0: torch's default)")
    parent: str | None = doc(None, help="the run this one evolved from (eau train --from)")
    parent_reason: str | None = doc(None, help="why the new run was started")
    lineage: list[str] = doc(help="ancestors, oldest first", factory=list)
    max_lineage: int = doc(5, help="cap on inter-run iterations in one lineage (the method used 5)")

    def validate(self) -> None:
        """Cross-field checks with messages that say what to fix."""
        from harness.envs.registry import names

        if self.steps < 1:
            raise ValueError(f"steps must be >= 1, got {self.steps}")
        if self.tasks_per_step < 1 or self.samples_per_task < 1:
            raise ValueError("tasks_per_step and samples_per_task must be >= 1")
        unknown = [g for g in self.gyms if g not in names()]
        if not self.gyms or unknown:
            raise ValueError(f"gyms must be a non-empty list of {', '.join(names())}; unknown: {unknown}")
        if self.rendering not in ("tagged", "tool_call"):
            raise ValueError(f"rendering must be tagged or tool_call, got {self.rendering!r}")
        check_user_replies(self.rendering, self.user_replies)
        if self.rollout_stats not in ("auto", "rollout", "recompute"):
            raise ValueError(f"rollout_stats must be auto, rollout or recompute, got {self.rollout_stats!r}")
        if self.rollout_stats == "rollout" and (self.backend.name != "hf" or not self.backend.continuous):
            raise ValueError("rollout_stats=rollout needs the hf backend decoding continuously (log-probs are "
                             "recorded by run_turns); use rollout_stats=auto or recompute")
        if self.warm_start is not None and self.init_checkpoint:
            raise ValueError("set either init_checkpoint (start from existing weights) or warm_start (make them "
                             "first), not both; --set warm_start=null drops the preset's warm start")
        if len(self.lineage) >= self.max_lineage:
            raise ValueError(f"lineage {self.lineage} already has {len(self.lineage)} runs; the cap is "
                             f"max_lineage={self.max_lineage} (raise it with --set max_lineage=N if intended)")

    def to_dict(self) -> dict[str, Any]:
        """Plain, YAML-safe data (the frozen ``config.yaml``)."""
        return to_plain(self)


def preset_names() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


def preset_summary(name: str) -> str:
    """The first sentence of a preset file's leading comment (what ``eau train --help`` shows)."""
    lines = []
    for line in (PRESET_DIR / f"{name}.yaml").read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("#").strip())
    text = " ".join(lines)
    text = text.split(":", 1)[1].strip() if text.startswith(f"{name}:") else text
    sentences = text.replace(". ", ".\n").splitlines()
    out = ""
    for sentence in sentences:  # whole sentences, at least a line's worth
        out = f"{out} {sentence}".strip()
        if len(out) >= 60:
            break
    return out


def help_epilog() -> str:
    """``eau train --help``'s list of presets and config fields, generated from the preset files and
    the fields' own documentation."""
    parts = ["Presets (harness/ppo/presets/, every value commented):"]
    parts += [f"  {name}: {preset_summary(name)}" for name in preset_names()]
    parts.append("Config fields (--set KEY=VALUE, or a --config file of them; KEY = default: what it is):")
    parts += [f"  {key} = {default}: {text}" if default else f"  {key}: {text}"
              for key, default, text in field_docs(TrainConfig)]
    return "\n".join(parts)


def load_preset(name: str) -> dict[str, Any]:
    path = PRESET_DIR / f"{name}.yaml"
    if not path.exists():
        raise ValueError(f"unknown preset {name!r}; presets: {', '.join(preset_names())}")
    data = yaml.safe_load(path.read_text()) or {}
    data["preset"] = name
    return data


def set_dotted(d: dict[str, Any], key: str, value: Any) -> None:
    """``set_dotted(cfg, "policy.lora.r", 16)``; intermediate mappings are created."""
    parts = key.split(".")
    cur = d
    for p in parts[:-1]:
        if cur.get(p) is None:
            cur[p] = {}
        if not isinstance(cur[p], dict):
            raise ValueError(f"--set {key}: {p!r} is not a mapping")
        cur = cur[p]
    cur[parts[-1]] = value


def parse_override(text: str) -> tuple[str, Any]:
    """``key=value`` with a YAML value (``steps=50``, ``gyms=[travel]``, ``policy.lora=null``)."""
    if "=" not in text:
        raise ValueError(f"--set expects key=value, got {text!r}")
    key, raw = text.split("=", 1)
    from harness.io.yamlio import parse_text, plain

    return key.strip(), plain(parse_text(Path("<--set>"), raw, fast=True))


def build_config(preset: str = "tiny", config_file: str | Path | None = None,
                 overrides: list[str] | Mapping[str, Any] = ()) -> TrainConfig:
    """preset < config file < overrides; unknown top-level keys raise."""
    data = load_preset(preset)
    if config_file:
        extra = yaml.safe_load(Path(config_file).read_text()) or {}
        if not isinstance(extra, dict):
            raise ValueError(f"{config_file}: a config file is a mapping of TrainConfig fields")
        data.update(extra)
    items = overrides.items() if isinstance(overrides, Mapping) else [parse_override(o) for o in overrides]
    for k, v in items:
        set_dotted(data, k, v)
    return config_from_dict(data)


def config_from_dict(data: Mapping[str, Any]) -> TrainConfig:
    """A validated TrainConfig from plain data: unknown keys and wrong types raise naming the key."""
    data = copy.deepcopy(dict(data))
    if isinstance(data.get("policy"), str):  # policy: smollm2-135m is short for policy: {model: ...}
        data["policy"] = {"model": data["policy"]}
    valid = [f.name for f in dataclasses.fields(TrainConfig)]
    unknown = sorted(set(map(str, data)) - set(valid))
    if unknown:
        raise ValueError(f"unknown config key(s) {', '.join(unknown)}; valid: {', '.join(sorted(valid))}")
    cfg = from_mapping(TrainConfig, data, "")
    cfg.validate()
    return cfg
