"""A sentence for people, kept as its English template (the catalog's msgid) and the values
put into it, so that it can be said in the reader's language where it is shown: a refusal
in the console or the API, a notice in an e-mail.

Templates use str.format placeholders: `"Instance {instance} is {status}."`. A value may be
a Phrase itself (said in the same language). A template without values is used as written
(its braces are text)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
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
        """For a stored notice: values as text (numbers already written as the template
        wants them by whoever made the phrase)."""
        return {"template": self.template,
                "params": {k: v.to_json() if isinstance(v, Phrase) else str(v)
                           for k, v in self.params.items()}}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Phrase:
        params = {k: cls.from_json(v) if isinstance(v, dict) else v
                  for k, v in dict(data.get("params") or {}).items()}
        return cls(str(data["template"]), params)


def phrase(template: str, **params: Any) -> Phrase:
    """A phrase; `make messages` extracts the template (keyword `phrase`)."""
    return Phrase(template, params)


def listed(items: list[Phrase], separator: str = "; ") -> Phrase:
    """Several phrases as one, each said in the reader's language."""
    return Phrase(separator.join(f"{{p{i}}}" for i in range(len(items))),
                  {f"p{i}": item for i, item in enumerate(items)})
