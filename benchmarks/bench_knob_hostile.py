"""Hostile knob and rule edits (issue 28): malformed values and files against the knob store, and
during live runs of the ``tiny`` preset by hand edit (file writes) and by ``eau knobs set``.

    python benchmarks/bench_knob_hostile.py [--store-edits 300] [--live-runs 2] [--live-edits 500] [--seed 0]

Prints one JSON document: per phase and per class, the edits made, how they ended (refused,
accepted, unobserved), crashes, hangs (a bounded wait for each step boundary and each store poll),
invalid values in force (the store's in-force document, or the run's ``knobs_in_force.json``, after
every batch, checked against the packaged schemas and rule checks), and refusals that name the file
and the line. Edit classes and how they are made: ``benchmarks/hostile_knobs.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from hostile_knobs import (  # noqa: E402
    EXTRA_REWARD_FILE,
    SLOTS,
    Edit,
    Generator,
    apply_file_edit,
    invalid_in_force,
    read_base,
    restore_slots,
)

from harness.io import jsonl, yamlio  # noqa: E402
from harness.knobs.folder import copy_defaults  # noqa: E402
from harness.knobs.store import KnobStore  # noqa: E402
from harness.stores import open_store

REPO = Path(__file__).resolve().parents[1]
POLL_LIMIT_S = 120.0  # one store poll; far above the slowest legitimate one, on a loaded machine too
CLI_LIMIT_S = 120.0  # one `eau knobs set` (Python start-up on a loaded machine included)
BOUNDARY_LIMIT_S = 300.0  # the next step boundary of a live tiny run
TINY_FAST = [
    "--set",
    "tasks_per_step=2",
    "--set",
    "samples_per_task=1",
    "--set",
    "env_knobs.max_steps=3",
    "--set",
    "agent_knobs.max_new_tokens_per_turn=8",
    "--set",
    "agent_knobs.max_episode_tokens=400",
    "--set",
    "agent_knobs.mini_batch_size=2",
    "--set",
    "agent_knobs.micro_batch_size=2",
    "--set",
    "policy.tiny.num_hidden_layers=1",
    "--set",
    "policy.tiny.hidden_size=32",
    "--set",
    "policy.tiny.intermediate_size=64",
    "--set",
    "checkpoint_every=0",
]


def prepare_knobs(root: Path) -> Path:
    """A fresh knobs folder from the packaged defaults, with the extra reward rule files the edits use."""
    kdir = copy_defaults(root / "knobs")
    for slot in SLOTS:
        if not (kdir / slot).exists():
            (kdir / slot).write_text(EXTRA_REWARD_FILE)
    return kdir


class Tally:
    """Figures of one phase."""

    def __init__(self) -> None:
        self.by_class: dict[str, Counter] = defaultdict(Counter)
        self.edits = self.crashes = self.hangs = self.invalid_checks = 0
        self.invalid: list[str] = []
        self.refusals = self.refusals_with_line = self.refusals_not_a_file = self.internal = 0
        self.unexpected: list[str] = []
        self.poll_s: list[float] = []

    def outcome(self, edit: Edit, outcome: str) -> None:
        self.edits += 1
        self.by_class[edit.cls][outcome] += 1
        if (
            (edit.expect == "refuse" and outcome == "accepted")
            or (edit.expect == "accept" and outcome != "accepted")
            or outcome == "unobserved"
        ):
            self.unexpected.append(f"{edit.describe()} -> {outcome}")

    def refusal_events(self, events: list[dict[str, Any]]) -> None:
        for e in events:
            if e.get("status") != "rejected":
                continue
            self.refusals += 1
            self.internal += e.get("rule") == "internal error"
            if e.get("file") and e.get("line"):
                self.refusals_with_line += 1
            elif e.get("rule") in ("not a file", "missing"):
                self.refusals_not_a_file += 1
            else:
                self.unexpected.append(f"refusal without a line: {e.get('file')} [{e.get('rule')}] {e.get('message')}")

    def check(self, reference: KnobStore, doc: dict[str, Any]) -> None:
        self.invalid_checks += 1
        self.invalid += invalid_in_force(reference, doc)

    def figures(self) -> dict[str, Any]:
        return {
            "edits": self.edits,
            "crashes": self.crashes,
            "hangs": self.hangs,
            "invalid_values_in_force": len(self.invalid),
            "in_force_checks": self.invalid_checks,
            "refusals": self.refusals,
            "refusals_with_file_and_line": self.refusals_with_line,
            "refusals_of_non_files": self.refusals_not_a_file,
            "internal_errors": self.internal,
            "poll_s_max": round(max(self.poll_s), 3) if self.poll_s else None,
            "by_class": {k: dict(v) for k, v in sorted(self.by_class.items())},
            "unexpected": self.unexpected[:20],
            "invalid_examples": self.invalid[:10],
        }


def outcome_of(events: list[dict[str, Any]]) -> str:
    if any(e.get("status") == "rejected" for e in events):
        return "refused"
    if any(e.get("status") == "accepted" for e in events):
        return "accepted"
    return "unobserved"


def slot_events(events: list[dict[str, Any]], slot: str) -> list[dict[str, Any]]:
    return [e for e in events if str(e.get("file") or "").endswith("/" + slot)]


def hand_events(events: list[dict[str, Any]], slot: str) -> list[dict[str, Any]]:
    """The events of a hand edit of ``slot`` (the watcher's, author human), not the CLI's."""
    return [e for e in slot_events(events, slot) if e.get("author") == "human"]


def reference_store(root: Path) -> KnobStore:
    return open_store(copy_defaults(root / "reference"), events_path=None)


# ---------------------------------------------------------------------- store phase
def cli_write(store: KnobStore, edit: Edit) -> tuple[str, list[dict[str, Any]]]:
    """What ``eau knobs set`` does with an edit, in process: parse the value (bounded), then ``set``."""
    knob, text, gym = edit.cli
    try:
        value = yamlio.plain(yamlio.parse_text(Path("<value>"), text))
    except yamlio.FileProblem:
        return "refused", []  # the CLI answers a usage error (exit 2) naming the value
    res = store.set(knob, value, gym=gym, author="agent", reason="hostile-edit benchmark")
    return ("accepted" if res.ok else "refused"), res.events


def poll_bounded(store: KnobStore, step: int) -> tuple[Any, float]:
    """``store.poll`` in a thread with a time limit (a hang is reported, never waited out)."""
    out: dict[str, Any] = {}
    th = threading.Thread(target=lambda: out.setdefault("res", store.poll(step, [])), daemon=True)
    t0 = time.monotonic()
    th.start()
    th.join(POLL_LIMIT_S)
    return out.get("res"), time.monotonic() - t0


def store_phase(root: Path, n_edits: int, seed: int) -> dict[str, Any]:
    """Edits against a KnobStore directly (a live run's store: run gyms and facts set), polled after each batch."""
    root.mkdir(parents=True, exist_ok=True)
    kdir = prepare_knobs(root)
    log = root / "knob_events.jsonl"
    store = open_store(kdir, events_path=log, run_gyms=["intention"], debounce_s=0.0)
    store.run_facts = {"llm_user": False, "config": "the benchmark run"}
    reference = reference_store(root)
    base = read_base(kdir)
    gen = Generator(base, seed=seed, tmp=root)
    tally = Tally()
    step = 0
    for batch in gen.batches(n_edits):
        step += 1
        store.current_step = step
        seen = len(jsonl.read(log)) if log.exists() else 0
        for edit in [e for e in batch if e.via == "cli"]:
            outcome, events = cli_write(store, edit)
            tally.outcome(edit, outcome)
        files = [e for e in batch if e.via == "file"]
        for edit in files:
            apply_file_edit(kdir, edit)
            store.mark_dirty(kdir / edit.slot, t=0)
        res, dt = poll_bounded(store, step)
        tally.poll_s.append(dt)
        if res is None:
            tally.hangs += 1
            break
        events = jsonl.read(log)[seen:]
        tally.refusal_events(events)
        for edit in files:
            outcome = outcome_of(slot_events(res.applied + res.refused, edit.slot))
            tally.outcome(edit, outcome)
            if outcome == "accepted":
                base[edit.slot] = edit.content.decode()
                gen.base[edit.slot] = base[edit.slot]
        tally.check(reference, store.in_force_document())
        restore_slots(kdir, base)
        for slot in SLOTS:
            store.mark_dirty(kdir / slot, t=0)
        store.poll(step, [])
    return tally.figures()


# ---------------------------------------------------------------------- live phase
def _status(run_dir: Path) -> dict[str, Any]:
    try:
        return json.loads((run_dir / "status.json").read_text())
    except (OSError, ValueError):
        return {}


def run_cli_set(env: dict[str, str], edit: Edit) -> tuple[str, int, str]:
    knob, text, gym = edit.cli
    cmd = [
        sys.executable,
        "-m",
        "harness.cli.main",
        "knobs",
        "set",
        knob,
        text,
        "--reason",
        "hostile-edit benchmark",
        "--author",
        "agent",
    ] + (["--gym", gym] if gym else [])
    try:
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=CLI_LIMIT_S, cwd=REPO)
    except subprocess.TimeoutExpired:
        return "hang", -1, ""
    outcome = "accepted" if out.returncode == 0 else "refused" if out.returncode in (2, 3) else f"exit {out.returncode}"
    return outcome, out.returncode, out.stderr


def live_phase(root: Path, n_edits: int, seed: int, steps: int) -> dict[str, Any]:
    """One live tiny run; batches of edits between its step boundaries; the run stopped (SIGTERM) after."""
    root.mkdir(parents=True, exist_ok=True)
    kdir, rdir = prepare_knobs(root), root / "runs"
    rdir.mkdir(exist_ok=True)
    env = {**os.environ, "EAU_KNOBS_DIR": str(kdir), "EAU_RUNS_DIR": str(rdir), "PYTHONPATH": str(REPO)}
    run_dir = rdir / "hostile"
    reference = reference_store(root)
    tally = Tally()
    t_start = time.monotonic()
    err = open(root / "train.stderr", "w")
    train = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "harness.cli.main",
            "train",
            "--preset",
            "tiny",
            "--steps",
            str(steps),
            "--run-id",
            "hostile",
            "--no-progress",
            *TINY_FAST,
        ],
        env=env,
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=err,
    )
    try:
        while _status(run_dir).get("step") is None or not (run_dir / "knob_events.jsonl").exists():
            if train.poll() is not None:
                tally.crashes += 1
                return {
                    **tally.figures(),
                    "error": "the run did not start",
                    "stderr": (root / "train.stderr").read_text()[-2000:],
                }
            if time.monotonic() - t_start > 3 * BOUNDARY_LIMIT_S:  # a slow start on a loaded machine is no crash
                return {
                    **tally.figures(),
                    "error": f"the run had not started after {3 * BOUNDARY_LIMIT_S:.0f} s",
                    "stderr": (root / "train.stderr").read_text()[-2000:],
                }
            time.sleep(0.5)
        own = run_dir / "knobs"  # the run's own folder, made from kdir and the preset's values: edits go there
        base = read_base(own)
        gen = Generator(base, seed=seed, tmp=root)
        log = run_dir / "knob_events.jsonl"
        cli_returncodes: Counter = Counter()
        for batch in gen.batches(n_edits):
            if train.poll() is not None:
                break
            cli_seen = len(jsonl.read(log))
            # `eau knobs set` first, on a folder whose files are valid (the CLI checks the whole folder)
            for edit in [e for e in batch if e.via == "cli"]:
                outcome, rc, stderr = run_cli_set(env, edit)
                cli_returncodes[rc] += 1
                tally.hangs += outcome == "hang"
                if "Traceback" in stderr:
                    tally.unexpected.append(f"traceback from {edit.describe()}: {stderr[-300:]}")
                tally.outcome(edit, outcome)
            tally.refusal_events(jsonl.read(log)[cli_seen:])  # the CLI's refusals, logged to the run
            # the hand edits' window starts after the CLI's events, so a CLI refusal naming the same
            # file is never read as the hand edit's outcome
            seen = len(jsonl.read(log))
            step0 = _status(run_dir).get("step") or 0
            files = [e for e in batch if e.via == "file"]
            for edit in files:
                apply_file_edit(own, edit)
            # wait for the run's next boundaries to report every edited file (bounded)
            t0 = time.monotonic()
            pending = {e.slot for e in files}
            while pending:
                events = jsonl.read(log)[seen:]
                pending = {s for s in pending if not hand_events(events, s)}
                step = _status(run_dir).get("step") or 0
                if not pending or train.poll() is not None or (step >= step0 + 3 and time.monotonic() - t0 > 20):
                    break  # (an edit no boundary reports after 3 steps and 20 s is counted as unobserved)
                if time.monotonic() - t0 > BOUNDARY_LIMIT_S:
                    tally.hangs += 1
                    break
                time.sleep(0.3)
            events = jsonl.read(log)[seen:]
            tally.refusal_events(events)
            for edit in files:
                outcome = outcome_of(hand_events(events, edit.slot))
                tally.outcome(edit, outcome)
                # only an edit meant to be valid becomes the base the next restore writes back: a
                # hostile file taken for accepted (a mis-read window) must never become the base
                if outcome == "accepted" and edit.expect == "accept":
                    base[edit.slot] = edit.content.decode()
                    gen.base[edit.slot] = base[edit.slot]
            doc = json.loads((run_dir / "knobs_in_force.json").read_text())
            tally.check(reference, doc)
            restore_slots(own, base)
            # let a boundary take the restored files (their events, e.g. a schema reloaded, belong to no edit)
            t0, step0 = time.monotonic(), _status(run_dir).get("step") or 0
            while (
                (_status(run_dir).get("step") or 0) < step0 + 2 and time.monotonic() - t0 < 60 and train.poll() is None
            ):
                time.sleep(0.2)
        train.send_signal(signal.SIGTERM)
        try:
            rc = train.wait(BOUNDARY_LIMIT_S)
        except subprocess.TimeoutExpired:
            tally.hangs += 1
            train.kill()
            rc = train.wait()
    finally:
        if train.poll() is None:
            train.kill()
            train.wait()
        err.close()
    state = _status(run_dir).get("state")
    stderr = (root / "train.stderr").read_text()
    if state not in ("finished", "interrupted") or "Traceback" in stderr:
        tally.crashes += 1
    figures = tally.figures()
    figures.update(
        {
            "run_state": state,
            "run_returncode": rc,
            "run_steps": _status(run_dir).get("step"),
            "cli_returncodes": dict(cli_returncodes),
            "seconds": round(time.monotonic() - t_start, 1),
            "log_refusals": sum("REFUSED" in line for line in (run_dir / "log.txt").read_text().splitlines()),
        }
    )
    return figures


