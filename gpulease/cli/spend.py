"""The CLI asks before it spends: what an order holds, a renewal or an add-on charges, said
with the amount, then `Go ahead? [y/N]` at a terminal. A script (no terminal) passes
`--yes`; without it nothing is spent and the command says how to go on. After the spend,
the command prints what was taken from the wallet."""

from __future__ import annotations

import sys
from decimal import Decimal
from typing import Annotated

import typer

from gpulease.cli.common import err
from gpulease.cli.words import _

YesOpt = Annotated[bool, typer.Option("--yes", "-y", help=(
    "spend without asking (needed where there is no terminal to ask at, as in a script)"))]


def at_terminal() -> bool:
    return sys.stdin.isatty()


def confirm_spend(what: str, amount: Decimal, yes: bool) -> None:
    """Say what is about to be spent and ask; exit 1 when the answer is no, 2 when there is
    no terminal to ask at and no `--yes` (nothing spent either way)."""
    said = _("{what}: ¥{amount} from your wallet.", what=what, amount=f"{amount:,.2f}")
    if yes:
        return
    if not at_terminal():
        err.print(said + " " + _("Nothing was spent: there is no terminal to ask at; add "
                                 "--yes to go ahead."), highlight=False)
        raise typer.Exit(2)
    err.print(said, highlight=False)
    if not typer.confirm(_("Go ahead?"), default=False, err=True):
        err.print(_("Nothing was spent."))
        raise typer.Exit(1)
