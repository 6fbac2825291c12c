"""A run's policy as a Hugging Face model folder (``eau export``): what ``transformers`` loads and
``vllm serve`` serves, outside this harness.

    config.json, generation_config.json   the architecture; generation stops at the chat template's turn end
    model.safetensors                      the weights, LoRA adapters merged into the base
    tokenizer.json, tokenizer_config.json  the tokenizer, with the chat template the run played with
    chat_template.jinja                    (transformers writes it beside the tokenizer)
    README.md                              a model card: the run, the checkpoint step, the held-out scores
                                           (eval_results/<run_id>/), the knobs in force at that checkpoint

The policy is rebuilt as ``eau eval`` rebuilds it (harness/eval/policy.py: the run config, its starting
weights, the checkpoint's trainable tensors); the value head and optimiser state stay behind. The
folder is written beside ``--out`` and renamed into place, so a failed export leaves nothing half
written.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Mapping

from huggingface_hub import ModelCard, ModelCardData

from harness.eval.policy import INIT, RunPolicy, load_run_policy
from harness.eval.results import read_result
from harness.ppo import checkpoint

CARD = "README.md"


def merged_model(policy: RunPolicy) -> Any:
    """The policy as a plain transformers model: a peft model's adapters merged into its base."""
    model = policy.model
    if hasattr(model, "merge_and_unload"):
        model = model.merge_and_unload()
    return model


def knobs_at(checkpoint_dir: Path | None, run_dir: Path) -> dict[str, Any]:
    """The knob values in force at a checkpoint (its trainer state); for ``init``, those the run
    started with (``knobs_at_start.json``)."""
    if checkpoint_dir is not None:
        state = checkpoint.read_state(checkpoint_dir).get("knob_state") or {}
    else:
        path = Path(run_dir) / "knobs_at_start.json"
        state = json.loads(path.read_text()) if path.is_file() else {}
    return dict(state.get("values") or {})


def held_out_scores(eval_dir: Path, run_id: str, label: str) -> dict[str, Any]:
    """``{label: overall scores}`` of the run's stored evaluations of this checkpoint and of its
    starting policy (``init``), each as ``eau eval`` stored it; empty when none was made."""
    out: dict[str, Any] = {}
    for which in dict.fromkeys((INIT, label)):
        result = read_result(eval_dir, run_id, which)
        if result is not None:
            out[which] = {
                "protocol": result.get("protocol_name"),
                "overall": (result.get("overall") or {}).get("all"),
                "gyms": {
                    g: {k: s.get(k) for k in ("reward_mean", "success_rate", "episodes", "held_out") if k in s}
                    for g, s in (result.get("gyms") or {}).items()
                },
            }
    return out


def _fmt(v: Any) -> str:
    return f"{v:.3f}" if isinstance(v, float) else "-" if v is None else str(v)


def model_card(
    policy: RunPolicy, scores: Mapping[str, Any], knobs: Mapping[str, Any], base: str, merged_lora: bool
) -> str:
    """The folder's README.md: the Hub's card metadata (huggingface_hub's ModelCard writes the YAML
    front matter), then the run's provenance."""
    cfg = policy.config
    step = "the starting policy (before any PPO update)" if policy.step is None else f"step {policy.step}"
    lines = [
        f"# {policy.run_id} ({policy.label})",
        "",
        f"A policy trained with PPO by the EAU harness: run `{policy.run_id}` at {step} "
        f"(checkpoint `{policy.label}`), preset `{cfg.get('preset')}`, gyms {', '.join(cfg.get('gyms') or [])}, "
        f"rendering `{cfg.get('rendering')}`.",
        f"Base model: `{base}`" + (" with its LoRA adapters merged into the weights." if merged_lora else "."),
        "",
        "## Held-out scores",
        "",
    ]
    if scores:
        lines += [
            "| checkpoint | protocol | gym | held out | episodes | reward | success |",
            "|---|---|---|---|---|---|---|",
        ]
        for label, res in scores.items():
            for gym, s in res["gyms"].items():
                lines.append(
                    f"| {label} | {res['protocol']} | {gym} | {'yes' if s.get('held_out') else 'no'} | "
                    f"{_fmt(s.get('episodes'))} | {_fmt(s.get('reward_mean'))} | {_fmt(s.get('success_rate'))} |"
                )
            overall = res.get("overall") or {}
            lines.append(
                f"| {label} | {res['protocol']} | all (macro) | | | {_fmt(overall.get('reward_mean'))} | "
                f"{_fmt(overall.get('success_rate'))} |"
            )
    else:
        lines.append(f"None recorded: `eau eval --run {policy.run_id} --checkpoint {policy.label}` makes one.")
    lines += [
        "",
        "## Knobs in force at this checkpoint",
        "",
        "```json",
        json.dumps(knobs, indent=1, sort_keys=True, default=str),
        "```",
        "",
        "## Use",
        "",
        "```python",
        "from transformers import AutoModelForCausalLM, AutoTokenizer",
        'model = AutoModelForCausalLM.from_pretrained("PATH")',
        'tokenizer = AutoTokenizer.from_pretrained("PATH")',
        "```",
        "",
        "`vllm serve PATH` serves it behind an OpenAI-compatible endpoint.",
        "",
    ]
    data = ModelCardData(
        library_name="transformers", pipeline_tag="text-generation", tags=["eau", "ppo", "user-centric-agent"]
    )
    return str(ModelCard(f"---\n{data.to_yaml()}\n---\n\n" + "\n".join(lines)))  # the body is no template


def export_run(
    run_dir: Path, which: str | int | None, out: Path, eval_dir: Path, *, force: bool = False, log=lambda m: None
) -> dict[str, Any]:
    """Write the Hugging Face folder of ``run_dir``'s checkpoint ``which`` (None: the latest) to ``out``.
    FileExistsError when ``out`` holds anything and ``force`` is off. Returns what was written."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not force:
        raise FileExistsError(f"--out {out} exists and is not empty; choose another folder or pass --force")
    policy = load_run_policy(run_dir, which, device="cpu", log=log)
    lora = hasattr(policy.model, "merge_and_unload")
    model = merged_model(policy)
    ck = None if policy.label == INIT else checkpoint.ckpt_dir(run_dir, int(policy.step))
    knobs = knobs_at(ck, Path(run_dir))
    scores = held_out_scores(eval_dir, policy.run_id, policy.label)
    base = str((policy.config.get("policy") or {}).get("model", "tiny"))

    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        model.save_pretrained(tmp)  # safetensors: transformers' only format for new saves
        policy.tokenizer.save_pretrained(tmp)
        (tmp / CARD).write_text(model_card(policy, scores, knobs, base, lora), encoding="utf-8")
        if out.exists():
            shutil.rmtree(out) if out.is_dir() else out.unlink()
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return {
        "run_id": policy.run_id,
        "checkpoint": policy.label,
        "step": policy.step,
        "out": str(out),
        "base_model": base,
        "lora_merged": lora,
        "files": sorted(p.name for p in out.iterdir()),
        "held_out_scores": scores,
    }
