"""Hostile programs against the colbench scorer, a training run and ``eau tasks check``; JSON on stdout.

The programs (``hostile_programs.py``, at least 100, from templates: file-system search, stack
frames, lying objects, values that break comparison, huge outputs, fork bombs, signal games,
loops in ``__del__`` ...) answer tasks whose true results no program can guess, so every test a
hostile program passes is a pass by cheating. Parts:

* ``gym``: each program is a policy's answer, scored by the colbench gym's ``step`` exactly as in
  training (sandbox run, comparison with the reference's outcomes). Figures: trainer crashes (an
  exception out of ``step``), passes by cheating, statuses, seconds.
* ``lying``: the lying objects and comparison cheats (``hp.lying_programs``: ``__eq__`` always
  true, always unequal, raising, mutating the other side, learning it; a program that reads the
  expected value from the test's text) as answers to tasks whose tests are written as comparisons:
  the secret task with ``==``/``assert``/``!=``/``not`` tests, every record of the real ColBench
  file whose tests compare (``--colbench-data``, read in place, never copied), a few of its
  bare-call records and a few procedural tasks. A cheating pass: more tests passed than the best
  trivial answer (None, 0, '', [], (), {}, the first argument) passes on the same task; each task's
  reference must pass all of its tests (control).
* ``train``: a real ``tiny`` training run on the colbench gym (``--train-steps`` steps) whose
  policy's answers are drawn from the hostile set (a scripted generation backend: every turn is an
  answer), then the same run SIGKILLed mid-rollout: crashes, cheating passes, episode errors,
  sandbox processes and working folders left after the kill.
* ``tasks_check``: every program as the reference of a task in a data file, through
  ``eau tasks check colbench --data``: exit code, tracebacks, tasks reported.
* ``lifetime``: a caller running a blocking program (signals ignored, blocked in a call) is
  SIGKILLed: sandbox processes and working folders left within a few seconds, in kernel and
  process mode.

Usage: ``python benchmarks/bench_hostile_programs.py [--parts gym,lying,train,tasks_check,lifetime]
[--limit N] [--train-steps N] [--colbench-data FILE] [--data-bare N] [--procedural N]``.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, Sequence

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import hostile_programs as hp  # noqa: E402  (benchmarks/ is on sys.path just above)

from harness.sandbox import Limits, run_source  # noqa: E402

SANDBOX_MARKER = b"Child side of the code sandbox"  # the child's -c text starts with its docstring
# Tighter than the gym's default (2 s a call, 40 s a run): the same checks, a suite that ends sooner.
SUITE_LIMITS = Limits(call_time=1.0, module_time=2.0, total_time=8.0)


# ------------------------------------------------------------------ processes of a sandbox
def _stat_fields(pid: str) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rindex(")") + 2 :].split()  # fields after the command name


def sandbox_processes(session: int | None = None) -> list[int]:
    """Pids of live sandbox children (by the runner text in their command line); with ``session``,
    only those of that session (each sandbox child leads its own session)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if SANDBOX_MARKER not in cmd:
            continue
        fields = _stat_fields(entry)
        if fields is None or fields[0] == "Z":
            continue
        if session is None or int(fields[3]) == session:
            out.append(int(entry))
    return out


def children_sessions(parent: int) -> set[int]:
    """Sessions of the sandbox children whose parent is ``parent``."""
    out = set()
    for pid in sandbox_processes():
        fields = _stat_fields(str(pid))
        if fields and int(fields[1]) == parent:
            out.add(int(fields[3]))
    return out


def wait_gone(sessions: set[int], pattern: str, seconds: float = 5.0) -> tuple[list[int], list[str]]:
    """Wait until no process of ``sessions`` and no path matching ``pattern`` exist; what is left."""
    end = time.monotonic() + seconds
    while True:
        left = [p for s in sessions for p in sandbox_processes(s)]
        dirs = glob.glob(pattern)
        if (not left and not dirs) or time.monotonic() > end:
            return left, dirs
        time.sleep(0.05)


