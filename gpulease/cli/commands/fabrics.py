"""Operators' fabrics and racks: list, create, change, delete."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from gpulease.cli.common import JsonOpt, TokenOpt, UrlOpt, api, connect, out, print_json
from gpulease.cli.tables import Column, WideOpt, fitted
from gpulease.cli.tables import show as show_table
from gpulease.cli.words import _

app = typer.Typer()
fabric_app = typer.Typer(help="Operator: one fabric (InfiniBand or RoCE).", no_args_is_help=True)
rack_app = typer.Typer(help="Operator: one rack.", no_args_is_help=True)
app.add_typer(fabric_app, name="fabric")
app.add_typer(rack_app, name="rack")

Kind = Annotated[str | None, typer.Option(help="infiniband or roce")]
Rate = Annotated[int | None, typer.Option(help="per-port line rate in Gbit/s (400 = NDR)")]


@app.command()
def fabrics(url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False) -> None:
    """Operator: the fabrics, their type and speed, and the racks and nodes on each."""
    found = api(lambda: connect(url, token).every("/fabrics"))
    if as_json:
        return print_json(found)
    t = Table(_("fabric"), _("region"), _("kind"), "Gbit/s", _("racks"), _("nodes"),
              title=_("{count} fabrics", count=len(found)))
    for f in found:
        t.add_row(f["id"], f["region"], f["kind"], str(f["rate_gbps"]), str(f["racks"]),
                  str(f["nodes"]))
    out.print(t)


@fabric_app.command("create")
def fabric_create(fabric_id: str, region: Annotated[str, typer.Option()],
                  kind: Kind = "infiniband", rate_gbps: Rate = 400, url: UrlOpt = "",
                  token: TokenOpt = "", as_json: JsonOpt = False) -> None:
    made = api(lambda: connect(url, token).post_json("/fabrics", {
        "id": fabric_id, "region": region, "kind": kind, "rate_gbps": rate_gbps}))
    if as_json:
        return print_json(made)
    out.print(_("fabric {fabric}: {kind} {rate} Gbit/s in {region}", fabric=made["id"],
                kind=made["kind"], rate=made["rate_gbps"], region=made["region"]))


@fabric_app.command("update")
def fabric_update(fabric_id: str, kind: Kind = None, rate_gbps: Rate = None, url: UrlOpt = "",
                  token: TokenOpt = "", as_json: JsonOpt = False) -> None:
    body = {k: v for k, v in (("kind", kind), ("rate_gbps", rate_gbps)) if v is not None}
    made = api(lambda: connect(url, token).patch_json(f"/fabrics/{fabric_id}", body))
    if as_json:
        return print_json(made)
    out.print(_("fabric {fabric}: {kind} {rate} Gbit/s", fabric=made["id"], kind=made["kind"],
                rate=made["rate_gbps"]))


@fabric_app.command("delete")
def fabric_delete(fabric_id: str, url: UrlOpt = "", token: TokenOpt = "") -> None:
    """Only a fabric no node or rack is on."""
    api(lambda: connect(url, token).delete(f"/fabrics/{fabric_id}"))
    out.print(_("fabric {fabric} deleted", fabric=fabric_id))


@app.command()
def racks(region: Annotated[str | None, typer.Option()] = None, url: UrlOpt = "",
          token: TokenOpt = "", as_json: JsonOpt = False, wide: WideOpt = False) -> None:
    """Operator: the racks, where they stand and how many nodes each holds."""
    found = api(lambda: connect(url, token).every(
        "/racks" + (f"?region={region}" if region else "")))
    if as_json:
        return print_json(found)
    show_table(fitted(
        (Column(_("rack"), keep=True), Column(_("nodes"), keep=True, justify="right"),
         Column(_("fabric")), Column(_("region")), Column(_("zone")), Column(_("leaf switch"))),
        [(r["id"], str(r["nodes"]), r["fabric"] or "", r["region"], r["zone"],
          r["leaf_switch"] or "") for r in found], wide=wide,
        title=_("{count} racks", count=len(found))),
        wide)


@rack_app.command("create")
def rack_create(
    rack_id: str, region: Annotated[str, typer.Option()],
    zone: Annotated[str, typer.Option(help="room or hall")],
    fabric: Annotated[str | None, typer.Option(help="the fabric its leaf switch is on")] = None,
    leaf_switch: Annotated[str | None, typer.Option()] = None,
    url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False,
) -> None:
    made = api(lambda: connect(url, token).post_json("/racks", {
        "id": rack_id, "region": region, "zone": zone, "fabric": fabric,
        "leaf_switch": leaf_switch}))
    if as_json:
        return print_json(made)
    out.print(_("rack {rack} in {region}/{zone}", rack=made["id"], region=made["region"],
                zone=made["zone"])
              + (_(" on fabric {fabric}", fabric=made["fabric"]) if made["fabric"] else ""))


@rack_app.command("update")
def rack_update(
    rack_id: str, zone: Annotated[str | None, typer.Option()] = None,
    fabric: Annotated[str | None, typer.Option(help="fabric id; '' takes it off")] = None,
    leaf_switch: Annotated[str | None, typer.Option()] = None,
    url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False,
) -> None:
    body = {k: v for k, v in (("zone", zone), ("fabric", fabric), ("leaf_switch", leaf_switch))
            if v is not None}
    made = api(lambda: connect(url, token).patch_json(f"/racks/{rack_id}", body))
    if as_json:
        return print_json(made)
    out.print(_("rack {rack} in {region}/{zone}", rack=made["id"], region=made["region"],
                zone=made["zone"])
              + (_(" on fabric {fabric}", fabric=made["fabric"]) if made["fabric"] else ""))


@rack_app.command("delete")
def rack_delete(rack_id: str, url: UrlOpt = "", token: TokenOpt = "") -> None:
    """Only a rack no node is in."""
    api(lambda: connect(url, token).delete(f"/racks/{rack_id}"))
    out.print(f"rack {rack_id} deleted")
