"""``eau eval`` end to end: a run's checkpoint, played on the fixed protocol, scored, stored.

Inputs are the run folder (its ``config.yaml`` and checkpoint) and the protocol (its file and the
frozen files it names). The training knob folder is not an input: nothing here opens ``knobs/``.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from harness import __version__
from harness.eval.policy import RunPolicy, load_run_policy
from harness.eval.protocol import Protocol, default_protocol_path, scorer_hash
from harness.eval.runner import evaluate_policy
from harness.eval.scoring import score_records
from harness.knobs.snapshot import resolve
from harness.users import UserFactory

CPU_PROTOCOL = Path("eval") / "protocol-cpu.yaml"  # relative to the repository root


class ProtocolRuntimeError(RuntimeError):
    """The protocol could not be played (e.g. a gym needs a knob the protocol has no value for)."""


def turn_budget(protocol: Protocol) -> int:
    """The most agent turns the protocol's episodes can play in all (each gym's ``max_steps``)."""
    steps = protocol.knobs.values.get("env", {}).get("max_steps", 16)
    return sum(g.tasks * protocol.trials * int(resolve(steps, g.name)) for g in protocol.gyms)


def rendering_for(protocol: Protocol, run_config: dict[str, Any]) -> str:
    """The protocol's rendering, or the run's own when the protocol says ``run``."""
    if protocol.rendering != "run":
        return protocol.rendering
    return str(run_config.get("rendering") or "tagged")


def user_replies_for(protocol: Protocol, run_config: dict[str, Any]) -> str:
    """How user replies are rendered: the run's own choice when the protocol plays the run's rendering,
    else user messages (a protocol that fixes the rendering fixes this too)."""
    if protocol.rendering != "run":
        return "user"
    return str(run_config.get("user_replies") or "user")


def evaluate_loaded(
    policy: RunPolicy, protocol: Protocol, progress: Callable[[int, int, int], None] | None = None
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Play and score ``protocol`` with an already loaded policy: ``(result, episode records)``.
    ``progress(episodes done, episodes, turns played)`` is called after every agent turn."""
    t0 = time.perf_counter()
    rendering = rendering_for(protocol, policy.config)
    user_replies = user_replies_for(protocol, policy.config)
    trained = [str(g) for g in policy.config.get("gyms") or []]
    try:
        raw = evaluate_policy(
            policy.model,
            policy.tokenizer,
            protocol.gym_names,
            knobs=protocol.knobs,
            tasks_per_gym={g.name: g.tasks for g in protocol.gyms},
            trials=protocol.trials,
            split=protocol.split,
            seed=protocol.seed,
            rendering=rendering,
            user_replies=user_replies,
            temperature=protocol.temperature,
            top_p=protocol.top_p,
            max_new_tokens_per_turn=protocol.max_new_tokens_per_turn,
            max_episode_tokens=protocol.max_episode_tokens,
            batch_size=protocol.batch_size,
            user_factory=UserFactory(),  # no LLM backend: the protocol is symbolic-only
            gym_kwargs={g.name: {"data_file": g.data_file} for g in protocol.gyms if g.data_file is not None},
            progress=progress,
        )
    except KeyError as exc:  # a gym read a knob the frozen protocol does not define
        raise ProtocolRuntimeError(
            f"{protocol.path}: a gym needs {exc}, which the protocol does not define; "
            "add it under knobs: (this makes a new protocol: bump its name)"
        ) from exc
    records = raw["records"]
    scores = score_records(
        records, protocol.gym_names, protocol.trials, held_out=[g.name for g in protocol.gyms if g.held_out]
    )
    warnings = []
    for g in protocol.gyms:
        entry = scores["gyms"][g.name]
        entry["held_out"] = g.held_out
        entry["trained_on"] = g.name in trained
        if g.held_out and g.name in trained:
            warnings.append(
                f"gym {g.name} is held out by protocol {protocol.name} but run {policy.run_id} "
                "trained on it: its score is not a held-out score for this run"
            )
    result = {
        "run_id": policy.run_id,
        "checkpoint": policy.label,
        "step": policy.step,
        "time": datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z"),
        "protocol_name": protocol.name,
        "protocol_hash": protocol.hash,
        "protocol": protocol.describe(),
        "harness_version": __version__,
        "scorer_hash": scorer_hash(),
        "seed": protocol.seed,
        "trials": protocol.trials,
        "rendering": rendering,
        "user_replies": user_replies,
        "device": policy.device,
        "run": {
            "preset": policy.config.get("preset"),
            "gyms": trained,
            "parent": policy.config.get("parent"),
            "policy": policy.config.get("policy"),
        },
        "gyms": scores["gyms"],
        "overall": scores["overall"],
        "warnings": warnings,
        "episodes": len(records),
        "wall_s": round(time.perf_counter() - t0, 3),
    }
    return result, records


def evaluate_run(
    run_dir: Path,
    protocol: Protocol,
    checkpoint: str | int | None = None,
    device: str = "auto",
    log: Callable[[str], None] | None = None,
    progress: Callable[[int, int, int], None] | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Load ``run_dir`` at ``checkpoint`` (None: latest) and evaluate it on ``protocol``. ``log``:
    what is evaluated; ``progress``: as in :func:`evaluate_loaded`."""
    policy = load_run_policy(Path(run_dir), checkpoint, device, log=log or (lambda m: None))
    if log is not None:
        n = sum(g.tasks for g in protocol.gyms) * protocol.trials
        log(
            f"evaluating {policy.run_id} {policy.label} on {protocol.name} ({protocol.hash[:12]}): "
            f"{n} episodes over {', '.join(protocol.gym_names)} on {policy.device}"
        )
        if policy.device == "cpu" and protocol.path == default_protocol_path().resolve():
            log(
                f"  this is the full protocol, sized for a GPU; on a CPU, {CPU_PROTOCOL} is a smaller one "
                "(its own name and hash): eau eval --protocol " + str(CPU_PROTOCOL)
            )
    return evaluate_loaded(policy, protocol, progress)


# Keys that differ between two evaluations of the same checkpoint even when every score is equal.
VOLATILE_KEYS = ("time", "wall_s", "device", "protocol", "saved")


def comparable(result: dict[str, Any]) -> dict[str, Any]:
    """A result without its volatile keys (time, wall clock, device, protocol path): two evaluations of
    one checkpoint on one protocol with one seed compare equal on this. (``saved``: where the CLI wrote it.)"""
    return {k: v for k, v in result.items() if k not in VOLATILE_KEYS}
