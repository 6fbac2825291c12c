"""A run's side of the knobs folder: the values it lends, the changes it applies at step boundaries,
and what it gives back or keeps when it ends (harness.knobs.lease, harness.knobs.store).

Process 0 owns it; the other processes receive each step's snapshot from the trainer."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable, Mapping

from harness.io import jsonl
from harness.io.yamlio import atomic_write_text
from harness.knobs.events import KnobEvent
from harness.knobs.lease import Lease, give_back, lease_is_live, lend, read_lease, settle_stale_lease
from harness.knobs.run_checks import facts_from_config
from harness.knobs.snapshot import KnobSnapshot
from harness.knobs.store import KnobStore

NOT_APPLIED = "knobs_not_applied.json"  # in a run folder: writes accepted for the run that it never applied


def lent_values(agent_knobs: Mapping[str, Any] | None, env_knobs: Mapping[str, Any] | None,
                knob_state: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The knob values a run sets (its config's ``agent_knobs`` / ``env_knobs``, by full name); with
    ``knob_state`` (a checkpoint's, on resume) the values it had in force for those knobs instead."""
    values = {f"agent.{k}": v for k, v in (agent_knobs or {}).items()}
    values.update({f"env.{k}": v for k, v in (env_knobs or {}).items()})
    in_force = (knob_state or {}).get("values") or {}
    for name in values:
        area, _, knob = name.partition(".")
        if knob in in_force.get(area, {}):
            values[name] = in_force[area][knob]
    return values


