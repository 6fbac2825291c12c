"""Run configuration: presets (commented YAML files in ``harness/ppo/presets/``) plus overrides.

One precedence rule: preset < ``--config FILE`` < ``--set key=value`` (dotted keys, YAML values).
Unknown keys and wrong types are errors that name the dotted key and what is allowed. The parts with
parts of their own (policy, critic, backend, user_llm, warm_start, evaluation) are typed specs
(:mod:`harness.ppo.specs`), every field documented where it is defined. Optimisation hyperparameters
that may change while the run is live are *knobs* (``knobs/agent.yaml``): a preset's ``agent_knobs``
and ``env_knobs`` are written into the run's own knobs folder at its start (harness/ppo/run_knobs.py).
"""

from __future__ import annotations

import copy
import dataclasses
import math
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping

import yaml

from harness.envs.registry import gym_class, names
from harness.io.yamlio import FileProblem, decode, flow_depth, parse_text, plain
from harness.ppo.specs import (
    BackendSpec,
    CriticSpec,
    EvaluationSpec,
    PolicySpec,
    UserLLMSpec,
    WarmStartSpec,
    check_range,
    doc,
    field_docs,
    from_mapping,
    to_plain,
)
from harness.rollout.chat import check_user_replies
from harness.runs.names import check_run_id
from harness.runs.trackers import TRACKERS, check_report_to

PRESET_DIR = Path(__file__).parent / "presets"