# ------------------------------------------------------------------ gym
def score_one(env: Any, split: str, index: int, prog: hp.Hostile, seed: int = 0) -> dict:
    """``prog`` as the answer to task ``index`` of ``split`` through the gym's ``step``."""
    env.reset(seed=seed, options={"task_index": index, "split": split, "arm": "symbolic"})
    t0 = time.monotonic()
    row: dict[str, Any] = {"name": prog.name, "family": prog.family}
    try:
        _, reward, _, _, info = env.step(f"ANSWER:\n```python\n{prog.source}```")
        details = info["turn"]["answer"]["details"]
        row.update(
            crashed=False,
            passed=int(details.get("passed", 0)),
            total=details.get("total"),
            statuses=details.get("statuses", {}),
            reward=reward,
        )
    except Exception as exc:  # noqa: BLE001 -- the figure this benchmark counts
        row.update(crashed=True, passed=0, error=f"{type(exc).__name__}: {exc}"[:300])
    row["seconds"] = round(time.monotonic() - t0, 3)
    return row


def score_in_gym(programs: Sequence[hp.Hostile], data_file: Path, limits: Limits = SUITE_LIMITS) -> list[dict]:
    """Each program as an answer through the colbench gym's step (the training scoring path)."""
    from harness.envs.registry import make

    env = make("colbench", data_file=data_file, limits=limits)
    split = "train" if env.source.by_split["train"] else "eval"
    return [score_one(env, split, i, prog, seed=i) for i, prog in enumerate(programs)]


def summarise_gym(rows: list[dict]) -> dict:
    statuses: Counter = Counter()
    for r in rows:
        statuses.update(r.get("statuses", {}))
    return {
        "programs": len(rows),
        "families": dict(Counter(r["family"] for r in rows)),
        "trainer_crashes": sum(r["crashed"] for r in rows),
        "cheating_passes": sum(1 for r in rows if r["passed"] > 0),
        "cheaters": [r["name"] for r in rows if r["passed"] > 0 or r["crashed"]],
        "call_statuses": dict(statuses),
        "seconds_total": round(sum(r["seconds"] for r in rows), 2),
        "seconds_max": max((r["seconds"] for r in rows), default=0.0),
    }


# ------------------------------------------------------------------ tests written as comparisons
DEFAULT_COLBENCH = REPO.parent / "shared" / "colbench" / "backend_test.jsonl"


def compares(test: str) -> bool:
    """Whether a test is written as a comparison or an assert (not a bare call)."""
    try:
        stmt = ast.parse(test.strip()).body[0]
    except (SyntaxError, IndexError):
        return False
    return isinstance(stmt, ast.Assert) or isinstance(getattr(stmt, "value", None), (ast.Compare, ast.UnaryOp))


def _target(kind: str, label: str, env: Any, split: str, index: int, function: str, reference: str) -> dict:
    """A task to score lying answers on, with the most tests any trivial answer passes on it
    (``hp.trivial_programs``: None, 0, '', [], (), {}, the first argument): a lying answer's pass
    counts as cheating only beyond that (a lie that returns an empty list may equal a true result)."""
    t = {"kind": kind, "label": label, "env": env, "split": split, "index": index, "function": function}
    control = score_one(env, split, index, hp.Hostile("control_reference", "control", reference))
    t["control_passed"] = not control["crashed"] and control["passed"] == control["total"]
    t["trivial_best"] = max(score_one(env, split, index, p)["passed"] for p in hp.trivial_programs(function))
    return t


