"""The ``scenario`` section of user rule files (the τ² customers): shipped files valid, errors
name the file, the field and the value."""

from __future__ import annotations

import copy

import pytest
import yaml

from harness.knobs.folder import defaults_dir
from harness.users.rules import RuleFileError, compile_user_rules, validate_rule_file

GYMS = ("tau2_airline", "tau2_retail", "tau2_telecom", "tau")


def rules_of(gym: str) -> dict:
    return yaml.safe_load((defaults_dir() / "rules" / "users" / f"{gym}.yaml").read_text())


@pytest.mark.parametrize("gym", GYMS)
def test_shipped_scenario_rules_are_valid(gym):
    validate_rule_file(rules_of(gym), gym=gym)
    sc = compile_user_rules(rules_of(gym), gym=gym).scenario
    assert sc is not None and sc.max_insist == 2 and sc.replies["confirm_yes"]
    assert bool(sc.user_tools) == (gym == "tau2_telecom")


def test_a_placeholder_a_template_does_not_allow_is_named():
    data = copy.deepcopy(rules_of("tau2_retail"))
    data["scenario"]["replies"]["confirm_yes"] = ["Yes to {request}"]
    with pytest.raises(RuleFileError, match=r"scenario\.replies\.confirm_yes\[0\].*\{request\}.*allowed here: none"):
        compile_user_rules(data, "x.yaml", gym="tau2_retail")


def test_a_bad_pattern_and_a_missing_field_are_named():
    data = copy.deepcopy(rules_of("tau2_telecom"))
    data["scenario"]["user_tools"][0]["patterns"] = ["(unclosed"]
    with pytest.raises(RuleFileError, match=r"scenario.*user_tools.*0.*patterns.*0.*not a valid regular expression"):
        compile_user_rules(data, "x.yaml", gym="tau2_telecom")
    del data["scenario"]["replies"]["remind"]
    with pytest.raises(RuleFileError, match="remind"):
        compile_user_rules(data, "x.yaml", gym="tau2_telecom")


def test_a_user_tool_the_domain_lacks_is_refused_when_the_gym_builds_its_user():
    from tau2_support import need_tau2

    need_tau2()
    from gyms_support import knobs

    from harness.envs.registry import make
    from harness.knobs.snapshot import KnobSnapshot

    base = knobs()
    data = copy.deepcopy(rules_of("tau2_telecom"))
    data["scenario"]["user_tools"].append({"tool": "launch_rocket", "patterns": ["rocket"]})
    rules = dict(base.user_rules)
    rules["tau2_telecom"] = data
    snap = KnobSnapshot(values=base.values, user_rules=rules, reward_rules=base.reward_rules)
    env = make("tau2_telecom", knobs=snap)
    with pytest.raises(RuleFileError, match=r"tau2_telecom\.yaml.*launch_rocket.*not user tools"):
        env.reset(seed=0, options={"task_index": 0})
