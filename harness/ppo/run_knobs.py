"""A run's side of the knobs folder: the values it lends, the changes it applies at step boundaries,
and what it gives back or keeps when it ends (harness.knobs.lease, harness.knobs.store).

Process 0 owns it; the other processes receive each step's snapshot from the trainer."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any, Callable, Mapping

from harness.envs.registry import gym_class
from harness.gyms import BUILTIN_GYMS
from harness.io import jsonl
from harness.io.processes import pid_namespace
from harness.io.yamlio import atomic_write_text
from harness.knobs.events import EventLog, KnobEvent, not_applied_event
from harness.knobs.lease import (
    HANDED_BACK,
    HISTORY,
    KNOB_LOG,
    NOT_APPLIED,
    Lease,
    folder_lock,
    give_back,
    hand_over,
    lease_is_live,
    lend,
    read_lease,
    settle_stale_lease,
)
from harness.knobs.run_checks import facts_from_config
from harness.knobs.snapshot import AREAS, KnobSnapshot, resolve
from harness.knobs.store import KnobStore
from harness.plugins.folder import PluginFolder
from harness.ppo import checkpoint

PLUGIN_REPLAY_STEPS = 3  # recent steps of recorded episodes a plug-in's gate replays
AT_START = "knobs_at_start.json"  # in a run folder: the knob state its step 0 ran with (a resume with no
# checkpoint starts from it)


def writes_to_apply_again(records: list[dict[str, Any]], start_step: int) -> list[dict[str, Any]]:
    """The knob and rule writes a resumed run must apply again: those whose last record says they were
    applied live at ``start_step`` or later (the steps the resume runs again). Schema reloads are not
    among them: a run loads the schemas the folder holds."""
    last: dict[str, dict[str, Any]] = {}
    for rec in records:
        if rec.get("id"):
            last.pop(rec["id"], None)
            last[rec["id"]] = rec  # in log order of the last record
    return [
        r
        for r in last.values()
        if r.get("status") == "accepted"
        and r.get("applies") == "live"
        and isinstance(r.get("step_effective"), int)
        and r["step_effective"] >= start_step
        and not str(r.get("knob", "")).startswith(("schema.", "plugins."))  # plug-ins: gated again from the files
        and r.get("author") in ("human", "agent", "system")
        and r.get("reason")
    ]


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _records_between(path: Path, start: int, end: int) -> list[dict[str, Any]]:
    """The complete JSON records of ``path`` between byte offsets ``start`` and ``end``."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, start))
            data = f.read(max(0, end - start))
    except OSError:
        return []
    out = []
    for line in data.split(b"\n")[:-1]:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


