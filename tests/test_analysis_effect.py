"""``eau effect``: windows around real knob events of built runs, the bootstrap noise floor, verdicts."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from analysis_runs import CONTROL_SEARCH_FIRST, EFFECT_HARM, cached_run

from harness.analysis.effect import EffectError, effect, metric_direction
from harness.analysis.run_data import load_run_dir
from harness.analysis.stats import bootstrap_noise_floor
from harness.stores import open_store


@pytest.fixture(scope="module")
def harm():
    run = load_run_dir(cached_run(EFFECT_HARM))
    ev = next(e for e in run.knob_events if e["knob"] == "user.max_reveals" and e["status"] == "accepted")
    return run, ev


def test_harmful_change_is_harmed_on_its_gym(harm):
    run, ev = harm
    doc = effect(run, event_id=ev["id"], window=6)
    assert doc["metric"] == "gym/intention/success_rate"  # the event set intention's value: its gym's metric
    assert doc["pre"]["steps"] == [0, 1, 2, 3, 4, 5] and doc["post"]["steps"] == [6, 7, 8, 9, 10, 11]
    series = dict(run.series("gym/intention/success_rate"))
    assert doc["pre"]["mean"] == pytest.approx(np.mean([series[s] for s in range(6)]))
    assert doc["difference"] == pytest.approx(doc["post"]["mean"] - doc["pre"]["mean"], abs=1e-6)
    assert doc["verdict"] == "harmed" and doc["difference"] < -doc["noise_floor"] < 0
    assert doc["bootstrap"] == {"iterations": 2000, "quantile": 0.95, "seed": 0, "resampled_from": "pre-window"}


def test_direction_aware_verdicts(harm):
    run, ev = harm
    # fewer questions after the change: "changed" without a better direction, "improved" if lower is better
    plain = effect(run, event_id=ev["id"], metric="gym/intention/questions_mean", window=6)
    assert plain["direction"] == "none" and plain["verdict"] == "changed" and plain["difference"] < 0
    lower = effect(run, event_id=ev["id"], metric="gym/intention/questions_mean", window=6, direction="lower")
    higher = effect(run, event_id=ev["id"], metric="gym/intention/questions_mean", window=6, direction="higher")
    assert (lower["verdict"], higher["verdict"]) == ("improved", "harmed")
    assert metric_direction("deadlock_rate") == "lower" and metric_direction("gym/travel/format_error_rate") == "lower"
    assert metric_direction("arm/llm/success_rate") == "higher" and metric_direction("entropy") is None


def test_no_change_is_inconclusive():
    run = load_run_dir(cached_run(CONTROL_SEARCH_FIRST))
    doc = effect(run, at_step=6, metric="success_rate", window=6)
    assert doc["event"] is None and doc["verdict"] == "inconclusive"
    assert abs(doc["difference"]) <= doc["noise_floor"]


def test_not_enough_data_says_how_many_steps_are_missing(harm):
    run, ev = harm
    doc = effect(run, event_id=ev["id"], window=8)
    assert doc["state"] == doc["verdict"] == "not_enough_data"
    assert doc["missing"] == {"pre": 2, "post": 2} and doc["difference"] is None
    lagged = effect(run, event_id=ev["id"], window=6, lag=3)
    assert lagged["post"]["steps"] == [9, 10, 11] and lagged["missing"] == {"pre": 0, "post": 3}


def test_lag_shifts_the_post_window(harm):
    run, ev = harm
    doc = effect(run, event_id=ev["id"], window=4, lag=2)
    assert doc["pre"]["steps"] == [2, 3, 4, 5] and doc["post"]["steps"] == [8, 9, 10, 11]


def test_unknown_rejected_and_unapplied_events(harm, tmp_path):
    run, _ = harm
    with pytest.raises(KeyError, match="k-missing"):
        effect(run, event_id="k-missing")
    # a real refused write logged into a copy of the run's event log
    copy = tmp_path / "run"
    shutil.copytree(run.dir, copy)
    store = open_store(copy / "knobs", events_path=copy / "knob_events.jsonl")
    res = store.set("env.max_steps", 100, reason="too far", author="agent")
    assert not res.ok
    with pytest.raises(EffectError, match="rejected"):
        effect(load_run_dir(copy), event_id=res.event["id"])
    with pytest.raises(EffectError):
        effect(run)  # neither --event nor --at-step
    with pytest.raises(KeyError, match="not in"):
        effect(run, at_step=6, metric="no_such_metric")


def test_bootstrap_noise_floor_is_seeded_and_scales_with_noise():
    rng = np.random.default_rng(1)
    quiet = list(0.5 + 0.01 * rng.standard_normal(10))
    loud = list(0.5 + 0.2 * rng.standard_normal(10))
    assert bootstrap_noise_floor(quiet, 10, seed=3) == bootstrap_noise_floor(quiet, 10, seed=3)
    assert bootstrap_noise_floor([0.4] * 10, 10) == 0.0
    assert bootstrap_noise_floor(loud, 10) > 5 * bootstrap_noise_floor(quiet, 10)
    # larger windows average more: a smaller floor for the same spread
    assert bootstrap_noise_floor(loud, 40) < bootstrap_noise_floor(loud, 5)
