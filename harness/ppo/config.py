"""Run configuration: presets (commented YAML files in ``harness/ppo/presets/``) plus overrides.

One precedence rule: preset < ``--config FILE`` < ``--set key=value`` (dotted keys, YAML values).
Unknown keys are errors that list the valid ones. Optimisation hyperparameters that may change
while the run is live are *knobs* (``knobs/agent.yaml``): a preset's ``agent_knobs`` and
``env_knobs`` are written there at run start (author ``system``), so the knob files always show
what is in force.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

from harness.io.yamlio import FileProblem, decode, flow_depth
from harness.ppo.fieldcheck import check_fields, check_range
from harness.rollout.chat import check_user_replies
from harness.runs.names import check_run_id

PRESET_DIR = Path(__file__).parent / "presets"
# the eau sft settings a run's warm_start may set (harness.ppo.sft.SFTConfig); the policy, gyms,
# rendering, user_replies and seed are the run's own
WARM_START_KEYS = ("demonstrator", "give_up", "episodes", "epochs", "batch_size", "lr", "max_episode_tokens")

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
    """Everything about a run that is fixed for its lifetime (``runs/<id>/config.yaml``)."""

    preset: str = "tiny"  # preset this config started from (informational)
    run_id: str | None = None  # run folder name; None: <preset>-<UTC time>
    seed: int = 0  # seeds task draws, user arms, sampling and model init
    steps: int = 20  # PPO steps (one rollout batch + its update each)
    gyms: list[str] = field(default_factory=lambda: ["intention"])  # gyms trained on (tasks round-robin)
    tasks_per_step: int = 8  # distinct tasks per step, over all processes
    samples_per_task: int = 2  # episodes per task (n); they form a group sharing the task
    rendering: str = "tagged"  # action rendering: tagged (ASK:/SEARCH:/ANSWER:) or tool_call (native tool calls)
    # tool_call rendering only: the user's replies as user messages (user) or as the result of the
    # tool call that asked (tool; how TRL's environment_factory and UserRL render them)
    user_replies: str = "user"
    policy: dict[str, Any] = field(default_factory=lambda: {"model": "tiny"})  # harness.ppo.models.PolicySpec
    critic: dict[str, Any] = field(default_factory=lambda: {"mode": "separate", "init": "policy"})  # CriticSpec
    # hf | vllm (+ VLLMBackend options). hf option continuous (default true): a row's next turn starts
    # as soon as its last one ended (HFBackend.run_turns) instead of one generate per turn
    backend: dict[str, Any] = field(default_factory=lambda: {"name": "hf"})
    user_llm: dict[str, Any] | None = None  # LLM user backend (harness.users.backends.make_backend); None: symbolic only
    init_checkpoint: str | None = None  # policy weights to start from (an `eau sft` output or a run checkpoint dir)
    # a supervised warm start made by the run itself before PPO (when init_checkpoint is unset): eau
    # sft's settings (WARM_START_KEYS) on the run's policy, gyms and rendering; written to
    # runs/<id>/warm_start/ and the run's starting policy (reused on resume). None: no warm start
    warm_start: dict[str, Any] | None = None
    # held-out evaluation on a fixed protocol around training: {protocol: FILE, before: bool, after:
    # bool}. before scores the starting policy (after any warm start), after the final one; results
    # go to eval_results/<run_id>/ and a before -> after summary closes the run. None: no evaluation
    evaluation: dict[str, Any] | None = None
    agent_knobs: dict[str, Any] = field(default_factory=dict)  # knob values written at start (agent.*)
    env_knobs: dict[str, Any] = field(default_factory=dict)  # knob values written at start (env.*)
    checkpoint_every: int = 10  # steps between checkpoints (0: only at the end)
    keep_checkpoints: int = 3  # most recent checkpoints kept
    adv_estimator: str = "gae"  # harness.ppo.core registry: gae | reinforce
    # where PPO's old log-probs (and, with the shared critic, old values) come from. rollout: recorded
    # by the hf backend's continuous decoding from the very logits each token was sampled from (and the
    # value head on that call's hidden state), so the scoring pass before the update skips that forward;
    # recompute: one more forward over the batch before the update (how vLLM and per-turn decoding
    # always work); auto: rollout when the hf backend decodes continuously with a float32 policy, else
    # recompute (in bf16/fp16 the rollout's and the update's kernels round differently, and a ratio
    # that is not 1 at the first mini-batch is clipped for nothing)
    rollout_stats: str = "auto"
    loss_agg: str = "token-mean"  # harness.ppo.core.agg_loss mode
    metrics_window: int = 20  # recent metric lines given to knob checks (x-requires)
    progress: bool = True  # rich progress bar on the terminal (log.txt is written either way)
    device: str = "auto"  # auto | cpu | cuda
    torch_threads: int = 0  # CPU threads for torch (0: torch's default); 1 is much faster for tiny models
    parent: str | None = None  # run this one evolved from (eau train --from)
    parent_reason: str | None = None  # why the new run was started
    lineage: list[str] = field(default_factory=list)  # ancestors, oldest first
    max_lineage: int = 5  # cap on inter-run iterations in one lineage (the method used 5)

    def validate(self) -> None:
        """Cross-field checks with messages that say what to fix."""
        from harness.envs.registry import names

        check_fields(self, LIMITS)  # types and sizes first: the checks below compare values
        if self.run_id is not None:
            check_run_id(self.run_id)
        if self.tasks_per_step * self.samples_per_task > MAX_EPISODES_PER_STEP:
            raise ValueError(f"tasks_per_step * samples_per_task must be at most {MAX_EPISODES_PER_STEP:,} episodes "
                             f"a step, got {self.tasks_per_step} * {self.samples_per_task}")
        unknown = [g for g in self.gyms if g not in names()]
        if not self.gyms or unknown:
            raise ValueError(f"gyms must be a non-empty list of {', '.join(names())}; unknown: {unknown}")
        if self.rendering not in ("tagged", "tool_call"):
            raise ValueError(f"rendering must be tagged or tool_call, got {self.rendering!r}")
        check_user_replies(self.rendering, self.user_replies)
        if self.backend.get("name", "hf") not in ("hf", "vllm"):
            raise ValueError(f"backend.name must be hf or vllm, got {self.backend.get('name')!r}")
        if self.backend.get("name", "hf") == "hf":
            extra = sorted(set(self.backend) - {"name", "continuous"})
            if extra:
                raise ValueError(f"backend (hf) takes name and continuous; unknown: {extra}")
            if not isinstance(self.backend.get("continuous", True), bool):
                raise ValueError(f"backend.continuous must be true or false, got {self.backend['continuous']!r}")
        if self.rollout_stats not in ("auto", "rollout", "recompute"):
            raise ValueError(f"rollout_stats must be auto, rollout or recompute, got {self.rollout_stats!r}")
        if self.rollout_stats == "rollout" and (self.backend.get("name", "hf") != "hf"
                                                 or not self.backend.get("continuous", True)):
            raise ValueError("rollout_stats=rollout needs the hf backend decoding continuously (log-probs are "
                             "recorded by run_turns); use rollout_stats=auto or recompute")
        if self.warm_start is not None:
            if not isinstance(self.warm_start, dict):
                raise ValueError(f"warm_start must be a mapping of eau sft settings ({', '.join(WARM_START_KEYS)}) "
                                 f"or null; got {self.warm_start!r}")
            unknown = sorted(set(self.warm_start) - set(WARM_START_KEYS))
            if unknown:
                raise ValueError(f"warm_start: unknown key(s) {', '.join(unknown)}; valid: {', '.join(WARM_START_KEYS)}")
            check_sft_sizes(self.warm_start, "warm_start.")
            if self.init_checkpoint:
                raise ValueError("set either init_checkpoint (start from existing weights) or warm_start (make them "
                                 "first), not both; --set warm_start=null drops the preset's warm start")
        if self.evaluation is not None:
            ev = self.evaluation
            if not isinstance(ev, dict) or not ev.get("protocol"):
                raise ValueError(f"evaluation must be a mapping with a protocol file (and before/after: true|false) "
                                 f"or null; got {ev!r}")
            unknown = sorted(set(ev) - {"protocol", "before", "after"})
            if unknown:
                raise ValueError(f"evaluation: unknown key(s) {', '.join(unknown)}; valid: protocol, before, after")
            for k in ("before", "after"):
                if not isinstance(ev.get(k, True), bool):
                    raise ValueError(f"evaluation.{k} must be true or false, got {ev[k]!r}")
        if len(self.lineage) >= self.max_lineage:
            raise ValueError(f"lineage {self.lineage} already has {len(self.lineage)} runs; the cap is "
                             f"max_lineage={self.max_lineage} (raise it with --set max_lineage=N if intended)")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def preset_names() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


def check_sft_sizes(settings: Mapping[str, Any], prefix: str = "") -> None:
    """ValueError naming the first eau sft setting that is not a finite number within SFT_LIMITS."""
    for key, (low, high) in SFT_LIMITS.items():
        if key not in settings:
            continue
        value = settings[key]
        integral = isinstance(low, int)
        if isinstance(value, bool) or not isinstance(value, int if integral else (int, float)) \
                or (isinstance(value, float) and not math.isfinite(value)):
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
    from harness.io.yamlio import parse_text, plain

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


def build_config(preset: str = "tiny", config_file: str | Path | None = None,
                 overrides: list[str] | Mapping[str, Any] = ()) -> TrainConfig:
    """preset < config file < overrides; unknown top-level keys raise."""
    data = load_preset(preset)
    if config_file:
        data.update(load_config_file(config_file))
    items = overrides.items() if isinstance(overrides, Mapping) else [parse_override(o) for o in overrides]
    for k, v in items:
        set_dotted(data, k, v)
    return config_from_dict(data)


def config_from_dict(data: Mapping[str, Any]) -> TrainConfig:
    if not isinstance(data, Mapping):
        raise ValueError(f"a config is a mapping of TrainConfig fields, got {type(data).__name__}")
    if not all(isinstance(k, str) for k in data):
        raise ValueError(f"config keys are field names; got {sorted(map(repr, data))[:5]}")
    valid = {f.name for f in dataclasses.fields(TrainConfig)}
    unknown = sorted(set(data) - valid)
    if unknown:
        raise ValueError(f"unknown config key(s) {', '.join(unknown)}; valid: {', '.join(sorted(valid))}")
    cfg = TrainConfig(**copy.deepcopy(dict(data)))
    cfg.validate()
    return cfg
