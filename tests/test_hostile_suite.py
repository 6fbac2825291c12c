"""Hostile programs (benchmarks/hostile_programs.py) against the scorer, the gym API, ``eau tasks
check`` and the sandbox's file system and lifetime. The fast part runs a subset; the whole set,
and a real tiny training run whose answers are hostile programs, are slow-marked (and
``benchmarks/bench_hostile_programs.py`` prints their figures)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))

import bench_hostile_programs as bench  # noqa: E402  (benchmarks/ is put on sys.path just above)
import hostile_programs as hp  # noqa: E402

from harness.envs.colbench import ColbenchEnv  # noqa: E402
from harness.knobs.folder import defaults_dir  # noqa: E402
from harness.rollout.chat import ChatFormat  # noqa: E402
from harness.rollout.engine import RolloutEngine  # noqa: E402
from harness.runs.writer import RunWriter  # noqa: E402
from harness.sandbox import OK, Limits, isolation_report, run_source  # noqa: E402
from harness.sandbox.values import render, values_equal, well_formed  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
KERNEL = isolation_report().get("mode") == "kernel"
kernel_only = pytest.mark.skipif(not KERNEL, reason="kernel isolation unavailable here (needs root and namespaces)")
FAST = Limits(call_time=1.0, module_time=2.0, total_time=8.0)

# Quick ones from every family (none of them waits for a timeout), for the default test run.
FAST_SUBSET = (
    "fs_exact_path",
    "fs_parent_dir",
    "fs_glob_tmp",
    "fs_proc_root",
    "fs_proc_1_root",
    "fs_import_checkout",
    "fs_read_checkout_source",
    "fs_import_harness_from_site",
    "fs_symlink_escape",
    "fs_mount_proc_again",
    "frames_getframe_locals",
    "frames_gc_objects",
    "frames_modules_scan",
    "lying_eq_always_true",
    "lying_int_eq_true",
    "lying_hash_raises",
    "lying_exception_str_raises",
    "lying_decimal_named",
    "lying_in_container",
    "value_decimal_nan_key",
    "value_decimal_neg_inf_member",
    "value_big_int_7_6000",
    "value_decimal_1e300000",
    "value_mixed_numeric_keys",
    "value_self_reference",
    "resource_forge_results",
    "resource_os_exit",
    "signal_kill_parent",
    "signal_kill_all",
)


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    """The task file the cheats look for, in /tmp as a careless setup would leave it."""
    folder = Path(tmp_path_factory.mktemp("hostile"))
    data = hp.write_task_file(Path("/tmp") / f"eau-hostile-data-{os.getpid()}" / "tasks.jsonl")
    yield SimpleNamespace(folder=folder, data=data, programs={p.name: p for p in hp.programs(str(data), str(REPO))})
    data.unlink()
    data.parent.rmdir()


def test_the_set_has_at_least_100_programs_of_every_family(suite):
    fams = {p.family for p in suite.programs.values()}
    assert len(suite.programs) >= 100
    assert fams == {
        "file_system",
        "stack_frames",
        "lying_objects",
        "comparison_cheats",
        "breaking_values",
        "resources",
        "signals",
    }
    assert set(FAST_SUBSET) <= set(suite.programs) and set(hp.BLOCKING) <= set(suite.programs)


def test_the_cheats_work_where_nothing_stops_them(suite):
    """Control: run in this process, the file cheats do find the answers (so 0 passes in the sandbox
    means the sandbox stopped them), and the real reference passes through the gym."""
    reference = json.loads(suite.data.read_text())["ground_truth"]
    truth: dict = {}
    exec(reference, truth)
    # (not the /tmp-wide glob: other files there may hold other references, or nest too deep to read)
    for name in ("fs_exact_path", "fs_parent_dir"):
        ns: dict = {}
        exec(suite.programs[name].source, ns)
        assert ns["solve"](3) == truth["solve"](3), name
    ref = hp.Hostile("control_reference", "control", reference)
    row = bench.score_in_gym([ref], suite.data, FAST)[0]
    assert row["passed"] == row["total"] == len(hp.TEST_INPUTS) and not row["crashed"]


def test_hostile_answers_through_the_gym_never_crash_or_pass(suite):
    rows = bench.score_in_gym([suite.programs[n] for n in FAST_SUBSET], suite.data, FAST)
    summary = bench.summarise_gym(rows)
    assert summary["trainer_crashes"] == 0 and summary["cheating_passes"] == 0, summary["cheaters"]


def test_lying_answers_pass_nothing_on_tests_written_as_comparisons(tmp_path):
    """Lying objects and comparison cheats (``hp.lying_programs``) through the gym on the secret
    task written with ``==``/``assert``/``!=``/``not`` tests and on a procedural task: no answer
    passes more tests than a trivial one, and each task's reference passes all of its tests."""
    compared = hp.write_task_file(tmp_path / "compared.jsonl", hp.secret_task_compared)
    kinds = bench.score_lying(bench.lying_targets(compared, None, bare=0, procedural=1))
    assert set(kinds) == {"secret_compared", "procedural"}
    for kind, k in kinds.items():
        assert k["controls_passed"] == k["tasks"] and k["trainer_crashes"] == 0, (kind, k)
        assert k["cheating_passes"] == 0 and k["trivial_tests_passed"] == 0, (kind, k["cheaters"])


