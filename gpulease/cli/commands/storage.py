"""A tenant's object storage: `gpulease storage`, keys made and revoked."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from gpulease.cli.common import JsonOpt, TokenOpt, UrlOpt, api, connect, out, print_json
from gpulease.cli.words import _

app = typer.Typer()
storage_app = typer.Typer(invoke_without_command=True)
app.add_typer(storage_app, name="storage")


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


@storage_app.callback()
def storage(ctx: typer.Context, url: UrlOpt = "", token: TokenOpt = "",
            as_json: JsonOpt = False) -> None:
    """Your object storage: the S3 endpoint, your bucket, what it holds and your keys.
    `storage key` makes a key (shown once), `storage revoke ID` ends one."""
    if ctx.invoked_subcommand is not None:
        return
    v = api(lambda: connect(url, token).get_json("/storage"))
    if as_json:
        return print_json(v)
    used, quota = int(v["used_bytes"]), int(v["quota_bytes"])
    out.print(_("endpoint {endpoint} (region {region}), bucket [bold]{bucket}[/bold]\n"
                "{used:,.2f} GB stored of a {quota:,.0f} GB quota ({percent:.0f} %)",
                endpoint=v["endpoint"], region=v["region"], bucket=v["bucket"],
                used=used / 1e9, quota=quota / 1e9, percent=100 * used / quota),
              highlight=False)
    if v.get("writes_blocked"):
        out.print(_("[bold red]past the quota: uploads with your keys are refused[/bold red] "
                    "(reads and deletes go on); delete objects or ask your provider for more"),
                  highlight=False)
    if v["price_per_gb_month"] is not None:
        out.print(_("the first {free:,.0f} GB free, then ¥{price} per GB-month, measured "
                    "daily", free=int(v["free_bytes"]) / 1e9, price=v["price_per_gb_month"]),
                  highlight=False)
    t = Table(title=_("{count} keys", count=len(v["keys"])))
    t.add_column(_("access key id"), no_wrap=True, min_width=20)
    for col in (_("made"), _("by"), _("revoked")):
        t.add_column(col)
    for k in v["keys"]:
        t.add_row(k["access_key_id"], k["created_at"][:16], k["created_by"],
                  (k["revoked_at"] or "")[:16])
    out.print(t)


@storage_app.command("key")
def key(url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False) -> None:
    """Tenant admin: a new access key to your bucket; the secret is shown this once."""
    k = api(lambda: connect(url, token).post_json("/storage/keys"))
    if as_json:
        return print_json(k)
    out.print(_("endpoint {endpoint}, bucket {bucket}", endpoint=k["endpoint"],
                bucket=k["bucket"]) + f"\nAWS_ACCESS_KEY_ID={k['access_key_id']}\n"
              f"AWS_SECRET_ACCESS_KEY={k['secret_access_key']}\n"
              + _("(the secret is not kept: store it now)"), highlight=False)


@storage_app.command("revoke")
def revoke(access_key_id: Annotated[str, typer.Argument()], url: UrlOpt = "",
           token: TokenOpt = "") -> None:
    """Tenant admin: end an access key."""
    api(lambda: connect(url, token).delete(f"/storage/keys/{access_key_id}"))
    out.print(_("{token} revoked", token=access_key_id))


@storage_app.command("quota")
def quota(tenant_id: Annotated[str, typer.Argument()],
          gb: Annotated[str, typer.Argument(help="GB (10^9 bytes), or 'default'")],
          url: UrlOpt = "", token: TokenOpt = "") -> None:
    """Operator: a tenant's bucket quota; past it the platform starts no backup into it."""
    value = None if gb == "default" else _gb(gb)
    q = api(lambda: connect(url, token).put_json(f"/storage/quotas/{tenant_id}",
                                                 {"quota_gb": value}))
    out.print(_("{tenant}: quota {gb:,.0f} GB", tenant=tenant_id, gb=q["quota_gb"]),
              highlight=False)


def _gb(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise typer.BadParameter(f"{text!r}: give GB as a number, or 'default'") from None
