"""What a person sees while a long command works: one line per phase, with a count and an ETA.

On a terminal, a ``rich`` progress display (a spinner for a phase of unknown length such as loading a
model, a bar with elapsed time and ETA for one whose total is known). Elsewhere (a pipe, a file,
``nohup``), plain lines on the same stream: when a phase starts, at most every ``plain_every_s``
seconds while it runs, and when it ends, e.g.::

    [eau] warm start: 24/64 updates (38%), loss 0.733, 1m48s elapsed, ETA 3m00s

Callers never branch on which of the two is shown.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.progress import Progress as RichProgress
from rich.text import Text


def fmt_duration(seconds: float) -> str:
    """``75`` -> ``1m15s``; ``3725`` -> ``1h02m``."""
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def eta_seconds(done: float, total: float, elapsed: float) -> float | None:
    """Time left at the average pace so far (None before any progress)."""
    if done <= 0 or total <= 0 or elapsed <= 0:
        return None
    return max(0.0, elapsed * (total - done) / done)


class Phase:
    """One phase of a :class:`Progress`: ``advance`` it, ``update`` its info text, ``close`` it."""

    def __init__(self, owner: Progress, name: str, total: int | None, unit: str, eta_bound: bool = False):
        self.owner, self.name, self.total, self.unit = owner, name, total, unit
        self.eta_bound = eta_bound  # total is an upper bound (e.g. turns when episodes may end early)
        self.done = 0
        self.info = ""
        self.t0 = time.monotonic()
        self._last_plain = self.t0
        self.task = None
        if owner.bar is not None:
            self.task = owner.bar.add_task(name, total=total, info="")
        else:
            owner.plain(self.text())

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def eta(self) -> float | None:
        return eta_seconds(self.done, self.total or 0, self.elapsed()) if self.total else None

    def text(self, final: bool = False) -> str:
        parts = []
        if self.total:
            parts.append(f"{self.done}/{self.total} {self.unit} ({100 * self.done / self.total:.0f}%)")
        elif self.done:
            parts.append(f"{self.done} {self.unit}")
        elif not final:
            parts.append("started")
        if self.info:
            parts.append(self.info)
        parts.append(f"{fmt_duration(self.elapsed())} elapsed")
        line = f"{self.name}: " + ", ".join(parts)
        eta = self.eta()
        if eta is not None and not final:
            line += f", ETA {'at most ' if self.eta_bound else ''}{fmt_duration(eta)}"
        return line + (" - done" if final else "")

    def advance(self, n: int = 1, info: str | None = None) -> None:
        self.set(self.done + n, info)

    def set(self, done: int, info: str | None = None, total: int | None = None) -> None:
        self.done = done
        if info is not None:
            self.info = info
        if total is not None:
            self.total = total
        if self.task is not None:
            self.owner.bar.update(self.task, completed=done, info=self.info, total=self.total)
        else:
            now = time.monotonic()
            if now - self._last_plain >= self.owner.plain_every_s:
                self._last_plain = now
                self.owner.plain(self.text())

    def close(self, info: str | None = None) -> None:
        if info is not None:
            self.info = info
        if self.task is not None:
            self.owner.bar.stop_task(self.task)
            self.owner.bar.update(self.task, visible=False)

            self.owner.bar.console.print(Text(self.text(final=True), style="dim"))
        else:
            self.owner.plain(self.text(final=True))

    def __enter__(self) -> Phase:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Progress:
    """Phases shown on ``stream`` (stderr by default). ``enabled=False`` shows nothing at all;
    ``terminal`` forces (True) or forbids (False) the rich display (None: ask the stream)."""

    def __init__(
        self,
        enabled: bool = True,
        stream: TextIO | None = None,
        terminal: bool | None = None,
        plain_every_s: float = 30.0,
    ):
        self.enabled = enabled
        self.stream = stream if stream is not None else sys.stderr
        self.plain_every_s = plain_every_s
        self.bar = None
        if not enabled:
            return

        console = (
            Console(file=self.stream, force_terminal=terminal) if terminal is not None else Console(file=self.stream)
        )
        if console.is_terminal:
            self.bar = RichProgress(
                SpinnerColumn(),
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                TextColumn("{task.fields[info]}"),
                console=console,
                transient=False,
            )
            self.bar.start()

    @property
    def on_terminal(self) -> bool:
        return self.bar is not None

    def phase(self, name: str, total: int | None = None, unit: str = "", eta_bound: bool = False) -> Phase | _Null:
        """Start a phase (use as a context manager, or ``close()`` it). ``eta_bound``: ``total`` is an
        upper bound, so the ETA is one too."""
        if not self.enabled:
            return _Null()
        return Phase(self, name, total, unit, eta_bound)

    def plain(self, line: str) -> None:
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.console.print(line, markup=False, highlight=False)
        else:
            self.stream.write(f"[eau] {line}\n")
            self.stream.flush()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None


class _Null:
    """A phase that shows nothing (progress disabled)."""

    done = 0
    total = None

    def advance(self, n: int = 1, info: str | None = None) -> None:
        pass

    def set(self, done: int, info: str | None = None, total: int | None = None) -> None:
        pass

    def close(self, info: str | None = None) -> None:
        pass

    def eta(self) -> None:
        return None

    def elapsed(self) -> float:
        return 0.0

    def __enter__(self) -> _Null:
        return self

    def __exit__(self, *exc: Any) -> None:
        pass
