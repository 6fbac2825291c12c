"""The autopilot reverts a harmful change on a live run with ``eau knobs revert``: the run must apply
that revert at its step boundary even when it makes a gym harder (a revert restores a value that was
in force before, so x-requires does not apply to it, on the CLI path or at the run's poll), while any
other write that makes a gym harder is still refused there."""

from __future__ import annotations

from harness.knobs.store import KnobStore
from harness.stores import open_store

LOW = [{"step": s, "success_rate": 0.0, "gym/intention/success_rate": 0.0} for s in range(10)]


def live_store(knobs_dir, tmp_path) -> KnobStore:
    store = open_store(knobs_dir, events_path=tmp_path / "knob_events.jsonl", run_gyms=["intention"], debounce_s=0.0)
    store.live_run = True
    return store


def test_live_revert_of_an_easing_change_is_applied_at_the_boundary(knobs_dir, tmp_path):
    store = live_store(knobs_dir, tmp_path)
    before = store.get("env.max_steps", "intention")
    res = store.set(
        "env.max_steps",
        before + 2,
        author="agent",
        reason="autopilot: deadlock",
        recent_metrics=LOW,
        step_written=3,
        for_run="live",
    )
    assert res.ok and res.pending
    poll = store.poll(4, LOW, rescan=True, wait_debounce=False)
    (ev,) = poll.applied
    assert ev["new"] == before + 2 and ev["step_effective"] == 4
    # harmed: revert while success is 0 (lowering max_steps "requires" success >= 0.8)
    rev = store.revert(
        ev["id"], author="agent", reason="autopilot: harmed", recent_metrics=LOW, step_written=6, for_run="live"
    )
    assert rev.ok and rev.pending
    poll = store.poll(7, LOW, rescan=True, wait_debounce=False)
    assert poll.refused == []
    (back,) = poll.applied
    assert (back["new"], back["source"], back["ref"], back["author"], back["step_effective"]) == (
        before,
        "revert",
        ev["id"],
        "agent",
        7,
    )
    assert store.get("env.max_steps", "intention") == before


def test_other_harder_writes_are_still_refused_at_the_boundary(knobs_dir, tmp_path):
    store = live_store(knobs_dir, tmp_path)
    before = store.get("env.max_steps", "intention")
    res = store.set(
        "env.max_steps",
        before - 2,
        author="agent",
        reason="make it harder",
        recent_metrics=[],
        step_written=3,
        for_run="live",
        skip_requires=True,
    )  # past the CLI's check ...
    assert res.ok and res.pending
    poll = store.poll(4, LOW, rescan=True, wait_debounce=False)  # ... the run still checks x-requires
    assert poll.applied == [] and poll.refused[0]["rule"] == "requires"
    assert store.get("env.max_steps", "intention") == before
