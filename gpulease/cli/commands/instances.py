"""Ordering and holding machines: order, follow the delivery, show, verify, metrics,
acceptance reports, release, erase certificates."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from gpulease.cli.client import ApiError, Client
from gpulease.cli.common import (
    AllOpt,
    JsonOpt,
    OffsetOpt,
    TokenOpt,
    UrlOpt,
    api,
    connect,
    err,
    out,
    pages,
    parse_addons,
    print_json,
    safe,
    say_part,
)
from gpulease.cli.spend import YesOpt, confirm_spend
from gpulease.cli.tables import Column, WideOpt, fitted
from gpulease.cli.tables import show as show_table
from gpulease.cli.words import _, step
from gpulease.domain.states import InstanceStatus
from gpulease.schemas import InstanceView, OrderRequest

app = typer.Typer()
order_app = typer.Typer(help="Order bare metal, a cluster or a container.", no_args_is_help=True)
app.add_typer(order_app, name="order")


def _read_keys(files: list[Path]) -> list[str]:
    keys = []
    for f in files:
        try:
            keys += [ln.strip() for ln in f.read_text().splitlines() if ln.strip()]
        except OSError as exc:
            err.print(_("[red]error[/red]: cannot read SSH key file {path}: {error}",
                        path=f, error=exc.strerror))
            raise typer.Exit(2) from None
    return keys


@dataclass(frozen=True)
class Follow:
    """How an order command goes on once it has checked the order: whether it waits for
    delivery (and how long), prints JSON, and spends without asking."""

    wait: bool
    as_json: bool
    timeout: float
    yes: bool


def _place_and_follow(url: str, token: str, req: OrderRequest, how: Follow) -> None:
    client = connect(url, token)
    review = api(lambda: client.post_json("/instances/review",
                                          req.model_dump(mode="json", exclude_none=True)))
    hold = Decimal(review["hold"])
    confirm_spend(_("This order holds its first {term}", term=_(req.term or "month")), hold,
                  how.yes)
    inst = api(lambda: client.order(req, idempotency_key=str(uuid.uuid4())))
    wait, as_json, timeout = how.wait, how.as_json, how.timeout
    if as_json and not wait:
        return print_json(inst)
    if not as_json:
        out.print(_("ordered [bold]{instance}[/bold] ({kind}, {sku} in {region}, {nodes} "
                    "node(s), {gpus} GPUs)", instance=inst.id, kind=inst.kind, sku=inst.sku,
                    region=inst.region, nodes=inst.node_count, gpus=inst.gpu_count))
        out.print(_("held ¥{amount} from your wallet", amount=f"{hold:,.2f}"), highlight=False)
    inst = _follow(client, inst, quiet=as_json, timeout=timeout)
    creds = None
    if inst.status == InstanceStatus.READY and inst.credentials_available:
        creds = api(lambda: client.credentials(inst.id))
    if as_json:
        data = inst.model_dump(mode="json")
        data["credentials"] = creds.model_dump(mode="json") if creds else None
        print_json(data)
    elif inst.status == InstanceStatus.READY:
        out.print(_("[green]ready[/green] in {seconds:.1f} s (SLA {sla:.0f} s)",
                    seconds=inst.delivery_seconds, sla=inst.delivery_sla_seconds)
                  + (_("  [yellow]simulated hardware[/yellow]") if inst.simulated else ""))
        out.print(f"IP:       {inst.ip_address}")
        out.print(f"SSH:      {inst.ssh_command}")
        if len(inst.nodes) > 1:
            for n in inst.nodes:
                out.print(_("  node {node}: {ip}  GPUs {gpus}", node=n.name, ip=n.ip_address,
                            gpus=len(n.gpus)))
        if creds:
            out.print(_("password: {password}   [dim]({note})[/dim]",
                        password=creds.root_password, note=creds.note))
    if inst.status != InstanceStatus.READY:
        err.print(f"[red]{inst.status}[/red]: "
                  f"{inst.status_reason or _('not ready in time')}")
        raise typer.Exit(1)


def _follow(client: Client, inst: InstanceView, quiet: bool, timeout: float,
            until: tuple[str, ...] = ("ready", "failed", "released")) -> InstanceView:
    """Print each stage as it comes: pushed by the API (server-sent events), or, where the
    stream cannot be had (an older API, a proxy that buffers), by polling."""
    seen = 0
    deadline = time.monotonic() + timeout
    instance_id = inst.id

    def show(view: InstanceView, status: Any) -> None:
        nonlocal seen
        if not quiet:
            for st in view.stages[seen:]:
                where = f" [dim]{st.node}[/dim]" if st.node else ""
                msg = f" — {st.message}" if st.message else ""
                out.print(f"  {st.at:%H:%M:%S}  {step(st.stage)}{where}{msg}")
            status.update(f"{view.status}: {step(view.stage)}")
        seen = len(view.stages)

    with out.status(_("waiting…"), spinner="dots") as status:
        try:
            for inst in client.follow(instance_id, until, timeout):
                show(inst, status)
                if inst.status in until:
                    return inst
            if time.monotonic() > deadline:
                return inst
        except ApiError:
            pass  # no stream here: poll
        while True:
            inst = api(lambda: client.instance(instance_id))
            show(inst, status)
            if inst.status in until or time.monotonic() > deadline:
                return inst
            time.sleep(0.5)


KeyOpt = Annotated[list[Path], typer.Option("--ssh-key", help="public key file (repeatable)")]
AddOpt = Annotated[list[str] | None, typer.Option(
    help="add-on NAME=QUANTITY charged per period with the lease, repeatable: "
    "public-bandwidth=100 (Mbps), extra-storage=2000 (GB), support-standard=1")]
WaitOpt = Annotated[bool, typer.Option("--wait", help="with --json: wait until ready")]
TimeoutOpt = Annotated[float, typer.Option(help="seconds to wait for delivery")]
EncryptOpt = Annotated[bool, typer.Option(
    "--encrypted-data", help="leave the data disk for LUKS2 under a key only you hold "
    "(`gpulease agent encrypt-data` on the server)")]


@order_app.command("bare-metal")
def order_bare_metal(
    sku: Annotated[str, typer.Option(help="e.g. h100-80g-x8")],
    region: Annotated[str, typer.Option(help="e.g. ningxia-1")],
    ssh_key: KeyOpt,
    term: Annotated[str, typer.Option(help="day, month or year")] = "month",
    image: Annotated[str | None, typer.Option(help="image id (default: the offer's)")] = None,
    name: Annotated[str | None, typer.Option()] = None,
    add: AddOpt = None,
    restore: Annotated[str | None, typer.Option(
        help="a snapshot of yours (`gpulease backups`) put on the data disk at delivery")
    ] = None,
    encrypted_data: EncryptOpt = False,
    wait: WaitOpt = False, as_json: JsonOpt = False, timeout: TimeoutOpt = 1800.0,
    yes: YesOpt = False, url: UrlOpt = "", token: TokenOpt = "",
) -> None:
    """Order one whole 8-GPU server and follow its delivery."""
    req = OrderRequest.model_validate(dict(
        kind="bare_metal", sku=sku, region=region, term=term, image=image,
        ssh_keys=_read_keys(ssh_key), name=name, add=parse_addons(add), restore=restore,
        encrypted_data=encrypted_data))
    _place_and_follow(url, token, req, Follow(wait or not as_json, as_json, timeout, yes))


@order_app.command("cluster")
def order_cluster(
    nodes: Annotated[int, typer.Option(help="number of servers on one fabric")],
    sku: Annotated[str, typer.Option()],
    region: Annotated[str, typer.Option()],
    ssh_key: KeyOpt,
    term: Annotated[str, typer.Option()] = "month",
    image: Annotated[str | None, typer.Option()] = None,
    name: Annotated[str | None, typer.Option()] = None,
    add: AddOpt = None,
    encrypted_data: EncryptOpt = False,
    wait: WaitOpt = False, as_json: JsonOpt = False, timeout: TimeoutOpt = 1800.0,
    yes: YesOpt = False, url: UrlOpt = "", token: TokenOpt = "",
) -> None:
    """Order N servers placed on one InfiniBand fabric (or be told what is free where)."""
    req = OrderRequest.model_validate(dict(
        kind="cluster", nodes=nodes, sku=sku, region=region, term=term, image=image,
        ssh_keys=_read_keys(ssh_key), name=name, add=parse_addons(add),
        encrypted_data=encrypted_data))
    _place_and_follow(url, token, req, Follow(wait or not as_json, as_json, timeout, yes))


@order_app.command("container")
def order_container(
    gpus: Annotated[int, typer.Option(help="GPUs (1-8)")],
    ssh_key: KeyOpt,
    offer: Annotated[str, typer.Option()] = "rtx4090-24g-container",
    image: Annotated[str | None, typer.Option(
        help="an image id, or my/NAME: one of your saved environments")] = None,
    name: Annotated[str | None, typer.Option()] = None,
    ssh_password: Annotated[bool, typer.Option(help=(
        "also let root log in over SSH with the password shown once (default: keys only)"))]
    = False,
    wait: WaitOpt = False, as_json: JsonOpt = False, timeout: TimeoutOpt = 600.0,
    yes: YesOpt = False, url: UrlOpt = "", token: TokenOpt = "",
) -> None:
    """Order GPUs of a shared server, billed by the hour."""
    req = OrderRequest(kind="container", offer=offer, gpus=gpus, term="hour", image=image,
                       ssh_keys=_read_keys(ssh_key), name=name, ssh_password=ssh_password)
    _place_and_follow(url, token, req, Follow(wait or not as_json, as_json, timeout, yes))


# ----------------------------------------------------------------------- instances
@app.command()
def instances(
    status: Annotated[str | None, typer.Option()] = None,
    limit: Annotated[int, typer.Option(min=1, max=500, help="a page's size")] = 500,
    offset: OffsetOpt = 0, every: AllOpt = False,
    wide: WideOpt = False,
    idle: Annotated[bool, typer.Option(
        "--idle", help="the delivered ones with the share of the last hour and day their "
        "GPUs sat idle, the most idle first")] = False,
    url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False,
) -> None:
    """Your instances, newest first (one line each; at 80 columns the secondary columns
    step aside; a page of 500, --all for every one)."""
    client = connect(url, token)
    if idle:
        return _idle(client, wide, as_json)

    def fetch(size: int, skip: int) -> tuple[list[InstanceView], int]:
        page = api(lambda: client.instances(status=status, limit=size, offset=skip))
        return list(page.items), page.total

    found, total = pages(fetch, limit, offset, every)
    say_part(len(found), total, offset)
    if as_json:
        return print_json(found)
    columns = (Column("id", keep=True), Column(_("status"), keep=True), Column("SKU"),
               Column(_("stage")), Column("IP"), Column(_("GPUs"), justify="right"),
               Column(_("region")), Column(_("kind")), Column(_("nodes"), justify="right"),
               Column(_("delivery"), justify="right"))
    rows = [(i.id, i.status, i.sku or i.kind, i.stage or "", i.ip_address or "",
             str(i.gpu_count), i.region, i.kind.replace("_", " "), str(i.node_count),
             f"{i.delivery_seconds:.1f} s" if i.delivery_seconds is not None else "")
            for i in found]
    show_table(fitted(columns, rows, wide=wide, title=_("{count} instances",
                                                         count=total)), wide)


@app.command()
def show(instance_id: str, url: UrlOpt = "", token: TokenOpt = "",
         as_json: JsonOpt = False) -> None:
    """One instance with its nodes and the time of every stage."""
    inst = api(lambda: connect(url, token).instance(instance_id))
    if as_json:
        return print_json(inst)
    out.print(f"[bold]{inst.id}[/bold] {inst.kind} {inst.sku} {inst.region} term={inst.term} "
              f"image={inst.image}  status=[bold]{inst.status}[/bold]"
              + (f" ({safe(inst.status_reason)})" if inst.status_reason else ""))
    if inst.ssh_command:
        out.print(f"SSH: {inst.ssh_command}")
    cost = api(lambda: connect(url, token).get_json(f"/instances/{inst.id}/cost"))
    if cost["per_hour"] is not None:
        out.print(_("cost: ¥{per_hour:,.2f} an hour now · ¥{spent:,.2f} so far",
                    per_hour=Decimal(cost["per_hour"]), spent=Decimal(cost["spent"])),
                  highlight=False)
    else:
        out.print(_("cost: ¥{spent:,.2f} in all", spent=Decimal(cost["spent"])),
                  highlight=False)
    for n in inst.nodes:
        out.print(_("  node {node}: {status} {stage} GPUs {gpus} {ip}", node=n.name,
                    status=n.status, stage=step(n.stage), gpus=n.gpus, ip=n.ip_address or ""))
    for st in inst.stages:
        out.print(f"  {st.at:%Y-%m-%d %H:%M:%S}  {step(st.stage)} {st.node or ''} "
                  f"{safe(st.message or '')}")


@app.command()
def credentials(instance_id: str, url: UrlOpt = "", token: TokenOpt = "",
                as_json: JsonOpt = False) -> None:
    """The root password of a ready instance (of a replaced server too), shown once: after
    this, log in with your SSH key and set your own with `passwd`."""
    creds = api(lambda: connect(url, token).credentials(instance_id))
    if as_json:
        return print_json(creds)
    out.print(f"SSH:      {creds.ssh_command}")
    out.print(_("password: {password}   [dim]({note})[/dim]",
                password=safe(creds.root_password), note=safe(creds.note)), highlight=False)


@app.command()
def release(
    instance_id: str,
    wait: Annotated[bool, typer.Option(help="wait until erased and free again")] = False,
    url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False,
    timeout: TimeoutOpt = 1800.0,
) -> None:
    """Hand an instance back; its disks are erased before anyone else gets the node."""
    client = connect(url, token)
    inst = api(lambda: client.release(instance_id))
    if wait:
        inst = _follow(client, inst, quiet=as_json, timeout=timeout, until=("released",))
    if as_json:
        return print_json(inst)
    out.print(f"{inst.id}: {inst.status}")


POWER_ACTIONS = ("reboot", "power_cycle", "restart")


@app.command()
def power(
    instance_id: str,
    action: Annotated[str | None, typer.Argument(
        help="reboot | power_cycle (bare metal) | restart (a container); left out: the "
             "instance's last power actions")] = None,
    node: Annotated[str | None, typer.Option(help="one server of a cluster")] = None,
    wait: Annotated[bool, typer.Option(help="wait until every server took it")] = True,
    url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False,
) -> None:
    """Reboot or power cycle your server, or restart your container; nothing is erased."""
    client = connect(url, token)
    path = f"/instances/{instance_id}/power"
    if action is None:
        history = api(lambda: client.get_json(path))["items"]  # the newest 20
        if as_json:
            return print_json(history)
        for a in history:
            out.print(_power_line(a), highlight=False)
        return
    if action not in POWER_ACTIONS:
        raise typer.BadParameter(_("one of {actions}", actions=", ".join(POWER_ACTIONS)),
                                 param_hint="ACTION")
    body: dict[str, Any] = {"action": action, **({"node": node} if node else {})}
    asked = api(lambda: client.post_json(path, body))
    deadline = time.monotonic() + 600
    while wait and asked["status"] == "queued" and time.monotonic() < deadline:
        time.sleep(1)
        asked = next((a for a in api(lambda: client.get_json(path))["items"]
                      if a["id"] == asked["id"]), asked)
    if as_json:
        return print_json(asked)
    out.print(_power_line(asked), highlight=False)
    if asked["status"] == "failed":
        raise typer.Exit(1)


def _power_line(a: dict[str, Any]) -> str:
    why = f" — {a['status_reason']}" if a["status_reason"] else ""
    return _("{id} {action} ({servers}): {status}", id=a["id"], action=a["action"],
             servers=a["node"] or _("every server"),
             status={"queued": _("queued"), "done": _("done"), "failed": _("failed")}.get(
                 a["status"], a["status"])) + why


# ----------------------------------------------------------------------- operator
@app.command()
def metrics(instance_id: str, url: UrlOpt = "", token: TokenOpt = "",
            as_json: JsonOpt = False) -> None:
    """Latest GPU telemetry of an instance (per GPU) and its open hardware alerts."""
    data = api(lambda: connect(url, token).get_json(f"/instances/{instance_id}/metrics"))
    if as_json:
        return print_json(data)
    for node in data["nodes"]:
        label = _(" (SIMULATED)") if node["simulated"] else ""
        out.print(_("[bold]{node}[/bold]{label}  received {at}", node=node["node"],
                    label=label, at=node["received_at"] or "-"))
        table = Table("GPU", _("temp max °C"), _("power avg W"), _("util avg %"),
                      _("SM MHz min-max"), _("thermal throttle s"), "XIDs", "ECC DBE",
                      _("NVLink down"))
        for g in node["gpus"]:
            table.add_row(str(g["index"]), str(g["temp_max_c"]), str(g["power_avg_w"]),
                          str(g["util_avg_pct"]),
                          f"{g['sm_clock_min_mhz']}-{g['sm_clock_max_mhz']}",
                          str(g["thermal_throttle_s"]), ",".join(map(str, g["xids"])) or "-",
                          str(g["ecc_dbe_total"]),
                          ",".join(map(str, g["nvlink_down"])) or "-")
        out.print(table)
        for a in node["alerts"]:
            out.print(f"  [red]{a['severity']}[/red] {a['kind']}: {safe(a['message'])}")
        if not node["gpus"]:
            out.print(_("  no telemetry yet: the node's agent pushes a summary every minute"))


@app.command()
def acceptance(instance_id: str, url: UrlOpt = "", token: TokenOpt = "",
               as_json: JsonOpt = False) -> None:
    """The acceptance reports of an instance's nodes, run before delivery."""
    data = api(lambda: connect(url, token).every(f"/instances/{instance_id}/acceptance"))
    if as_json:
        return print_json(data)
    if not data:
        out.print(_("no acceptance report yet"))
    for r in data:
        out.print(f"[bold]{r['node']}[/bold] {r['created_at']} ({r['trigger']})")
        print(r["report"]["summary"])