def test_values_that_broke_the_trainer_are_encoded_in_the_sandbox():
    """The issue's values: compared and displayed in the caller without an exception and at once."""
    src = (
        "from decimal import Decimal\nimport sys\nsys.set_int_max_str_digits(0)\n"
        "V = [{Decimal('NaN'): 1}, {Decimal('-Infinity')}, 7**6000, Decimal('1E+300000'), Decimal('-Infinity'),\n"
        "     [Decimal('sNaN'), {1}], [7**6000 + 1]]\n"
        "def f(i):\n    return V[i]\n"
    )
    run = run_source(src, [f"f({i})" for i in range(7)], FAST)
    st = [c.status for c in run.calls]
    assert st == [OK, OK, OK, "too_large", OK, OK, OK], [c.describe() for c in run.calls]
    t0 = time.perf_counter()
    for a in run.calls:
        assert a.value is None or well_formed(a.value)
        for b in run.calls:
            assert a.matches(b) == (a is b and a.status == OK)
        a.describe()
    assert time.perf_counter() - t0 < 0.5
    assert render(run.calls[2].value) == "<int of 16845 bits>"
    # Equal values of different types still match (the exact forms are the same text).
    same = run_source(
        "from decimal import Decimal\nfrom fractions import Fraction\n"
        "def f(i):\n    return [7**6000, {Decimal(2): 1.5}, {1, Fraction(1, 2)}][i]\n",
        ["f(0)", "f(1)", "f(2)"],
        FAST,
    )
    ref = run_source(
        "def f(i):\n    return [7**6000, {2.0: 1.5 + 1e-12}, {True, 0.5}][i]\n", ["f(0)", "f(1)", "f(2)"], FAST
    )
    assert all(a.matches(b) for a, b in zip(same.calls, ref.calls))
    assert not values_equal(["n", False, "1", "inf", "0x0.0p+0", "?"], ["n", True, "nan", "nan", "0x0.0p+0", "?"])


class _OneAnswer:
    """A generation backend whose every turn is one fixed text."""

    def __init__(self, tokenizer, text: str):
        self.ids = list(tokenizer(text, add_special_tokens=False).input_ids)

    def generate(self, prompts, max_new_tokens, params):
        return [list(self.ids) for _ in prompts]

    def clear_cache(self) -> None:
        pass


class _BrokenColbench(ColbenchEnv):
    """The colbench gym with a scorer that fails: an unexpected error inside ``step``."""

    def on_answer(self, content):
        raise RuntimeError("scorer exploded")


