"""The trainer benchmarks: every script answers --help, and the helpers that turn runs into numbers
compute what they claim (hand-computed cases)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))

import _common  # noqa: E402  (benchmarks/ is put on sys.path just above)
import bench_rollout  # noqa: E402
import bench_train_step  # noqa: E402


@pytest.mark.parametrize(
    "script", ["bench_rollout.py", "bench_train_step.py", "bench_vs_trl.py", "bench_hf_continuous_batching.py"]
)
def test_script_answers_help(script):
    out = subprocess.run(
        [sys.executable, str(BENCH / script), "--help"], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "--repeats" in out.stdout or "--steps" in out.stdout
    assert "--threads" in out.stdout


def test_alternate_flips_the_order_every_repeat():
    seen = []
    res = _common.alternate(
        {"a": lambda r: seen.append(("a", r)) or r * 10, "b": lambda r: seen.append(("b", r)) or r * 100}, repeats=3
    )
    assert seen == [("a", 0), ("b", 0), ("b", 1), ("a", 1), ("a", 2), ("b", 2)]
    assert res == {"a": [0, 10, 20], "b": [0, 100, 200]}
    with pytest.raises(ValueError, match="--repeats"):
        _common.alternate({"a": lambda r: r}, repeats=0)


def test_episode_specs_share_a_task_per_group_like_the_trainer():
    specs = bench_rollout.episode_specs(["intention", "travel"], tasks=3, samples=2, first_task=10)
    assert [s["gym"] for s in specs] == ["intention"] * 2 + ["travel"] * 2 + ["intention"] * 2
    assert [s["reset"]["options"]["task_index"] for s in specs] == [10, 10, 11, 11, 12, 12]
    assert [s["reset"]["seed"] for s in specs] == [310, 311, 341, 342, 372, 373]
    assert specs[2]["group"] == "travel/train/11" and specs[3]["sample"] == 1


def test_call_profile_counts_wasted_decode_slots():
    calls = [
        {"rows": 4, "width": 100, "budget": 10, "kept": 20, "steps": 10, "s": 1.0},
        {"rows": 2, "width": 150, "budget": 10, "kept": 10, "steps": 10, "s": 0.5},
    ]
    prof = bench_rollout.call_profile(calls)
    assert prof["row_step_slots"] == 60 and prof["tokens_kept"] == 30
    assert prof["kept_fraction_of_slots"] == 0.5 and prof["prefill_tokens"] == 700


def test_analyse_reports_the_median_harness_share_and_the_unattributed_rest():
    lines = [
        {
            "time_step_s": 10.0,
            "time_rollout_s": 6.0,
            "time_update_s": 3.8,
            "time_harness_s": 0.1,
            "time_generate_s": 5.0,
            "time_env_s": 0.5,
        },
        {
            "time_step_s": 20.0,
            "time_rollout_s": 15.0,
            "time_update_s": 4.5,
            "time_harness_s": 0.4,
            "time_generate_s": 14.0,
            "time_env_s": 0.5,
        },
        {
            "time_step_s": 10.0,
            "time_rollout_s": 5.0,
            "time_update_s": 4.6,
            "time_harness_s": 0.3,
            "time_generate_s": 4.0,
            "time_env_s": 0.5,
        },
    ]
    res = bench_train_step.analyse(
        {
            "metrics": lines,
            "trajectory_bytes_per_step": [1, 2, 3],
            "wall_first_metrics_s": 1.0,
            "wall_total_s": 2.0,
            "command": "x",
        }
    )
    assert res["harness_share"]["values"] == [0.01, 0.02, 0.03] and res["harness_share"]["median"] == 0.02
    assert res["breakdown_median_s"]["unattributed"] == pytest.approx(0.1)
    assert res["time_step_s"]["median"] == 10.0 and res["time_step_s_excluding_step0"] == 15.0
    assert res["harness_plus_unattributed_share"] == pytest.approx(0.025)
    assert res["per_step"]["time_update_s"] == [3.8, 4.5, 4.6]


def test_versus_pools_steps_after_the_first_and_reports_ratios():
    def run(updates):
        return {
            "per_step": {
                "time_update_s": updates,
                "time_step_s": [u + 1 for u in updates],
                "time_rollout_s": [1.0] * len(updates),
            }
        }

    res = bench_train_step.compare([run([9.0, 4.0, 6.0]), run([9.0, 5.0])], [run([9.0, 2.0, 3.0]), run([1.0, 2.5])])
    assert res["time_update_s"] == {"plain": 5.0, "versus": 2.5, "ratio_versus_over_plain": 0.5}
    assert res["time_step_s"]["ratio_versus_over_plain"] == pytest.approx(3.5 / 6.0, abs=1e-3)
    assert res["time_rollout_s"]["ratio_versus_over_plain"] == 1.0


def test_warm_start_refuses_a_cache_of_another_config(tmp_path):
    (tmp_path / "policy.pt").write_bytes(b"")
    (tmp_path / "sft.json").write_text(
        json.dumps(
            {"config": {"rendering": "tagged", "epochs": 2, "policy": {"model": "tiny"}, "max_episode_tokens": 1024}}
        )
    )
    with pytest.raises(ValueError, match="not"):
        _common.warm_start("tagged", None, epochs=10, directory=tmp_path)
    hit = _common.warm_start("tagged", None, epochs=2, directory=tmp_path)
    assert hit["cached"] and hit["dir"] == str(tmp_path)


def test_bench_knobs_override_only_max_steps():
    from harness.knobs.folder import defaults_dir
    from harness.knobs.snapshot import KnobSnapshot

    snap = _common.bench_knobs(4)
    repo = KnobSnapshot.read_dir(defaults_dir())
    assert snap.get("env", "max_steps", "travel") == 4 and snap.get("env", "max_steps", "colbench") == 4
    assert snap.area("user", "travel") == repo.area("user", "travel")
    assert snap.area("agent") == repo.area("agent")


def test_rollout_benchmark_runs_the_sides_it_is_asked_for_and_reports_only_those():
    """A real (tiny, untrained) run of the script with the diagnostics skipped, as the cpu-gemma
    measurement runs it: the JSON holds the batched-vs-one-by-one block and no block of a skipped side."""
    out = subprocess.run(
        [
            sys.executable,
            str(BENCH / "bench_rollout.py"),
            "--policy",
            "random",
            "--tasks",
            "2",
            "--samples",
            "2",
            "--repeats",
            "1",
            "--max-steps",
            "2",
            "--turn-tokens",
            "4",
            "--skip-raw",
            "--skip-per-turn",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    res = json.loads(out.stdout)
    assert not {"engine_vs_raw_generate", "continuous_vs_per_turn", "cache_reuse"} & set(res)
    seq = res["batched_vs_sequential"]
    assert res["setup"]["episodes"] == 4 and seq["sequential_tokens"] == res["engine_generated_tokens_per_repeat"]
    assert seq["speedup_wall"] > 0 and len(seq["speedup_wall_per_repeat"]) == 1
