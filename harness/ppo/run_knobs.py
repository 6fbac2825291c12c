"""A run's own knobs: its folder ``runs/<id>/knobs/``, the store on it, the changes applied at step
boundaries, and what a kill or the end leaves for a resume.

* **Start**: the folder is made from the project's knobs folder (or, for ``eau train --from``, from the
  parent run's folder as it is now: its final values and any edit made to it since), then the run's own
  values (its preset's ``agent_knobs`` / ``env_knobs``, ``--set agent_knobs.X=...``) are written into it
  through the store (author ``system``). The trainer watches only this folder; nothing else changes.
* **Every step boundary**: the changes waiting there (hand edits, ``eau knobs set``) are validated and
  applied or refused, each logged in ``knob_events.jsonl`` with its author, reason and event id.
* **Resume**: the checkpoint's knob state (with no checkpoint, the one step 0 ran with:
  ``knobs_at_start.json``) is in force, then the folder as it is now is compared with it at the first
  boundary. A write that was in force in the steps the resume runs again is applied again under its
  id; a write made while the run was not live is applied under the id its command printed.
* **End**: under the folder's write lock, every write accepted for the run that it never applied is
  logged ``not_applied`` (its note stays, so ``eau train --resume`` applies it under the same id).

Process 0 owns it; the other processes receive each step's snapshot from the trainer.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any, Iterator, Mapping

from harness.io import jsonl, yamlio
from harness.io.yamlio import atomic_write_text
from harness.knobs.checks import facts_from_config
from harness.knobs.events import KnobEvent
from harness.knobs.folder import copy_folder
from harness.knobs.notes import write_lock
from harness.knobs.snapshot import KnobSnapshot, resolve
from harness.plugins.folder import PluginFolder
from harness.ppo import checkpoint
from harness.runs import reader
from harness.stores import open_store

KNOBS = "knobs"  # in a run folder: the run's own knobs folder
KNOB_LOG = "knob_events.jsonl"
AT_START = "knobs_at_start.json"  # the knob state step 0 ran with (a resume with no checkpoint starts from it)
PLUGIN_REPLAY_STEPS = 3  # recent steps of recorded episodes a plug-in's gate replays
STARTED_ONLY = {KNOBS, KNOB_LOG, "log.txt"}  # what a start killed before the run folder existed leaves


def writes_to_apply_again(records: list[dict[str, Any]], start_step: int) -> list[dict[str, Any]]:
    """The knob and rule writes a resumed run must apply again: those whose last record says they were
    applied live at ``start_step`` or later (the steps the resume runs again). Schema reloads and
    plug-ins are not among them: a run loads those as the folder holds them."""
    last = {rec["id"]: rec for rec in records if rec.get("id")}  # the last record of each write says how it stands
    return [
        r
        for r in last.values()
        if r.get("status") == "accepted"
        and r.get("applies") == "live"
        and isinstance(r.get("step_effective"), int)
        and r["step_effective"] >= start_step
        and not str(r.get("knob", "")).startswith(("schema.", "plugins."))
        and r.get("author") in ("human", "agent", "system")
        and r.get("reason")
    ]


class RunKnobs:
    """The knobs of one run (see the module docstring)."""

    def __init__(self, run_dir: Path, gyms: list[str], llm_user: bool):
        """``llm_user``: whether the run has an LLM user (a value it cannot work with, such as an
        LLM-user share without one, is refused)."""
        self.run_dir, self.dir, self.gyms = Path(run_dir), Path(run_dir) / KNOBS, list(gyms)
        self.facts = facts_from_config({"user_llm": llm_user}, str(self.run_dir / "config.yaml"))
        self.store: Any = None
        self.writer: Any = None
        self.plugins = PluginFolder(self.dir, lambda: self.store.log)  # runs/<id>/knobs/plugins/*.py

    def _open(self, base: Mapping[str, Any] | None = None) -> None:
        self.store = open_store(self.dir, events_path=None, run_gyms=self.gyms, base=base)
        self.store.run_facts = self.facts

    # ------------------------------------------------------------------ start
    def start(self, cfg: Any, project: Path, runs_dir: Path) -> None:
        """A new run's folder made from the project folder ``project`` (with ``cfg.parent``, ``eau train
        --from``: from the parent run's folder as it is now), then the config's own values written
        through the store. ValueError naming the preset and the knob when one is refused, KnobError for
        an invalid file in the folder it is made from; the run folder is removed again on any failure."""
        parent = Path(runs_dir) / cfg.parent / KNOBS if cfg.parent else None
        source = parent if parent is not None and parent.is_dir() else project
        reason = f"run {self.run_dir.name}: preset {cfg.preset}" + (
            f", from run {cfg.parent}" if source == parent else ""
        )
        values = {f"agent.{k}": v for k, v in (cfg.agent_knobs or {}).items()}
        values.update({f"env.{k}": v for k, v in (cfg.env_knobs or {}).items()})
        there = {p.name for p in self.run_dir.iterdir()} if self.run_dir.is_dir() else set()
        if there - STARTED_ONLY or (self.run_dir / "config.yaml").exists():
            raise FileExistsError(
                f"run folder {self.run_dir} exists and is not empty; choose another --run-id "
                f"or resume it with --resume {self.run_dir.name}"
            )
        if there:  # a start killed before its run folder was written: only its knobs folder is there
            shutil.rmtree(self.run_dir)
        made = not self.run_dir.exists()
        try:
            copy_folder(source, self.dir)
            self._open()
            system = dict(author="system", reason=reason, source="system", skip_requires=True, skip_delta=True)
            for name, value in values.items():
                # a scalar sets the global/default value (other gyms' values stay); a mapping is the whole value
                res = self.store.set(name, value, whole=isinstance(value, Mapping), **system)
                if not res.ok:
                    raise ValueError(f"{name}={value!r} refused: {res.event['message']}")
            problems = self.store.run_problems()
            if problems:  # refused now rather than fatal at the first reset
                raise ValueError("; ".join(problems))
        except BaseException as exc:
            shutil.rmtree(self.run_dir if made else self.dir, ignore_errors=True)
            if isinstance(exc, ValueError):
                raise ValueError(f"preset {cfg.preset}: {exc}") from None
            raise

    def resume(self, knob_state: Mapping[str, Any] | None, start_step: int) -> None:
        """Resume: the checkpoint's knob state in force (with no checkpoint, the one step 0 ran with),
        and notes for the writes the steps run again had in force, so the first boundary applies them
        again under their ids (writes made meanwhile carry their notes already)."""
        if knob_state is None and (self.run_dir / AT_START).is_file():
            knob_state = json.loads((self.run_dir / AT_START).read_text(encoding="utf-8"))
        self._open(knob_state)
        self.plugins.start_note = f"when the run resumed at step {start_step} (gated again)"
        for note in self.store.notes.all():  # from an earlier resume killed before its first boundary
            if note.get("first_applied_at") is not None:
                self.store.notes.drop(note["knob"], note.get("gym"), note.get("new"))
        ck = checkpoint.latest(self.run_dir)
        offset = int(checkpoint.read_state(ck).get("offsets", {}).get(KNOB_LOG, 0)) if ck is not None else 0
        for rec in writes_to_apply_again(jsonl.read_from(self.run_dir / KNOB_LOG, offset), start_step):
            self.store.notes.write(rec, first_applied_at=rec["step_effective"])

    def attach(self, writer: Any, resumed: bool) -> None:
        """From now on events go to the run folder (with those logged before it existed)."""
        self.writer = writer
        self.store.attach_log(self.run_dir / KNOB_LOG)
        if not resumed:
            writer.knobs_in_force(self.in_force_document())
            atomic_write_text(self.run_dir / AT_START, json.dumps(self.store.in_force_document(), default=str))
            set_by_run = sorted({e["knob"] for e in self.store.log.read() if e.get("source") == "system"})
            writer.log(
                f"knobs of this run in {self.dir}"
                + (f" (set by its config: {', '.join(set_by_run)})" if set_by_run else "")
            )

    # ------------------------------------------------------------------ every step
    def poll(self, step: int, window: int, first: bool) -> tuple[KnobSnapshot, int]:
        """Apply the changes waiting at this step boundary (``first``: compare every file with the values
        in force); log each applied and refused one. Returns the snapshot in force and how many applied."""
        self.store.current_step = step
        recent = jsonl.tail(self.run_dir / "metrics.jsonl", window)
        res = self.store.poll(step, recent, rescan=first)
        if first:
            self._settle_notes(step)
        episodes = lambda: reader.recent_episodes(self.run_dir, PLUGIN_REPLAY_STEPS)
        plugged, unplugged = self.plugins.poll(step, episodes, current_step=step, first=first)
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

    def _settle_notes(self, step: int) -> None:
        """After the first boundary of an attempt, the notes it did not use: a write whose value was in
        force already is logged so under its id; one the files no longer hold (changed again) never
        will be applied, and is logged ``not_applied``."""
        for note in self.store.notes.all():
            again = note.get("first_applied_at")
            if again is None and self._file_holds(note) and self._in_force(note):
                self._record(note, "accepted", f"in force already when this attempt started at step {step}", step)
            else:
                before = f"applied from step {again} before the run was killed" if again is not None else "written"
                message = f"{before}; at step {step} the files no longer hold this value (replaced): not in force"
                self._record(note, "not_applied", message)
            self.store.notes.drop(note["knob"], note.get("gym"), note.get("new"))

    def _file_holds(self, note: Mapping[str, Any]) -> bool:
        """Whether the run's files hold the value of a write's note."""
        first, _, rest = note["knob"].partition(".")
        path = self.dir / (("rules/" + rest.replace(".", "/", 1) if first == "rules" else first) + ".yaml")
        try:
            doc = yamlio.load_plain(path)
        except yamlio.FileProblem:
            return False
        if first == "rules":
            return doc == note.get("new")
        return isinstance(doc, dict) and resolve(doc.get(rest), note.get("gym")) == note.get("new")

    def _in_force(self, note: Mapping[str, Any]) -> bool:
        first, _, rest = note["knob"].partition(".")
        if first == "rules":
            kind, _, key = rest.partition(".")
            return self.store.rules.get(kind, {}).get(key) == note.get("new")
        return resolve(self.store.in_force.get(first, {}).get(rest), note.get("gym")) == note.get("new")

    def _record(self, note: Mapping[str, Any], status: str, message: str, step_effective: int | None = None) -> None:
        """Log the outcome of a note's write under its id, author and reason (and a line in log.txt)."""
        fields = {k: note.get(k) for k in ("id", "knob", "gym", "new", "author", "reason", "step_written", "ref")}
        event = KnobEvent(**fields, source=note.get("source") or "cli", status=status, message=message)
        event.step_effective = step_effective
        self.store.log.append(event)
        what = "NOT APPLIED" if status == "not_applied" else "in force"
        self.writer.log(f"knob {note['knob']} = {json.dumps(note.get('new'))} ({note['id']}) {what}: {message}")

    def snapshot(self) -> KnobSnapshot:
        """The knob snapshot in force, with the plug-ins in force for their override points."""
        snap = self.store.snapshot()
        entries = self.plugins.entries()
        return dataclasses.replace(snap, plugins=entries) if entries else snap

    def in_force_document(self) -> dict[str, Any]:
        """``knobs_in_force.json``: the store's values and rules, and the plug-ins in force."""
        return {**self.store.in_force_document(), "plugins": self.plugins.summary()}

    # ------------------------------------------------------------------ end
    @contextlib.contextmanager
    def ending(self) -> Iterator[None]:
        """However the run ends: under the folder's write lock, each write accepted for the run that it
        never applied is logged ``not_applied`` (its note stays for a resume); the block (the run's
        final state) runs under the lock too, so a command that writes after it sees a stopped run."""
        if self.store is None or not self.dir.is_dir():
            yield
            return
        with write_lock(self.dir):
            if self.writer is not None:
                for note in self.store.notes.all():
                    if note.get("first_applied_at") is None:
                        self._unapplied(note)
            yield

    def _unapplied(self, note: Mapping[str, Any]) -> None:
        if self._file_holds(note):
            message = "the run ended before its next step boundary; `eau train --resume` applies it under this id"
            self._record(note, "not_applied", message)
        else:
            self._record(note, "not_applied", "replaced in the file before the run applied it: never applied")
            self.store.notes.drop(note["knob"], note.get("gym"), note.get("new"))
