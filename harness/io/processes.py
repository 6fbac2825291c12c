"""Whether a process exists on this host (a live run's trainer, a lease holder)."""

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
