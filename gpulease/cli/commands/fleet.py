"""Operators' fleet: nodes, and actions on one node."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from gpulease.cli.common import (
    AllOpt,
    JsonOpt,
    OffsetOpt,
    ReasonOpt,
    TokenOpt,
    UrlOpt,
    api,
    connect,
    err,
    out,
    pages,
    print_json,
    say_part,
)
from gpulease.cli.tables import Column, WideOpt, fitted
from gpulease.cli.tables import show as show_table
from gpulease.cli.words import _
from gpulease.schemas import NodeView
from gpulease.schemas.fleet import NodeFilter

app = typer.Typer()
node_app = typer.Typer(help="Operator actions on one node.", no_args_is_help=True)
app.add_typer(node_app, name="node")
breaker_app = typer.Typer(invoke_without_command=True)
app.add_typer(breaker_app, name="breaker")


def _show_breaker(b: dict[str, object]) -> None:
    out.print(_("deploy circuit breaker: {status}", status=b["status"])
              + (_(" since {at}", at=str(b["opened_at"])[:19]) if b["status"] == "open"
                 else "")
              + (_(", {count} deploys held", count=b["held_deploys"]) if b["held_deploys"]
                 else "")
              + (f"\n{b['reason']}" if b["status"] == "open" and b["reason"] else ""),
              highlight=False)


@breaker_app.callback()
def breaker(ctx: typer.Context, url: UrlOpt = "", token: TokenOpt = "",
            as_json: JsonOpt = False) -> None:
    """Operator: the deploy circuit breaker (open when the latest deploys all failed the
    same way: failing deploys are then held, not sent to maintenance). `breaker reset`
    closes it."""
    if ctx.invoked_subcommand is not None:
        return
    b = api(lambda: connect(url, token).get_json("/breaker"))
    if as_json:
        return print_json(b)
    _show_breaker(b)


@breaker_app.command("reset")
def breaker_reset(url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False) -> None:
    """Close it once the cause is fixed: held deploys retry at once."""
    b = api(lambda: connect(url, token).post_json("/breaker/reset"))
    if as_json:
        return print_json(b)
    _show_breaker(b)


@app.command()
def nodes(
    status: Annotated[str | None, typer.Option()] = None,
    region: Annotated[str | None, typer.Option()] = None,
    sku: Annotated[str | None, typer.Option()] = None,
    fabric: Annotated[str | None, typer.Option(help="InfiniBand fabric id")] = None,
    rack: Annotated[str | None, typer.Option()] = None,
    counts: Annotated[bool, typer.Option(
        "--counts", help="nodes per region, rack, fabric and status instead")] = False,
    limit: Annotated[int, typer.Option(min=1, max=500, help="a page's size")] = 500,
    offset: OffsetOpt = 0, every: AllOpt = False,
    wide: WideOpt = False,
    url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False,
) -> None:
    """Operator: the fleet, one line per node, with status, stage and reason (a page of
    500; --all for every node; the count says when it shows part)."""
    if counts:
        found = api(lambda: connect(url, token).every("/nodes/counts"))
        if as_json:
            return print_json(found)
        c = Table(_("region"), _("rack"), _("fabric"), _("status"), _("nodes"),
                  title=_("Nodes"))
        for row in found:
            c.add_row(row["region"], row["rack"] or "", row["fabric"] or "", row["status"],
                      str(row["nodes"]))
        out.print(c)
        return None
    client, which = connect(url, token), NodeFilter(status, region, sku, fabric, rack)

    def fetch(size: int, skip: int) -> tuple[list[NodeView], int]:
        page = api(lambda: client.nodes(which, limit=size, offset=skip))
        return list(page.items), page.total

    found, total = pages(fetch, limit, offset, every)
    say_part(len(found), total, offset)
    if as_json:
        return print_json(found)
    columns = (Column(_("name"), keep=True), Column(_("status"), keep=True),
               Column(_("instance")), Column(_("stage")),
               Column(_("GPUs free"), justify="right"), Column("SKU"), Column(_("region")),
               Column(_("pool")), Column(_("fabric")), Column("id"), Column(_("reason")))
    rows = [(n.name + (" (sim)" if n.simulated and not n.name.startswith("sim-") else ""),
             # a drained node still busy is not simply "active"
             n.status + (_(" draining") if n.drain_requested else ""), n.instance_id or "",
             n.stage or "", f"{n.free_gpus}/{n.gpu_count}", n.sku, n.region, n.pool,
             n.fabric or "", n.id, (n.status_reason or n.last_error or "")[:200])
            for n in found]
    show_table(fitted(columns, rows, wide=wide, title=_("{count} nodes", count=total)),
               wide)


@app.command()
def workers(
    stopped: Annotated[bool, typer.Option("--stopped", help="include stopped workers")] = False,
    url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False,
) -> None:
    """Operator: the worker processes, alive, dead (silent for three heartbeats) or
    stopped, with the site each serves; then each site's live workers."""
    found = api(lambda: connect(url, token).every(
        "/workers" + ("?stopped=true" if stopped else "")))
    if as_json:
        return print_json(found)
    t = Table(title=_("{count} workers", count=len(found)))
    for col in (_("worker"), _("host"), "pid", _("state"), _("site"), _("threads"),
                _("claims"), _("started"), _("last seen")):
        t.add_column(col, overflow="fold")
    for w in found:
        t.add_row(w["owner"], w["host"], str(w["pid"]), w["state"], w["site"] or _("any"),
                  str(w["threads"]), str(w["claims"]), w["started_at"][:19],
                  w["seen_at"][:19])
    out.print(t)
    t = Table(title=_("sites"))
    for col in (_("site"), _("regions"), _("own workers"), _("live"), _("orders")):
        t.add_column(col, overflow="fold")
    for site in api(lambda: connect(url, token).every("/sites")):
        t.add_row(site["id"], ", ".join(site["regions"]),
                  _("yes") if site["own_workers"] else _("no"), str(site["live_workers"]),
                  _("taken") if site["served"] else _("refused (no worker)"))
    out.print(t)