# Sane bounds of the sizes a config sets (inclusive). A value past them is a typo or a unit mistake
# that would start a run that can never finish or never fit in memory; each is far above anything
# the project's presets use (cpu-small: 32 episodes a step, 40 steps).
LIMITS = {
    "steps": (1, 1_000_000),
    "tasks_per_step": (1, 4_096),
    "samples_per_task": (1, 256),
    "seed": (0, 2**32 - 1),  # numpy and torch seed range
    "checkpoint_every": (0, 1_000_000),
    "keep_checkpoints": (1, 1_000),
    "metrics_window": (1, 100_000),
    "torch_threads": (0, 1_024),
    "max_lineage": (1, 1_000),
}
MAX_EPISODES_PER_STEP = 16_384  # tasks_per_step * samples_per_task
# eau sft / warm_start sizes (harness.ppo.sft.SFTConfig); token budgets as the agent knob's schema
SFT_LIMITS = {
    "episodes": (1, 1_000_000),
    "epochs": (1, 1_000),
    "batch_size": (1, 4_096),
    "max_episode_tokens": (256, 131_072),
    "give_up": (0.0, 1.0),
    "lr": (0.0, 1.0),
    "seed": (0, 2**32 - 1),
}
MAX_CONFIG_BYTES = 256 * 1024
MAX_SET_DEPTH = 64  # nesting of a --set value or config file; a config needs a handful of levels  # a --config or config.yaml file; anything larger is not a config


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
    rendering: str = doc(
        "tagged", help="action rendering: tagged (ASK:/SEARCH:/ANSWER:) or tool_call (native tool calls)"
    )
    user_replies: str = doc(
        "user",
        help="tool_call rendering only: the user's replies as user messages (user) or "
        "as the result of the tool call that asked (tool; as TRL and UserRL do)",
    )
    policy: PolicySpec = doc(help="the policy model", factory=PolicySpec)
    critic: CriticSpec = doc(help="the learned value model", factory=CriticSpec)
    backend: BackendSpec = doc(help="the rollout's generation backend", factory=BackendSpec)
    user_llm: UserLLMSpec | None = doc(None, help="the LLM user's backend; null: symbolic users only")
    init_checkpoint: str | None = doc(
        None, help="policy weights to start from (an eau sft output or a run checkpoint folder)"
    )
    warm_start: WarmStartSpec | None = doc(
        None,
        help="a supervised warm start made by the run itself before PPO, "
        "written to runs/<id>/warm_start/ (reused on resume); null: none",
    )
    evaluation: EvaluationSpec | None = doc(None, help="held-out evaluation before and after training; null: none")
    agent_knobs: dict[str, Any] = doc(
        help="agent.* knob values written into the run's own knobs folder at its start", factory=dict
    )
    env_knobs: dict[str, Any] = doc(
        help="env.* knob values written into the run's own knobs folder at its start", factory=dict
    )
    checkpoint_every: int = doc(10, help="steps between checkpoints (0: only at the end)")
    keep_checkpoints: int = doc(3, help="most recent checkpoints kept")
    adv_estimator: str = doc("gae", help="advantage estimator (harness.ppo.core registry): gae | reinforce")
    rollout_stats: str = doc(
        "auto",
        help=(
            "where PPO's old log-probs (and a shared critic's old values) come from. rollout: recorded while "
            "sampling (hf continuous decoding), so scoring skips that forward; recompute: one more forward before "
            "the update (vLLM, per-turn decoding); auto: rollout for a float32 policy decoded continuously, else "
            "recompute (in bf16 the rollout's and the update's kernels round differently)"
        ),
    )
    loss_agg: str = doc("token-mean", help="loss aggregation (harness.ppo.core.agg_loss)")
    metrics_window: int = doc(20, help="recent metric lines given to knob checks (x-requires)")
    progress: bool = doc(True, help="live progress display on a terminal (log.txt is written either way)")
    report_to: list[str] = doc(
        help="experiment trackers that get a copy of the run's records (metrics rows, knob events and "
        "alerts as markers, sampled trajectories as tables, the config and knobs at start), any of "
        + ", ".join(TRACKERS)
        + "; each is the package extra of the same name; nothing reaches a network: trackio's "
        "local database, W&B offline in runs/<id>/wandb/, TensorBoard in runs/<id>/tensorboard/",
        factory=list,
    )
    device: str = doc("auto", help="auto | cpu | cuda")
    torch_threads: int = doc(0, help="CPU threads for torch (0: torch's default)")
    parent: str | None = doc(None, help="the run this one evolved from (eau train --from)")
    parent_reason: str | None = doc(None, help="why the new run was started")
    lineage: list[str] = doc(help="ancestors, oldest first", factory=list)
    max_lineage: int = doc(5, help="cap on inter-run iterations in one lineage (the method used 5)")

    def validate(self) -> None:
        """Cross-field checks with messages that say what to fix."""
        for name, (low, high) in LIMITS.items():  # sizes first (types were checked when it was built)
            check_range(name, getattr(self, name), low, high)
        if self.run_id is not None:
            check_run_id(self.run_id)
        if self.tasks_per_step * self.samples_per_task > MAX_EPISODES_PER_STEP:
            raise ValueError(
                f"tasks_per_step * samples_per_task must be at most {MAX_EPISODES_PER_STEP:,} episodes "
                f"a step, got {self.tasks_per_step} * {self.samples_per_task}"
            )
        unknown = [g for g in self.gyms if g not in names()]
        if not self.gyms or unknown:
            raise ValueError(f"gyms must be a non-empty list of {', '.join(names())}; unknown: {unknown}")
        for g in self.gyms:  # a gym on an optional package (τ²) says what to install before the run starts
            try:
                gym_class(g).check_available()
            except ImportError as exc:
                raise ValueError(f"gym {g!r} cannot run here: {exc}") from None
        check_report_to(self.report_to)
        if self.rendering not in ("tagged", "tool_call"):
            raise ValueError(f"rendering must be tagged or tool_call, got {self.rendering!r}")
        check_user_replies(self.rendering, self.user_replies)
        if self.rollout_stats not in ("auto", "rollout", "recompute"):
            raise ValueError(f"rollout_stats must be auto, rollout or recompute, got {self.rollout_stats!r}")
        if self.rollout_stats == "rollout" and (self.backend.name != "hf" or not self.backend.continuous):
            raise ValueError(
                "rollout_stats=rollout needs the hf backend decoding continuously (log-probs are "
                "recorded by run_turns); use rollout_stats=auto or recompute"
            )
        if self.warm_start is not None:
            check_sft_sizes(dataclasses.asdict(self.warm_start), "warm_start.")
            if self.init_checkpoint:
                raise ValueError(
                    "set either init_checkpoint (start from existing weights) or warm_start (make them "
                    "first), not both; --set warm_start=null drops the preset's warm start"
                )
        if len(self.lineage) >= self.max_lineage:
            raise ValueError(
                f"lineage {self.lineage} already has {len(self.lineage)} runs; the cap is "
                f"max_lineage={self.max_lineage} (raise it with --set max_lineage=N if intended)"
            )

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
    parts += [
        f"  {key} = {default}: {text}" if default else f"  {key}: {text}"
        for key, default, text in field_docs(TrainConfig)
    ]
    return "\n".join(parts)