@app.command()
def verify(instance_id: str,
           wait: Annotated[bool, typer.Option(help="wait for every node's report")] = False,
           timeout: Annotated[float, typer.Option(help="seconds to wait")] = 1800,
           url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False) -> None:
    """Run the acceptance suite again on a ready instance's nodes."""
    client = connect(url, token)
    before = api(lambda: client.get_json(f"/instances/{instance_id}/acceptance"))["total"]
    runs = api(lambda: client.post_json(f"/instances/{instance_id}/verify"))
    deadline = time.monotonic() + timeout
    reports = []
    while True:
        reports = api(lambda: client.get_json(
            f"/instances/{instance_id}/acceptance?offset={before}"))["items"]
        if not wait or len(reports) >= len(runs) or time.monotonic() > deadline:
            break
        time.sleep(2)
    if as_json:
        return print_json({"runs": runs, "reports": reports})
    for r in runs:
        out.print(f"{r['node']}: {r['status']}", highlight=False)
    for r in reports:
        print(r["report"]["summary"])
    if wait and len(reports) < len(runs):
        err.print(_("[red]timed out[/red] waiting for the node agent's report"))
        raise typer.Exit(1)
    if any(not r["passed"] for r in reports):
        raise typer.Exit(1)


@app.command()
def certificates(instance_id: str, url: UrlOpt = "", token: TokenOpt = "",
                 as_json: JsonOpt = False) -> None:
    """The erase certificates (NIST SP 800-88) of the disks an instance used."""
    data = api(lambda: connect(url, token).every(f"/instances/{instance_id}/erase-certificates"))
    if as_json:
        return print_json(data)
    table = Table(_("certificate"), _("node"), _("device"), _("serial"), _("method"),
                  _("NIST level"), _("verified"))
    for c in data:
        table.add_row(c["id"], c["node"], c["device"], c["serial"] or "-", c["method"],
                      c["nist_level"], _("yes") if c["passed"] else _("[red]NO[/red]"))
    out.print(table)


