"""The autopilot's intervention table and the arithmetic of one knob step (no processes)."""

from __future__ import annotations

import pytest
import yaml

from harness.analysis.diagnose import detector_names
from harness.supervise.autopilot import change_direction, cli_value
from harness.supervise.interventions import (
    TABLE_PATH,
    Intervention,
    TableError,
    check_detectors,
    load_table,
    next_value,
)


def test_packaged_table_is_valid_and_names_real_detectors_and_knobs(knobs_dir):
    from harness.stores import open_store

    table = load_table()
    check_detectors(table, detector_names(), str(TABLE_PATH))
    store = open_store(knobs_dir, events_path=None)
    for e in table:
        assert e.predicted and e.why and e.window >= 2
        if e.action != "knob":
            assert e.action in ("restore_user_rules", "disable_dominant_rule") and not e.knob
            continue
        spec = store.spec(e.knob)  # raises for an unknown knob
        assert spec.schema.get("type") in ("integer", "number"), e.knob
    covered = {e.detector for e in table}
    assert {"deadlock", "user_leakage", "entropy_collapse", "question_rate_drop"} <= covered
    assert "arm_disparity" not in covered  # documented: the mix must not be moved to hide a weak arm
    max_steps = next(e for e in table if e.knob == "env.max_steps")
    assert dict(max_steps.guards) == {"success_rate": "higher", "token_truncation_rate": "lower"}


def _write(tmp_path, entries):
    p = tmp_path / "t.yaml"
    p.write_text(yaml.safe_dump({"interventions": entries}))
    return p


BASE = {
    "detector": "deadlock",
    "knob": "env.max_steps",
    "direction": "raise",
    "step": {"delta": 2},
    "metric": "deadlock_rate",
    "better": "lower",
    "predicted": "fewer deadlocks",
}


@pytest.mark.parametrize(
    "change, msg",
    [
        ({"knob": "max_steps"}, "must be <area>.<name>"),
        ({"direction": "up"}, "direction 'up' is not allowed"),
        ({"step": {"delta": -1}}, "delta must be positive"),
        ({"step": {"factor": 0.5}}, "factor must be > 1"),
        ({"step": {"by": 1}}, "step must be {delta: D} or {factor: F}"),
        ({"better": "more"}, "better 'more' is not allowed"),
        ({"guards": {"success_rate": "up"}}, "guards.success_rate 'up' is not allowed"),
        ({"guards": ["success_rate"]}, "guards must be a mapping metric: higher|lower"),
        ({"lag": -1}, "lag must be an integer >= 0"),
        ({"window": 1}, "window must be an integer >= 2"),
        ({"colour": "red"}, "unknown field(s) colour"),
        ({"predicted": ""}, "field 'predicted' is required"),
    ],
)
def test_bad_entries_are_named(tmp_path, change, msg):
    p = _write(tmp_path, [BASE, {**BASE, **change}])
    with pytest.raises(TableError) as e:
        load_table(p)
    assert f"{p}: interventions[1]" in str(e.value) and msg in str(e.value)


def test_bad_files_and_unknown_detectors(tmp_path):
    with pytest.raises(TableError, match="no such intervention table"):
        load_table(tmp_path / "none.yaml")
    (tmp_path / "x.yaml").write_text("interventions: {")
    with pytest.raises(TableError, match="not valid YAML"):
        load_table(tmp_path / "x.yaml")
    (tmp_path / "y.yaml").write_text("- a\n")
    with pytest.raises(TableError, match="'interventions' list"):
        load_table(tmp_path / "y.yaml")
    table = load_table(_write(tmp_path, [{**BASE, "detector": "gremlins"}]))
    with pytest.raises(TableError, match="unknown detector.*gremlins; detectors: deadlock"):
        check_detectors(table, detector_names(), "t.yaml")


def entry(**kw) -> Intervention:
    base = dict(
        detector="d",
        knob="env.max_steps",
        direction="raise",
        delta=2.0,
        factor=None,
        metric="m",
        better="lower",
        predicted="p",
    )
    return Intervention(**{**base, **kw})


INT = {"schema": {"type": "integer", "minimum": 3, "maximum": 60}, "max_delta": 8, "allowed": "integer in [3, 60]"}
LR = {"schema": {"type": "number", "exclusiveMinimum": 0, "maximum": 0.01}, "max_factor": 10, "allowed": "(0, 0.01]"}


