"""Text that stays text: the one rule for free text a tenant (or an agent) controls, and the
escaped form every output that is not HTML shows it in (the operator's terminal, the audit
trail, logs).

Refused in input: control characters (C0, DEL, C1) except a newline (and a tab) where the
field is meant to hold several lines, and the bidirectional overrides and isolates that make
text read differently from what it is (U+202A–U+202E, U+2066–U+2069). Shown escaped: the
same characters as `\\xNN` / `\\uNNNN`, so an ESC sequence or a right-to-left override in a
stored value prints as its code, never as its effect."""

from __future__ import annotations

import re

BIDI = frozenset(chr(c) for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A)))
LINE_BREAKS = frozenset("\n\t")


def _unsafe(ch: str, multiline: bool) -> bool:
    code = ord(ch)
    if ch in BIDI:
        return True
    if code < 0x20 or 0x7F <= code < 0xA0:
        return not (multiline and ch in LINE_BREAKS)
    return False


def problem(value: str, *, multiline: bool = False) -> str | None:
    """What makes `value` unfit as tenant text, in words, or None when it is fit."""
    for at, ch in enumerate(value):
        if _unsafe(ch, multiline):
            kind = ("a bidirectional override" if ch in BIDI else "a control character")
            allowed = " (only newlines and tabs are allowed)" if multiline else ""
            return f"holds {kind} (U+{ord(ch):04X}) at position {at}{allowed}"
    return None


def shown(value: str, *, multiline: bool = False) -> str:
    """`value` with every unsafe character written as its escape (`\\x1b`, `\\u202e`); a
    value that is already safe comes back unchanged."""
    if not any(_unsafe(ch, multiline) for ch in value):
        return value
    out = []
    for ch in value:
        if not _unsafe(ch, multiline):
            out.append(ch)
        elif ord(ch) <= 0xFF:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(f"\\u{ord(ch):04x}")
    return "".join(out)


def clipped(value: str | None, size: int) -> str | None:
    """`value` shown escaped and cut to `size` characters (a column's width)."""
    if value is None:
        return None
    return shown(str(value))[:size]


CSV_FORMULA = ("=", "+", "-", "@", "\t", "\r")
NUMBER = re.compile(r"^[+-]?\d+(\.\d+)?$")


def csv_cell(value: object) -> object:
    """A CSV cell that a spreadsheet shows as text: a string starting with a formula
    character gets a leading apostrophe (OWASP's advice for CSV injection). Numbers stay
    numbers: a negative amount is a number, not a formula."""
    if isinstance(value, str) and value.startswith(CSV_FORMULA) and not NUMBER.match(value):
        return "'" + value
    return value