def check_sft_sizes(settings: Mapping[str, Any], prefix: str = "") -> None:
    """ValueError naming the first eau sft setting that is not a finite number within SFT_LIMITS."""
    for key, (low, high) in SFT_LIMITS.items():
        if key not in settings:
            continue
        value = settings[key]
        integral = isinstance(low, int)
        if (
            isinstance(value, bool)
            or not isinstance(value, int if integral else (int, float))
            or (isinstance(value, float) and not math.isfinite(value))
        ):
            raise ValueError(f"{prefix}{key} must be {'an integer' if integral else 'a finite number'}, got {value!r}")
        check_range(prefix + key, value, low, high)


def load_preset(name: str) -> dict[str, Any]:
    if name not in preset_names():  # a name, never a path
        raise ValueError(f"--preset: unknown preset {name!r}; presets: {', '.join(preset_names())}")
    path = PRESET_DIR / f"{name}.yaml"
    data = yaml.safe_load(path.read_text()) or {}
    data["preset"] = name
    return data


_KEY_PART = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def set_dotted(d: dict[str, Any], key: str, value: Any) -> None:
    """``set_dotted(cfg, "policy.lora.r", 16)``; intermediate mappings are created."""
    parts = key.split(".")
    if not all(_KEY_PART.fullmatch(p) for p in parts):
        raise ValueError(f"--set {key!r}: a key is a field name, dotted for nested fields (policy.lora.r)")
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

    if flow_depth(raw) > MAX_SET_DEPTH:  # ruamel's C parser overflows the C stack (a segfault) far below
        raise ValueError(f"--set {key.strip()}: the value nests [ ] / {{ }} deeper than {MAX_SET_DEPTH} levels")
    try:
        return key.strip(), plain(parse_text(Path("<--set>"), raw, fast=True))
    except FileProblem as exc:
        raise ValueError(f"--set {key.strip()}: the value is not YAML ({exc.message}): {raw[:80]!r}") from None
    except ValueError as exc:  # e.g. an integer of more than 4300 digits
        raise ValueError(f"--set {key.strip()}: {exc}") from None


