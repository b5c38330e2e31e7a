"""The input rule for free text a tenant controls (domain/text.py), as pydantic types: a
value that breaks it is a 422 naming the field and the character's position.

`OneLine`: names, titles, summaries, addresses, URLs: no control character at all, no
bidirectional override. `Lines`: ticket texts, notes, comments: newlines and tabs allowed
(a browser's CR LF is taken as a newline), nothing else. `PlainNumber`: an amount or a
quantity sent as a string is digits with at most one point."""

from __future__ import annotations

import re

from pydantic import AfterValidator, BeforeValidator

from gpulease.domain.text import problem


def _one_line(value: str | None) -> str | None:
    if value is not None and (why := problem(value)) is not None:
        raise ValueError(f"text {why}; send plain text on one line")
    return value


def _lines(value: str | None) -> str | None:
    if value is None:
        return None
    value = value.replace("\r\n", "\n")
    if (why := problem(value, multiline=True)) is not None:
        raise ValueError(f"text {why}; send plain text")
    return value


OneLine = AfterValidator(_one_line)
Lines = AfterValidator(_lines)


NUMBER = re.compile(r"^-?\d+(\.\d+)?$")


def _plain_number(value: object) -> object:
    """A number sent as a string is written plainly: digits, one point, a leading minus;
    `1_000`, ` 5 `, `1e3`, `NaN` are refused (JSON numbers pass through to the type)."""
    if isinstance(value, str) and not NUMBER.match(value):
        raise ValueError(f"{value!r} is not a plain number: write digits and at most one "
                         "point, e.g. 1000.50")
    return value


PlainNumber = BeforeValidator(_plain_number)
