"""Backups the platform runs on a rented server: `gpulease backup INSTANCE`, `gpulease
backups INSTANCE`, `gpulease restore INSTANCE SNAPSHOT` (the node agent moves the bytes;
docs/agent.md has the agent's own `gpulease agent backup` for tenants who run it
themselves)."""

from __future__ import annotations

import os
import time
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from gpulease.cli.client import Client
from gpulease.cli.common import (
    JsonOpt,
    TerminalConsole,
    TokenOpt,
    UrlOpt,
    api,
    connect,
    out,
    print_json,
)
from gpulease.cli.words import _

app = typer.Typer()
err = TerminalConsole(stderr=True)
PathOpt = Annotated[str, typer.Option(help="a directory on the server's data disk")]
WaitOpt = Annotated[bool, typer.Option("--wait", help="wait until it is done")]
RateOpt = Annotated[float | None, typer.Option("--max-mbps", help="bandwidth cap, MB/s")]
FINAL = ("succeeded", "failed")


def _line(r: dict[str, Any]) -> str:
    size = f"{r['bytes_total'] / 1e6:,.1f} MB" if r["bytes_total"] is not None else ""
    what = (_("{kind} {run} of {path} on {node}: {status}", kind=r["kind"], run=r["id"],
              path=r["path"], node=r["node"], status=r["status"])
            + (_(", snapshot {snapshot}", snapshot=r["snapshot_id"]) if r["snapshot_id"]
               else "")
            + (_(", {files} files, {size}", files=r["files"], size=size)
               if r["files"] is not None else "")
            + (_(" in {seconds:.1f} s", seconds=r["seconds"]) if r["seconds"] is not None
               else ""))
    return what + (f" — {r['status_reason']}" if r["status_reason"] else "")


def _follow(client: Client, instance_id: str, run: dict[str, Any], wait: bool,
            timeout_s: float = 3600) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    where = f"/instances/{instance_id}/backups/{run['id']}"
    while wait and run["status"] not in FINAL and time.monotonic() < deadline:
        time.sleep(1)
        run = api(lambda: client.get_json(where))
        if run["status"] == "running" and run["bytes_total"]:
            err.print(_("  {moved:,} of {total:,} bytes ({percent:.0f} %)",
                        moved=run["bytes_moved"] or 0, total=run["bytes_total"],
                        percent=100 * (run["bytes_moved"] or 0) / run["bytes_total"]),
                      highlight=False)
    return run


def _run(client: Client, instance_id: str, route: str, body: dict[str, Any], wait: bool,
         as_json: bool) -> None:
    run = api(lambda: client.post_json(f"/instances/{instance_id}/{route}", body))
    run = _follow(client, instance_id, run, wait)
    if as_json:
        return print_json(run)
    out.print(_line(run), highlight=False)
    if run["status"] == "failed":
        raise typer.Exit(1)


ToOpt = Annotated[str | None, typer.Option(
    "--to", help="your own S3 instead: ENDPOINT/BUCKET or ENDPOINT/BUCKET/PREFIX (keys "
    "from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY); a public address only")]


def _target(to: str | None) -> dict[str, str] | None:
    if to is None:
        return None
    scheme, _sep, rest = to.partition("://")
    host, _sep, where = rest.partition("/")
    bucket, _sep, prefix = where.partition("/")
    key, secret = os.environ.get("AWS_ACCESS_KEY_ID"), os.environ.get("AWS_SECRET_ACCESS_KEY")
    if not (scheme and host and bucket and key and secret):
        err.print(_("[red]error[/red]: ") + escape(_(
            "--to takes https://HOST/BUCKET[/PREFIX], with the keys in AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY")))
        raise typer.Exit(2)
    return {"endpoint": f"{scheme}://{host}", "bucket": bucket, "prefix": prefix,
            "access_key_id": key, "secret_access_key": secret}


