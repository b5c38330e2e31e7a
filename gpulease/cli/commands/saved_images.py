"""Saved environments: `gpulease image save INSTANCE --name N`, `gpulease image saved`,
`gpulease image delete ID`; containers are ordered from one with `--image my/NAME`."""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer
from rich.table import Table

from gpulease.cli.commands.catalog import image_app
from gpulease.cli.common import JsonOpt, TokenOpt, UrlOpt, api, connect, out, print_json
from gpulease.cli.words import _

app = typer.Typer()  # the commands live in `gpulease image`


def _line(i: dict[str, Any]) -> str:
    size = f", {i['size_bytes'] / 1e6:,.0f} MB" if i["size_bytes"] else ""
    why = f" — {i['status_reason']}" if i["status_reason"] else ""
    return _("{name} ({image}) from {instance}: {status}", name=i["order_as"], image=i["id"],
             instance=i["source_instance_id"], status=i["status"]) + size + why


@image_app.command("save")
def save(instance_id: str,
         name: Annotated[str, typer.Option(help="order it later as my/NAME")],
         wait: Annotated[bool, typer.Option("--wait", help="wait until it is saved")] = False,
         url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False) -> None:
    """Save a running container instance as an image (its /data volume stays out)."""
    image = api(lambda: connect(url, token).post_json(f"/instances/{instance_id}/image",
                                                      {"name": name}))
    deadline = time.monotonic() + 3600
    while wait and image["status"] == "saving" and time.monotonic() < deadline:
        time.sleep(1)
        found = [i for i in api(lambda: connect(url, token).every("/saved-images"))
                 if i["id"] == image["id"]]
        image = found[0] if found else image
    if as_json:
        return print_json(image)
    out.print(_line(image), highlight=False)
    if image["status"] == "failed":
        raise typer.Exit(1)


@image_app.command("saved")
def saved(url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False) -> None:
    """Your saved images, newest first."""
    items = api(lambda: connect(url, token).every("/saved-images"))
    if as_json:
        return print_json(items)
    t = Table(title=_("{count} saved images", count=len(items)))
    for col in (_("order as"), "id", _("status"), _("from")):
        t.add_column(col, no_wrap=True)
    for col in ("MB", _("saved"), _("reason")):
        t.add_column(col, overflow="fold")
    for i in items:
        t.add_row(i["order_as"], i["id"], i["status"], i["source_instance_id"],
                  f"{i['size_bytes'] / 1e6:,.0f}" if i["size_bytes"] else "",
                  (i["saved_at"] or "")[:16], i["status_reason"] or "")
    out.print(t)


@image_app.command("delete")
def delete(image_id: str, url: UrlOpt = "", token: TokenOpt = "") -> None:
    """Delete a saved image (containers started from it go on)."""
    api(lambda: connect(url, token).delete(f"/saved-images/{image_id}"))
    out.print(_("deleted {image}", image=image_id))
