"""Tenants and API tokens."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from gpulease.cli.common import (
    JsonOpt,
    TokenOpt,
    UrlOpt,
    api,
    connect,
    out,
    print_json,
)

app = typer.Typer()


@app.command("tenant-create")
def tenant_create(
    name: str, admin_email: Annotated[str, typer.Option()],
    admin_name: Annotated[str, typer.Option()] = "Tenant admin",
    url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False,
) -> None:
    """Operator: create a tenant and its first admin; prints the admin's token once."""
    created = api(lambda: connect(url, token).create_tenant(name, admin_email, admin_name))
    if as_json:
        return print_json(created)
    out.print(f"tenant {created.tenant.id} ({created.tenant.name}); admin {created.admin.email}")
    out.print(f"token: {created.token.token}   [dim]({created.token.note})[/dim]")


@app.command("token-create")
def token_create(
    name: Annotated[str, typer.Option()] = "cli",
    days: Annotated[int, typer.Option(help="valid for this many days")] = 90,
    url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False,
) -> None:
    """A new API token for yourself (shown once)."""
    created = api(lambda: connect(url, token).create_token(name, days))
    if as_json:
        return print_json(created)
    out.print(f"{created.token}   [dim]({created.note})[/dim]")


@app.command("tokens")
def tokens(url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False) -> None:
    """API tokens you may see (prefixes only)."""
    items = api(lambda: connect(url, token).tokens())
    if as_json:
        return print_json(items)
    t = Table()
    for col in ("id", "name", "prefix", "user", "expires", "revoked"):
        t.add_column(col)
    for tk in items:
        t.add_row(tk.id, tk.name, tk.prefix + "…", tk.user_id,
                  f"{tk.expires_at:%Y-%m-%d}" if tk.expires_at else "never",
                  f"{tk.revoked_at:%Y-%m-%d}" if tk.revoked_at else "")
    out.print(t)


@app.command("token-revoke")
def token_revoke(token_id: str, url: UrlOpt = "", token: TokenOpt = "") -> None:
    """Revoke an API token."""
    tk = api(lambda: connect(url, token).revoke_token(token_id))
    out.print(f"{tk.id} revoked")


# --- telemetry, acceptance reports, erase certificates -----------------------------------
