"""Knob schemas: every knob documented, harness keywords meta-validated, values and writes checked."""

from __future__ import annotations

import copy
import json

import pytest

from harness.knobs.checks import check_change, check_delta, check_requires, check_scope
from harness.knobs.folder import defaults_dir
from harness.knobs.schema import (
    RULE_DELTA,
    RULE_GYM,
    RULE_RANGE,
    RULE_REQUIRES,
    RULE_TYPE,
    SchemaProblem,
    load_schemas,
    parse_area_schema,
    validate_value,
)


@pytest.fixture(scope="module")
def schemas():
    return load_schemas(defaults_dir())


def test_every_knob_is_documented(schemas):
    names = set()
    for area in schemas.values():
        for spec in area.knobs.values():
            names.add(spec.full_name)
            assert len(spec.description) > 20, spec.full_name
            assert spec.gyms and isinstance(spec.hot, bool)
            assert spec.allowed_text()
    # the catalogue the issue asks for
    for need in [
        "env.max_steps",
        "env.min_questions",
        "env.human_response_char_limit",
        "env.search_failure_interval",
        "env.elicitation_interval",
        "env.noise_choice_number",
        "env.wrong_choice_number",
        "env.success_threshold",
        "env.max_repeated_probes",
        "user.user_strategy_mix",
        "user.facts_per_reply",
        "user.match_threshold",
        "user.volunteer_interval",
        "user.max_reveals",
        "user.reveal_kinds",
        "user.temperature",
        "user.persona",
        "reward.default_scale",
        "reward.per_gym_scale",
        "reward.turn_reward_clip",
        "reward.predicate_weight",
        "agent.entropy_coeff",
        "agent.kl_coef",
        "agent.lr",
        "agent.clip_ratio",
        "agent.value_clip",
        "agent.ppo_epochs",
        "agent.mini_batch_size",
        "agent.temperature",
        "agent.gamma",
        "agent.lam",
    ]:
        assert need in names, need


def test_issue_ranges(schemas):
    env, user, reward, agent = (schemas[a].knobs for a in ("env", "user", "reward", "agent"))
    assert (env["max_steps"].schema["minimum"], env["max_steps"].schema["maximum"]) == (3, 60)
    assert (env["min_questions"].schema["minimum"], env["min_questions"].schema["maximum"]) == (0, 3)
    assert (user["facts_per_reply"].schema["minimum"], user["facts_per_reply"].schema["maximum"]) == (1, 3)
    assert len(user["persona"].schema["enum"]) <= 8
    assert (agent["entropy_coeff"].schema["maximum"], agent["entropy_coeff"].max_delta) == (0.05, 0.004)
    assert reward["predicate_weight"].gyms == ["function"]
    assert any(r["when"] == "decrease" for r in env["max_steps"].requires)
    assert any(r["when"] == "increase" for r in env["noise_choice_number"].requires)


def _area(props):
    return {"type": "object", "properties": props}


GOOD = {
    "description": "a documented knob",
    "x-hot": True,
    "x-gyms": ["*"],
    "type": "integer",
    "minimum": 0,
    "maximum": 5,
}


@pytest.mark.parametrize(
    "mutate, words",
    [
        (lambda p: p.pop("description"), "description"),
        (lambda p: p.pop("x-hot"), "x-hot"),
        (lambda p: p.update({"x-gyms": "travel"}), "x-gyms"),
        (lambda p: p.update({"x-gyms": ["Bad Name"]}), "x-gyms"),
        (lambda p: p.update({"x-speed": 3}), "unknown harness keyword"),
        (lambda p: p.update({"x-max-delta": -1}), "x-max-delta"),
        (lambda p: p.update({"x-max-factor": 1}), "x-max-factor"),
        (
            lambda p: p.update({"x-requires": [{"when": "sometimes", "metric": "m", "op": ">=", "value": 1}]}),
            "x-requires",
        ),
        (lambda p: p.update({"x-requires": [{"metric": "m"}]}), "x-requires"),
        (lambda p: p.update({"x-check": "sorted"}), "x-check"),
        (lambda p: p.update({"minimum": "zero"}), "invalid JSON Schema"),
        (lambda p: (p.pop("type"),), "type or an enum"),
    ],
)
def test_meta_validation_rejects(tmp_path, mutate, words):
    prop = copy.deepcopy(GOOD)
    mutate(prop)
    with pytest.raises(SchemaProblem, match=words):
        parse_area_schema("env", tmp_path / "env.schema.json", _area({"k": prop}))


def _spec(**extra):
    return parse_area_schema("env", None, _area({"k": {**GOOD, **extra}})).knobs["k"]


def test_validate_value_scalar_and_per_gym():
    spec = _spec(**{"x-gyms": ["travel", "function"]})
    assert validate_value(spec, 3) is None
    assert validate_value(spec, {"default": 3, "travel": 5}) is None
    assert validate_value(spec, 9).rule == RULE_RANGE
    assert validate_value(spec, "3").rule == RULE_TYPE
    assert validate_value(spec, True).rule == RULE_TYPE
    assert validate_value(spec, {"travel": 5}).rule == RULE_RANGE  # needs a default
    r = validate_value(spec, {"default": 3, "colbench": 5})
    assert r.rule == RULE_GYM and "colbench" in r.message
    assert validate_value(spec, {"default": 3, "travel": 7}).rule == RULE_RANGE


