"""A sentence for people, kept as its English template (the catalog's msgid) and the values
put into it, so that it can be said in the reader's language where it is shown: a refusal
in the console or the API, a notice in an e-mail.

Templates use str.format placeholders: `"Instance {instance} is {status}."`. A value may be
a Phrase itself (said in the same language). A template without values is used as written
(its braces are text)."""

from __future__ import annotations

import json
import string
from collections.abc import Callable, Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any

Gettext = Callable[[str], str]


def _english(message: str) -> str:
    return message


class Phrase:
    __slots__ = ("params", "template")

    def __init__(self, template: str, params: Mapping[str, Any] | None = None) -> None:
        self.template = template
        self.params = dict(params or {})

    def said(self, gettext: Gettext = _english) -> str:
        """The sentence in gettext's language; where a translation does not fit its values
        (a placeholder misspelt), the English one."""
        if not self.params:
            return gettext(self.template)
        values = {k: v.said(gettext) if isinstance(v, Phrase) else v
                  for k, v in self.params.items()}
        try:
            return gettext(self.template).format(**values)
        except (KeyError, IndexError, ValueError, AttributeError):
            return self.template.format(**values)

    def __str__(self) -> str:
        return self.said()

    def __repr__(self) -> str:
        return f"Phrase({self.template!r}, {self.params!r})"

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Phrase) and other.template == self.template
                and other.params == self.params)

    def __hash__(self) -> int:
        return hash(self.template)

    def to_json(self) -> dict[str, Any]:
        """To keep with a stored line: numbers, amounts and times keep their type (a
        template's `{cost:,.2f}` still applies); anything else is kept as its text."""
        return {"template": self.template,
                "params": {k: _value_to_json(v) for k, v in self.params.items()}}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Phrase:
        return cls(str(data["template"]),
                   {k: _value_from_json(v) for k, v in dict(data.get("params") or {}).items()})


def _value_to_json(v: Any) -> Any:
    if isinstance(v, Phrase):
        return v.to_json()
    if isinstance(v, bool | int | float) or v is None:
        return v
    if isinstance(v, Decimal):
        return {"decimal": str(v)}
    if isinstance(v, datetime):
        return {"datetime": v.isoformat()}
    return str(v)


def _value_from_json(v: Any) -> Any:
    if isinstance(v, dict):
        if "template" in v:
            return Phrase.from_json(v)
        if "decimal" in v:
            return Decimal(str(v["decimal"]))
        if "datetime" in v:
            return datetime.fromisoformat(str(v["datetime"]))
    return v


def _kept_value(value: dict[str, Any]) -> bool:
    """An amount or a time as to_json keeps it, and readable as one."""
    try:
        if set(value) == {"decimal"} and isinstance(value["decimal"], str):
            return Decimal(value["decimal"]).is_finite()
        if set(value) == {"datetime"} and isinstance(value["datetime"], str):
            datetime.fromisoformat(value["datetime"])
            return True
    except (ArithmeticError, ValueError):
        return False
    return False


def well_formed(data: Any, depth: int = 0) -> bool:
    """Whether a phrase as JSON from outside (an agent's report) is safe to say: each
    placeholder a plain name (no attribute or index lookups), nested at most 4 deep, its
    values numbers, short texts, or such phrases."""
    if depth > 4 or not isinstance(data, dict) or set(data) - {"template", "params"}:
        return False
    template, params = data.get("template"), data.get("params") or {}
    if (not isinstance(template, str) or len(template) > 500 or not isinstance(params, dict)
            or len(params) > 50):
        return False
    try:
        names = {f for _, f, _, _ in string.Formatter().parse(template) if f is not None}
    except ValueError:
        return False
    if not all(n.isidentifier() for n in names) or not names <= set(params):
        return False
    for key, value in params.items():
        if not (isinstance(key, str) and key.isidentifier()):
            return False
        if isinstance(value, dict):
            if "template" in value:
                if not well_formed(value, depth + 1):
                    return False
            elif not _kept_value(value):
                return False
        elif not (value is None or isinstance(value, bool | int | float)
                  or (isinstance(value, str) and len(value) <= 500)):
            return False
    return True


def phrase(template: str, **params: Any) -> Phrase:
    """A phrase; `make messages` extracts the template (keyword `phrase`)."""
    return Phrase(template, params)


def listed(items: list[Phrase], separator: str = "; ") -> Phrase:
    """Several phrases as one, each said in the reader's language."""
    return Phrase(separator.join(f"{{p{i}}}" for i in range(len(items))),
                  {f"p{i}": item for i, item in enumerate(items)})


def stored(text: str | Phrase) -> tuple[str, str | None]:
    """A line to keep in the database: its English text, and its phrase as JSON (None for
    what people wrote, kept as they wrote it)."""
    if isinstance(text, Phrase):
        return str(text), json.dumps(text.to_json(), ensure_ascii=False)
    return text, None


def said_stored(text: str, phrase_json: str | Mapping[str, Any] | None,
                gettext: Gettext = _english) -> str:
    """A kept line in gettext's language (its text as kept when it has no phrase, or its
    phrase cannot be read); the phrase as JSON text or as its parsed JSON."""
    if not phrase_json:
        return text
    try:
        data = json.loads(phrase_json) if isinstance(phrase_json, str) else phrase_json
        return Phrase.from_json(data).said(gettext)
    except (ValueError, KeyError, TypeError):
        return text