def total(phases: list[dict[str, Any]]) -> dict[str, Any]:
    keys = [
        "edits",
        "crashes",
        "hangs",
        "invalid_values_in_force",
        "refusals",
        "refusals_with_file_and_line",
        "refusals_of_non_files",
        "internal_errors",
    ]
    out = {k: sum(p.get(k, 0) for p in phases) for k in keys}
    classes: Counter = Counter()
    for p in phases:
        for cls, c in p.get("by_class", {}).items():
            classes[cls] += sum(c.values())
    out["classes"] = dict(sorted(classes.items()))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store-edits", type=int, default=300, help="edits against a KnobStore directly")
    ap.add_argument("--live-runs", type=int, default=2, help="live tiny runs")
    ap.add_argument("--live-edits", type=int, default=500, help="edits per live run")
    ap.add_argument(
        "--steps", type=int, default=400, help="step limit of each live run (it is stopped when its edits are done)"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--keep", type=Path, default=None, help="work in this folder and keep it (runs, knobs, logs)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="eau-hostile-") as tmp:
        root = args.keep or Path(tmp)
        store = store_phase(root / "store", args.store_edits, args.seed) if args.store_edits else None
        if store:
            (root / "store.json").write_text(json.dumps(store, indent=1))  # each phase's figures as soon as it ends
        live = []
        for i in range(args.live_runs):
            live.append(live_phase(root / f"live{i}", args.live_edits, args.seed + 1 + i, args.steps))
            (root / f"live{i}.json").write_text(json.dumps(live[-1], indent=1))
    phases = ([store] if store else []) + live
    live_total = total(live)
    print(
        json.dumps(
            {
                "benchmark": "hostile knob and rule edits",
                "args": {k: str(v) for k, v in vars(args).items()},
                "live_total": live_total,
                "all_total": total(phases),
                "store": store,
                "live": live,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