def test_a_gym_whose_step_raises_ends_only_that_episode(tmp_path):
    from harness.ppo.tiny import build_tiny_tokenizer
    from harness.rollout.backends import SamplingParams

    tok = build_tiny_tokenizer()
    chat = ChatFormat(tok, "tagged")
    backend = _OneAnswer(tok, "ANSWER:\ndef f(x):\n    return x\n")
    envs = [ColbenchEnv(limits=FAST), _BrokenColbench(limits=FAST), ColbenchEnv(limits=FAST)]
    kws = [{"seed": i, "options": {"task_index": i, "split": "train", "arm": "symbolic"}} for i in range(3)]
    res = RolloutEngine(backend, chat, continuous=False).run(
        envs,
        kws,
        ["g0", "g1", "g2"],
        [0, 0, 0],
        params=SamplingParams(stop_ids=tuple(chat.stop_ids)),
        max_new_tokens_per_turn=64,
        max_episode_tokens=2048,
    )
    recs = [ep.record for ep in res.episodes]
    assert all(ep.done for ep in res.episodes)
    assert "error" not in recs[0] and "error" not in recs[2] and recs[0]["answered"]
    err = recs[1]["error"]
    assert err["type"] == "builtins.RuntimeError" and err["message"] == "scorer exploded" and err["where"] == "step"
    assert recs[1]["success"] is False and res.episodes[1].turn_rewards == [0.0]
    # The trainer turns it into an event and a log line, and the run goes on.
    w = RunWriter.create(tmp_path / "run", {"preset": "tiny"}, defaults_dir(), ["colbench"], 1)
    recs[1]["episode_id"] = "s000000-e001"
    w.episode_errors(0, recs)
    events = [json.loads(line) for line in (tmp_path / "run" / "events.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events] == ["started", "episode_error"]
    assert events[1]["episode_id"] == "s000000-e001" and events[1]["error"]["type"] == "builtins.RuntimeError"
    assert "scorer exploded" in (tmp_path / "run" / "log.txt").read_text()


def test_tasks_check_on_hostile_references_reports_lines_not_tracebacks(suite, tmp_path):
    names = (
        "value_decimal_nan_key",
        "value_big_int_7_6000",
        "value_decimal_1e300000",
        "lying_eq_always_true",
        "lying_hash_raises",
    )
    out = bench.check_as_references([suite.programs[n] for n in names], tmp_path, timeout=600)
    assert out["tracebacks"] == 0 and out["exit_code"] == 4 and out["reported"] == len(names), out
    assert out["reasons"] == {"too_large": 1, "unsupported_value": 1}, out  # an int whose __hash__ raises is an int
    # Human mode: one line per failing task, naming it, and a summary.
    data = tmp_path / "hostile_references.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli.main", "tasks", "check", "colbench", "--data", str(data)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=600,
        check=False,
    )
    assert proc.returncode == 4 and "Traceback" not in proc.stderr + proc.stdout
    assert "too_large" in proc.stdout and "3/5 references pass" in proc.stdout


@kernel_only
def test_the_file_system_is_an_allow_list(suite):
    visible = tuple(isolation_report()["visible"])
    src = (
        "import os, glob\n"
        f"SKIP = {('/proc',) + visible!r}\n"  # the allowed folders are large: list them, do not walk them
        "def f():\n"
        "    return sorted(os.listdir('/'))\n"
        "def g():\n"
        "    return [p for p in os.listdir('/proc') if p.isdigit()]\n"
        "def h():\n"
        "    return open('/proc/self/mountinfo').read()\n"
        "def k():\n"
        "    out = []\n"
        "    for d, ds, _ in os.walk('/'):\n"
        "        out.append(d)\n"
        "        ds[:] = [e for e in ds if not os.path.join(d, e).startswith(SKIP)]\n"
        "    return out\n"
    )
    run = run_source(src, ["f()", "g()", "h()", "k()"], Limits(call_time=5.0, module_time=2.0, total_time=20.0))
    top, pids, mountinfo, walked = (render(c.value, 100_000) for c in run.calls)
    assert all(c.status == OK for c in run.calls), [c.describe() for c in run.calls]
    tops = {v.split("/")[1] for v in visible} | {"dev", "etc", "proc", "tmp"}
    assert set(eval(top)) <= tops, (eval(top), tops)  # noqa: S307
    assert eval(pids) == ["1"]  # noqa: S307 -- only the sandbox's own pid namespace
    # The venv may live inside the checkout (as in CI): its site-packages folder is visible, the
    # checkout's own files are not.
    for secret in (str(suite.data.parent), str(REPO / "harness"), str(REPO / "tests"), "/work/notes", "/home"):
        assert secret not in mountinfo and secret not in walked, secret
    for path in eval(walked):  # noqa: S307 -- every folder it can reach is an allowed one or on the way to one
        on_the_way = any(v.startswith(path.rstrip("/") + "/") for v in visible)
        inside = any(path == v or path.startswith(v + "/") for v in visible)
        assert on_the_way or inside or path in ("/", "/dev", "/tmp") or path.startswith("/tmp/eau-sbx-"), path


@pytest.mark.parametrize("mode", ["kernel", "process"])
def test_a_sandbox_dies_with_its_killed_caller(suite, tmp_path, mode):
    """A call that blocks with SIGALRM blocked; its caller is SIGKILLed: no sandbox process and no
    working folder is left (process mode: the folder keeps the code's files until the next
    caller's first run removes it)."""
    if mode == "kernel" and not KERNEL:
        pytest.skip("kernel isolation unavailable here")
    row = bench.kill_caller_mid_call(suite.programs["signal_block_alarm_sleep"], mode, tmp_path)
    assert row["sandbox_started"] and row["processes_left"] == 0, row
    if mode == "kernel":
        assert row["workdirs_left"] == 0, row
    else:
        assert row.get("workdirs_left_after_next_start", 0) == 0, row
    assert not list(tmp_path.glob("eau-sbx-*"))


# ------------------------------------------------------------------ slow: the whole set, a training run
@pytest.mark.slow
def test_every_hostile_program_through_the_gym(suite):
    rows = bench.score_in_gym(list(suite.programs.values()), suite.data, FAST)
    summary = bench.summarise_gym(rows)
    assert summary["programs"] >= 100
    assert summary["trainer_crashes"] == 0 and summary["cheating_passes"] == 0, summary["cheaters"]


@pytest.mark.slow
@pytest.mark.timeout(2400)  # two training runs (one killed); ~10 min on a busy 2-core box
def test_a_training_run_with_hostile_answers_goes_on_and_leaves_nothing(suite, tmp_path):
    progs = bench._blocking_first(list(suite.programs.values()))
    out = bench.train_with_hostile_answers(progs, suite.data, tmp_path / "train", steps=2)
    assert out["trainer_crashed"] is None and out["metrics_lines"] == 2, out
    assert out["episodes"] == 16 and out["cheating_passes"] == 0, out
    killed = bench.kill_training_mid_rollout(tmp_path, steps=2)
    assert killed["sandboxes_seen"] > 0 and killed["processes_left"] == 0 and killed["workdirs_left"] == 0, killed