def _node_action(action: str, node_id: str, reason: str | None, url: str, token: str,
                 as_json: bool) -> None:
    node = api(lambda: connect(url, token).node_action(node_id, action, reason))
    if as_json:
        return print_json(node)
    out.print(f"{node.name}: {node.status}" + (_(" (draining)") if node.drain_requested
                                               else "")
              + (f" — {node.status_reason}" if node.status_reason else ""))


@node_app.command("history")
def node_history(
    node_id: Annotated[str, typer.Argument(help="node id or name")],
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 50,
    url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False,
) -> None:
    """Operator: a node's history, newest first, with who caused each step."""
    page = api(lambda: connect(url, token).get_json(f"/nodes/{node_id}/history?limit={limit}"))
    if as_json:
        return print_json(page)
    t = Table(_("at (UTC)"), _("kind"), _("from"), _("to"), _("by"), _("message"),
              title=_("{node}: {count} events", node=node_id, count=page["total"]))
    for e in page["items"]:
        t.add_row(e["at"][:19], e["kind"], e["from_value"] or "", e["to_value"] or "",
                  e["actor"] or "", e["message"] or "")
    out.print(t)


@node_app.command("enroll")
def node_enroll(
    bmc: Annotated[str | None, typer.Option(help="Redfish URL of the server's BMC")] = None,
    username: Annotated[str | None, typer.Option(help="BMC user")] = None,
    password_file: Annotated[Path | None, typer.Option(help="file holding the BMC password")]
    = None,
    offer: Annotated[str | None, typer.Option(help="expected offer, SKU@region")] = None,
    name: Annotated[str | None, typer.Option()] = None,
    fabric: Annotated[str | None, typer.Option(help="fabric id (`gpulease fabrics`)")] = None,
    rack: Annotated[str | None, typer.Option(help="rack id (`gpulease racks`)")] = None,
    runtime: Annotated[str | None, typer.Option(help=(
        "a shared server for container instances: its Docker engine URL "
        "(tcp://HOST:2376, ssh://root@HOST)"))] = None,
    boot_address: Annotated[str | None, typer.Option(help=(
        "network boot: the address the server's boot NIC gets from your DHCP"))] = None,
    ssh_endpoint: Annotated[str | None, typer.Option(help=(
        "HOST:PORT where tenants reach its SSH behind NAT or a port forward"))] = None,
    csv_file: Annotated[Path | None, typer.Option("--csv", help=(
        "bulk: columns bmc,username,password_file"
        "[,offer,name,fabric,rack,runtime,boot_address,ssh_endpoint]"))] = None,
    parallel: Annotated[int, typer.Option(help="bulk: BMCs at once")] = 8,
    url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False,
) -> None:
    """Enroll servers by their BMC; their inventory is checked against the offer."""
    from gpulease.cli.commands.enroll import Server, enroll_many, enroll_one

    client = connect(url, token)
    if csv_file is not None:
        raise typer.Exit(enroll_many(client, csv_file, parallel, as_json, out, err))
    if not (bmc and username and password_file):
        err.print(_("[red]error[/red]: give --bmc, --username and --password-file, or "
                    "--csv FILE"))
        raise typer.Exit(2)
    server = Server(bmc, username, password_file, offer, name, fabric, runtime, boot_address,
                    rack, ssh_endpoint)
    raise typer.Exit(enroll_one(client, server, as_json, out, err))