@app.command()
def certificate(certificate_id: str,
                output: Annotated[Path | None, typer.Option(help="write JSON here")] = None,
                url: UrlOpt = "", token: TokenOpt = "") -> None:
    """Download one erase certificate (JSON, with its SHA-256 digest)."""
    data = api(lambda: connect(url, token).get_json(f"/erase-certificates/{certificate_id}"))
    text = json.dumps(data["certificate"], indent=2)
    if output:
        output.write_text(text)
        out.print(_("certificate {certificate} written to {path}",
                    certificate=certificate_id, path=output))
    else:
        print(text)


def _pct(share: dict[str, Any]) -> str:
    return "—" if share["idle_pct"] is None else f"{share['idle_pct']:.0f} %"


def _idle(client: Client, wide: bool, as_json: bool) -> None:
    found = api(lambda: client.every("/idle"))
    if as_json:
        return print_json(found)
    columns = (Column("id", keep=True), Column(_("name")), Column(_("GPUs"), justify="right"),
               Column(_("idle, last hour"), justify="right", keep=True),
               Column(_("idle, last day"), justify="right", keep=True),
               Column(_("most idle GPU, day"), justify="right"))
    rows = []
    for v in found:
        worst = max(v["per_gpu"], key=lambda g: g["day"]["idle_pct"] or 0, default=None)
        rows.append((v["instance_id"], safe(v["name"] or ""), str(v["gpus"]), _pct(v["hour"]),
                     _pct(v["day"]), f"#{worst['index']}: {_pct(worst['day'])}"
                     if worst else "—"))
    threshold = found[0]["threshold_pct"] if found else None
    title = _("{count} delivered instances; idle = utilisation under {threshold:g} %",
              count=len(found), threshold=threshold) if threshold is not None else \
        _("{count} delivered instances", count=0)
    show_table(fitted(columns, rows, wide=wide, title=title), wide)
