"""Held-out evaluation around a training run (a run config's ``evaluation``), and the closing summary.

``eau train`` with ``evaluation: {protocol: FILE, before: true, after: true}`` scores the starting
policy (label ``init``: after the run's warm start, before any PPO update) and the final policy
(label ``step_NNNNNN``) on the fixed protocol, with the policy already in memory. The results are
ordinary ``eau eval`` results in ``eval_results/<run_id>/`` (outside ``runs/``: the skill never
reads them), and the run ends with a before -> after table per gym.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping

from harness.eval.evaluate import evaluate_loaded
from harness.eval.policy import INIT, RunPolicy
from harness.eval.protocol import Protocol, load_protocol, repo_root
from harness.eval.results import read_result, write_result
from harness.ppo.specs import EvaluationSpec


def protocol_file(path: str | Path) -> Path:
    """A run config's protocol path: absolute, else relative to the working folder when it exists
    there, else to the repository (so ``eval/protocol-quickstart.yaml`` works from anywhere)."""
    p = Path(path).expanduser()
    if p.is_absolute() or p.exists():
        return p
    return repo_root() / p


def load_run_protocol(evaluation: EvaluationSpec) -> Protocol:
    """The protocol a run config's ``evaluation`` names (ProtocolError when invalid)."""
    return load_protocol(protocol_file(evaluation.protocol))


def evaluate_in_memory(
    model: Any,
    tokenizer: Any,
    run_id: str,
    config: Mapping[str, Any],
    protocol: Protocol,
    label: str,
    step: int | None,
    device: str,
    eval_root: Path,
    progress: Callable[[int, int, int], None] | None = None,
) -> dict[str, Any]:
    """Score a policy in memory on ``protocol`` as ``eau eval`` would score the checkpoint ``label``
    of the run, write the result to ``eval_root`` and return it (with ``saved``)."""
    was_training = model.training
    model.eval()
    try:
        policy = RunPolicy(
            model=model, tokenizer=tokenizer, run_id=run_id, label=label, step=step, config=dict(config), device=device
        )
        result, records = evaluate_loaded(policy, protocol, progress=progress)
    finally:
        model.train(was_training)
    result["saved"] = str(write_result(eval_root, result, records))
    return result


def stored(eval_root: Path, run_id: str, label: str, protocol: Protocol) -> dict[str, Any] | None:
    """A stored result of ``label`` on this very protocol (same hash), or None."""
    res = read_result(eval_root, run_id, label)
    return res if res is not None and res.get("protocol_hash") == protocol.hash else None


def compare(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    """Per gym and overall: held-out success and reward before and after, and the change."""
    rows = {}
    for gym, a in after["gyms"].items():
        b = before["gyms"].get(gym, {})
        rows[gym] = {
            "held_out": bool(a.get("held_out")),
            "trained_on": bool(a.get("trained_on")),
            "tasks": a.get("tasks"),
            **{
                f"{m}_{w}": v
                for m in ("success_rate", "reward_mean")
                for w, v in (("before", b.get(m)), ("after", a.get(m)))
            },
        }
        for m in ("success_rate", "reward_mean"):
            bv, av = rows[gym][f"{m}_before"], rows[gym][f"{m}_after"]
            rows[gym][f"{m}_delta"] = None if bv is None or av is None else av - bv
    ob, oa = before["overall"]["all"], after["overall"]["all"]
    overall = {
        "success_rate_before": ob["success_rate"],
        "success_rate_after": oa["success_rate"],
        "success_rate_delta": oa["success_rate"] - ob["success_rate"],
        "reward_mean_before": ob["reward_mean"],
        "reward_mean_after": oa["reward_mean"],
        "reward_mean_delta": oa["reward_mean"] - ob["reward_mean"],
    }
    return {
        "protocol_name": after["protocol_name"],
        "protocol_hash": after["protocol_hash"],
        "before": before["checkpoint"],
        "after": after["checkpoint"],
        "gyms": rows,
        "overall": overall,
    }


def summary_lines(cmp: Mapping[str, Any]) -> list[str]:
    """The closing table: one line per gym, then the mean."""
    lines = [
        f"held-out evaluation on {cmp['protocol_name']} ({cmp['protocol_hash'][:12]}): "
        f"{cmp['before']} (start) -> {cmp['after']} (end)",
        f"  {'gym':<12} {'tasks':>5}  {'success':<24}  {'reward':<26}",
    ]
    for gym, r in cmp["gyms"].items():
        note = "  held out" if r["held_out"] else ""
        lines.append(
            f"  {gym:<12} {r['tasks'] or '':>5}  {_arrow(r['success_rate_before'], r['success_rate_after']):<24}"
            f"  {_arrow(r['reward_mean_before'], r['reward_mean_after']):<26}{note}"
        )
    o = cmp["overall"]
    if len(cmp["gyms"]) > 1:
        lines.append(
            f"  {'mean':<12} {'':>5}  {_arrow(o['success_rate_before'], o['success_rate_after']):<24}"
            f"  {_arrow(o['reward_mean_before'], o['reward_mean_after']):<26}"
        )
    return lines


def _arrow(before: float | None, after: float | None) -> str:
    if before is None or after is None:
        return "-"
    return f"{before:.3f} -> {after:.3f} ({after - before:+.3f})"


__all__ = ["INIT", "compare", "evaluate_in_memory", "load_run_protocol", "protocol_file", "stored", "summary_lines"]
