"""The knob store: one validation path, file writes that keep comments, events, history, revert, add."""

from __future__ import annotations

import json

import pytest

from harness.io import jsonl
from harness.knobs.store import KnobError, UnknownKnob
from harness.stores import open_store, validate_folder

GOOD_METRICS = [
    {
        "success_rate": 0.9,
        **{f"gym/{g}/success_rate": 0.9 for g in ("travel", "function", "telepathy", "intention", "colbench")},
    }
] * 5
EVENT_FIELDS = {
    "id",
    "time",
    "knob",
    "gym",
    "old",
    "new",
    "author",
    "reason",
    "status",
    "rule",
    "message",
    "step_written",
    "step_effective",
}


def test_set_accepted_writes_file_keeps_comments_and_logs(knobs_dir):
    store = open_store(knobs_dir)
    before = (knobs_dir / "agent.yaml").read_text()
    res = store.set("agent.entropy_coeff", 0.004, author="agent", reason="explore more", step_written=7)
    assert res.ok and store.get("agent.entropy_coeff") == 0.004
    after = (knobs_dir / "agent.yaml").read_text()
    assert "entropy_coeff: 0.004" in after
    # every comment line survives the write
    assert [x for x in before.splitlines() if x.startswith("#")] == [x for x in after.splitlines() if x.startswith("#")]
    ev = jsonl.read(knobs_dir / ".history" / "knob_events.jsonl")[-1]
    assert EVENT_FIELDS <= set(ev)
    assert (ev["knob"], ev["old"], ev["new"], ev["author"], ev["status"], ev["step_written"]) == (
        "agent.entropy_coeff",
        0.001,
        0.004,
        "agent",
        "accepted",
        7,
    )
    assert not list(knobs_dir.glob(".*.tmp"))  # atomic write left no temp file


@pytest.mark.parametrize(
    "name, value, gym, rule",
    [
        ("agent.entropy_coeff", 0.06, None, "range"),
        ("agent.entropy_coeff", "high", None, "type"),
        ("agent.entropy_coeff", 0.01, None, "max delta"),
        ("env.noise_choice_number", 5, "travel", "requires"),
        ("env.max_steps", 12, None, "requires"),
        ("env.max_repeated_probes", 4, "travel", "wrong gym"),
        ("user.persona", "pirate", None, "range"),
    ],
)
def test_refusals_name_the_rule_and_leave_the_file_untouched(knobs_dir, name, value, gym, rule):
    store = open_store(knobs_dir)
    area = name.split(".")[0]
    before = (knobs_dir / f"{area}.yaml").read_bytes()
    res = store.set(name, value, gym=gym, author="human", reason="test")
    assert not res.ok
    assert res.event["rule"] == rule and res.event["status"] == "rejected" and res.event["message"]
    assert (knobs_dir / f"{area}.yaml").read_bytes() == before
    assert jsonl.read(knobs_dir / ".history" / "knob_events.jsonl")[-1]["rule"] == rule


def test_unknown_knob(knobs_dir):
    with pytest.raises(UnknownKnob, match="unknown knob"):
        open_store(knobs_dir).set("agent.nope", 1, author="human", reason="x")


def test_requires_met_with_recent_success(knobs_dir):
    store = open_store(knobs_dir)
    res = store.set(
        "env.noise_choice_number", 5, gym="travel", author="agent", reason="harder", recent_metrics=GOOD_METRICS
    )
    assert res.ok
    assert store.get("env.noise_choice_number", "travel") == 5 and store.get("env.noise_choice_number") == 3


def test_run_scope_refuses_knob_of_no_run_gym(knobs_dir):
    store = open_store(knobs_dir, run_gyms=["travel"])
    res = store.set("reward.predicate_weight", 0.2, author="agent", reason="x")
    assert not res.ok and res.event["rule"] == "wrong gym"
    assert store.set("reward.default_scale", 1.2, author="agent", reason="x").ok


def test_per_gym_values_and_default(knobs_dir):
    store = open_store(knobs_dir)
    assert store.get("env.max_steps", "colbench") == 10 and store.get("env.max_steps", "travel") == 16
    store.set("env.human_response_char_limit", 800, gym="colbench", author="human", reason="x")
    store.set("env.human_response_char_limit", 500, author="human", reason="x")
    assert store.raw("env.human_response_char_limit") == {"default": 500, "colbench": 800}
    reread = open_store(knobs_dir)
    assert reread.get("env.human_response_char_limit", "colbench") == 800
    assert reread.get("env.human_response_char_limit", "travel") == 500


