"""A request model's refusal of a field (pydantic's error types), said in the reader's
language: the English is pydantic's own sentence; other languages say the same with the
limits pydantic reports (a type not listed here keeps pydantic's English)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpulease.domain.phrases import Gettext
from gpulease.translations import N_

_NUMBER = N_("{field}: a number, please.")
_WHOLE = N_("{field}: a whole number, please.")
_ONE_OF = N_("{field}: one of {expected}.")
SAID: dict[str, str] = {
    "missing": N_("{field}: required; fill it in."),
    "int_parsing": _WHOLE, "int_type": _WHOLE, "int_from_float": _WHOLE,
    "float_parsing": _NUMBER, "float_type": _NUMBER, "decimal_parsing": _NUMBER,
    "decimal_type": _NUMBER,
    "greater_than_equal": N_("{field}: at least {ge}."),
    "greater_than": N_("{field}: more than {gt}."),
    "less_than_equal": N_("{field}: at most {le}."),
    "less_than": N_("{field}: less than {lt}."),
    "string_too_short": N_("{field}: at least {min_length} characters."),
    "string_too_long": N_("{field}: at most {max_length} characters."),
    "too_short": N_("{field}: at least {min_length} items."),
    "too_long": N_("{field}: at most {max_length} items."),
    "literal_error": _ONE_OF, "enum": _ONE_OF,
    "string_pattern_mismatch": N_("{field}: not in the form it takes."),
    "bool_parsing": N_("{field}: true or false."), "bool_type": N_("{field}: true or false."),
    "string_type": N_("{field}: text, please."),
}


REQUEST_PARTS = ("body", "query", "path", "header", "cookie")


def field_of(err: Mapping[str, Any], request: bool = True) -> str:
    """The field's dotted name; a request's error starts with where the field came from
    (body, query, …), which is left out."""
    loc = [str(x) for x in err.get("loc", ())]
    if request and loc and loc[0] in REQUEST_PARTS:
        loc = loc[1:]
    return ".".join(loc) or "body"


def field_error(err: Mapping[str, Any], gettext: Gettext | None = None,
                request: bool = True) -> str:
    """`field: what is wrong`; pydantic's English without gettext (or when its type is not
    one listed)."""
    field = field_of(err, request)
    english = f"{field}: {err.get('msg')}"
    template = SAID.get(str(err.get("type")))
    if gettext is None or template is None:
        return english
    try:
        return gettext(template).format(field=field, **dict(err.get("ctx") or {}))
    except (KeyError, IndexError, ValueError):
        return english