def lying_targets(secret_file: Path, colbench_file: Path | None, bare: int, procedural: int) -> list[dict]:
    """The tasks the lying answers are scored on: the secret task written with comparisons; every
    record of the real ColBench file whose tests compare, and its first ``bare`` records of bare
    calls on which no trivial answer passes a test; as many procedural train tasks (``procedural``).
    Each: kind, label, env, split, index, function, control_passed (the reference passes every test
    through the gym), trivial_best."""
    from harness.envs.colbench import CodeTask
    from harness.envs.registry import make

    env = make("colbench", data_file=secret_file, limits=SUITE_LIMITS)
    split = "train" if env.source.by_split["train"] else "eval"
    secret = env.source.by_split[split][0]
    out = [_target("secret_compared", "secret", env, split, 0, hp.FUNCTION, secret.reference)]
    if colbench_file is not None:
        env = make("colbench", data_file=colbench_file, limits=SUITE_LIMITS)
        n_bare = 0
        for rec in env.source.records:
            compared = any(compares(t) for t in rec.tests)
            if not compared and n_bare >= bare:
                continue
            ct = CodeTask.from_record(rec)
            index = env.source.by_split[ct.split].index(ct)
            t = _target(
                "data_compared" if compared else "data_bare",
                f"data-{rec.index}",
                env,
                ct.split,
                index,
                ct.function or hp.FUNCTION,
                ct.reference,
            )
            if compared or t["trivial_best"] == 0:
                out.append(t)
                n_bare += not compared
    env = make("colbench", limits=SUITE_LIMITS)
    i = n_proc = 0
    while n_proc < procedural and i < 20 * procedural:
        env.reset(seed=0, options={"task_index": i, "split": "train"})
        d = env.task.data
        t = _target("procedural", env.task.task_id, env, "train", i, d["function"], d["reference"])
        if t["trivial_best"] == 0:
            out.append(t)
            n_proc += 1
        i += 1
    return out


def score_lying(targets: list[dict]) -> dict:
    """Every lying answer (``hp.lying_programs``) on every target through the gym. A cheating pass:
    an answer that passes more tests than the best trivial answer on the same task."""
    kinds: dict[str, dict[str, Any]] = {}
    for t in targets:
        k = kinds.setdefault(
            t["kind"],
            {
                "tasks": 0,
                "controls_passed": 0,
                "trivial_tests_passed": 0,
                "answers": 0,
                "trainer_crashes": 0,
                "cheating_passes": 0,
                "tests_passed_beyond_trivial": 0,
                "cheaters": [],
            },
        )
        k["tasks"] += 1
        k["controls_passed"] += int(t["control_passed"])
        k["trivial_tests_passed"] += t["trivial_best"]
        for prog in hp.lying_programs(t["function"]):
            row = score_one(t["env"], t["split"], t["index"], prog)
            k["answers"] += 1
            k["trainer_crashes"] += int(row["crashed"])
            if row["passed"] > t["trivial_best"]:
                k["cheating_passes"] += 1
                k["tests_passed_beyond_trivial"] += row["passed"] - t["trivial_best"]
                if len(k["cheaters"]) < 40:
                    k["cheaters"].append(f"{t['label']}:{prog.name} {row['passed']}/{row['total']}")
    return kinds


# ------------------------------------------------------------------ eau tasks check
def check_as_references(
    programs: Sequence[hp.Hostile], folder: Path, workers: int = 2, timeout: float = 1800.0
) -> dict:
    """Every program as a reference in a data file, through the real ``eau tasks check`` CLI."""
    rows = []
    for prog in programs:
        rows.append(
            {
                "problem_description": f"{prog.name}. The signature of the function is: def {hp.FUNCTION}(x)",
                "ground_truth": prog.source,
                "hidden_information": prog.source,
                "test_cases": {f"test{j + 1}": f"{hp.FUNCTION}({x})" for j, x in enumerate(hp.TEST_INPUTS)},
            }
        )
    data = folder / "hostile_references.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    t0 = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.cli.main",
            "tasks",
            "check",
            "colbench",
            "--data",
            str(data),
            "--json",
            "--workers",
            str(workers),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(folder),
        timeout=timeout,
        check=False,
    )
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        doc = {}
    return {
        "references": len(programs),
        "exit_code": proc.returncode,
        "tracebacks": proc.stderr.count("Traceback") + proc.stdout.count("Traceback"),
        "reported": doc.get("total"),
        "passed": doc.get("passed"),
        "reasons": doc.get("reasons", {}),
        "seconds": round(time.monotonic() - t0, 2),
        "stderr_tail": proc.stderr[-500:] if proc.returncode not in (0, 4) else "",
    }