def test_next_value_steps_clips_and_refuses():
    assert next_value(entry(), 3, INT) == (5, None)
    assert next_value(entry(), 59, INT) == (60, None)  # clipped to the maximum
    new, why = next_value(entry(), 60, INT)
    assert new is None and "already at its limit" in why
    assert next_value(entry(direction="lower", delta=20.0), 30, INT) == (22, None)  # x-max-delta 8
    assert next_value(entry(direction="lower", delta=0.4), 10, INT) == (9, None)  # an integer step always moves
    assert next_value(entry(knob="agent.lr", direction="lower", delta=None, factor=2.0), 0.001, LR) == (0.0005, None)
    assert next_value(entry(knob="agent.lr", direction="raise", delta=None, factor=100.0), 0.0005, LR) == (0.005, None)
    # x-max-factor 10 bounds even a huge step; without it, the exclusive minimum 0 leaves no room
    assert next_value(entry(knob="agent.lr", direction="lower", delta=1.0), 0.001, LR) == (0.0001, None)
    new, why = next_value(entry(knob="agent.lr", direction="lower", delta=1.0), 0.001, {**LR, "max_factor": None})
    assert new is None and "at its limit" in why
    assert next_value(entry(delta=None, factor=2.0), 0, INT)[1].endswith("a factor cannot move it")
    assert "not a number" in next_value(entry(), "neutral", INT)[1]
    assert "not a number" in next_value(entry(), True, INT)[1]


def test_cli_value_and_change_direction():
    assert cli_value(5) == "5" and cli_value(0.0005) == "0.0005" and cli_value(1e-05) == "0.00001"
    assert cli_value(2.0) == "2.0" and cli_value(0.1) == "0.1" and cli_value(1e-13) == "0.0000000000001"
    assert change_direction({"tags": ["autopilot", "lower"], "change": "3 -> 5"}) == "lower"  # the tag wins
    assert change_direction({"change": "10 -> 6 (colbench)"}) == "lower"
    assert change_direction({"change": "0.001 -> 0.004"}) == "raise"
    assert change_direction({"change": "reveal filter shape"}) is None


def test_rule_file_actions_and_when_conditions(tmp_path):
    """A rule-file action takes no knob fields; ``when`` conditions are checked per gym on the
    finding's metrics, and a path the finding lacks fails the condition."""
    from harness.supervise.interventions import when_holds

    rule = {k: v for k, v in BASE.items() if k not in ("knob", "direction", "step")}
    [e] = load_table(_write(tmp_path, [{**rule, "action": "restore_user_rules", "repair": True}]))
    assert (e.action, e.knob, e.repair) == ("restore_user_rules", "", True)
    with pytest.raises(TableError, match=r"action restore_user_rules changes a rule file; drop direction, knob, step"):
        load_table(_write(tmp_path, [{**BASE, "action": "restore_user_rules"}]))
    with pytest.raises(TableError, match=r"action 'rewrite' is not allowed"):
        load_table(_write(tmp_path, [{**rule, "action": "rewrite"}]))
    with pytest.raises(TableError, match=r"field 'knob' is required for a knob action"):
        load_table(_write(tmp_path, [rule]))
    with pytest.raises(TableError, match=r"repair must be true or false"):
        load_table(_write(tmp_path, [{**BASE, "repair": "yes"}]))
    with pytest.raises(TableError, match=r"when\[0\].op '=' is not allowed"):
        load_table(_write(tmp_path, [{**BASE, "when": [{"metric": "a", "op": "=", "value": 1}]}]))
    with pytest.raises(TableError, match=r"when\[0\] must have exactly metric, op and value"):
        load_table(_write(tmp_path, [{**BASE, "when": [{"metric": "a", "op": ">="}]}]))
    cond = [
        {"metric": "per_gym.{gym}.answered", "op": ">=", "value": 0.5},
        {"metric": "per_gym.{gym}.disclosed", "op": "<", "value": 2},
    ]
    [w] = load_table(_write(tmp_path, [{**BASE, "when": cond}]))
    metrics = {"per_gym": {"intention": {"answered": 0.9, "disclosed": 1.0}, "travel": {"answered": 0.2}}}
    assert when_holds(w, metrics, "intention") == (True, None)
    ok, why = when_holds(w, metrics, "travel")
    assert not ok and why == "per_gym.{gym}.answered = 0.2, needed >= 0.5"
    ok, why = when_holds(w, {"per_gym": {"colbench": {"answered": 1.0}}}, "colbench")
    assert not ok and "per_gym.{gym}.disclosed is not in the finding" in why
