"""Run ids: a run id is a folder name under the runs folder, never a path."""

from __future__ import annotations

import re

# letters, digits, . _ - ; no leading dot (no "..", no hidden folder), at most 128 characters
RUN_ID_RE = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}")
RUN_ID_RULE = "a plain name of 1 to 128 letters, digits, '.', '_' or '-', not starting with '.'"


def check_run_id(value: object, what: str = "run_id") -> str:
    """``value`` when it is a plain run name; ValueError naming ``what`` (the option or field) otherwise."""
    if not isinstance(value, str) or not RUN_ID_RE.fullmatch(value):
        raise ValueError(f"{what} {value!r}: a run id is {RUN_ID_RULE}")
    return value
