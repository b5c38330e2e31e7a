"""Tables that fit the terminal: the columns a user must read or type (ids, status) always,
the others in their order of importance while they fit, every row on one line and no id
ever cut; `--wide` shows them all. Cells are plain text (cli/common.plain)."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated

import typer
from rich.cells import cell_len
from rich.table import Table

from gpulease.cli.common import out, plain
from gpulease.cli.words import _

WideOpt = Annotated[bool, typer.Option("--wide", help="every column, however wide")]


@dataclass(frozen=True)
class Column:
    name: str
    keep: bool = False  # shown at any width: what users read first or type (ids)
    justify: str = "left"


def terminal_width() -> int:
    """COLUMNS when set (narrow terminals, scripts), else the terminal's, else 80."""
    return shutil.get_terminal_size((80, 24)).columns


def fitted(columns: Sequence[Column], rows: Sequence[Sequence[str]], *, wide: bool = False,
           title: str | None = None, width: int | None = None) -> Table:
    """A table of the kept columns and as many of the others, in order, as fit `width`."""
    width = width or terminal_width()
    # cells, not characters: a Chinese heading or name takes two columns a character
    need = [max([cell_len(c.name), *(cell_len(r[i]) for r in rows)])
            for i, c in enumerate(columns)]
    shown = set(range(len(columns))) if wide else {i for i, c in enumerate(columns) if c.keep}
    used = 1 + sum(need[i] + 3 for i in shown)
    for i in range(len(columns)):
        if i not in shown and used + need[i] + 3 <= width:
            shown.add(i)
            used += need[i] + 3
    left_out = [c.name for i, c in enumerate(columns) if i not in shown]
    caption = (_("{columns} left out: --wide shows them", columns=", ".join(left_out))
               if left_out else None)
    t = Table(title=title, caption=caption, width=used if wide else None)
    for i, c in enumerate(columns):
        if i in shown:
            t.add_column(c.name, no_wrap=True, min_width=need[i] if c.keep else None,
                         overflow="ellipsis", justify=c.justify)  # type: ignore[arg-type]
    for r in rows:  # cells are plain text: a tenant's name is never markup or an ESC code
        t.add_row(*(plain(cell) for i, cell in enumerate(r) if i in shown))
    return t


def show(table: Table, wide: bool = False) -> None:
    """At the terminal's width; `--wide` at the table's own, however wide."""
    width = max(table.width or 0, terminal_width()) if wide else terminal_width()
    out.print(table, width=width, crop=not wide)