@node_app.command("drain")
def node_drain(node_id: str, reason: ReasonOpt = None, url: UrlOpt = "", token: TokenOpt = "",
               as_json: JsonOpt = False) -> None:
    """No new tenants; maintenance once the current one is gone."""
    _node_action("drain", node_id, reason, url, token, as_json)


@node_app.command("maintenance")
def node_maintenance(node_id: str, reason: ReasonOpt = None, url: UrlOpt = "",
                     token: TokenOpt = "", as_json: JsonOpt = False) -> None:
    """Take a free node out of service now."""
    _node_action("maintenance", node_id, reason, url, token, as_json)


@node_app.command("retire")
def node_retire(node_id: str,
                reason: Annotated[str, typer.Option(help="why it is broken for good")],
                url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False) -> None:
    """Declare a node in maintenance broken beyond repair."""
    _node_action("retire", node_id, reason, url, token, as_json)


@node_app.command("resume")
def node_resume(node_id: str, url: UrlOpt = "", token: TokenOpt = "",
                as_json: JsonOpt = False) -> None:
    """Put a node back in service."""
    _node_action("resume", node_id, None, url, token, as_json)


@node_app.command("update")
def node_update(
    node_id: Annotated[str, typer.Argument(help="node id or name")],
    name: Annotated[str | None, typer.Option(help="new name")] = None,
    rack: Annotated[str | None, typer.Option(help="rack id; '' takes it out of its rack")]
    = None,
    fabric: Annotated[str | None, typer.Option(help="fabric id; '' takes it off its fabric")]
    = None,
    bmc_username: Annotated[str | None, typer.Option(help="new BMC user")] = None,
    bmc_password_file: Annotated[Path | None, typer.Option(
        help="file holding the new BMC password (tried on the BMC first)")] = None,
    no_verify: Annotated[bool, typer.Option("--no-verify", help=(
        "store the BMC credentials without trying them (the BMC is down)"))] = False,
    url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False,
) -> None:
    """Operator: rename a node, move it to another rack or fabric, or rotate its BMC
    password."""
    body: dict[str, object] = {k: v for k, v in (("name", name), ("rack", rack),
                                                 ("fabric", fabric),
                                                 ("bmc_username", bmc_username))
                               if v is not None}
    if bmc_password_file is not None:
        try:
            body["bmc_password"] = bmc_password_file.read_text().strip()
        except OSError as exc:
            err.print(_("[red]error[/red]: cannot read {path}: {error}",
                        path=bmc_password_file, error=exc.strerror))
            raise typer.Exit(2) from None
        body["verify"] = not no_verify
    node = api(lambda: connect(url, token).patch_json(f"/nodes/{node_id}", body))
    if as_json:
        return print_json(node)
    out.print(_("{node}: rack {rack}, fabric {fabric}, BMC user {user}", node=node["name"],
                rack=node["rack"] or "-", fabric=node["fabric"] or "-",
                user=bmc_username or _("(unchanged)")))


@node_app.command("delete")
def node_delete(
    node_id: Annotated[str, typer.Argument(help="node id or name")],
    reason: ReasonOpt = None, url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False,
) -> None:
    """Operator: remove a node from the fleet (not while a tenant holds it). Its history
    and certificates stay, found by its id; the server may be enrolled again."""
    node = api(lambda: connect(url, token).delete(f"/nodes/{node_id}",
                                                  {"reason": reason} if reason else None))
    if as_json:
        return print_json(node)
    out.print(_("node {node} deleted — {reason}", node=node["id"],
                reason=node["status_reason"]))


