"""A real filesystem observer (watchdog) on a knobs folder that queues changed files in a KnobStore.

The observer thread only records *which* files changed and when (``store.mark_dirty``); nothing is
read or applied until the trainer calls ``store.poll(step, metrics)`` at a step boundary, so a change
can never land mid-step. Editor behaviour is covered: in-place writes (modified), atomic renames and
swap-file dances (moved/created: the destination is queued), deletions (queued: the poll logs a
refusal and keeps the last valid values). Files that are not knob or rule files (``.swp``, ``~``,
``4913``, temp files) are ignored by the store's path classification.
"""

from __future__ import annotations

from pathlib import Path

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from harness.knobs.store import KnobStore


class _Handler(FileSystemEventHandler):
    def __init__(self, store: KnobStore):
        self.store = store

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type in ("opened", "closed_no_write"):
            return
        for attr in ("src_path", "dest_path"):
            p = getattr(event, attr, None)
            if p:
                self.store.mark_dirty(Path(p.decode() if isinstance(p, bytes) else p))


class KnobWatcher:
    """Context manager: ``with KnobWatcher(store): ... store.poll(step, metrics) ...``."""

    def __init__(self, store: KnobStore):
        self.store = store
        self.observer = Observer()
        self.observer.daemon = True

    def __enter__(self) -> KnobWatcher:
        self.observer.schedule(_Handler(self.store), str(self.store.dir), recursive=True)
        self.observer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.observer.is_alive():
            self.observer.stop()
            self.observer.join(timeout=5)