@app.command("backup")
def backup(instance_id: str, path: PathOpt = "/data/checkpoints", max_mbps: RateOpt = None,
           to: ToOpt = None, wait: WaitOpt = False, url: UrlOpt = "", token: TokenOpt = "",
           as_json: JsonOpt = False) -> None:
    """Back a directory of the server's data disk up to your bucket as a snapshot (only
    what the bucket lacks is sent)."""
    _run(connect(url, token), instance_id, "backups",
         {"path": path, "max_mbps": max_mbps, "target": _target(to)}, wait, as_json)


@app.command("restore")
def restore(instance_id: str, snapshot: str, path: PathOpt = "/data/checkpoints",
            max_mbps: RateOpt = None, to: ToOpt = None, wait: WaitOpt = False,
            url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False) -> None:
    """Restore a snapshot onto the server's data disk, every file verified by SHA-256."""
    _run(connect(url, token), instance_id, "restores",
         {"snapshot_id": snapshot, "path": path, "max_mbps": max_mbps,
          "target": _target(to)}, wait, as_json)


@app.command("backup-policy")
def policy(instance_id: str,
           path: Annotated[str | None, typer.Option(help="the directory kept")] = None,
           every: Annotated[float | None, typer.Option(
               help="a backup every this many hours; 0: no schedule")] = None,
           at_lease_end: Annotated[bool | None, typer.Option(
               "--at-lease-end/--no-at-lease-end",
               help="back up when the lease lapses, at grace and before the erase")] = None,
           max_mbps: Annotated[float | None, typer.Option(
               "--max-mbps", help="bandwidth cap, MB/s; 0 removes it")] = None,
           url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False) -> None:
    """Show the instance's backup policy, or change it (only what is given changes)."""
    change = {k: v for k, v in dict(path=path, every_hours=every, at_lease_end=at_lease_end,
                                    max_mbps=max_mbps).items() if v is not None}
    where = f"/instances/{instance_id}/backup-policy"
    pol = api(lambda: connect(url, token).patch_json(where, change) if change
              else connect(url, token).get_json(where))
    if as_json:
        return print_json(pol)
    every_text = (_("every {hours:g} h", hours=pol["every_hours"]) if pol["every_hours"]
                  else _("none"))
    lines = [_("backups of {path} on {instance}", path=pol["path"], instance=instance_id),
             _("  schedule: {every}", every=every_text)
             + (_(" (next {at})", at=pol["next_scheduled_at"]) if pol["next_scheduled_at"]
                else ""),
             _("  when the lease lapses: ")
             + (_("backed up at grace and before the erase") if pol["at_lease_end"]
                else _("not backed up (opted out)")),
             _("  last success: {at}", at=pol["last_success_at"] or _("never"))
             + (_(", snapshot {snapshot}", snapshot=pol["last_snapshot_id"])
                if pol["last_snapshot_id"] else "")]
    if pol["max_mbps"]:
        lines.append(_("  bandwidth cap: {mbps:g} MB/s", mbps=pol["max_mbps"]))
    if pol["last_failure"]:
        lines.append(_("  the latest backup failed: {reason}", reason=pol["last_failure"]))
    out.print("\n".join(lines), highlight=False)


@app.command("backups")
def backups(instance_id: str, url: UrlOpt = "", token: TokenOpt = "",
            as_json: JsonOpt = False) -> None:
    """The instance's backups and restores, newest first."""
    runs = api(lambda: connect(url, token).every(f"/instances/{instance_id}/backups"))
    if as_json:
        return print_json(runs)
    t = Table(title=_("{count} backups and restores of {instance}", count=len(runs),
                      instance=instance_id))
    for col in ("id", _("kind"), _("status"), _("snapshot")):
        t.add_column(col, no_wrap=True)
    for col in (_("path"), _("files"), "MB", "s", _("reason")):
        t.add_column(col, overflow="fold")
    for r in runs:
        t.add_row(r["id"], r["kind"], r["status"], r["snapshot_id"] or "", r["path"],
                  "" if r["files"] is None else str(r["files"]),
                  "" if r["bytes_total"] is None else f"{r['bytes_total'] / 1e6:,.1f}",
                  "" if r["seconds"] is None else f"{r['seconds']:.1f}",
                  r["status_reason"] or "")
    out.print(t)
