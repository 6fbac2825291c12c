"""Whether a process exists on this host (a live run's trainer).

A process in another PID namespace cannot see the trainer's process at all: Codex, for one, runs
each shell command of an agent session in its own PID namespace (bubblewrap on Linux). Records of a
live process therefore carry its namespace (:func:`pid_namespace`), and a reader outside it
(:func:`sees_pid_namespace` false) must not conclude from a missing pid that the process ended.
"""

from __future__ import annotations

import os
from typing import Any


def pid_alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def pid_namespace() -> str | None:
    """This process's PID namespace (``pid:[4026531836]`` on Linux), or None where there is no /proc."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def sees_pid_namespace(recorded: Any) -> bool:
    """Whether pids recorded in namespace ``recorded`` can be checked from here: true when it is ours
    or unknown (records written before namespaces were recorded, systems without /proc)."""
    if not isinstance(recorded, str) or not recorded:
        return True
    ours = pid_namespace()
    return ours is None or ours == recorded
