"""Tenants and API tokens."""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated, Any
from urllib.parse import quote

import typer
from rich.table import Table

from gpulease.cli.common import (
    JsonOpt,
    ReasonOpt,
    TokenOpt,
    UrlOpt,
    api,
    connect,
    out,
    plain,
    print_json,
    safe,
)
from gpulease.cli.tables import Column, WideOpt, fitted
from gpulease.cli.tables import show as show_table
from gpulease.cli.words import _
from gpulease.schemas import MeterCreated, UserView

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
    out.print(_("tenant {tenant} ({name}); admin {email}", tenant=created.tenant.id,
                name=created.tenant.name, email=created.admin.email))
    out.print(_("token: {token}   [dim]({note})[/dim]", token=created.token.token,
                note=created.token.note))


@app.command("meter-create")
def meter_create(
    name: str,
    days: Annotated[int | None, typer.Option(help="token valid for this many days")] = None,
    url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False,
) -> None:
    """Operator: an account for a metering source; prints its token once. The token may
    only post usage; `gpulease user disable ID` ends it."""
    created = MeterCreated.model_validate(api(lambda: connect(url, token).post_json(
        "/meters", {"name": name, "expires_in_days": days})))
    if as_json:
        return print_json(created)
    out.print(_("meter {meter} ({name})", meter=created.meter.id, name=created.meter.name))
    out.print(_("token: {token}   [dim]({note})[/dim]", token=created.token.token,
                note=created.token.note))


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
def tokens(url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False,
           wide: WideOpt = False) -> None:
    """API tokens you may see (prefixes only)."""
    items = api(lambda: connect(url, token).tokens())
    if as_json:
        return print_json(items)
    show_table(fitted(
        (Column("id", keep=True), Column(_("name"), keep=True), Column(_("expires")),
         Column(_("revoked")), Column(_("prefix")), Column(_("user"))),
        [(tk.id, tk.name, f"{tk.expires_at:%Y-%m-%d}" if tk.expires_at else _("never"),
          f"{tk.revoked_at:%Y-%m-%d}" if tk.revoked_at else "", tk.prefix + "...",
          tk.user_id or "") for tk in items], wide=wide), wide)


@app.command("token-revoke")
def token_revoke(token_id: str, url: UrlOpt = "", token: TokenOpt = "") -> None:
    """Revoke an API token."""
    tk = api(lambda: connect(url, token).revoke_token(token_id))
    out.print(_("{token} revoked", token=tk.id))


user_app = typer.Typer(help="Tenant admin: the tenant's users.", no_args_is_help=True)
app.add_typer(user_app, name="user")


def _user_line(u: UserView) -> str:
    return (f"{u.id}  {u.email}  {u.role}" + (_("  disabled") if u.disabled_at else "")
            + ("" if u.has_password else _("  (no console password yet)")))


@app.command("users")
def users_cmd(url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False) -> None:
    """Tenant admin: the tenant's users (operator: everyone)."""
    items = api(lambda: connect(url, token).users())
    if as_json:
        return print_json(items)
    for u in items:
        out.print(_user_line(u), highlight=False)


@user_app.command("add")
def user_add(email: str, name: Annotated[str, typer.Option(help="full name")],
             role: Annotated[str, typer.Option(help="admin, member or reader")] = "member",
             url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False) -> None:
    """Add a user; give them a token (`gpulease token-create`) or let them set a password."""
    made = api(lambda: connect(url, token).add_user(email, name, role))
    print_json(made) if as_json else out.print(_user_line(made), highlight=False)


def _user_action(action: str, user_id: str, url: str, token: str, as_json: bool) -> None:
    done = api(lambda: connect(url, token).user_action(user_id, action))
    print_json(done) if as_json else out.print(_user_line(done), highlight=False)


@user_app.command("disable")
def user_disable(user_id: str, url: UrlOpt = "", token: TokenOpt = "",
                 as_json: JsonOpt = False) -> None:
    """No more sign-ins; the user's tokens and console sessions end now."""
    _user_action("disable", user_id, url, token, as_json)


@user_app.command("enable")
def user_enable(user_id: str, url: UrlOpt = "", token: TokenOpt = "",
                as_json: JsonOpt = False) -> None:
    """Let a disabled user sign in again (their old tokens stay ended)."""
    _user_action("enable", user_id, url, token, as_json)


@user_app.command("remove")
def user_remove(user_id: str, url: UrlOpt = "", token: TokenOpt = "") -> None:
    """Remove a user for good (kept for the record; the e-mail is free again)."""
    api(lambda: connect(url, token).remove_user(user_id))
    out.print(_("{user} removed", user=user_id))


@app.command("password")
def password_cmd(url: UrlOpt = "", token: TokenOpt = "") -> None:
    """Set your web-console password (asks for the current one and the new one)."""
    current = typer.prompt("current password (empty if none yet)", hide_input=True,
                           default="", show_default=False)
    new = typer.prompt("new password (12 characters or more)", hide_input=True,
                       confirmation_prompt=True)
    api(lambda: connect(url, token).set_password(new, current or None))
    out.print(_("password set; your other console sessions have ended"))