class RunKnobs:
    """The knob store of one run and its lease on the knobs folder."""

    def __init__(self, knobs_dir: Path, run_id: str, run_dir: Path, gyms: list[str],
                 note: Callable[[str], None] = lambda m: None, config: Mapping[str, Any] | None = None):
        """``config``: the run's config as a mapping (what the store checks values against: a value
        this run cannot work with, such as an LLM-user share without ``user_llm``, is refused)."""
        self.dir, self.run_id, self.run_dir, self.gyms = Path(knobs_dir), run_id, Path(run_dir), list(gyms)
        self.note = note  # a line for the person watching (before the run folder exists too)
        self.facts = facts_from_config(config or {}, str(self.run_dir / "config.yaml")) if config is not None else None
        self.store = self._open()  # events in memory until the run folder exists (attach)
        self.lease: Lease | None = None
        self.writer: Any = None

    def _open(self) -> KnobStore:
        store = KnobStore(self.dir, events_path=None, run_gyms=self.gyms)
        store.live_run = True
        store.run_facts = self.facts
        return store

    # ------------------------------------------------------------------ start
    def lend(self, values: Mapping[str, Any], reason: str) -> None:
        """Lend ``values`` to the folder: a lease left by a run that died is given back first; a lease
        of another live run is refused (ValueError naming it); a lease of this run (killed, now resumed)
        keeps the values it recorded from before the run."""
        held = read_lease(self.dir)
        if held is not None and held.run_id != self.run_id:
            if lease_is_live(held):
                raise ValueError(f"run {held.run_id} (pid {held.pid}) is live on the knobs folder {self.dir}; a "
                                 "second run needs a knobs folder of its own: --knobs-dir DIR (eau knobs init DIR)")
            settle_stale_lease(self.dir, log=self.note)
            self.store = self._open()
            held = None
        self.lease = held or Lease(run_id=self.run_id, run_dir=str(self.run_dir.resolve()), pid=os.getpid())
        self.lease.pid = os.getpid()
        try:
            lend(self.store, self.lease, values, reason=reason)
            problems = self.store.run_problems()
            if problems:  # refused now rather than fatal at the first reset
                raise ValueError("; ".join(problems))
        except ValueError:
            self.give_back(f"run {self.run_id} did not start: lent values given back")
            raise

    def attach(self, writer: Any, resumed: bool) -> None:
        """From now on events go to the run folder (with those logged before it existed)."""
        self.writer = writer
        self.store.attach_log(self.run_dir / "knob_events.jsonl")
        if not resumed:
            writer.knobs_in_force(self.store.in_force_document())
        changed = [f"{k} {json.dumps(v['before'])} -> {json.dumps(v['lent'])}"
                   for k, v in (self.lease.knobs if self.lease else {}).items() if v["before"] != v["lent"]]
        if changed:
            writer.log(f"knobs lent to this run (given back when it ends): {'; '.join(changed)}")

    def restore(self, knob_state: Mapping[str, Any] | None, start_step: int) -> None:
        """Resume: the checkpoint's values in force, then the writes the run had accepted but not applied
        when it ended, written again (the first step boundary applies them with their author and reason)."""
        self.store.restore(knob_state)
        path = self.run_dir / NOT_APPLIED
        if not path.is_file():
            return
        for w in json.loads(path.read_text()):
            res = self.store.set(w["knob"], w["written"], gym=w["gym"], author=w["author"], reason=w["reason"],
                                 step_written=start_step, run_live=True, source=w.get("source") or "cli",
                                 skip_requires=True)
            state = "written again" if res.ok else f"refused now: {res.event.get('message')}"
            self.writer.log(f"knob {w['knob']} = {json.dumps(w['written'])} (not applied before the run ended): {state}")
        path.unlink()

    # ------------------------------------------------------------------ every step
    def poll(self, step: int, window: int, first: bool) -> tuple[KnobSnapshot, int]:
        """Apply the changes waiting at this step boundary (``first``: compare every file with the values
        in force); log each applied and refused one. Returns the snapshot in force and how many applied."""
        self.store.current_step = step
        recent = jsonl.tail(self.run_dir / "metrics.jsonl", window)
        res = self.store.poll(step, recent, rescan=first)
        for e in res.applied:
            self.writer.log(f"knob {e['knob']}{'[' + e['gym'] + ']' if e.get('gym') else ''} "
                            f"{e.get('old')} -> {e.get('new')} in force from step {step} ({e['author']}: {e['reason']})")
        for e in res.refused:
            self.writer.log(f"knob edit REFUSED {e['knob']} ({e.get('rule')}): {e.get('message')}")
        if res.applied or res.refused or first:
            self.writer.knobs_in_force(self.store.in_force_document())
        return self.store.snapshot(), len(res.applied)

    # ------------------------------------------------------------------ end
    def end(self) -> None:
        """However the run ends: report the writes it accepted but never applied (kept in
        ``knobs_not_applied.json`` for a resume), then give the lent values back to the folder."""
        try:
            left = self.store.unapplied_writes()
        except Exception as exc:  # a report must not hide the run's own error
            left = []
            self.note(f"knobs: could not check for unapplied writes: {exc}")
        if left and self.writer is not None:
            for w in left:
                rec = self.store.log.append(KnobEvent(
                    knob=w["knob"], gym=w["gym"], old=w["in_force"], new=w["written"], author=w["author"],
                    reason=w["reason"], status="not_applied", source=w["source"], file=w["file"],
                    step_written=w["step_written"], message="accepted for this run, which ended before its next step "
                    "boundary: `eau train --resume` applies it"))
                w["event"] = rec["id"]
                self.writer.log(f"knob {w['knob']}{'[' + w['gym'] + ']' if w['gym'] else ''} = "
                                f"{json.dumps(w['written'])} NOT APPLIED: the run ended before its next step boundary "
                                f"({w['author']}: {w['reason']}); `eau train --resume {self.run_id}` applies it")
            atomic_write_text(self.run_dir / NOT_APPLIED, json.dumps(left, indent=1, default=str))
        self.give_back(f"run {self.run_id} ended: the values it lent go back")

    def give_back(self, reason: str) -> None:
        if self.lease is None:
            return
        back = give_back(self.store, self.lease, reason=reason)
        self.lease = None
        given = [f"{e['knob']} -> {json.dumps(e['new'])}" for e in back if e.get("status") == "accepted"]
        if given and self.writer is not None:
            self.writer.log(f"knobs given back to {self.dir}: {'; '.join(given)}")