def test_history_and_revert(knobs_dir):
    store = open_store(knobs_dir)
    first = store.set("agent.kl_coef", 0.02, author="agent", reason="a").event
    store.set("agent.kl_coef", 0.05, author="agent", reason="b")
    res = store.revert(first["id"], author="human")
    assert res.ok and store.get("agent.kl_coef") == 0.001
    assert res.event["ref"] == first["id"] and res.event["source"] == "revert"
    assert open_store(knobs_dir).get("agent.kl_coef") == 0.001
    knobs = [e["knob"] for e in store.log.read()]
    assert knobs.count("agent.kl_coef") == 3
    with pytest.raises(KeyError):
        store.revert("k-doesnotexist")


def test_revert_skips_requires_but_not_range(knobs_dir):
    store = open_store(knobs_dir)
    ev = store.set("env.max_steps", 20, gym="travel", author="agent", reason="easier").event  # increase: not gated
    assert ev["status"] == "accepted"
    res = store.revert(ev["id"], author="agent", reason="undo")  # a decrease, normally gated by requires
    assert res.ok and store.get("env.max_steps", "travel") == 16


def test_refused_event_cannot_be_reverted(knobs_dir):
    store = open_store(knobs_dir)
    ev = store.set("agent.entropy_coeff", 0.5, author="agent", reason="x").event
    with pytest.raises(ValueError, match="rejected"):
        store.revert(ev["id"])


def test_add_knob(knobs_dir):
    store = open_store(knobs_dir)
    schema = {
        "description": "Warm-up steps before the learning rate reaches its value.",
        "x-hot": False,
        "x-gyms": ["*"],
        "type": "integer",
        "minimum": 0,
        "maximum": 1000,
        "x-max-delta": 100,
    }
    res = store.add_knob("agent", "warmup_steps", schema, 10, author="human", reason="new schedule")
    assert res.ok and store.get("agent.warmup_steps") == 10
    reread = open_store(knobs_dir)  # schema and value both on disk, valid
    assert reread.spec("agent.warmup_steps").hot is False
    # a non-hot knob: accepted for the next run, not in force now
    res = reread.set("agent.warmup_steps", 50, author="human", reason="x")
    assert res.ok and res.event["applies"] == "next_run" and reread.get("agent.warmup_steps") == 10
    bad = dict(schema)
    bad.pop("description")
    assert not store.add_knob("agent", "other", bad, 1, author="human", reason="x").ok
    assert store.add_knob("agent", "third", schema, 5000, author="human", reason="x").event["rule"] == "range"


def test_invalid_files_at_load_are_listed(knobs_dir):
    (knobs_dir / "env.yaml").write_text(
        (knobs_dir / "env.yaml").read_text().replace("max_steps:\n  default: 16", "max_steps:\n  default: 99")
    )
    (knobs_dir / "user.yaml").write_text("persona: [unclosed\n")
    with pytest.raises(KnobError) as info:
        open_store(knobs_dir)
    files = {p["file"].rsplit("/", 1)[-1]: p for p in info.value.problems}
    assert len(info.value.problems) == 2
    assert files["env.yaml"]["rule"] == "range" and files["env.yaml"]["line"] == 7
    assert files["user.yaml"]["rule"] == "syntax" and files["user.yaml"]["line"]
    assert validate_folder(knobs_dir) == info.value.problems


def test_snapshot_is_immutable_view(knobs_dir):
    store = open_store(knobs_dir)
    snap = store.snapshot()
    store.set("agent.lr", 2e-5, author="human", reason="x")
    assert snap.get("agent", "lr") == 1e-5 and store.snapshot().get("agent", "lr") == 2e-5
    assert store.snapshot().version > snap.version
    assert store.snapshot().area("env", "colbench")["max_steps"] == 10


def test_yaml_12_floats(knobs_dir):
    (knobs_dir / "agent.yaml").write_text((knobs_dir / "agent.yaml").read_text().replace("lr: 1.0e-5", "lr: 1e-5"))
    assert open_store(knobs_dir).get("agent.lr") == 1e-5


def test_events_in_force_document(knobs_dir):
    store = open_store(knobs_dir)
    doc = store.in_force_document()
    json.dumps(doc)
    assert doc["values"]["env"]["max_steps"] == {
        "default": 16,
        "colbench": 10,
        "tau": 30,
        "tau2_airline": 50,
        "tau2_retail": 50,
        "tau2_telecom": 50,
    }
