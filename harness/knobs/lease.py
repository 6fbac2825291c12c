"""A run's own knob values are *lent* to the knobs folder for the run's lifetime, then given back.

A preset (and ``--config`` / ``--set agent_knobs.*`` / ``env_knobs.*``) chooses knob values for one
run. While the run is live they are written into the knob files, so the files show what is in
force and a person or agent edits them there as usual. When the run ends — finished, failed,
interrupted, or at the next ``eau`` command after a SIGKILL — every lent knob gets back the value it
had before the run, so a run never changes the folder's defaults for the commands after it. What
belongs to the run (its preset values, the changes made to them while it ran, writes it never
applied) stays in the run folder, and ``eau train --resume`` / ``--from`` start from there.

The lease file (``<knobs>/.lease.json``) is written before the first value is lent, so a crash at
any point leaves a record to give back from::

    {"run_id": "...", "run_dir": "/abs/runs/...", "pid": 123, "host": "...", "pid_ns": "pid:[...]",
     "knobs": {"agent.lr": {"before": 1e-05, "lent": 0.0001}, ...}}

``before`` and ``lent`` are raw values (a scalar, or a per-gym mapping).

Whenever the values go back while the run folder exists (the run ended, or a later command settles
the lease of a killed run), :func:`hand_over` first leaves in the run folder what a resume needs to
go on where the run stopped, with every write's author, reason and event id:

* ``knobs_not_applied.json``: the writes the files hold that the run accepted but never applied (a
  CLI write waiting for a step boundary, a hand edit not yet polled), each also logged as a
  ``not_applied`` event under its id; the resume writes them again;
* ``knobs_handed_back.json``: the values the run had in force for the knobs it lent (the resume lends
  those, so a write applied after the last checkpoint is not undone), and where the folder's history
  and the run's knob log ended, so that the resume applies the writes made while no run was live
  (``eau knobs set`` with no run, after a kill) under their ids rather than as anonymous hand edits::

    {"time": "...", "run_id": "...", "lent": {"agent.lr": 0.0001, ...},
     "history_offset": 1234, "log_offset": 5678}
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from harness.io import yamlio
from harness.io.processes import pid_alive, pid_namespace, sees_pid_namespace
from harness.knobs.events import KnobEvent, new_id, not_applied_event, now_iso

LEASE_FILE = ".lease.json"
NOT_APPLIED = "knobs_not_applied.json"  # in a run folder: writes accepted for the run that it never applied
HANDED_BACK = "knobs_handed_back.json"  # in a run folder: where the run stood when its lent values went back
KNOB_LOG = "knob_events.jsonl"
HISTORY = Path(".history") / "knob_events.jsonl"  # in a knobs folder: events of writes made with no run live
LOCK_FILE = ".lease.lock"  # in a knobs folder: held while a command writes for a run, or a run hands over

_held: dict[str, list[int]] = {}  # lock path -> [fd, depth] held by this process
_held_guard = threading.Lock()


@contextlib.contextmanager
def folder_lock(knobs_dir: Path):
    """Hold the knobs folder's lock (``<knobs>/.lease.lock``, an exclusive ``flock``) for the block.

    A command that writes for a live run holds it from deciding the run is live (its lease is in the
    folder) to the write's note and file; a run holds it while it hands over and gives its values back
    (and a command while it settles a killed run's lease). So a write is either seen by the hand-over
    of the run it was made for, or made after the lease was gone, as a write with no run live.
    Re-entrant within a process; a killed holder's lock is released by the kernel."""
    path = os.path.abspath(Path(knobs_dir) / LOCK_FILE)
    with _held_guard:
        entry = _held.get(path)
        if entry is not None:
            entry[1] += 1
    if entry is None:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:  # a folder this process cannot write: it writes nothing there either
            yield
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except BaseException:
            os.close(fd)
            raise
        with _held_guard:
            _held[path] = [fd, 1]
    try:
        yield
    finally:
        with _held_guard:
            entry = _held[path]
            entry[1] -= 1
            done = entry[1] == 0
            if done:
                del _held[path]
        if done:
            fcntl.flock(entry[0], fcntl.LOCK_UN)
            os.close(entry[0])


@dataclass
class Lease:
    """The knobs a run has lent to a knobs folder (see the module docstring)."""

    run_id: str
    run_dir: str
    pid: int
    host: str = field(default_factory=socket.gethostname)
    knobs: dict[str, dict[str, Any]] = field(default_factory=dict)  # full name -> {"before", "lent"}
    pid_ns: str | None = field(default_factory=pid_namespace)  # the holder's PID namespace

    def save(self, knobs_dir: Path) -> None:
        yamlio.atomic_write_text(Path(knobs_dir) / LEASE_FILE, json.dumps(asdict(self), indent=1, default=str))


def read_lease(knobs_dir: Path) -> Lease | None:
    """The folder's lease, or None (an unreadable lease file is treated as none and reported by the caller)."""
    path = Path(knobs_dir) / LEASE_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return Lease(**{k: data[k] for k in ("run_id", "run_dir", "pid", "host", "knobs")}, pid_ns=data.get("pid_ns"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def lease_is_live(lease: Lease) -> bool:
    """Whether the run that holds ``lease`` is still running (its trainer process exists on this host).
    From another PID namespace than the holder's the process cannot be seen: the lease is taken as
    live (settling it is destructive; a reader in the holder's namespace settles a stale one)."""
    if lease.host != socket.gethostname():
        return False
    return not sees_pid_namespace(lease.pid_ns) or pid_alive(lease.pid)


def lend(store: Any, lease: Lease, values: Mapping[str, Any], *, reason: str) -> list[dict[str, Any]]:
    """Write ``values`` (full knob name -> raw value) into the folder for the run of ``lease``,
    recording each knob's value before (kept from an earlier lease of the same run on resume).
    Goes through the store's validation path (author system; schema, range and gym checks apply,
    per-write limits and metric requirements do not). ValueError naming the knob when one is refused."""
    events = []
    for name, value in values.items():
        before = store.raw(name)
        if name not in lease.knobs:
            lease.knobs[name] = {"before": before, "lent": value}
        else:
            lease.knobs[name]["lent"] = value
        lease.save(store.dir)  # before the file changes: a crash now still knows what to give back
        if before == value:
            continue
        # a scalar sets the global/default value (per-gym values of other gyms stay); a mapping is the whole value
        res = store.set(
            name,
            value,
            author="system",
            reason=reason,
            skip_requires=True,
            skip_delta=True,
            source="system",
            whole=isinstance(value, Mapping),
        )
        if not res.ok:
            raise ValueError(f"{name}={value!r} refused: {res.event['message']}")
        lease.knobs[name]["lent"] = store.raw(name)  # the whole value now in force (a scalar sets the default)
        lease.save(store.dir)
        events += res.events
    return events


def give_back(store: Any, lease: Lease, *, reason: str) -> list[dict[str, Any]]:
    """Write every lent knob's value from before the run back into the folder (over any write the
    run accepted but never applied: that one stays with the run) and drop the lease. A knob whose
    schema no longer accepts its old value keeps the current one (a rejected event)."""
    events = []
    for name, rec in lease.knobs.items():
        try:
            ev = store.put(name, rec["before"], author="system", reason=reason)
        except KeyError:
            continue  # the knob was removed from the schema meanwhile
        if ev is not None:
            events.append(ev)
    (Path(store.dir) / LEASE_FILE).unlink(missing_ok=True)
    return events


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def log_line(run_dir: Path, line: str) -> None:
    """A line in a run's ``log.txt`` (the format of harness.runs.writer), from outside the run."""
    with open(Path(run_dir) / "log.txt", "a", encoding="utf-8") as f:
        f.write(f"{now_iso()} {line.rstrip()}\n")


def hand_over(store: Any, run_dir: Path, lease: Lease, log: Callable[[str], None]) -> list[dict[str, Any]]:
    """Leave in ``run_dir`` what a resume needs (see the module docstring) before the lent values go back.
    ``store`` holds the run's values in force and logs to the run's knob log. Returns the unapplied writes."""
    run_dir = Path(run_dir)
    earlier = _read_json(run_dir / HANDED_BACK)
    left = store.unapplied_writes(take=False)  # notes are dropped once the file below is written
    if earlier is not None:
        # a resume that ended (killed) before it took up the last hand-over: it ran no step, and that
        # hand-over still says where the run stood. Of what the files hold now, only writes made for
        # that resume while it was live (each with its note and id) are new; the writes made while no
        # run was live are found again after the earlier offsets.
        left = [w for w in left if w["id"]]
    for w in left:
        rec = store.log.append(
            KnobEvent(
                id=w["id"] or new_id(),
                knob=w["knob"],
                gym=w["gym"],
                old=w["in_force"],
                new=w["written"],
                author=w["author"],
                reason=w["reason"],
                status="not_applied",
                source=w["source"],
                file=w["file"],
                step_written=w["step_written"],
                message="accepted for this run, which ended before its next step "
                "boundary: `eau train --resume` applies it",
            )
        )
        w["event"] = w["id"] = rec["id"]
        log(
            f"knob {w['knob']}{'[' + w['gym'] + ']' if w['gym'] else ''} = "
            f"{json.dumps(w['written'])} NOT APPLIED: the run ended before its next step boundary "
            f"({w['author']}: {w['reason']}); `eau train --resume {lease.run_id}` applies it"
        )
    if left:
        path = run_dir / NOT_APPLIED
        try:  # a resume killed before it wrote them again left some: keep those too
            kept = [w for w in json.loads(path.read_text()) if w.get("id") not in {x["id"] for x in left}]
        except (OSError, ValueError, TypeError, AttributeError):
            kept = []
        yamlio.atomic_write_text(path, json.dumps(kept + left, indent=1, default=str))
        for w in left:
            store.drop_attribution(w["knob"], w["gym"], w["written"])
    for note in store.waiting_notes():
        # a write accepted for this run whose value the files no longer hold (a later write or a hand edit
        # replaced it before a step boundary applied it): it never will be; say so under its id
        store.log.append(
            not_applied_event(
                note,
                "accepted for this run, but the file no longer held this value when the run ended "
                "(replaced before a step boundary applied it): never applied",
            )
        )
        store.drop_attribution(note["knob"], note.get("gym"), note.get("new"))
        log(
            f"knob {note['knob']} = {json.dumps(note.get('new'))} ({note.get('id')}, {note['author']}: "
            f"{note['reason']}) NOT APPLIED: replaced in the file before the run applied it"
        )
    doc = {
        "time": now_iso(),
        "run_id": lease.run_id,
        "lent": {name: store.raw(name) for name in lease.knobs if _known(store, name)},
        "history_offset": _size(Path(store.dir) / HISTORY),
        "log_offset": _size(run_dir / KNOB_LOG),
    }
    if earlier is not None:
        doc.update({k: earlier[k] for k in ("lent", "history_offset", "log_offset") if k in earlier})
    yamlio.atomic_write_text(run_dir / HANDED_BACK, json.dumps(doc, indent=1, default=str))
    return left


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _known(store: Any, name: str) -> bool:
    try:
        store.spec(name)
        return True
    except KeyError:
        return False


def settle_stale_lease(knobs_dir: Path, log: Callable[[str], None] = lambda m: None) -> Lease | None:
    """Give back the lease of a run that ended without giving it back (SIGKILL, power loss), after
    handing its unapplied writes and its values in force to its run folder (:func:`hand_over`), as the
    run itself would have done at its end. Returns the settled lease (None when there was none, or its
    run is still live)."""
    lease = read_lease(knobs_dir)
    if lease is None or lease_is_live(lease):
        return None
    with folder_lock(knobs_dir):  # checked again under the lock: another command may have settled it
        return _settle_stale_lease(knobs_dir, log)


def _settle_stale_lease(knobs_dir: Path, log: Callable[[str], None]) -> Lease | None:
    from harness.knobs.store import KnobStore

    lease = read_lease(knobs_dir)
    if lease is None or lease_is_live(lease):
        return None
    run_dir = Path(lease.run_dir)
    events_path = run_dir / KNOB_LOG if run_dir.is_dir() else "auto"
    store = KnobStore(knobs_dir, events_path=events_path)
    if run_dir.is_dir():
        try:
            in_force = json.loads((run_dir / "knobs_in_force.json").read_text(encoding="utf-8"))["values"]
        except (OSError, ValueError, KeyError, TypeError):
            # killed before its first step boundary: what it had in force is what it lent
            in_force = {}
            for name, rec in lease.knobs.items():
                area, _, knob = name.partition(".")
                in_force.setdefault(area, {})[knob] = rec.get("lent")
        if isinstance(in_force, dict):
            store.load_in_force(in_force)
        hand_over(store, run_dir, lease, log=lambda m: log_line(run_dir, m))
    back = give_back(
        store,
        lease,
        reason=f"run {lease.run_id} ended without giving its knob values back "
        "(killed?): the values from before it are restored",
    )
    names = sorted(lease.knobs)
    log(
        f"knobs: run {lease.run_id} is no longer running and had lent {', '.join(names) or 'no knobs'}; "
        f"their values from before it are back in {knobs_dir} ({len(back)} change(s))"
    )
    return lease