def load_config_file(path: str | Path, what: str = "--config") -> dict[str, Any]:
    """The mapping of a config YAML file (``--config``, a run's ``config.yaml``). ValueError that
    names the file (and the line when the parser knows it) when it is missing, not a regular file,
    too large, not UTF-8, not YAML, nested too deeply or not a mapping. YAML anchors and aliases
    are refused: a config never needs them, and expanding them can take exponential memory."""
    p = Path(path)
    if not p.exists():
        raise ValueError(f"{what} {p}: no such file")
    if not p.is_file():  # a folder, FIFO or device would block or fail on read
        raise ValueError(f"{what} {p}: not a regular file")
    with open(p, "rb") as f:
        data = f.read(MAX_CONFIG_BYTES + 1)
    if len(data) > MAX_CONFIG_BYTES:
        raise ValueError(f"{what} {p}: larger than {MAX_CONFIG_BYTES:,} bytes, not a config file")
    try:
        text = decode(p, data)
        if flow_depth(text) > MAX_SET_DEPTH:  # refused before a parser spends seconds on it
            raise ValueError(f"{what} {p}: YAML nested deeper than {MAX_SET_DEPTH} levels of [ ] / {{ }}")
        if any(isinstance(ev, yaml.AliasEvent) for ev in yaml.parse(text, Loader=yaml.SafeLoader)):
            raise ValueError(f"{what} {p}: YAML aliases (*name) are not allowed in a config file")
        doc = yaml.safe_load(text)
    except FileProblem as exc:
        raise ValueError(f"{what} {exc}") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f":{mark.line + 1}" if mark is not None else ""
        raise ValueError(f"{what} {p}{line}: YAML syntax error: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise ValueError(f"{what} {p}: not YAML ({one_line(str(exc))})") from None
    except RecursionError:
        raise ValueError(f"{what} {p}: YAML nested too deeply") from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise ValueError(f"{what} {p}: a config file is a mapping of TrainConfig fields, got {type(doc).__name__}")
    return doc


def one_line(text: str) -> str:
    return " ".join(text.split())[:300]


def default_run_id(preset: str) -> str:
    return f"{preset}-{datetime.now(timezone.utc).strftime('%Y%m%d-%H%M%S')}"


def check_start(cfg: TrainConfig, world: int) -> None:
    """What a run needs before anything is made or loaded (a packaged model takes a while)."""
    if cfg.tasks_per_step % world:
        raise ValueError(f"tasks_per_step={cfg.tasks_per_step} must divide evenly over {world} processes")
    if cfg.init_checkpoint and not (Path(cfg.init_checkpoint) / "policy.pt").exists():
        raise ValueError(
            f"init_checkpoint {cfg.init_checkpoint}: no policy.pt there; make a warm start with "
            f"`eau sft --preset tiny --out {cfg.init_checkpoint}` or point it at an `eau sft` output "
            "or a run's checkpoints/step_N folder"
        )


def resume_config(run_dir: Path) -> TrainConfig:
    """The frozen config of a run folder (``config.yaml``), validated."""
    path = Path(run_dir) / "config.yaml"
    try:
        return config_from_dict(load_config_file(path, what="run config"))
    except ValueError as exc:
        msg = str(exc)
        raise ValueError(msg if str(path) in msg else f"run config {path}: {msg}") from None


def build_config(
    preset: str = "tiny", config_file: str | Path | None = None, overrides: list[str] | Mapping[str, Any] = ()
) -> TrainConfig:
    """preset < config file < overrides; unknown top-level keys raise."""
    data = load_preset(preset)
    if config_file:
        data.update(load_config_file(config_file))
    items = overrides.items() if isinstance(overrides, Mapping) else [parse_override(o) for o in overrides]
    for k, v in items:
        set_dotted(data, k, v)
    return config_from_dict(data)


def config_from_dict(data: Mapping[str, Any]) -> TrainConfig:
    """A validated TrainConfig from plain data: unknown keys and wrong types raise naming the key."""
    if not isinstance(data, Mapping):
        raise ValueError(f"a config is a mapping of TrainConfig fields, got {type(data).__name__}")
    if not all(isinstance(k, str) for k in data):
        raise ValueError(f"config keys are field names; got {sorted(map(repr, data))[:5]}")
    data = copy.deepcopy(dict(data))
    if isinstance(data.get("policy"), str):  # policy: smollm2-135m is short for policy: {model: ...}
        data["policy"] = {"model": data["policy"]}
    valid = [f.name for f in dataclasses.fields(TrainConfig)]
    unknown = sorted(set(data) - set(valid))
    if unknown:
        raise ValueError(f"unknown config key(s) {', '.join(unknown)}; valid: {', '.join(sorted(valid))}")
    cfg = from_mapping(TrainConfig, data, "")
    cfg.validate()
    return cfg
