"""Where a run's policy starts: an ``init_checkpoint`` (an ``eau sft`` output or another run's
checkpoint), or a warm start the run makes itself (config ``warm_start``: ``eau sft`` on the run's
own policy, gyms and rendering, into ``runs/<id>/warm_start/``, reused on resume)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Mapping

import yaml

from harness.runs.progress import Progress, fmt_duration


def warm_start_dir(run_dir: Path) -> Path:
    """Where a run's own warm start lives (``policy.pt``, ``sft.json``, ``metrics.jsonl``)."""
    return Path(run_dir) / "warm_start"


def starting_weights(cfg: Any, run_dir: Path) -> Path | None:
    """The folder whose ``policy.pt`` a run starts from: ``init_checkpoint``, or the run's own finished
    warm start (on resume); None when a warm start is still to be made (or none is set)."""
    if cfg.init_checkpoint:
        return Path(cfg.init_checkpoint)
    if cfg.warm_start is not None and (warm_start_dir(run_dir) / "policy.pt").is_file():
        return warm_start_dir(run_dir)
    return None


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


def format_mismatch(cfg: Any) -> dict[str, Any] | None:
    """``{message, learned, plays}`` when ``init_checkpoint`` learned another conversation format
    (rendering, user_replies) than the run plays; None when it matches or is unknown."""
    if not cfg.init_checkpoint:
        return None
    learned = warm_start_format(Path(cfg.init_checkpoint))
    plays = {"rendering": cfg.rendering, "user_replies": cfg.user_replies}
    if learned is None or learned == plays:
        return None
    return {
        "message": f"init_checkpoint {cfg.init_checkpoint} was trained on {learned} but this run plays {plays}: "
        "the policy starts on a format it did not learn",
        "learned": learned,
        "plays": plays,
    }


def make_warm_start(
    cfg: Any, policy: Any, tokenizer: Any, knobs: Any, run_dir: Path, writer: Any, progress: Progress
) -> dict[str, Any]:
    """Train ``policy`` in place on scripted demonstrations (the run config's ``warm_start``) and
    write it to ``runs/<id>/warm_start/``, showing each stage (demonstrations, updates) on ``progress``
    and in the run folder (``status.json``'s phase, ``warm_start/metrics.jsonl``, ``log.txt`` at the
    first update and every eighth). Returns eau sft's summary."""
    from harness.ppo.sft import SFTConfig, run_sft

    out = warm_start_dir(run_dir)
    sft = SFTConfig(
        policy=cfg.policy,
        gyms=list(cfg.gyms),
        rendering=cfg.rendering,
        user_replies=cfg.user_replies,
        seed=cfg.seed,
        **dataclasses.asdict(cfg.warm_start),
    )
    writer.write_status(phase="warm start", phase_done=None, phase_total=None, phase_eta_s=None)
    writer.log(
        f"warm start: {sft.episodes} {sft.demonstrator} demonstrations x {sft.epochs} epochs "
        f"(give_up {sft.give_up}) -> {out}"
    )
    labels = {
        "demonstrations": ("warm start: playing demonstrations", "episodes"),
        "updates": ("warm start", "updates"),
    }
    phases: dict[str, Any] = {}

    def on_progress(stage: str, done: int, total: int, info: Mapping[str, Any]) -> None:
        if stage not in phases:
            for other in phases.values():
                other.close()
            phases.clear()
            phases[stage] = progress.phase(labels[stage][0], total=total, unit=labels[stage][1])
        ph = phases[stage]
        ph.set(done, f"loss {info['loss']:.3f}" if "loss" in info else None)
        if stage == "updates" and done == 0:
            return
        eta = ph.eta()
        writer.write_status(phase=labels[stage][0], phase_done=done, phase_total=total, phase_eta_s=eta)
        if stage == "updates":
            writer.warm_start_metrics({"update": done, "updates": total, **info, "time_s": round(ph.elapsed(), 1)})
            if done in (1, total) or done % max(1, total // 8) == 0:
                writer.log(
                    f"warm start: update {done}/{total} loss {info['loss']:.3f}"
                    + (f" (ETA {fmt_duration(eta)})" if eta is not None and done < total else "")
                )

    try:
        summary = run_sft(sft, knobs, out, log=writer.log, model=policy, tokenizer=tokenizer, progress=on_progress)
    finally:
        for ph in phases.values():
            ph.close()
    writer.event("warm_start", **{k: v for k, v in summary.items() if k != "config"})
    return summary
