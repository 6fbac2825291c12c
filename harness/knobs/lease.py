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
"""

from __future__ import annotations

import json
import socket
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from harness.io import yamlio
from harness.io.processes import pid_alive, pid_namespace, sees_pid_namespace

LEASE_FILE = ".lease.json"


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


def settle_stale_lease(knobs_dir: Path, log: Callable[[str], None] = lambda m: None) -> Lease | None:
    """Give back the lease of a run that ended without giving it back (SIGKILL, power loss). Returns
    the settled lease (None when there was none, or its run is still live)."""
    from harness.knobs.store import KnobStore

    lease = read_lease(knobs_dir)
    if lease is None or lease_is_live(lease):
        return None
    events_path = Path(lease.run_dir) / "knob_events.jsonl" if Path(lease.run_dir).is_dir() else "auto"
    store = KnobStore(knobs_dir, events_path=events_path)
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