@node_app.command("fault")
def node_fault(
    node_id: Annotated[str, typer.Argument(help="node id or name (a simulated server)")],
    faults: Annotated[list[str] | None, typer.Argument(
        help="KIND[:GPU[:ARG]] …, e.g. xid79:3 or xid:3:94 (thermal, xid79, xid, nvlink-down, "
        "slow-gpu, ecc-dbe, row-remap); none: clear")] = None,
    url: UrlOpt = "", token: TokenOpt = "",
) -> None:
    """Operator, demo: inject GPU faults into a simulated server and its stand-in agent."""
    now = api(lambda: connect(url, token).put_json(f"/nodes/{node_id}/faults",
                                                   {"faults": faults or []}))
    out.print(f"{node_id}: " + (", ".join(now) if now else _("no faults")))


@node_app.command("repair")
def node_repair(
    node_id: Annotated[str, typer.Argument(help="node id or name")],
    reason: ReasonOpt = None,
    ticket: Annotated[str | None, typer.Option(help="the ticket it is repaired for")] = None,
    url: UrlOpt = "", token: TokenOpt = "",
) -> None:
    """Operator: send a free node for repair."""
    r = api(lambda: connect(url, token).post_json(f"/nodes/{node_id}/repair",
                                                  {"reason": reason, "ticket": ticket}))
    out.print(_("{node}: in repair since {at} — {reason}", node=r["node"],
                at=r["started_at"][:16], reason=r["reason"]))


@node_app.command("repaired")
def node_repaired(
    node_id: Annotated[str, typer.Argument(help="node id or name")],
    parts: Annotated[str, typer.Option(help="what was replaced, with serials")],
    url: UrlOpt = "", token: TokenOpt = "",
) -> None:
    """Operator: record the parts replaced; the node is erased and burned in before it
    returns to the pool (after a card repair: burned in on its tenant's system, then back
    to them)."""
    r = api(lambda: connect(url, token).post_json(f"/nodes/{node_id}/repaired",
                                                  {"parts": parts}))
    then = (_("burn-in, then back to instance {instance}", instance=r["instance_id"])
            if r.get("instance_id") else _("erase and burn-in, then the pool"))
    out.print(_("{node}: repaired in {hours} h ({parts}); {then}", node=r["node"],
                hours=r["hours"], parts=r["parts"], then=then), highlight=False)


@app.command()
def repairs(open_only: Annotated[bool, typer.Option("--open", help="only running ones")]
            = False, url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False) -> None:
    """Operator: repairs, newest first, with parts, serials and time to repair."""
    found = api(lambda: connect(url, token).every(
        "/repairs" + ("?open=true" if open_only else "")))
    if as_json:
        return print_json(found)
    t = Table(title=_("{count} repairs", count=len(found)))
    for col in (_("node"), _("offer"), _("ticket"), _("started"), _("hours"), _("parts"),
                _("reason")):
        t.add_column(col, overflow="fold")
    for r in found:
        t.add_row(r["node"], r["offer"], r["ticket_id"] or "", r["started_at"][:16],
                  "" if r["hours"] is None else f"{r['hours']:.2f}", r["parts"] or "",
                  r["reason"])
    out.print(t)


@node_app.command("agent-token")
def node_agent_token(node_id: str, url: UrlOpt = "", token: TokenOpt = "") -> None:
    """Operator: a one-time enrollment token for the node's agent (24 hours)."""
    data = api(lambda: connect(url, token).post_json(f"/nodes/{node_id}/agent-token"))
    print(data["token"])


@app.command("bridge-guard")
def bridge_guard_cmd(dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="print the commands instead of running them")] = False) -> None:
    """On a container host, as root: the firewall rules that keep tenants' bridges apart
    while the engine rewrites its own (run again after a reboot)."""
    from gpulease.drivers import bridge_guard

    if dry_run:
        for line in bridge_guard.commands():
            print(line)
        return
    try:
        applied = bridge_guard.apply()
    except RuntimeError as exc:
        err.print(_("[red]error[/red]: {reason}", reason=exc), highlight=False)
        raise typer.Exit(1) from None
    for a in applied:
        if a.missing_tool:
            out.print(_("{family}: not installed, skipped", family=a.family), highlight=False)
        else:
            out.print(_("{family}: {added} rules added ({state})", family=a.family,
                        added=a.added, state=_("now in place") if a.added
                        else _("already in place")), highlight=False)
