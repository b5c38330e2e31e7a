"""The audit trail: `gpulease audit` lists it, `gpulease audit verify` checks its chain."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from gpulease.cli.common import JsonOpt, TokenOpt, UrlOpt, api, connect, err, out, print_json
from gpulease.cli.words import _

app = typer.Typer()
audit_app = typer.Typer(help="The audit trail: who did what, from where, and how it ended.",
                        invoke_without_command=True)
app.add_typer(audit_app, name="audit")


@audit_app.callback()
def audit_list(
    ctx: typer.Context,
    tenant: Annotated[str | None, typer.Option(help="operator: one tenant's rows")] = None,
    user: Annotated[str | None, typer.Option(help="one user's rows")] = None,
    limit: Annotated[int, typer.Option(help="rows, newest first")] = 50,
    url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False,
) -> None:
    """Newest first (operator: all; tenant admin: the tenant's own)."""
    if ctx.invoked_subcommand is not None:
        return
    query = "&".join(f"{k}={v}" for k, v in (("tenant", tenant), ("user", user),
                                              ("limit", limit)) if v)
    page = api(lambda: connect(url, token).get_json(f"/audit?{query}"))
    if as_json:
        return print_json(page)
    t = Table()
    for col in ("#", _("at (UTC)"), _("who"), _("tenant"), _("from"), _("action"), _("target"),
                _("outcome")):
        t.add_column(col)
    for row in page["items"]:
        t.add_row(str(row["seq"]), row["at"][:19].replace("T", " "),
                  f"{row['user_id'] or 'anonymous'} ({row['role'] or '-'})",
                  row["tenant_id"] or "", row["source"] or "", row["action"],
                  row["target"] or "", str(row["outcome"]))
    out.print(t)
    out.print(_("{shown} of {total} rows", shown=len(page["items"]), total=page["total"]),
              highlight=False)


@audit_app.command("verify")
def audit_verify(url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False) -> None:
    """Operator: check the chain; exit 1 and name the row when one was changed or removed."""
    verdict = api(lambda: connect(url, token).get_json("/audit/verify"))
    if as_json:
        print_json(verdict)
    elif verdict["intact"]:
        out.print(_("audit trail intact: rows {first}–{last} ({checked} checked)",
                    first=verdict["first_seq"], last=verdict["last_seq"],
                    checked=verdict["checked"]), highlight=False)
    else:
        err.print(_("[red]audit trail broken[/red]: {problem}", problem=verdict["problem"]),
                  highlight=False)
    if not verdict["intact"]:
        raise typer.Exit(1)