tenant_app = typer.Typer(help="Operator: one tenant's account.", no_args_is_help=True)
app.add_typer(tenant_app, name="tenant")


@app.command("tenants")
def tenants(status: Annotated[str | None, typer.Option(help="active, suspended or closed")]
            = None, url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False) -> None:
    """Operator: every tenant, its users, live instances and balance."""
    found: list[dict[str, Any]] = api(lambda: connect(url, token).every(
        "/tenants" + (f"?status={status}" if status else "")))
    if as_json:
        return print_json(found)
    t = Table(title=_("{count} tenants", count=len(found)))
    for col in ("id", _("name"), _("status"), _("users"), _("live"), _("balance"), _("since"),
                _("reason")):
        t.add_column(col, overflow="fold")
    for row in found:
        t.add_row(row["id"], plain(row["name"]), row["status"], str(row["users"]),
                  str(row["live_instances"]), f"¥{Decimal(row['balance']):,.2f}",
                  row["created_at"][:10], plain(row["status_reason"]))
    out.print(t)


def _tenant_action(tenant_id: str, action: str, reason: str | None, url: str, token: str,
                   as_json: bool) -> None:
    row = api(lambda: connect(url, token).post_json(
        f"/tenants/{tenant_id}/{action}", {"reason": reason} if reason else None))
    if as_json:
        return print_json(row)
    out.print(f"{safe(row['name'])} ({row['id']}): {row['status']}"
              + (f" — {safe(row['status_reason'])}" if row["status_reason"] else ""))


@tenant_app.command("suspend")
def tenant_suspend(tenant_id: str, reason: Annotated[str, typer.Option(help="shown to its "
                   "users when an order is refused")], url: UrlOpt = "", token: TokenOpt = "",
                   as_json: JsonOpt = False) -> None:
    """New orders refused; its machines are kept and billed."""
    _tenant_action(tenant_id, "suspend", reason, url, token, as_json)


@tenant_app.command("reinstate")
def tenant_reinstate(tenant_id: str, url: UrlOpt = "", token: TokenOpt = "",
                     as_json: JsonOpt = False) -> None:
    """Lift a suspension."""
    _tenant_action(tenant_id, "reinstate", None, url, token, as_json)


@tenant_app.command("close")
def tenant_close(tenant_id: str, reason: ReasonOpt = None, url: UrlOpt = "",
                 token: TokenOpt = "", as_json: JsonOpt = False) -> None:
    """Close an account once nothing is rented, unbilled or owed (it says what is left)."""
    _tenant_action(tenant_id, "close", reason, url, token, as_json)


quota_app = typer.Typer(help="Operator: a tenant's GPU quotas.", no_args_is_help=True)
app.add_typer(quota_app, name="quota")


def _quota_table(found: list[dict[str, Any]]) -> None:
    t = Table(title=_("{count} GPU quotas", count=len(found)))
    for col in (_("tenant"), _("offer"), _("max GPUs"), _("GPUs held"), _("set by"),
                _("reason")):
        t.add_column(col, overflow="fold")
    for q in found:
        t.add_row(q["tenant_id"], _("all GPUs") if q["offer"] == "*" else q["offer"],
                  str(q["max_gpus"]), str(q["held"]), plain(q["set_by"]), plain(q["reason"]))
    out.print(t)


@app.command("quotas")
def quotas_cmd(tenant: Annotated[str | None, typer.Option(
        help="operator: whose quotas (tenant users see their own)")] = None,
        url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False) -> None:
    """GPU quotas: how many GPUs may be held at once, in all or of one offer, and how many
    are held now."""
    path = f"/tenants/{quote(tenant, safe='')}/gpu-quotas" if tenant else "/gpu-quotas"
    found = api(lambda: connect(url, token).every(path))
    if as_json:
        return print_json(found)
    _quota_table(found)


@quota_app.command("set")
def quota_set(tenant_id: str, offer: Annotated[str, typer.Argument(
        help="'*' for all GPUs, or an offer as sku@region")],
        gpus: Annotated[int, typer.Argument(help="GPUs it may hold at once")],
        reason: ReasonOpt = None, url: UrlOpt = "", token: TokenOpt = "",
        as_json: JsonOpt = False) -> None:
    """Cap the GPUs a tenant holds at once; orders beyond it are refused, nothing running
    is touched."""
    row = api(lambda: connect(url, token).put_json(
        f"/tenants/{quote(tenant_id, safe='')}/gpu-quotas/{quote(offer, safe='@')}",
        {"max_gpus": gpus, "reason": reason}))
    if as_json:
        return print_json(row)
    _quota_table([row])


@quota_app.command("remove")
def quota_remove(tenant_id: str, offer: str, url: UrlOpt = "", token: TokenOpt = "") -> None:
    api(lambda: connect(url, token).delete(
        f"/tenants/{quote(tenant_id, safe='')}/gpu-quotas/{quote(offer, safe='@')}"))
    out.print(_("quota removed"))
