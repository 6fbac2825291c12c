"""benchmarks/gpu_check.py at its small sizes on CPU: every part runs and the JSON document has the
fields BENCHMARKS.md ("GPU check") lists, so a GPU session starts from a script that works."""

from __future__ import annotations

import json
import subprocess

from vllm_support import REPO, vllm_env, vllm_python


def test_the_gpu_check_runs_at_small_sizes_on_cpu(tmp_path):
    out = tmp_path / "check.json"
    proc = subprocess.run(
        [vllm_python(), "benchmarks/gpu_check.py", "--small", "--steps", "1", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=1800,
        cwd=REPO,
        env=vllm_env(),
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    doc = json.loads(out.read_text())
    assert doc == json.loads(proc.stdout)  # the same document on stdout and in --out
    assert doc["check"] == "gpu_check" and doc["small"] and doc["device"] == "cpu" and doc["ok"]
    assert doc["model"]["shape"] == "small" and doc["model"]["parameters"] > 0
    h = doc["harness"]
    assert len(h["steps"]) == 1
    step = h["steps"][0]
    assert step["time_weight_sync_s"] > 0 and step["weight_sync_logprob_diff"] <= 1e-3
    assert 0 < h["weight_sync_share"] < 1
    bare = h["rollout_vs_bare"]
    assert bare["ratio"] > 0 and bare["turns"] >= bare["episodes"] == 4
    assert bare["bare_generated_tokens"] == bare["generated_tokens"]  # the replay generated the same work
    trl = doc["trl"]
    assert len(trl["step_s"]) == 1 and trl["episodes"] == 4 and not trl["vllm"]
    server = doc["server"]
    assert server["transfer"] == "eau_tensors" and server["weight_sync_logprob_diff"] <= 1e-3
    assert server["generated_tokens"] > 0
    assert doc["harness_vs_trl_step_ratio"] > 0
    assert {"rollout_vs_bare_min", "time_limit_s"} <= doc["targets"].keys()