def writes_with_no_run(records: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Among knob events logged while no run was live (the folder's history, or a stopped run's log
    through ``--run``), the accepted writes of knob cells by a person or an agent: (the last of each
    cell, unless a later system write such as a run lending or giving back values replaced it; the
    others, replaced by a later write). Rule and schema files are not among them (a resume reads those
    as they are)."""

    def by_someone(r: Mapping[str, Any]) -> bool:
        return (
            r.get("author") in ("human", "agent")
            and r.get("source") in ("cli", "revert", "watch")
            and r.get("applies") == "live"
            and bool(r.get("reason"))
            and bool(r.get("id"))
        )

    last: dict[tuple[str, Any], dict[str, Any]] = {}
    replaced: list[dict[str, Any]] = []
    for r in records:
        knob = str(r.get("knob", ""))
        if r.get("status") != "accepted" or knob.partition(".")[0] not in AREAS:
            continue
        prev = last.pop((knob, r.get("gym")), None)
        if prev is not None and by_someone(prev) and prev.get("id") != r.get("id"):
            replaced.append({**prev, "_by": r})
        last[(knob, r.get("gym"))] = r
    return [r for r in last.values() if by_someone(r)], replaced


def lent_values(
    agent_knobs: Mapping[str, Any] | None,
    env_knobs: Mapping[str, Any] | None,
    knob_state: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
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

    def __init__(
        self,
        knobs_dir: Path,
        run_id: str,
        run_dir: Path,
        gyms: list[str],
        note: Callable[[str], None] = lambda m: None,
        config: Mapping[str, Any] | None = None,
    ):
        """``config``: the run's config as a mapping (what the store checks values against: a value
        this run cannot work with, such as an LLM-user share without ``user_llm``, is refused)."""
        self.dir, self.run_id, self.run_dir, self.gyms = Path(knobs_dir), run_id, Path(run_dir), list(gyms)
        self.note = note  # a line for the person watching (before the run folder exists too)
        self.facts = facts_from_config(config or {}, str(self.run_dir / "config.yaml")) if config is not None else None
        self.store = self._open()  # events in memory until the run folder exists (attach)
        self.plugins = PluginFolder(self.dir, lambda: self.store.log)  # knobs/plugins/*.py (harness.plugins)
        for name in BUILTIN_GYMS:  # every gym's override points declared, for the plug-in gate
            gym_class(name)
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
        keeps the values it recorded from before the run. Under the folder's lock (a command writing
        for a run decides under it whether a run holds the folder)."""
        with folder_lock(self.dir):
            self._lend(values, reason)

    def _lend(self, values: Mapping[str, Any], reason: str) -> None:
        held = read_lease(self.dir)
        resuming = (self.run_dir / "config.yaml").exists()
        if held is not None and held.run_id == self.run_id and resuming:
            # this run, killed, now resumed: the files hold what it lent and every write made since (the
            # first step boundary applies those with their authors); lend only what it had not lent yet
            values = {k: v for k, v in values.items() if k not in held.knobs}
        if held is not None and held.run_id != self.run_id:
            if lease_is_live(held):
                raise ValueError(
                    f"run {held.run_id} (pid {held.pid}) is live on the knobs folder {self.dir}; a "
                    "second run needs a knobs folder of its own: --knobs-dir DIR (eau knobs init DIR)"
                )
            settle_stale_lease(self.dir, log=self.note)
            self.store = self._open()
            held = None
        if held is None:
            self._retire_orphaned_notes()
        self.handed_back = self._handed_back() if resuming else None
        if self.handed_back and held is None:
            # this run's values went back to the folder when it ended (or when a command settled its lease
            # after a kill): lend what it had in force then, writes applied after its last checkpoint included
            values = {k: self.handed_back["lent"].get(k, v) for k, v in values.items()}
        # what the folder held before this resume lent anything (an attempt of it killed before its first
        # step boundary lent some already: their values from before are in its lease)
        self.folder_values = {spec.full_name: self.store.raw(spec.full_name) for spec in self.store.specs()}
        for name, rec in (held.knobs if held is not None else {}).items():
            self.folder_values[name] = rec.get("before")
        self.log_size_at_start = _size(self.run_dir / KNOB_LOG)  # what this attempt logs comes after
        self.lease = held or Lease(run_id=self.run_id, run_dir=str(self.run_dir.resolve()), pid=os.getpid())
        self.lease.pid, self.lease.pid_ns = os.getpid(), pid_namespace()
        self.lease.save(self.dir)  # the folder knows the live process even when nothing is lent again
        try:
            lend(self.store, self.lease, values, reason=reason)
            problems = self.store.run_problems()
            if problems:  # refused now rather than fatal at the first reset
                raise ValueError("; ".join(problems))
        except ValueError:
            self.give_back(f"run {self.run_id} did not start: lent values given back")
            raise

    def _retire_orphaned_notes(self) -> None:
        """No run holds the folder: a note left in ``.pending`` belongs to no live run (its run ended, or
        was settled, without matching it); log each in the folder's history under its id, then drop it.
        Notes of writes a killed resume was to apply again are dropped (its log has them; a resume of it
        writes them again)."""
        for rec in self.store.carried_over():
            self.store.drop_attribution(rec["knob"], rec.get("gym"), rec.get("new"))
        notes = self.store.waiting_notes()
        if not notes:
            return
        history = EventLog(self.dir / HISTORY)
        for note in notes:
            history.append(
                not_applied_event(
                    note,
                    f"found waiting in .pending when run {self.run_id} started: the run it was accepted "
                    "for ended without applying it",
                )
            )
            self.store.drop_attribution(note["knob"], note.get("gym"), note.get("new"))
            self.note(
                f"knobs: write {note.get('id')} ({note['knob']} = {json.dumps(note.get('new'))}) was left "
                "unapplied by an earlier run; logged as not_applied in the folder history"
            )

    def _handed_back(self) -> dict[str, Any] | None:
        try:
            doc = json.loads((self.run_dir / HANDED_BACK).read_text())
        except (OSError, ValueError):
            return None
        return doc if isinstance(doc, dict) and isinstance(doc.get("lent"), dict) else None

    def attach(self, writer: Any, resumed: bool) -> None:
        """From now on events go to the run folder (with those logged before it existed)."""
        self.writer = writer
        self.store.attach_log(self.run_dir / KNOB_LOG)
        if not resumed:
            writer.knobs_in_force(self.store.in_force_document())
            atomic_write_text(self.run_dir / AT_START, json.dumps(self.store.in_force_document(), default=str))
        changed = [
            f"{k} {json.dumps(v['before'])} -> {json.dumps(v['lent'])}"
            for k, v in (self.lease.knobs if self.lease else {}).items()
            if v["before"] != v["lent"]
        ]
        if changed:
            writer.log(f"knobs lent to this run (given back when it ends): {'; '.join(changed)}")

    def restore(self, knob_state: Mapping[str, Any] | None, start_step: int) -> None:
        """Resume: the checkpoint's values in force (with no checkpoint, those the run started with);
        the writes applied in the steps the resume runs again kept for the first step boundary, which
        applies them again under their event ids, authors and reasons; then the writes the run had
        accepted but not applied when it ended, written again (with their ids too)."""
        if knob_state is None and (self.run_dir / AT_START).is_file():
            knob_state = json.loads((self.run_dir / AT_START).read_text())
        self.store.restore(knob_state)
        self.plugins.start_note = f"when the run resumed at step {start_step} (gated again)"
        self._carry_over_applied(start_step)
        path = self.run_dir / NOT_APPLIED
        written_again: dict[tuple[str, Any], dict[str, Any]] = {}  # (knob, gym) -> the write, for a later one
        for w in json.loads(path.read_text()) if path.is_file() else []:
            written_again[(w["knob"], w["gym"])] = w
            res = self.store.set(
                w["knob"],
                w["written"],
                gym=w["gym"],
                author=w["author"],
                reason=w["reason"],
                step_written=start_step,
                run_live=True,
                source=w.get("source") or "cli",
                skip_requires=True,
                event_id=w.get("id") or w.get("event"),
            )
            state = "written again" if res.ok else f"refused now: {res.event.get('message')}"
            self.writer.log(
                f"knob {w['knob']} = {json.dumps(w['written'])} (not applied before the run ended): {state}"
            )
        path.unlink(missing_ok=True)
        self._apply_writes_with_no_run(start_step, written_again)

    def _apply_writes_with_no_run(self, start_step: int, written_again: Mapping[tuple[str, Any], Any]) -> None:
        """Resume after the run's values went back: the writes made while no run was live (in the folder's
        history, or in this run's log through ``--run``) that the folder still holds are written again
        for this run, under their ids, authors and reasons; the first step boundary applies them."""
        doc = self.handed_back
        if not doc:
            return
        records = jsonl.read_from(self.dir / HISTORY, int(doc.get("history_offset") or 0))
        # and those logged to this run's log through `--run` while it was stopped (before this attempt's own)
        records += _records_between(self.run_dir / KNOB_LOG, int(doc.get("log_offset") or 0), self.log_size_at_start)
        records.sort(key=lambda r: str(r.get("time", "")))
        apply, replaced = writes_with_no_run(records)
        for w in replaced:
            by = w["_by"]
            self._not_applied(
                w, f"written while no run was live; replaced before the resume by {by.get('id')} ({by.get('author')})"
            )
        for w in apply:
            if resolve(self.folder_values.get(w["knob"]), w.get("gym")) != w.get("new"):
                # changed again since (by hand): the rescan at the first boundary sees that
                self._not_applied(w, "written while no run was live; the file no longer held it at the resume")
                continue
            earlier = written_again.get((w["knob"], w.get("gym")))
            if earlier is not None and (earlier.get("id") or earlier.get("event")) != w["id"]:
                # a write the run never applied, replaced while no run was live: it never will be
                self.store.drop_attribution(earlier["knob"], earlier["gym"], earlier["written"])
                self.store.log.append(
                    KnobEvent(
                        id=earlier.get("id") or earlier.get("event"),
                        knob=earlier["knob"],
                        gym=earlier["gym"],
                        old=earlier.get("in_force"),
                        new=earlier["written"],
                        author=earlier["author"],
                        reason=earlier["reason"],
                        status="not_applied",
                        source=earlier.get("source") or "cli",
                        file=earlier.get("file"),
                        step_written=earlier.get("step_written"),
                        message=f"replaced before the resume by {w['id']} ({w['author']}: {w['reason']}), "
                        "written while no run was live",
                    )
                )
            res = self.store.set(
                w["knob"],
                w["new"],
                gym=w.get("gym"),
                author=w["author"],
                reason=w["reason"],
                step_written=start_step,
                run_live=True,
                source=w["source"],
                ref=w.get("ref"),
                skip_requires=True,  # checked when it was written; the max delta holds against what the run has
                event_id=w["id"],
            )
            if res.ok and not res.pending:  # the value the run resumes with already: in force, say so under its id
                self.store.log.append(
                    KnobEvent(
                        id=w["id"],
                        knob=w["knob"],
                        gym=w.get("gym"),
                        old=w.get("old"),
                        new=w["new"],
                        author=w["author"],
                        reason=w["reason"],
                        status="accepted",
                        source=w["source"],
                        file=w.get("file"),
                        step_written=w.get("step_written"),
                        ref=w.get("ref"),
                        message=f"written while no run was live; the run resumed at step {start_step} with this "
                        "value in force already",
                    )
                )
            state = (
                "applied at the next step boundary"
                if res.pending
                else ("in force already" if res.ok else f"refused now: {res.event.get('message')}")
            )
            self.writer.log(
                f"knob {w['knob']}{'[' + w['gym'] + ']' if w.get('gym') else ''} = {json.dumps(w['new'])} "
                f"({w['id']}, {w['author']}: {w['reason']}; written while no run was live): {state}"
            )
        (self.run_dir / HANDED_BACK).unlink(missing_ok=True)

    def _not_applied(self, w: Mapping[str, Any], message: str) -> None:
        """Log a write made while no run was live that this resume does not apply, under its id."""
        self.store.log.append(
            KnobEvent(
                id=w["id"],
                knob=w["knob"],
                gym=w.get("gym"),
                old=w.get("old"),
                new=w.get("new"),
                author=w["author"],
                reason=w["reason"],
                status="not_applied",
                source=w.get("source") or "cli",
                file=w.get("file"),
                step_written=w.get("step_written"),
                ref=w.get("ref"),
                message=message,
            )
        )

    def _carry_over_applied(self, start_step: int) -> None:
        """Notes for the writes logged after the checkpoint (or since the start) that were in force."""
        for old in self.store.carried_over():  # from an earlier resume that was killed before its first step
            self.store.drop_attribution(old["knob"], old.get("gym"), old.get("new"))
        ck = checkpoint.latest(self.run_dir)
        offset = int(checkpoint.read_state(ck).get("offsets", {}).get(KNOB_LOG, 0)) if ck is not None else 0
        for rec in writes_to_apply_again(jsonl.read_from(self.run_dir / KNOB_LOG, offset), start_step):
            self.store.carry_over(rec, first_applied_at=rec["step_effective"])

    def _settle_carried_over(self, step: int) -> None:
        """After a resumed run's first step boundary: a write it was to apply again that the files no
        longer hold (changed again, or back to the checkpoint's value) is not in force; say so under its id."""
        for rec in self.store.carried_over():
            self.store.log.append(
                KnobEvent(
                    id=rec["id"],
                    knob=rec["knob"],
                    gym=rec.get("gym"),
                    new=rec.get("new"),
                    author=rec["author"],
                    reason=rec["reason"],
                    status="not_applied",
                    source=rec.get("source") or "cli",
                    step_written=rec.get("step_written"),
                    ref=rec.get("ref"),
                    message=f"applied from step {rec['first_applied_at']} before the run was killed; the run resumed at "
                    f"step {step} and the files no longer hold this value, so it is not in force",
                )
            )
            self.store.drop_attribution(rec["knob"], rec.get("gym"), rec.get("new"))
            self.writer.log(
                f"knob {rec['knob']} = {json.dumps(rec.get('new'))} ({rec['id']}, applied before the kill) "
                "is not in force after the resume: the files no longer hold it"
            )

    # ------------------------------------------------------------------ every step
    def poll(self, step: int, window: int, first: bool) -> tuple[KnobSnapshot, int]:
        """Apply the changes waiting at this step boundary (``first``: compare every file with the values
        in force); log each applied and refused one. Returns the snapshot in force and how many applied."""
        self.store.current_step = step
        recent = jsonl.tail(self.run_dir / "metrics.jsonl", window)
        res = self.store.poll(step, recent, rescan=first)
        if first:
            self._settle_carried_over(step)
        plugged, unplugged = self.plugins.poll(step, self._recent_episodes, current_step=step, first=first)
        if plugged:
            self.store.version += 1  # the snapshot's version says "something changed"
        res.applied.extend(plugged)
        res.refused.extend(unplugged)
        for e in res.applied:
            self.writer.log(
                f"knob {e['knob']}{'[' + e['gym'] + ']' if e.get('gym') else ''} "
                f"{e.get('old')} -> {e.get('new')} in force from step {step} ({e['author']}: {e['reason']})"
            )
        for e in res.refused:
            self.writer.log(f"knob edit REFUSED {e['knob']} ({e.get('rule')}): {e.get('message')}")
        if res.applied or res.refused or first:
            self.writer.knobs_in_force(self.in_force_document())
        return self.snapshot(), len(res.applied)

    def snapshot(self) -> KnobSnapshot:
        """The knob snapshot in force, with the plug-ins in force for their override points."""
        snap = self.store.snapshot()
        entries = self.plugins.entries()
        return dataclasses.replace(snap, plugins=entries) if entries else snap

    def in_force_document(self) -> dict[str, Any]:
        """``knobs_in_force.json``: the store's values and rules, and the plug-ins in force."""
        return {**self.store.in_force_document(), "plugins": self.plugins.summary()}

    def _recent_episodes(self) -> list[dict[str, Any]]:
        """The episodes recorded in the run's last few steps (what a plug-in's gate replays)."""
        folder = self.run_dir / "trajectories"
        files = sorted(folder.glob("step_*.jsonl"))[-PLUGIN_REPLAY_STEPS:] if folder.is_dir() else []
        return [rec for f in files for rec in jsonl.read(f)]

    # ------------------------------------------------------------------ end
    def end(self) -> None:
        """However the run ends: report the writes it accepted but never applied (kept in
        ``knobs_not_applied.json`` for a resume), then give the lent values back to the folder."""
        with folder_lock(self.dir):  # a command writing for this run now either comes before or sees no lease
            if self.writer is not None and self.lease is not None:
                try:
                    hand_over(self.store, self.run_dir, self.lease, log=self.writer.log)
                except Exception as exc:  # a report must not hide the run's own error
                    self.note(f"knobs: could not hand over unapplied writes: {exc}")
            self.give_back(f"run {self.run_id} ended: the values it lent go back")

    def give_back(self, reason: str) -> None:
        if self.lease is None:
            return
        back = give_back(self.store, self.lease, reason=reason)
        self.lease = None
        given = [f"{e['knob']} -> {json.dumps(e['new'])}" for e in back if e.get("status") == "accepted"]
        if given and self.writer is not None:
            self.writer.log(f"knobs given back to {self.dir}: {'; '.join(given)}")