def test_a_knob_of_every_gym_refuses_a_key_that_names_no_gym():
    spec = _spec(**{"x-gyms": ["*"]})
    assert validate_value(spec, {"default": 3, "intention": 5}) is None
    r = validate_value(spec, {"default": 3, "intnetion": 5})  # a typo would change nothing, silently
    assert r.rule == RULE_GYM and "'intnetion' names no gym" in r.message and "intention" in r.message


def test_x_check_increasing():
    spec = parse_area_schema(
        "reward",
        None,
        _area(
            {
                "clip": {
                    "description": "bounds",
                    "x-hot": True,
                    "x-gyms": ["*"],
                    "type": "array",
                    "x-check": "increasing",
                    "items": {"type": "number", "minimum": -1, "maximum": 2},
                    "minItems": 2,
                    "maxItems": 2,
                }
            }
        ),
    ).knobs["clip"]
    assert validate_value(spec, [-1, 2]) is None
    assert "increasing" in validate_value(spec, [1, 0.5]).message
    assert validate_value(spec, [-3, 2]).rule == RULE_RANGE


def test_x_max_delta_and_factor():
    spec = _spec(**{"x-max-delta": 2})
    assert check_delta(spec, 1, 3) is None
    assert check_delta(spec, 1, 4).rule == RULE_DELTA
    lr = parse_area_schema(
        "agent",
        None,
        _area(
            {
                "lr": {
                    "description": "learning rate",
                    "x-hot": True,
                    "x-gyms": ["*"],
                    "type": "number",
                    "x-max-factor": 10,
                }
            }
        ),
    ).knobs["lr"]
    assert check_delta(lr, 1e-5, 1e-4) is None
    r = check_delta(lr, 1e-5, 2e-4)
    assert r.rule == RULE_DELTA and "factor" in r.message


def test_x_requires_directions_and_windows():
    req = [{"when": "increase", "metric": "success_rate", "per_gym": True, "op": ">=", "value": 0.8, "window": 3}]
    spec = _spec(**{"x-requires": req, "x-gyms": ["travel", "function"]})
    good = [{"gym/travel/success_rate": 0.9}] * 3
    assert check_requires(spec, 1, 2, ["travel"], good) is None
    assert check_requires(spec, 2, 1, ["travel"], []) is None  # decrease: not gated
    r = check_requires(spec, 1, 2, ["travel"], good[:2])
    assert r.rule == RULE_REQUIRES and "only 2" in r.message
    r = check_requires(spec, 1, 2, ["travel"], [{"gym/travel/success_rate": 0.5}] * 3)
    assert r.rule == RULE_REQUIRES and "0.500" in r.message
    # a global write is gated on every gym it affects
    r = check_requires(spec, 1, 2, ["travel", "function"], good)
    assert r.rule == RULE_REQUIRES and "function" in r.message
    # the mean over the window decides, older lines do not count
    mixed = [{"gym/travel/success_rate": 0.0}] * 5 + [{"gym/travel/success_rate": 0.85}] * 3
    assert check_requires(spec, 1, 2, ["travel"], mixed) is None


def test_x_gyms_scope():
    spec = _spec(**{"x-gyms": ["function"]})
    assert check_scope(spec, "travel", None).rule == RULE_GYM
    assert check_scope(spec, None, ["travel", "colbench"]).rule == RULE_GYM  # governs no gym of the run
    assert check_scope(spec, None, ["function"]) is None
    assert check_scope(spec, "function", ["travel"]).rule == RULE_GYM  # gym not in the run
    assert check_change(spec, None, 1, 2, recent_metrics=[], run_gyms=["travel"]).rule == RULE_GYM


def test_packaged_schemas_are_valid_json_schema_files():
    from jsonschema import Draft202012Validator

    paths = sorted((defaults_dir() / "schema").glob("*.json"))
    assert len(paths) == 6
    for path in paths:
        Draft202012Validator.check_schema(json.loads(path.read_text()))  # raises SchemaError naming the problem
    bad = {"type": "object", "properties": {"x": {"type": "numbr"}}}
    with pytest.raises(Exception, match="numbr"):
        Draft202012Validator.check_schema(bad)


def test_the_typed_agent_knobs_are_the_agent_schema(schemas):
    """harness.ppo.hyperparams.AgentKnobs: one field per agent knob, typed as its schema says; the
    default values come from the packaged agent.yaml only."""
    from dataclasses import fields

    from harness.knobs.snapshot import KnobSnapshot
    from harness.ppo.hyperparams import AgentKnobs

    specs = schemas["agent"].knobs
    assert [f.name for f in fields(AgentKnobs)] == list(specs)
    json_type = {"number": "float", "integer": "int", "boolean": "bool", "string": "str"}
    for f in fields(AgentKnobs):
        assert json_type[specs[f.name].schema.get("type", "string")] == f.type, f.name
    k = AgentKnobs.from_snapshot(KnobSnapshot.read_dir(defaults_dir()))
    assert (k.lr, k.ppo_epochs, k.kl_estimator, k.whiten_advantages) == (1e-5, 2, "k3", True)
    assert isinstance(k.max_grad_norm, float) and isinstance(k.mini_batch_size, int)
