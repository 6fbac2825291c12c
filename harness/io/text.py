"""Text that must be written as UTF-8 (files, figures, JSON) and where it is not."""

from __future__ import annotations


def not_utf8(text: str) -> str | None:
    """Why ``text`` cannot be written as UTF-8, or None. A byte that was not UTF-8 where the text
    came from (a command-line argument, stdin) is kept by Python as a lone surrogate escape; it is
    named as that byte: ``"character 3 is byte 0xff, not UTF-8"``."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        code = ord(text[exc.start])
        what = f"byte 0x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"U+{code:04X} (a lone surrogate)"
        return f"character {exc.start + 1} is {what}, not UTF-8"
    return None