# ------------------------------------------------------------------ a caller killed mid-run
_CALLER = """
import sys
from harness.sandbox import Limits, run_source
run_source(sys.argv[1], ["{fn}(1)"], Limits(call_time=600, module_time=10, total_time=900, isolation=sys.argv[2],
           tmp_root=sys.argv[3]))
"""


def kill_caller_mid_call(prog: hp.Hostile, isolation: str, tmp_root: Path, settle: float = 1.0) -> dict:
    """Start a caller running ``prog`` (a call that blocks or spins, ignoring SIGALRM), SIGKILL the
    caller once its sandbox child is in the call, and see what is left after a few seconds."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    caller = subprocess.Popen(
        [sys.executable, "-c", _CALLER.format(fn=hp.FUNCTION), prog.source, isolation, str(tmp_root)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    sessions: set[int] = set()
    end = time.monotonic() + 30
    while not sessions and time.monotonic() < end and caller.poll() is None:
        sessions = children_sessions(caller.pid)
        time.sleep(0.02)
    time.sleep(settle)  # into the call: the module has run, the timer is ignored or blocked
    alive_before = bool(sessions) and bool([p for s in sessions for p in sandbox_processes(s)])
    caller.kill()
    caller.wait()
    t0 = time.monotonic()
    left, dirs = wait_gone(sessions, str(tmp_root / f"{'eau-sbx-'}{caller.pid}-*"))
    row = {
        "name": prog.name,
        "isolation": isolation,
        "sandbox_started": alive_before,
        "processes_left": len(left),
        "workdirs_left": len(dirs),
        "seconds_to_clean": round(time.monotonic() - t0, 2),
    }
    for pid in left:  # do not leave them to the machine
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    if dirs:
        # Process mode keeps its files in the folder: the next caller's first run removes it.
        from harness.sandbox import remove_stale_workdirs

        removed = remove_stale_workdirs(str(tmp_root))
        row["workdirs_left_after_next_start"] = len([d for d in dirs if d not in removed and os.path.exists(d)])
    return row


def lifetime(programs: Sequence[hp.Hostile], folder: Path) -> dict:
    modes = ["kernel", "process"] if os.geteuid() == 0 else ["process"]
    rows = [kill_caller_mid_call(p, m, folder) for m in modes for p in programs if p.name in hp.BLOCKING]
    return {
        "kills": len(rows),
        "sandboxes_started": sum(r["sandbox_started"] for r in rows),
        "processes_left": sum(r["processes_left"] for r in rows),
        "workdirs_left": {m: sum(r["workdirs_left"] for r in rows if r["isolation"] == m) for m in modes},
        "workdirs_left_after_next_start": sum(r.get("workdirs_left_after_next_start", 0) for r in rows),
        "rows": rows,
    }


# ------------------------------------------------------------------ a training run
class HostileAnswers:
    """A generation backend whose every turn is the next hostile program as an answer (the tiny
    tokenizer is byte-level: any text round-trips). It does not sample: the policy is still trained
    on these turns by the real PPO update."""

    per_request_seeds = False  # (rollout.backends.GenerationBackend) it samples nothing

    def __init__(self, tokenizer: Any, stop_ids: Sequence[int], programs: Sequence[hp.Hostile]):
        self.tokenizer, self.stop_ids, self.programs = tokenizer, list(stop_ids), list(programs)
        self.used: list[str] = []

    def generate(self, prompts, max_new_tokens, params) -> list[list[int]]:
        out = []
        for _ in prompts:
            prog = self.programs[len(self.used) % len(self.programs)]
            self.used.append(prog.name)
            text = f"ANSWER:\n```python\n{prog.source}```"
            out.append(list(self.tokenizer(text, add_special_tokens=False).input_ids) + self.stop_ids[:1])
        return out

    def sync_weights(self, model: Any) -> dict[str, float]:
        return {}  # its turns do not depend on the policy's weights

    def clear_cache(self) -> None:
        pass


def train_with_hostile_answers(
    programs: Sequence[hp.Hostile], data_file: Path, folder: Path, steps: int, tasks_per_step: int = 4
) -> dict:
    """A real tiny training run on the colbench gym (tasks from ``data_file``) with hostile answers."""
    from harness.envs.colbench import ColbenchEnv
    from harness.knobs.folder import defaults_dir
    from harness.ppo.config import build_config
    from harness.ppo.trainer import Trainer
    from harness.rollout.engine import RolloutEngine

    # The trainer builds its gyms by name; the data file (the tasks whose answers cannot be guessed)
    # and the suite's limits reach them as the gym class's defaults, for this process only.
    ColbenchEnv.__init__.__kwdefaults__.update(data_file=str(data_file), limits=SUITE_LIMITS)
    knobs = folder / "knobs"
    shutil.copytree(defaults_dir(), knobs, ignore=shutil.ignore_patterns(".pending", ".history"))
    cfg = build_config(
        "tiny",
        None,
        {
            "run_id": "hostile",
            "steps": steps,
            "gyms": ["colbench"],
            "tasks_per_step": tasks_per_step,
            "samples_per_task": 2,
            "checkpoint_every": 1000,
            "agent_knobs": {"max_episode_tokens": 4096, "max_new_tokens_per_turn": 48},
        },
    )
    t0 = time.monotonic()
    crashed = None
    trainer = Trainer(cfg, folder / "runs", knobs)
    backend = HostileAnswers(trainer.tokenizer, trainer.chat.stop_ids, programs)
    trainer.backend, trainer.engine, trainer.rollout_stats = (
        backend,
        RolloutEngine(backend, trainer.chat, continuous=False),
        False,
    )
    try:
        with trainer.session():
            trainer.train()
    except Exception as exc:  # noqa: BLE001 -- the figure this benchmark counts
        crashed = f"{type(exc).__name__}: {exc}"[:500]
    run = folder / "runs" / "hostile"
    episodes = [
        json.loads(line)
        for p in sorted((run / "trajectories").glob("step_*.jsonl"))
        for line in p.read_text().splitlines()
    ]
    passes = [
        e for e in episodes for t in e.get("turns", []) if (t.get("answer") or {}).get("details", {}).get("passed")
    ]
    return {
        "steps": steps,
        "trainer_crashed": crashed,
        "episodes": len(episodes),
        "answers": len(backend.used),
        "distinct_programs": len(set(backend.used)),
        "cheating_passes": len(passes),
        "episode_errors": sum(1 for e in episodes if e.get("error")),
        "metrics_lines": len((run / "metrics.jsonl").read_text().splitlines())
        if (run / "metrics.jsonl").exists()
        else 0,
        "seconds": round(time.monotonic() - t0, 1),
    }


def kill_training_mid_rollout(folder: Path, steps: int, seconds: float = 3.0, start_timeout: float = 900.0) -> dict:
    """The training run of :func:`train_with_hostile_answers` in its own process, SIGKILLed
    ``seconds`` after its first sandbox started (its rollout runs the blocking programs first):
    sandbox processes and folders left."""
    tmp_root = folder / "tmp"
    tmp_root.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(tmp_root)}
    trainer = subprocess.Popen(
        [sys.executable, __file__, "--child-train", str(folder / "killed"), "--train-steps", str(steps)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(folder / "killed.err", "wb"),
    )
    sessions: set[int] = set()
    end = time.monotonic() + start_timeout
    while time.monotonic() < end and trainer.poll() is None:
        sessions |= children_sessions(trainer.pid)
        if sessions:
            end = min(end, time.monotonic() + seconds)
        time.sleep(0.05)
    running = [p for s in sessions for p in sandbox_processes(s)]
    ended_by_itself = trainer.poll()
    trainer.kill()
    trainer.wait()
    left, dirs = wait_gone(sessions, str(tmp_root / f"eau-sbx-{trainer.pid}-*"))
    for pid in left:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    out = {
        "sandboxes_seen": len(sessions),
        "sandbox_processes_at_kill": len(running),
        "processes_left": len(left),
        "workdirs_left": len(dirs),
    }
    if ended_by_itself is not None:  # it should still be rolling out when killed
        out["trainer_ended_before_kill"] = ended_by_itself
        out["trainer_stderr_tail"] = (folder / "killed.err").read_text(errors="replace")[-1000:]
    return out


def _blocking_first(programs: Sequence[hp.Hostile]) -> list[hp.Hostile]:
    return sorted(programs, key=lambda p: p.name not in hp.BLOCKING)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", default="gym,lying,train,tasks_check,lifetime", help="comma-separated parts to run")
    ap.add_argument(
        "--colbench-data",
        default=str(DEFAULT_COLBENCH),
        help="the real ColBench file for the lying part (its records whose tests compare); skipped when absent",
    )
    ap.add_argument("--data-bare", type=int, default=3, help="lying part: also this many bare-call ColBench records")
    ap.add_argument("--procedural", type=int, default=5, help="lying part: this many procedural tasks")
    ap.add_argument("--limit", type=int, default=None, help="only the first N programs")
    ap.add_argument("--train-steps", type=int, default=4, help="steps of the training run (8 answers a step)")
    ap.add_argument("--child-train", default=None, help=argparse.SUPPRESS)  # the process the train part kills
    args = ap.parse_args()
    if args.child_train:  # inside the parent's folder, which the parent removes
        out = Path(args.child_train)
        data_file = hp.write_task_file(out / "data" / "tasks.jsonl")
        progs = hp.programs(str(data_file), str(REPO))[: args.limit]
        train_with_hostile_answers(_blocking_first(progs), data_file, out, args.train_steps)
        return
    folder = Path(tempfile.mkdtemp(prefix="eau-hostile-", dir="/tmp"))
    data_file = hp.write_task_file(folder / "data" / "tasks.jsonl")
    progs = hp.programs(str(data_file), str(REPO))[: args.limit]
    parts = set(args.parts.split(","))
    result: dict[str, Any] = {
        "programs": len(progs),
        "data_file": str(data_file),
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
        "isolation": run_source("", []).isolation.get("mode"),
    }
    try:
        if "gym" in parts:
            result["gym"] = summarise_gym(score_in_gym(progs, data_file))
        if "lying" in parts:
            compared = hp.write_task_file(folder / "compared" / "tasks.jsonl", hp.secret_task_compared)
            colbench = Path(args.colbench_data) if Path(args.colbench_data).is_file() else None
            result["lying"] = {
                "colbench_data": str(colbench) if colbench else "absent (skipped)",
                "programs_per_task": len(hp.lying_programs()),
                "by_kind": score_lying(lying_targets(compared, colbench, args.data_bare, args.procedural)),
            }
        if "train" in parts:
            result["train"] = train_with_hostile_answers(progs, data_file, folder / "train", args.train_steps)
            result["train_killed"] = kill_training_mid_rollout(folder, args.train_steps)
        if "tasks_check" in parts:
            result["tasks_check"] = check_as_references(progs, folder)
        if "lifetime" in parts:
            life = lifetime(progs, folder)
            life.pop("rows")
            result["lifetime"] = life
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
