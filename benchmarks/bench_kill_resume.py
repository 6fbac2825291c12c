"""SIGKILL a real tiny run at random points while an agent writes knobs; resume it each time; check
that every event and every write's attribution survived. Prints JSON figures.

    python benchmarks/bench_kill_resume.py --kills 20 --seed 0 --out kill_resume.json

Two campaigns, each a real ``eau train --preset tiny`` in a subprocess on a private knobs folder:

* ``kills``: a run (``--steps``, a checkpoint every ``--checkpoint-every`` steps) killed with
  SIGKILL ``--kills`` times and resumed with ``eau train --resume`` after each kill; the last resume
  runs to the end (a run that ends before its next kill is checked and a new one takes its place).
  Each kill lands a random delay after the attempt went live (its pid in ``status.json``: rollout,
  update, knob polls, checkpoint writes, wherever it lands) or, for ``--startup-share`` of them,
  after its start (imports, making the run's knobs folder, model building), so the spread does not
  depend on load. A writer thread issues ``eau knobs set agent.entropy_coeff V --run RUN --author agent
  --reason ... --json`` every 0.5-2.5 s while the run is live (a write can be in flight when the kill
  lands), and after ``--gap-share`` of the kills once more while the run is not live, before the resume.
* ``before_first_checkpoint``: a run with no checkpoint before its end, killed after an agent write
  was applied, resumed.

Checks (``problems`` lists every failure; the figures count what was checked):

* every complete line of ``events.jsonl`` and ``knob_events.jsonl`` on disk right after a kill is in
  the final file exactly once; no torn line; event ids unique in ``events.jsonl``;
* ``metrics.jsonl`` holds steps 0..N-1 exactly once;
* every write the CLI accepted for the run, live or not, is in ``knob_events.jsonl`` under the id the
  CLI printed, with author ``agent`` and its reason; the last record of the id is accepted, rejected
  or not_applied; ``eau effect --event <id>`` finds it (in process for every write, through the CLI
  for ``--cli-effects`` of them), a write made while the run was not live (a kill's gap) included; a
  note left in the run's ``knobs/.pending`` belongs to a write whose last
  record is not_applied (a resume would apply it);
* the knob log tells the truth about the resumed run: replaying the final applied records step by
  step gives ``entropy_coeff`` of every line of ``metrics.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness.analysis.effect import EffectError, effect  # noqa: E402
from harness.analysis.run_data import load_run_dir  # noqa: E402
from harness.io import jsonl  # noqa: E402
from harness.io.processes import pid_alive  # noqa: E402
from harness.knobs.folder import copy_defaults  # noqa: E402

FAST = [
    "--set",
    "tasks_per_step=2",
    "--set",
    "samples_per_task=2",
    "--set",
    "env_knobs.max_steps=3",
    "--set",
    "agent_knobs.max_new_tokens_per_turn=12",
    "--set",
    "agent_knobs.max_episode_tokens=512",
    "--set",
    "agent_knobs.mini_batch_size=4",
    "--set",
    "agent_knobs.micro_batch_size=4",
    "--set",
    "policy.tiny.num_hidden_layers=2",
    "--set",
    "policy.tiny.hidden_size=64",
    "--set",
    "policy.tiny.intermediate_size=128",
    "--no-progress",
]
KNOB = "agent.entropy_coeff"
LOGS = ("events.jsonl", "knob_events.jsonl")


def eau_env(kdir: Path, rdir: Path) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "EAU_KNOBS_DIR": str(kdir), "EAU_RUNS_DIR": str(rdir), "PYTHONPATH": path}


def eau(args: list[str], kdir: Path, rdir: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "harness.cli.main", *args],
        env=eau_env(kdir, rdir),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def start(args: list[str], kdir: Path, rdir: Path, log: Path) -> subprocess.Popen:
    with open(log, "a") as f:
        return subprocess.Popen(
            [sys.executable, "-m", "harness.cli.main", *args],
            env=eau_env(kdir, rdir),
            stdout=f,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def run_live(run: Path) -> bool:
    try:
        st = json.loads((run / "status.json").read_text())
    except (OSError, ValueError):
        return False
    return st.get("state") == "running" and pid_alive(st.get("pid"))


def complete_lines(path: Path) -> list[bytes]:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    return data.split(b"\n")[:-1]  # the piece after the last newline is torn or empty


class Writer(threading.Thread):
    """An agent writing ``agent.entropy_coeff`` through the CLI while the run is live (distinct values,
    so each write is its own cell change)."""

    def __init__(self, kdir: Path, rdir: Path, run: Path, seed: int):
        super().__init__(daemon=True)
        self.kdir, self.rdir, self.run_dir, self.rng = kdir, rdir, run, random.Random(seed)
        self.writes: list[dict[str, Any]] = []
        self.i = 0
        self.paused, self.stopped, self.busy = threading.Event(), threading.Event(), threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            if self.paused.is_set() or not run_live(self.run_dir):
                time.sleep(0.1)
                continue
            self.busy.set()
            try:
                self.write_once()
            finally:
                self.busy.clear()
            self.stopped.wait(self.rng.uniform(0.5, 2.5))

    def write_once(self, tag: str = "") -> dict[str, Any]:
        """One ``eau knobs set`` (also called between a kill and the resume, the writer paused)."""
        self.i += 1
        i = self.i
        value = round(0.001 + i * 1e-5, 6)
        reason = f"bench write {i}{tag}: entropy to {value}"
        t0 = time.monotonic()
        out = eau(
            [
                "knobs",
                "set",
                KNOB,
                str(value),
                "--run",
                self.run_dir.name,
                "--author",
                "agent",
                "--reason",
                reason,
                "--json",
            ],
            self.kdir,
            self.rdir,
            timeout=300,
        )
        try:
            doc = json.loads(out.stdout) if out.stdout.strip() else None
        except ValueError:
            doc = None
        w = {
            "i": i,
            "value": value,
            "reason": reason,
            "rc": out.returncode,
            "doc": doc,
            "stderr": out.stderr[-500:],
            "t0": t0,
            "t1": time.monotonic(),
        }
        self.writes.append(w)
        return w

    def pause(self) -> None:
        """No new write; the one in flight finishes."""
        self.paused.set()
        while self.busy.is_set():
            time.sleep(0.05)

    def resume(self) -> None:
        self.paused.clear()


def wait_for(cond, timeout: float, every: float = 0.2) -> bool:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if cond():
            return True
        time.sleep(every)
    return False


def kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _status_pid(run: Path) -> int | None:
    try:
        return json.loads((run / "status.json").read_text()).get("pid")
    except (OSError, ValueError):
        return None


def snapshot(run: Path) -> dict[str, Any]:
    try:
        st = json.loads((run / "status.json").read_text())
    except (OSError, ValueError):
        st = {}
    return {
        "lines": {name: complete_lines(run / name) for name in LOGS},
        "phase": st.get("phase"),
        "step": st.get("step"),
        "metrics_steps": len(jsonl.read(run / "metrics.jsonl")),
    }


# ---------------------------------------------------------------------------- checks
def check_run(
    run: Path,
    steps: int,
    snaps: list[dict[str, Any]],
    writes: list[dict[str, Any]],
    cli_effects: int,
    kdir: Path,
    rdir: Path,
    starts: list[tuple[float, bool]] = (),
) -> dict[str, Any]:
    problems: list[str] = []
    figures: dict[str, Any] = {}
    final = {name: complete_lines(run / name) for name in LOGS}
    for name in LOGS + ("metrics.jsonl",):
        data = (run / name).read_bytes()
        if data and not data.endswith(b"\n"):
            problems.append(f"{name}: torn last line")
    counts = {name: {} for name in LOGS}
    for name in LOGS:
        for line in final[name]:
            counts[name][line] = counts[name].get(line, 0) + 1
    checked = {name: 0 for name in LOGS}
    for k, snap in enumerate(snaps):
        for name in LOGS:
            for line in set(snap["lines"][name]):
                checked[name] += 1
                n = counts[name].get(line, 0)
                if n != 1:
                    problems.append(
                        f"kill {k}: a line of {name} written before the kill is in the final file "
                        f"{n} times: {line[:160]!r}"
                    )
    figures["lines_checked"] = checked
    ids = [json.loads(line).get("id") for line in final["events.jsonl"]]
    if len(ids) != len(set(ids)) or None in ids:
        problems.append("events.jsonl: event ids missing or not unique")
    steps_seen = [m["step"] for m in jsonl.read(run / "metrics.jsonl")]
    if steps_seen != list(range(steps)):
        problems.append(f"metrics.jsonl steps {steps_seen} != 0..{steps - 1}")
    figures["events_final"] = {name: len(final[name]) for name in LOGS}
    figures["event_kinds"] = _kinds(run)
    figures.update(check_writes(run, writes, cli_effects, kdir, rdir, problems, starts))
    figures["timeline_steps_checked"] = check_timeline(run, problems)
    figures["problems"] = problems
    return figures


def _kinds(run: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    for e in jsonl.read(run / "events.jsonl"):
        out[e["event"]] = out.get(e["event"], 0) + 1
    return out


def check_writes(
    run: Path,
    writes: list[dict[str, Any]],
    cli_effects: int,
    kdir: Path,
    rdir: Path,
    problems: list[str],
    starts: list[tuple[float, bool]] = (),
) -> dict[str, Any]:
    records = jsonl.read(run / "knob_events.jsonl")
    last = {}
    for r in records:
        last[r["id"]] = r
    data = load_run_dir(run)
    accepted = [w for w in writes if w["doc"] and w["doc"].get("ok")]
    live = [w for w in accepted if w["doc"].get("live")]

    # a write accepted while the run was not live (between a kill and the resume that followed it) is
    # applied by the resume under its id
    def resumed_after(w: dict[str, Any]) -> bool:
        nxt = [is_resume for t, is_resume in starts if t > w.get("t1", float("inf"))]
        return bool(nxt) and nxt[0]

    between = [w for w in accepted if not w["doc"].get("live") and resumed_after(w)]
    # a write refused (for example sent before the run's folder exists) must say why, never crash
    refused = [{"i": w["i"], "rc": w["rc"], "stderr": w.get("stderr", "")[-200:]} for w in writes if w not in accepted]
    for r in refused:
        if r["rc"] not in (2, 3, 4, 5) or "Traceback" in r["stderr"]:
            problems.append(f"write {r['i']} failed with exit code {r['rc']}: {r['stderr']}")
    outcome: dict[str, int] = {}
    found_by_effect, cli_checked = 0, 0
    for w in accepted:
        eid = w["doc"]["event"]["id"]
        rec = last.get(eid)
        if rec is None:
            problems.append(f"write {w['i']} ({eid}, {w['value']}) is not in knob_events.jsonl")
            continue
        if rec["author"] != "agent" or rec["reason"] != w["reason"] or rec["knob"] != KNOB:
            problems.append(f"write {w['i']} ({eid}): logged as {rec['author']}: {rec['reason']!r} ({rec['knob']})")
        outcome[rec["status"]] = outcome.get(rec["status"], 0) + 1
        if rec["status"] not in ("accepted", "rejected", "not_applied"):
            problems.append(f"write {w['i']} ({eid}): status {rec['status']}")
        try:
            effect(data, event_id=eid, window=3)
            found_by_effect += 1
        except EffectError:
            found_by_effect += 1  # found; too few steps around it or not applied: a verdict, not a miss
        except KeyError as exc:
            problems.append(f"eau effect --event {eid}: {exc}")
        if cli_checked < cli_effects and rec["status"] == "accepted":
            cli_checked += 1
            out = eau(["effect", "--event", eid, "--run", run.name, "--json", "--window", "3"], kdir, rdir)
            if out.returncode == 5:
                problems.append(f"eau effect --event {eid}: not found ({out.stderr.strip()[-200:]})")
    for note in sorted((run / "knobs" / ".pending").glob("*.json")) if (run / "knobs" / ".pending").is_dir() else []:
        rec = last.get(json.loads(note.read_text()).get("id"))
        if rec is None or rec["status"] != "not_applied":
            problems.append(
                f"a note whose write is not logged not_applied is left in .pending: {note.read_text()[:200]}"
            )
    return {
        "writes": len(writes),
        "writes_to_the_live_run": len(live),
        "writes_while_the_run_was_not_live": len(accepted) - len(live),
        "writes_between_a_kill_and_its_resume": len(between),
        "writes_refused": refused,
        "write_outcomes": outcome,
        "found_by_effect": found_by_effect,
        "cli_effect_checked": cli_checked,
    }


def check_timeline(run: Path, problems: list[str]) -> int:
    """Replay the final applied records of KNOB step by step against metrics.jsonl."""
    last: dict[str, dict[str, Any]] = {}
    for r in jsonl.read(run / "knob_events.jsonl"):
        last.pop(r["id"], None)
        last[r["id"]] = r
    applied = [
        r
        for r in last.values()
        if r["knob"] == KNOB and r["status"] == "accepted" and isinstance(r.get("step_effective"), int)
    ]
    metrics = jsonl.read(run / "metrics.jsonl")
    current = metrics[0]["entropy_coeff"] if metrics else None
    for m in metrics:
        for r in [r for r in applied if r["step_effective"] == m["step"]]:
            current = r["new"]
        if m["entropy_coeff"] != current:
            problems.append(f"step {m['step']}: metrics say {KNOB} = {m['entropy_coeff']}, the knob log {current}")
    return len(metrics)


# ---------------------------------------------------------------------------- campaigns
def kill_campaign(
    work: Path,
    *,
    kills: int,
    steps: int,
    checkpoint_every: int,
    seed: int,
    min_delay: float,
    max_delay: float,
    cli_effects: int,
    timeout: float,
    startup_share: float = 0.25,
    gap_share: float = 0.5,
) -> dict[str, Any]:
    """``kills`` SIGKILLs at random delays after each (re)start; a run that reaches its last step
    before the next kill is checked and a new run takes its place (so the count of kill points does
    not depend on the machine's speed)."""
    rng = random.Random(seed)
    kdir, rdir = copy_defaults(work / "knobs"), work / "runs"
    t0 = time.monotonic()
    runs, points, done = [], [], 0
    while done < kills and len(runs) < 3 * kills:  # (a machine so fast that no run is ever killed stops too)
        run_id = f"kill{len(runs)}"
        doc = _one_run(
            work,
            kdir,
            rdir,
            run_id,
            rng,
            kills - done,
            steps,
            checkpoint_every,
            min_delay,
            max_delay,
            cli_effects,
            timeout,
            startup_share,
            gap_share,
        )
        runs.append(doc)
        done += doc["kills"]
        points += [{"run": run_id, **p} for p in doc.pop("kill_points")]
    problems = [f"{r['run']}: {p}" for r in runs for p in r["problems"]]
    totals = {
        key: sum(r[key] for r in runs)
        for key in (
            "writes",
            "writes_to_the_live_run",
            "writes_while_the_run_was_not_live",
            "writes_between_a_kill_and_its_resume",
            "found_by_effect",
            "cli_effect_checked",
            "timeline_steps_checked",
        )
    }
    outcomes: dict[str, int] = {}
    for r in runs:
        for k, v in r["write_outcomes"].items():
            outcomes[k] = outcomes.get(k, 0) + v
    refused = [{"run": r["run"], **w} for r in runs for w in r["writes_refused"]]
    lines = {name: sum(r["lines_checked"][name] for r in runs) for name in LOGS}
    phases: dict[str, int] = {}
    for p in points:
        if not p.get("finished_first"):
            phases[str(p.get("phase"))] = phases.get(str(p.get("phase")), 0) + 1
    return {
        "kills": done,
        "runs": len(runs),
        "wall_s": round(time.monotonic() - t0, 1),
        "lines_checked": lines,
        "write_outcomes": outcomes,
        "writes_refused": refused,
        "kill_phases": phases,
        **totals,
        "problems": problems,
        "per_run": runs,
        "kill_points": points,
    }


def _one_run(
    work: Path,
    kdir: Path,
    rdir: Path,
    run_id: str,
    rng: random.Random,
    kills: int,
    steps: int,
    checkpoint_every: int,
    min_delay: float,
    max_delay: float,
    cli_effects: int,
    timeout: float,
    startup_share: float,
    gap_share: float,
) -> dict[str, Any]:
    run = rdir / run_id
    log = work / f"{run_id}.log"
    writer = Writer(kdir, rdir, run, rng.randrange(1 << 30))
    writer.start()
    snaps, points, starts = [], [], []  # starts: (time, a resume?)
    args = [
        "train",
        "--preset",
        "tiny",
        "--steps",
        str(steps),
        "--run-id",
        run_id,
        "--set",
        f"checkpoint_every={checkpoint_every}",
        *FAST,
    ]
    finished = False
    try:
        for k in range(kills):
            # killed before its run folder existed: nothing to resume, the run starts again
            fresh = not (run / "config.yaml").exists()
            starts.append((time.monotonic(), not fresh))
            proc = start(args if fresh else ["train", "--resume", run_id, "--no-progress"], kdir, rdir, log)
            t_start = time.monotonic()
            # a quarter of the kills land at a random time from the start (start-up: imports, the run's knobs folder,
            # model building); the rest at a random time after this attempt is live (its pid in status.json)
            in_startup = rng.random() < startup_share
            if not in_startup:
                wait_for(lambda p=proc: p.poll() is not None or _status_pid(run) == p.pid, timeout)
            delay = rng.uniform(min_delay, max_delay)
            try:
                rc = proc.wait(timeout=delay)
                points.append({"kill": k, "delay_s": round(delay, 1), "finished_first": True})
                finished = True
                break  # the run ended before the kill
            except subprocess.TimeoutExpired:
                pass
            live_at_kill = _status_pid(run) == proc.pid
            kill(proc)
            writer.pause()
            snap = snapshot(run)
            snaps.append(snap)
            points.append(
                {
                    "kill": k,
                    "after_s": round(time.monotonic() - t_start, 1),
                    "aimed_at_startup": in_startup,
                    "phase": snap["phase"] if live_at_kill else "start-up",
                    "step": snap["step"],
                    "metrics_lines": snap["metrics_steps"],
                }
            )
            if rng.random() < gap_share:  # an agent write while the run is not live, before the resume
                writer.write_once(" (between a kill and the resume)")
            writer.resume()
        if not finished:
            fresh = not (run / "config.yaml").exists()
            starts.append((time.monotonic(), not fresh))
            proc = start(args if fresh else ["train", "--resume", run_id, "--no-progress"], kdir, rdir, log)
            rc = proc.wait(timeout=timeout)
    finally:
        writer.stopped.set()
        writer.join(timeout=300)
    figures = check_run(run, steps, snaps, writer.writes, cli_effects, kdir, rdir, starts)
    if rc != 0:
        figures["problems"].append(f"the last attempt exited {rc}; see {log}")
    return {"run": run_id, "kills": len(snaps), "kill_points": points, "final_rc": rc, **figures}


def before_first_checkpoint(work: Path, *, steps: int, timeout: float) -> dict[str, Any]:
    """Killed after an agent write was applied, before any checkpoint; resumed to the end."""
    kdir, rdir = copy_defaults(work / "knobs"), work / "runs"
    run = rdir / "early"
    log = work / "train.log"
    proc = start(
        ["train", "--preset", "tiny", "--steps", str(steps), "--run-id", "early", "--set", "checkpoint_every=0", *FAST],
        kdir,
        rdir,
        log,
    )
    writes = []
    try:
        if not wait_for(lambda: run_live(run) and len(jsonl.read(run / "metrics.jsonl")) >= 1, timeout):
            raise RuntimeError(f"the run did not reach step 1; see {log}")
        reason = "early write: entropy up"
        # the trainer is stopped while the CLI writes (a CLI start-up of seconds on a loaded box must not
        # let the short run reach its end first), so the write is for the live run; it runs on to apply it
        trainer = _status_pid(run)
        os.kill(trainer, signal.SIGSTOP)
        try:
            out = eau(
                ["knobs", "set", KNOB, "0.003", "--run", "early", "--author", "agent", "--reason", reason, "--json"],
                kdir,
                rdir,
            )
        finally:
            os.kill(trainer, signal.SIGCONT)
        doc = json.loads(out.stdout)
        writes.append({"i": 0, "value": 0.003, "reason": reason, "rc": out.returncode, "doc": doc})
        eid = doc["event"]["id"]
        applied = wait_for(
            lambda: any(
                r["id"] == eid and r.get("step_effective") is not None for r in jsonl.read(run / "knob_events.jsonl")
            ),
            300,
            every=0.05,
        )
        if applied:
            os.kill(trainer, signal.SIGSTOP)  # at once: the kill below lands before the run's end
    finally:
        kill(proc)
    had_checkpoint = any((run / "checkpoints").glob("step_*"))
    snaps = [snapshot(run)]
    proc = start(["train", "--resume", "early", "--no-progress"], kdir, rdir, log)
    rc = proc.wait(timeout=timeout)
    figures = check_run(run, steps, snaps, writes, 1, kdir, rdir)
    if had_checkpoint or not doc.get("live") or not applied:
        figures["problems"].append(
            "the case was not set up (a checkpoint before the kill, the write made while "
            "no run was live, or not applied before the kill): raise --early-steps"
        )
    if rc != 0:
        figures["problems"].append(f"the resume exited {rc}; see {log}")
    return {"had_checkpoint_at_kill": had_checkpoint, "final_rc": rc, **figures}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--steps", type=int, default=12, help="Steps of each run (a run that ends is replaced).")
    ap.add_argument("--checkpoint-every", type=int, default=1)
    ap.add_argument("--early-steps", type=int, default=8, help="Steps of the run killed before its first checkpoint.")
    ap.add_argument("--skip-early", action="store_true", help="Leave out the kill before the first checkpoint.")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--min-delay", type=float, default=0.0, help="Seconds after a (re)start or going live, at least.")
    ap.add_argument("--max-delay", type=float, default=20.0, help="Seconds after a (re)start or going live, at most.")
    ap.add_argument("--startup-share", type=float, default=0.25, help="Share of kills timed from the start (start-up).")
    ap.add_argument(
        "--gap-share", type=float, default=0.5, help="Share of kills followed by an agent write before the resume."
    )
    ap.add_argument("--cli-effects", type=int, default=3, help="Writes checked through `eau effect` too.")
    ap.add_argument("--timeout", type=float, default=1800.0, help="Seconds the last resume may take.")
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    work = a.workdir or Path(tempfile.mkdtemp(prefix="eau-kill-"))
    doc: dict[str, Any] = {"command": " ".join(sys.argv), "workdir": str(work)}
    doc["before_first_checkpoint"] = (
        {"problems": [], "skipped": True}
        if a.skip_early
        else before_first_checkpoint(work / "early", steps=a.early_steps, timeout=a.timeout)
    )
    print(json.dumps(doc["before_first_checkpoint"], default=str), file=sys.stderr, flush=True)
    doc["kills"] = kill_campaign(
        work / "kills",
        kills=a.kills,
        steps=a.steps,
        checkpoint_every=a.checkpoint_every,
        seed=a.seed,
        min_delay=a.min_delay,
        max_delay=a.max_delay,
        cli_effects=a.cli_effects,
        timeout=a.timeout,
        startup_share=a.startup_share,
        gap_share=a.gap_share,
    )
    doc["ok"] = not doc["kills"]["problems"] and not doc["before_first_checkpoint"]["problems"]
    text = json.dumps(doc, indent=1, default=str)
    if a.out:
        a.out.write_text(text)
    print(text)
    sys.exit(0 if doc["ok"] else 1)


if __name__ == "__main__":
    main()
