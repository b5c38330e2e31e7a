"""What every group of commands shares: the console, the server and token options, one
API call with its error printed as the server's sentence, JSON output."""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Callable
from typing import Annotated, Any, NoReturn, TypeVar

import typer
from pydantic import BaseModel
from rich.console import Console, ConsoleDimensions
from rich.markup import escape
from rich.text import Text

from gpulease.cli.client import ApiError, Client
from gpulease.cli.words import _
from gpulease.domain.locales import from_environment, http_tag
from gpulease.domain.text import shown

T = TypeVar("T")

class TerminalConsole(Console):
    """Rich's console takes COLUMNS once, when it is made (at import, whatever a script
    sets later); this one asks at each print: COLUMNS when set, else the terminal's width,
    else 80 (as cli/tables.py sizes its tables)."""

    @property
    def size(self) -> ConsoleDimensions:
        columns, lines = shutil.get_terminal_size((80, 25))
        return ConsoleDimensions(columns, lines)

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        self._width, self._height = new_size


out = TerminalConsole()
err = TerminalConsole(stderr=True)

def safe(value: object) -> str:
    """Text someone else wrote (a tenant's name, a ticket's summary, a URL), to put inside a
    line that has markup: its markup escaped, its control characters and bidirectional
    overrides shown as codes (domain/text.py), never interpreted by the terminal."""
    return escape(shown("" if value is None else str(value), multiline=True))


def plain(value: object) -> Text:
    """Text someone else wrote, as a table cell: never markup, control characters shown as
    codes."""
    return Text(shown("" if value is None else str(value), multiline=True))


AllOpt = Annotated[bool, typer.Option("--all", help="every one, page after page")]
OffsetOpt = Annotated[int, typer.Option(min=0, help="skip this many (the next page)")]
P = TypeVar("P")


def pages(fetch: Callable[[int, int], tuple[list[P], int]], limit: int, offset: int,
          every: bool) -> tuple[list[P], int]:
    """(items, total) of one page of `limit` from `offset`, or of every page with `every`:
    `fetch(limit, offset)` answers one page and the total."""
    items, total = fetch(limit, offset)
    while every and items and offset + len(items) < total:
        more, total = fetch(limit, offset + len(items))
        if not more:
            break
        items = items + more
    return items, total


def say_part(shown: int, total: int, offset: int) -> None:
    """When a list shows part of what there is, say so and how to see the rest."""
    if offset + shown < total or offset:
        err.print(_("showing {first}-{last} of {total}: --all shows every one, --offset "
                    "{next} the next page", first=offset + 1 if shown else 0,
                    last=offset + shown, total=total, next=offset + shown), highlight=False)


UrlOpt = Annotated[str, typer.Option("--url", envvar="GPULEASE_URL", help="server URL")]
TokenOpt = Annotated[str, typer.Option("--token", envvar="GPULEASE_TOKEN", help="API token")]
JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON")]
ReasonOpt = Annotated[str | None, typer.Option(help="why (shown to operators)")]
DEFAULT_URL = "http://127.0.0.1:8000"


def connect(url: str, token: str) -> Client:
    """The API client for a server URL (default: the local one) and token; the server's
    refusals come in the terminal's language (GPULEASE_LANG, else LANGUAGE, LC_ALL,
    LC_MESSAGES, LANG) where the platform speaks it."""
    language = from_environment(os.environ)
    return Client(url or DEFAULT_URL, token or None,
                  language=http_tag(language) if language else None)


def fail(exc: ApiError) -> NoReturn:
    err.print(_("[red]error[/red] ({status} {title}): {detail}", status=exc.status,
                title=exc.title, detail=exc.detail))
    if exc.body.get("accepted"):
        err.print(_("accepted: {values}", values=", ".join(exc.body["accepted"])))
    raise typer.Exit(1)


def api(call: Callable[[], T]) -> T:
    """Run one API call; an API error is printed as the server's sentence, exit code 1."""
    try:
        return call()
    except ApiError as exc:
        fail(exc)


def print_json(data: Any) -> None:
    if isinstance(data, BaseModel):
        data = data.model_dump(mode="json")
    elif isinstance(data, list):
        data = [d.model_dump(mode="json") if isinstance(d, BaseModel) else d for d in data]
    sys.stdout.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def parse_addons(specs: list[str] | None) -> dict[str, str]:
    """`--add NAME=QUANTITY` options as the API's `add`; exit 2 naming a malformed one."""
    found = {}
    for spec in specs or []:
        name, sep, qty = spec.partition("=")
        if not sep:
            err.print(_("[red]error[/red]: --add {spec!r}: expected NAME=QUANTITY, "
                        "e.g. public-bandwidth=100", spec=spec))
            raise typer.Exit(2)
        found[name.strip()] = qty.strip()
    return found
