"""The gpulease command line. Talks to a server through GPULEASE_URL / GPULEASE_TOKEN,
except `up`, `serve`, `worker` and `migrate`, which run the platform itself."""

from __future__ import annotations

import json
import sys
import time
import uuid
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, NoReturn, TypeVar

import typer
from pydantic import BaseModel
from rich.console import Console
from rich.table import Table

from gpulease.cli.agent import agent_app
from gpulease.cli.client import ApiError, Client
from gpulease.schemas import InstanceView, OrderRequest

T = TypeVar("T")

app = typer.Typer(help="gpulease: rent out and rent GPU servers.", no_args_is_help=True)
order_app = typer.Typer(help="Order bare metal, a cluster or a container.", no_args_is_help=True)
node_app = typer.Typer(help="Operator actions on one node.", no_args_is_help=True)
app.add_typer(order_app, name="order")
app.add_typer(node_app, name="node")
image_app = typer.Typer(help="Operator: custom OS images.", no_args_is_help=True)
app.add_typer(image_app, name="image")
app.add_typer(agent_app, name="agent")

out = Console()
err = Console(stderr=True)

UrlOpt = Annotated[str, typer.Option("--url", envvar="GPULEASE_URL", help="server URL")]
TokenOpt = Annotated[str, typer.Option("--token", envvar="GPULEASE_TOKEN", help="API token")]
JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON")]
DEFAULT_URL = "http://127.0.0.1:8000"


def _client(url: str, token: str) -> Client:
    return Client(url or DEFAULT_URL, token or None)


def _fail(exc: ApiError) -> NoReturn:
    err.print(f"[red]error[/red] ({exc.status} {exc.title}): {exc.detail}")
    if exc.body.get("accepted"):
        err.print(f"accepted: {', '.join(exc.body['accepted'])}")
    raise typer.Exit(1)


def _api(call: Callable[[], T]) -> T:
    """Run one API call; an API error is printed as the server's sentence, exit code 1."""
    try:
        return call()
    except ApiError as exc:
        _fail(exc)


def _json(data: Any) -> None:
    if isinstance(data, BaseModel):
        data = data.model_dump(mode="json")
    elif isinstance(data, list):
        data = [d.model_dump(mode="json") if isinstance(d, BaseModel) else d for d in data]
    sys.stdout.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")


# ----------------------------------------------------------------------- platform
def _settings(**overrides: Any) -> Any:
    from gpulease.settings import Settings

    return Settings(**{k: v for k, v in overrides.items() if v is not None})


@app.command()
def up(
    data_dir: Annotated[Path, typer.Option(help="where SQLite, keys and tokens live")] = Path(
        ".gpulease"),
    port: Annotated[int, typer.Option(help="port on 127.0.0.1")] = 8000,
    host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
    demo_delay: Annotated[float, typer.Option(help="simulated seconds per stage")] = 2.0,
    nodes_per_offer: Annotated[int, typer.Option(help="demo nodes per offer")] = 2,
    database_url: Annotated[str | None, typer.Option(envvar="GPULEASE_DATABASE_URL")] = None,
    bmc: Annotated[str, typer.Option(help=(
        "demo servers' BMCs: 'redfish' (behind a sushy-tools emulator: the production "
        "Redfish code) or 'simulated' (instant, with fault injection)"))]
    = "redfish",
    emulator_port: Annotated[int | None, typer.Option(help="with --bmc redfish; default port+1")]
    = None,
) -> None:
    """Start the API, the worker and a demo fleet of simulated servers (behind a Redfish
    emulator by default)."""
    from gpulease.server import PortInUse
    from gpulease.server import up as run_up

    if bmc not in ("simulated", "redfish"):
        err.print("[red]error[/red]: --bmc takes 'simulated' or 'redfish'")
        raise typer.Exit(2)
    try:
        run_up(_settings(data_dir=data_dir, port=port, host=host, demo_delay_s=demo_delay,
                         demo_nodes_per_offer=nodes_per_offer, database_url=database_url),
               say=out.print, bmc=bmc, emulator_port=emulator_port)
    except PortInUse as exc:
        err.print(f"[red]error[/red]: {exc}")
        raise typer.Exit(1) from None


@app.command()
def serve(
    data_dir: Annotated[Path, typer.Option()] = Path(".gpulease"),
    port: Annotated[int, typer.Option()] = 8000,
    host: Annotated[str, typer.Option()] = "127.0.0.1",
) -> None:
    """Start the API only (run workers separately with `gpulease worker`)."""
    from gpulease.server import serve as run_serve

    run_serve(_settings(data_dir=data_dir, port=port, host=host))


@app.command()
def worker(
    data_dir: Annotated[Path, typer.Option()] = Path(".gpulease"),
    threads: Annotated[int | None, typer.Option(help="worker threads")] = None,
    demo_delay: Annotated[float | None, typer.Option(help="simulated seconds per stage")] = None,
) -> None:
    """Run a provisioning worker; any number may share one PostgreSQL database."""
    import logging

    from gpulease.server import run_worker

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    run_worker(_settings(data_dir=data_dir, demo_delay_s=demo_delay), threads)


@app.command()
def migrate(data_dir: Annotated[Path, typer.Option()] = Path(".gpulease")) -> None:
    """Apply database migrations (also done at every start)."""
    from gpulease.server import prepare

    prepare(_settings(data_dir=data_dir)).db.dispose()
    out.print("database is at the latest migration")


# ----------------------------------------------------------------------- catalog
@app.command()
def catalog(url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False) -> None:
    """Every offer: GPUs, host, interconnect, prices and stock; and container prices."""
    c = _api(lambda: _client(url, token).catalog())
    if as_json:
        return _json(c)
    t = Table(title="Bare-metal offers (CNY)")
    for col in ("offer", "GPUs", "host", "interconnect", "¥/month", "¥/day", "stock"):
        t.add_column(col, overflow="fold")
    for o in c.offers:
        gpu = o.gpu.replace("NVIDIA ", "").replace("GeForce ", "").replace("Huawei ", "")
        link = o.gpu_interconnect.split(";")[0] + (
            f"\n[yellow]advertised: {o.advertised_interconnect}[/yellow]"
            if o.advertised_interconnect else "") + ("\n+ InfiniBand" if o.infiniband else "")
        t.add_row(f"{o.sku}\n{o.region} {o.region_name_zh}" + ("\n[dim]example data[/dim]"
                                                                if o.example else ""),
                  f"{o.gpu_count} × {gpu}", f"{o.cpu}\n{o.memory}\n{o.disks}", link,
                  f"{o.monthly_price:,.2f}" + (
                      f"\n[dim]list {o.list_monthly_price:,.0f}, -{o.discount_percent:.0f}%[/dim]"
                      if o.discount_percent else "") + "".join(
                      f"\n[yellow]from {ch.effective_from}: {ch.monthly_price:,.2f}[/yellow]"
                      for ch in o.price_changes), f"{o.day_price:,.2f}", str(o.stock))
    out.print(t)
    ct = Table(title="Container instances (per GPU-hour)")
    for col in ("offer", "GPU", "region", "¥/GPU-hour", "max GPUs", "free GPUs"):
        ct.add_column(col)
    for co in c.container_offers:
        ct.add_row(co.id, co.gpu, co.region, f"{co.price_per_gpu_hour:.2f}", str(co.max_gpus),
                   str(co.free_gpus))
    out.print(ct)
    out.print(f"Derived prices: {c.pricing_rule}")


@app.command()
def images(url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False) -> None:
    """OS images; each offer has a default, so --image may be left out."""
    items = _api(lambda: _client(url, token).images())
    if as_json:
        return _json(items)
    t = Table()
    for col in ("id", "name", "GPUs", "software"):
        t.add_column(col)
    for i in items:
        t.add_row(i.id, i.name, i.gpu_vendor, ", ".join(i.software))
    out.print(t)


@image_app.command("add")
def image_add(
    image_id: Annotated[str, typer.Option("--id", help="e.g. ubuntu24.04-cuda12.8")],
    name: Annotated[str, typer.Option()],
    image_url: Annotated[str, typer.Option("--image-url", help="http(s) URL of the image")],
    checksum: Annotated[str, typer.Option(help="sha256:<64 hex digits>")],
    os_name: Annotated[str, typer.Option("--os", help="e.g. Ubuntu 24.04 LTS")],
    gpu_vendor: Annotated[str, typer.Option(help="nvidia, huawei or any")] = "nvidia",
    software: Annotated[list[str] | None, typer.Option(help="preinstalled (repeatable)")] = None,
    url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False,
) -> None:
    """Add a custom OS image by URL and checksum."""
    from gpulease.schemas import ImageCreate

    try:
        body = ImageCreate(id=image_id, name=name, os=os_name, gpu_vendor=gpu_vendor,
                           url=image_url, checksum=checksum, software=software or [])
    except ValueError as exc:
        err.print(f"[red]error[/red]: {exc}")
        raise typer.Exit(2) from None
    image = _api(lambda: _client(url, token).add_image(body))
    if as_json:
        return _json(image)
    out.print(f"added image {image.id}")


@image_app.command("remove")
def image_remove(image_id: str, url: UrlOpt = "", token: TokenOpt = "") -> None:
    """Remove a custom OS image that no live instance uses."""
    _api(lambda: _client(url, token).remove_image(image_id))
    out.print(f"removed image {image_id}")


# ----------------------------------------------------------------------- ordering
def _read_keys(files: list[Path]) -> list[str]:
    keys = []
    for f in files:
        try:
            keys += [ln.strip() for ln in f.read_text().splitlines() if ln.strip()]
        except OSError as exc:
            err.print(f"[red]error[/red]: cannot read SSH key file {f}: {exc.strerror}")
            raise typer.Exit(2) from None
    return keys


def _place_and_follow(url: str, token: str, req: OrderRequest, wait: bool, as_json: bool,
                      timeout: float) -> None:
    client = _client(url, token)
    inst = _api(lambda: client.order(req, idempotency_key=str(uuid.uuid4())))
    if as_json and not wait:
        return _json(inst)
    if not as_json:
        out.print(f"ordered [bold]{inst.id}[/bold] ({inst.kind}, {inst.sku} in {inst.region}, "
                  f"{inst.node_count} node(s), {inst.gpu_count} GPUs)")
    inst = _follow(client, inst, quiet=as_json, timeout=timeout)
    creds = None
    if inst.status == "ready" and inst.credentials_available:
        creds = _api(lambda: client.credentials(inst.id))
    if as_json:
        data = inst.model_dump(mode="json")
        data["credentials"] = creds.model_dump(mode="json") if creds else None
        _json(data)
    elif inst.status == "ready":
        out.print(f"[green]ready[/green] in {inst.delivery_seconds:.1f} s "
                  f"(SLA {inst.delivery_sla_seconds:.0f} s)"
                  + ("  [yellow]simulated hardware[/yellow]" if inst.simulated else ""))
        out.print(f"IP:       {inst.ip_address}")
        out.print(f"SSH:      {inst.ssh_command}")
        if len(inst.nodes) > 1:
            for n in inst.nodes:
                out.print(f"  node {n.name}: {n.ip_address}  GPUs {len(n.gpus)}")
        if creds:
            out.print(f"password: {creds.root_password}   [dim]({creds.note})[/dim]")
    if inst.status != "ready":
        err.print(f"[red]{inst.status}[/red]: {inst.status_reason or 'not ready in time'}")
        raise typer.Exit(1)


def _follow(client: Client, inst: InstanceView, quiet: bool, timeout: float,
            until: tuple[str, ...] = ("ready", "failed", "released")) -> InstanceView:
    seen = 0
    deadline = time.monotonic() + timeout
    instance_id = inst.id
    with out.status("waiting…", spinner="dots") as status:
        while True:
            inst = _api(lambda: client.instance(instance_id))
            if not quiet:
                for st in inst.stages[seen:]:
                    where = f" [dim]{st.node}[/dim]" if st.node else ""
                    msg = f" — {st.message}" if st.message else ""
                    out.print(f"  {st.at:%H:%M:%S}  {st.stage}{where}{msg}")
                status.update(f"{inst.status}: {inst.stage or ''}")
            seen = len(inst.stages)
            if inst.status in until or time.monotonic() > deadline:
                return inst
            time.sleep(0.5)


KeyOpt = Annotated[list[Path], typer.Option("--ssh-key", help="public key file (repeatable)")]
WaitOpt = Annotated[bool, typer.Option("--wait", help="with --json: wait until ready")]
TimeoutOpt = Annotated[float, typer.Option(help="seconds to wait for delivery")]


@order_app.command("bare-metal")
def order_bare_metal(
    sku: Annotated[str, typer.Option(help="e.g. h100-80g-x8")],
    region: Annotated[str, typer.Option(help="e.g. ningxia-1")],
    ssh_key: KeyOpt,
    term: Annotated[str, typer.Option(help="day, month or year")] = "month",
    image: Annotated[str | None, typer.Option(help="image id (default: the offer's)")] = None,
    name: Annotated[str | None, typer.Option()] = None,
    wait: WaitOpt = False, as_json: JsonOpt = False, timeout: TimeoutOpt = 1800.0,
    url: UrlOpt = "", token: TokenOpt = "",
) -> None:
    """Order one whole 8-GPU server and follow its delivery."""
    req = OrderRequest(kind="bare_metal", sku=sku, region=region, term=term, image=image,
                       ssh_keys=_read_keys(ssh_key), name=name)
    _place_and_follow(url, token, req, wait or not as_json, as_json, timeout)


@order_app.command("cluster")
def order_cluster(
    nodes: Annotated[int, typer.Option(help="number of servers on one fabric")],
    sku: Annotated[str, typer.Option()],
    region: Annotated[str, typer.Option()],
    ssh_key: KeyOpt,
    term: Annotated[str, typer.Option()] = "month",
    image: Annotated[str | None, typer.Option()] = None,
    name: Annotated[str | None, typer.Option()] = None,
    wait: WaitOpt = False, as_json: JsonOpt = False, timeout: TimeoutOpt = 1800.0,
    url: UrlOpt = "", token: TokenOpt = "",
) -> None:
    """Order N servers placed on one InfiniBand fabric (or be told what is free where)."""
    req = OrderRequest(kind="cluster", nodes=nodes, sku=sku, region=region, term=term,
                       image=image, ssh_keys=_read_keys(ssh_key), name=name)
    _place_and_follow(url, token, req, wait or not as_json, as_json, timeout)


@order_app.command("container")
def order_container(
    gpus: Annotated[int, typer.Option(help="GPUs (1-8)")],
    ssh_key: KeyOpt,
    offer: Annotated[str, typer.Option()] = "rtx4090-24g-container",
    image: Annotated[str | None, typer.Option()] = None,
    name: Annotated[str | None, typer.Option()] = None,
    wait: WaitOpt = False, as_json: JsonOpt = False, timeout: TimeoutOpt = 600.0,
    url: UrlOpt = "", token: TokenOpt = "",
) -> None:
    """Order GPUs of a shared server, billed by the hour."""
    req = OrderRequest(kind="container", offer=offer, gpus=gpus, term="hour", image=image,
                       ssh_keys=_read_keys(ssh_key), name=name)
    _place_and_follow(url, token, req, wait or not as_json, as_json, timeout)


# ----------------------------------------------------------------------- instances
@app.command()
def instances(
    status: Annotated[str | None, typer.Option()] = None,
    url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False,
) -> None:
    """Your instances."""
    page = _api(lambda: _client(url, token).instances(status=status, limit=500))
    if as_json:
        return _json(page.items)
    t = Table()
    for col in ("id", "kind", "SKU", "region", "nodes", "GPUs", "status", "stage", "IP",
                "delivery"):
        t.add_column(col)
    for i in page.items:
        t.add_row(i.id, i.kind, i.sku, i.region, str(i.node_count), str(i.gpu_count), i.status,
                  i.stage or "", i.ip_address or "",
                  f"{i.delivery_seconds:.1f} s" if i.delivery_seconds is not None else "")
    out.print(t)


@app.command()
def show(instance_id: str, url: UrlOpt = "", token: TokenOpt = "",
         as_json: JsonOpt = False) -> None:
    """One instance with its nodes and the time of every stage."""
    inst = _api(lambda: _client(url, token).instance(instance_id))
    if as_json:
        return _json(inst)
    out.print(f"[bold]{inst.id}[/bold] {inst.kind} {inst.sku} {inst.region} term={inst.term} "
              f"image={inst.image}  status=[bold]{inst.status}[/bold]"
              + (f" ({inst.status_reason})" if inst.status_reason else ""))
    if inst.ssh_command:
        out.print(f"SSH: {inst.ssh_command}")
    for n in inst.nodes:
        out.print(f"  node {n.name}: {n.status} {n.stage or ''} GPUs {n.gpus} {n.ip_address or ''}")
    for st in inst.stages:
        out.print(f"  {st.at:%Y-%m-%d %H:%M:%S}  {st.stage} {st.node or ''} {st.message or ''}")


@app.command()
def release(
    instance_id: str,
    wait: Annotated[bool, typer.Option(help="wait until erased and free again")] = False,
    url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False,
    timeout: TimeoutOpt = 1800.0,
) -> None:
    """Hand an instance back; its disks are erased before anyone else gets the node."""
    client = _client(url, token)
    inst = _api(lambda: client.release(instance_id))
    if wait:
        inst = _follow(client, inst, quiet=as_json, timeout=timeout, until=("released",))
    if as_json:
        return _json(inst)
    out.print(f"{inst.id}: {inst.status}")


# ----------------------------------------------------------------------- operator
@app.command()
def nodes(
    status: Annotated[str | None, typer.Option()] = None,
    region: Annotated[str | None, typer.Option()] = None,
    sku: Annotated[str | None, typer.Option()] = None,
    url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False,
) -> None:
    """Operator: the fleet, with status, stage and reason."""
    page = _api(lambda: _client(url, token).nodes(status=status, region=region, sku=sku))
    if as_json:
        return _json(page.items)
    t = Table(title=f"{page.total} nodes")
    for col in ("id", "name", "SKU", "region", "pool", "fabric", "status", "stage", "GPUs free",
                "instance", "reason"):
        t.add_column(col, overflow="fold")
    for n in page.items:
        t.add_row(n.id, n.name + (" (sim)" if n.simulated else ""), n.sku, n.region, n.pool,
                  n.fabric or "", n.status + (" draining" if n.drain_requested else ""),
                  n.stage or "", f"{n.free_gpus}/{n.gpu_count}", n.instance_id or "",
                  n.status_reason or n.last_error or "")
    out.print(t)


def _node_action(action: str, node_id: str, reason: str | None, url: str, token: str,
                 as_json: bool) -> None:
    node = _api(lambda: _client(url, token).node_action(node_id, action, reason))
    if as_json:
        return _json(node)
    out.print(f"{node.name}: {node.status}" + (" (draining)" if node.drain_requested else "")
              + (f" — {node.status_reason}" if node.status_reason else ""))


ReasonOpt = Annotated[str | None, typer.Option(help="why (shown to operators)")]


@node_app.command("enroll")
def node_enroll(
    bmc: Annotated[str | None, typer.Option(help="Redfish URL of the server's BMC")] = None,
    username: Annotated[str | None, typer.Option(help="BMC user")] = None,
    password_file: Annotated[Path | None, typer.Option(help="file holding the BMC password")]
    = None,
    offer: Annotated[str | None, typer.Option(help="expected offer, SKU@region")] = None,
    name: Annotated[str | None, typer.Option()] = None,
    fabric: Annotated[str | None, typer.Option(help="InfiniBand fabric id")] = None,
    runtime: Annotated[str | None, typer.Option(help=(
        "a shared server for container instances: its Docker engine URL "
        "(tcp://HOST:2376, ssh://root@HOST)"))] = None,
    csv_file: Annotated[Path | None, typer.Option("--csv", help=(
        "bulk: columns bmc,username,password_file[,offer,name,fabric,runtime]"))] = None,
    parallel: Annotated[int, typer.Option(help="bulk: BMCs at once")] = 8,
    url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False,
) -> None:
    """Enroll servers by their BMC; their inventory is checked against the offer."""
    from gpulease.cli.enroll import enroll_many, enroll_one

    client = _client(url, token)
    if csv_file is not None:
        raise typer.Exit(enroll_many(client, csv_file, parallel, as_json, out, err))
    if not (bmc and username and password_file):
        err.print("[red]error[/red]: give --bmc, --username and --password-file, or --csv FILE")
        raise typer.Exit(2)
    raise typer.Exit(enroll_one(client, bmc, username, password_file, offer, name, fabric,
                                runtime, as_json, out, err))


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


@node_app.command("resume")
def node_resume(node_id: str, url: UrlOpt = "", token: TokenOpt = "",
                as_json: JsonOpt = False) -> None:
    """Put a node back in service."""
    _node_action("resume", node_id, None, url, token, as_json)


@app.command("tenant-create")
def tenant_create(
    name: str, admin_email: Annotated[str, typer.Option()],
    admin_name: Annotated[str, typer.Option()] = "Tenant admin",
    url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False,
) -> None:
    """Operator: create a tenant and its first admin; prints the admin's token once."""
    created = _api(lambda: _client(url, token).create_tenant(name, admin_email, admin_name))
    if as_json:
        return _json(created)
    out.print(f"tenant {created.tenant.id} ({created.tenant.name}); admin {created.admin.email}")
    out.print(f"token: {created.token.token}   [dim]({created.token.note})[/dim]")


@app.command("token-create")
def token_create(
    name: Annotated[str, typer.Option()] = "cli",
    days: Annotated[int, typer.Option(help="valid for this many days")] = 90,
    url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False,
) -> None:
    """A new API token for yourself (shown once)."""
    created = _api(lambda: _client(url, token).create_token(name, days))
    if as_json:
        return _json(created)
    out.print(f"{created.token}   [dim]({created.note})[/dim]")


@app.command("tokens")
def tokens(url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False) -> None:
    """API tokens you may see (prefixes only)."""
    items = _api(lambda: _client(url, token).tokens())
    if as_json:
        return _json(items)
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
    tk = _api(lambda: _client(url, token).revoke_token(token_id))
    out.print(f"{tk.id} revoked")


# --- telemetry, acceptance reports, erase certificates -----------------------------------

@app.command()
def metrics(instance_id: str, url: UrlOpt = "", token: TokenOpt = "",
            as_json: JsonOpt = False) -> None:
    """Latest GPU telemetry of an instance (per GPU) and its open hardware alerts."""
    data = _api(lambda: _client(url, token).get_json(f"/instances/{instance_id}/metrics"))
    if as_json:
        return _json(data)
    for node in data["nodes"]:
        label = " (SIMULATED)" if node["simulated"] else ""
        out.print(f"[bold]{node['node']}[/bold]{label}  received {node['received_at'] or '-'}")
        table = Table("GPU", "temp max °C", "power avg W", "util avg %", "SM MHz min-max",
                      "thermal throttle s", "XIDs", "ECC DBE", "NVLink down")
        for g in node["gpus"]:
            table.add_row(str(g["index"]), str(g["temp_max_c"]), str(g["power_avg_w"]),
                          str(g["util_avg_pct"]),
                          f"{g['sm_clock_min_mhz']}-{g['sm_clock_max_mhz']}",
                          str(g["thermal_throttle_s"]), ",".join(map(str, g["xids"])) or "-",
                          str(g["ecc_dbe_total"]),
                          ",".join(map(str, g["nvlink_down"])) or "-")
        out.print(table)
        for a in node["alerts"]:
            out.print(f"  [red]{a['severity']}[/red] {a['kind']}: {a['message']}")
        if not node["gpus"]:
            out.print("  no telemetry yet: the node's agent pushes a summary every minute")


@app.command()
def acceptance(instance_id: str, url: UrlOpt = "", token: TokenOpt = "",
               as_json: JsonOpt = False) -> None:
    """The acceptance reports of an instance's nodes, run before delivery."""
    data = _api(lambda: _client(url, token).get_json(f"/instances/{instance_id}/acceptance"))
    if as_json:
        return _json(data)
    if not data:
        out.print("no acceptance report yet")
    for r in data:
        out.print(f"[bold]{r['node']}[/bold] {r['created_at']} ({r['trigger']})")
        print(r["report"]["summary"])


@app.command()
def verify(instance_id: str,
           wait: Annotated[bool, typer.Option(help="wait for every node's report")] = False,
           timeout: Annotated[float, typer.Option(help="seconds to wait")] = 1800,
           url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False) -> None:
    """Run the acceptance suite again on a ready instance's nodes."""
    client = _client(url, token)
    before = len(_api(lambda: client.get_json(f"/instances/{instance_id}/acceptance")))
    runs = _api(lambda: client.post_json(f"/instances/{instance_id}/verify"))
    deadline = time.monotonic() + timeout
    reports = []
    while True:
        reports = _api(lambda: client.get_json(f"/instances/{instance_id}/acceptance"))[before:]
        if not wait or len(reports) >= len(runs) or time.monotonic() > deadline:
            break
        time.sleep(2)
    if as_json:
        return _json({"runs": runs, "reports": reports})
    for r in runs:
        out.print(f"{r['node']}: {r['status']}", highlight=False)
    for r in reports:
        print(r["report"]["summary"])
    if wait and len(reports) < len(runs):
        err.print("[red]timed out[/red] waiting for the node agent's report")
        raise typer.Exit(1)
    if any(not r["passed"] for r in reports):
        raise typer.Exit(1)


def _addons(specs: list[str] | None) -> dict[str, str]:
    found = {}
    for spec in specs or []:
        name, sep, qty = spec.partition("=")
        if not sep:
            err.print(f"[red]error[/red]: --add {spec!r}: expected NAME=QUANTITY, "
                      "e.g. public-bandwidth=100")
            raise typer.Exit(2)
        found[name.strip()] = qty.strip()
    return found


@app.command()
def quote(
    sku: Annotated[str, typer.Option(help="SKU id, e.g. h100-80g-x8")],
    region: Annotated[str, typer.Option(help="region id, e.g. ningxia-1")],
    term: Annotated[str, typer.Option(help="day, month or year")] = "month",
    count: Annotated[int, typer.Option(help="periods of the term, e.g. 3 (months)")] = 1,
    servers: Annotated[int, typer.Option(help="servers (a cluster's nodes)")] = 1,
    add: Annotated[list[str] | None, typer.Option(
        help="add-on NAME=QUANTITY, repeatable: public-bandwidth=100 (Mbps), "
        "extra-storage=2000 (GB), egress=500 (GB), support-standard=1")] = None,
    days_per_week: Annotated[float | None, typer.Option(
        help="usage pattern: compare paying by the day with the month")] = None,
    url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False,
) -> None:
    """The full fee list of a lease before ordering it."""
    body: dict[str, Any] = {"sku": sku, "region": region, "term": term, "count": count,
                            "servers": servers, "add": _addons(add)}
    if days_per_week is not None:
        body["days_per_week"] = str(days_per_week)
    q = _api(lambda: _client(url, token).post_json("/quotes", body))
    if as_json:
        return _json(q)
    table = Table("item", "quantity", "unit", "unit price ¥", "amount ¥",
                  title=f"Quote: {q['sku']} in {q['region']}, {q['count']} {q['term']}(s)"
                        f" × {q['servers']} server(s)")
    for line in q["lines"]:
        mark = " (example price)" if line["example_price"] else ""
        table.add_row(line["description"] + mark, str(line["quantity"]), line["unit"],
                      f"{Decimal(line['unit_price']):,.2f}", f"{Decimal(line['amount']):,.2f}")
    out.print(table)
    vat = "included" if q["prices_include_vat"] else "added"
    out.print(f"[bold]total ¥{Decimal(q['total']):,.2f}[/bold]  (VAT {Decimal(q['vat_rate']):.0%} "
              f"{vat}: ¥{Decimal(q['vat']):,.2f}; net ¥{Decimal(q['net']):,.2f})", highlight=False)
    out.print(f"early termination: {q['early_termination']}", highlight=False)
    cheapest = ", ".join(f"{r['region']} ¥{Decimal(r['monthly_price']):,.2f}/month"
                         for r in q["regions"])
    out.print(f"regions for {q['sku']}, cheapest first: {cheapest}", highlight=False)
    if q["break_even"]:
        b = q["break_even"]
        out.print(f"{b['days_per_week']} day(s) a week: by the day ¥"
                  f"{Decimal(b['by_day_per_month']):,.2f}/month vs by the month ¥"
                  f"{Decimal(b['by_month']):,.2f}: the {b['cheaper']} term is cheaper "
                  f"(break-even {b['break_even_days_per_month']} days a month)", highlight=False)
    for note in q["notes"]:
        out.print(f"note: {note}", highlight=False)


@app.command()
def wallet(tenant: Annotated[str | None, typer.Option(help="operator: which tenant")] = None,
           url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False) -> None:
    """The prepaid balance, credit limit and what open orders hold."""
    suffix = f"?tenant={tenant}" if tenant else ""
    w = _api(lambda: _client(url, token).get_json(f"/wallet{suffix}"))
    if as_json:
        return _json(w)
    out.print(f"balance ¥{Decimal(w['balance']):,.2f}  credit limit "
              f"¥{Decimal(w['credit_limit']):,.2f}  held by undelivered orders "
              f"¥{Decimal(w['held']):,.2f}  available ¥{Decimal(w['available']):,.2f}",
              highlight=False)


@app.command()
def ledger(tenant: Annotated[str | None, typer.Option(help="operator: which tenant")] = None,
           limit: Annotated[int, typer.Option()] = 50,
           url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False) -> None:
    """Every movement of the wallet, newest first."""
    query = f"?limit={limit}" + (f"&tenant={tenant}" if tenant else "")
    page = _api(lambda: _client(url, token).get_json(f"/wallet/ledger{query}"))
    if as_json:
        return _json(page["items"])
    table = Table("at", "kind", "amount ¥", "balance ¥", "reference", "instance")
    for e in page["items"]:
        table.add_row(e["at"][:19], e["kind"], f"{Decimal(e['amount']):,.2f}",
                      f"{Decimal(e['balance_after']):,.2f}", e["reference"] or "",
                      e["instance_id"] or "")
    out.print(table)


def _show_lease(data: dict[str, Any]) -> None:
    grace = f", grace until {data['grace_until'][:16]}" if data["grace_until"] else ""
    out.print(f"{data['instance_id']}: {data['status']}, {data['periods']} {data['term']}(s) "
              f"at ¥{Decimal(data['unit_price']):,.2f}, from {data['starts_at'][:16]} to "
              f"{data['ends_at'][:16]} UTC{grace}; auto-renew "
              f"{'on' if data['auto_renew'] else 'off'}", highlight=False)


@app.command("lease")
def lease_show(instance_id: str, url: UrlOpt = "", token: TokenOpt = "",
               as_json: JsonOpt = False) -> None:
    """A bare-metal instance's term, its end and grace, and auto-renew."""
    data = _api(lambda: _client(url, token).get_json(f"/instances/{instance_id}/lease"))
    return _json(data) if as_json else _show_lease(data)


@app.command()
def renew(instance_id: str,
          periods: Annotated[int, typer.Option(help="periods to add")] = 1,
          term: Annotated[str | None, typer.Option(help="switch to day or month")] = None,
          url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False) -> None:
    """Extend a lease (charged from the wallet now); during grace it cancels the erase."""
    body: dict[str, Any] = {"periods": periods}
    if term:
        body["term"] = term
    data = _api(lambda: _client(url, token).post_json(f"/instances/{instance_id}/renew", body))
    return _json(data) if as_json else _show_lease(data)


@app.command("auto-renew")
def auto_renew(instance_id: str, state: Annotated[str, typer.Argument(help="on or off")],
               url: UrlOpt = "", token: TokenOpt = "") -> None:
    """Renew automatically at expiry when the balance allows (else remind, then grace)."""
    if state not in ("on", "off"):
        err.print("[red]error[/red]: say on or off")
        raise typer.Exit(2)
    data = _api(lambda: _client(url, token).put_json(
        f"/instances/{instance_id}/auto-renew", {"auto_renew": state == "on"}))
    _show_lease(data)


@app.command()
def webhook(url: Annotated[str, typer.Argument(help="https URL, or 'remove'")],
            api_url: UrlOpt = "", token: TokenOpt = "") -> None:
    """Tenant admin: receive lease reminders as signed webhooks (the secret is shown once)."""
    client = _client(api_url, token)
    if url == "remove":
        _api(lambda: client._call_empty("DELETE", "/api/v1/webhook"))
        out.print("webhook removed")
        return
    data = _api(lambda: client.put_json("/webhook", {"url": url}))
    out.print(f"webhook {data['url']}\nsigning secret (shown once): {data['secret']}",
              highlight=False)


@app.command("top-up")
def top_up(tenant_id: str, amount: str,
           reference: Annotated[str, typer.Option(help="the payment's reference")],
           url: UrlOpt = "", token: TokenOpt = "") -> None:
    """Operator: record money a tenant paid in."""
    w = _api(lambda: _client(url, token).post_json(
        f"/tenants/{tenant_id}/top-ups", {"amount": amount, "reference": reference}))
    out.print(f"{tenant_id}: balance ¥{Decimal(w['balance']):,.2f}", highlight=False)


@app.command("credit-limit")
def credit_limit(tenant_id: str, amount: str, url: UrlOpt = "", token: TokenOpt = "") -> None:
    """Operator: let a tenant's orders hold up to this much beyond its balance."""
    w = _api(lambda: _client(url, token).put_json(
        f"/tenants/{tenant_id}/credit-limit", {"credit_limit": amount}))
    out.print(f"{tenant_id}: credit limit ¥{Decimal(w['credit_limit']):,.2f}", highlight=False)


@app.command()
def advise(
    params: Annotated[str | None, typer.Option(help="model size: 7B, 70B, 350M")] = None,
    workload: Annotated[str, typer.Option(
        help="inference, pretrain, full-finetune, lora, qlora")] = "full-finetune",
    precision: Annotated[str, typer.Option(help="fp32, bf16, fp16, fp8, int8, int4")] = "bf16",
    seq_len: Annotated[int, typer.Option("--seq-len", help="tokens per sequence")] = 4096,
    batch: Annotated[int, typer.Option(help="micro-batch per GPU (sequences)")] = 1,
    checkpointing: Annotated[bool, typer.Option(help="activation checkpointing")] = True,
    tokens: Annotated[float | None, typer.Option(help="tokens to process (e.g. 2e9)")] = None,
    hours: Annotated[float | None, typer.Option(help="planned hours")] = None,
    budget: Annotated[str | None, typer.Option(help="yuan")] = None,
    gpu: Annotated[str | None, typer.Option(help="only this GPU id")] = None,
    domestic: Annotated[bool, typer.Option(help="domestic hardware (Ascend 910B)")] = False,
    layers: Annotated[int | None, typer.Option()] = None,
    hidden: Annotated[int | None, typer.Option()] = None,
    heads: Annotated[int | None, typer.Option()] = None,
    kv_heads: Annotated[int | None, typer.Option("--kv-heads")] = None,
    vocab: Annotated[int | None, typer.Option()] = None,
    ffn: Annotated[int | None, typer.Option(help="MLP inner width")] = None,
    experts: Annotated[int, typer.Option(help="MoE experts")] = 1,
    top_k: Annotated[int, typer.Option("--top-k", help="MoE experts per token")] = 1,
    url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False,
) -> None:
    """Size a job: memory term by term, the machines that fit ranked by total cost, time,
    bare metal or container and why."""
    body = {k: v for k, v in dict(
        params=params, workload=workload, precision=precision, seq_len=seq_len, batch=batch,
        checkpointing=checkpointing, tokens=tokens, hours=hours, budget=budget, gpu=gpu,
        domestic=domestic, layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads,
        vocab=vocab, ffn=ffn, experts=experts, top_k=top_k).items() if v is not None}
    a = _api(lambda: _client(url, token).post_json("/advise", body))
    if as_json:
        return _json(a)
    out.print(f"[bold]{a['params'] / 1e9:,.2f}B parameters[/bold]"
              + (" (shape inferred)" if a["shape_inferred"] else "")
              + f" · quick estimate: {a['quick_estimate']}", highlight=False)
    mem = Table("memory", "GB", "why", title=f"Memory of the whole job: {a['total_gb']:,.1f} GB")
    for m in a["memory"]:
        mem.add_row(m["name"], f"{m['gb']:,.2f}", m["why"])
    out.print(mem)
    opts = Table("#", "kind", "offer", "GPUs", "layout", "GB/GPU", "hours", "cost ¥", "term",
                 "stock", title=f"Options by total cost ({a['work']})")
    for n, o in enumerate(a["options"], 1):
        opts.add_row(str(n), o["kind"].replace("_", " "), o["offer"], str(o["gpus"]),
                     o["layout"], f"{o['memory_per_gpu_gb']:.1f}/{o['memory_usable_gb']:.0f}",
                     f"{o['hours']:,.1f}", f"{Decimal(o['cost']):,.2f}",
                     f"{o['periods']} {o['term']}", str(o["stock"])
                     + ("" if o["in_stock"] else " (short)"))
    out.print(opts)
    if a["options"]:
        best = a["options"][0]
        out.print(f"Per GPU in option 1 ({best['layout']}): " + ", ".join(
            f"{k} {v:,.1f} GB" for k, v in best["per_gpu_gb"].items()), highlight=False)
    out.print(f"[bold]Recommendation:[/bold] {a['recommendation']}", highlight=False)
    for w in a["warnings"]:
        out.print(f"[yellow]warning:[/yellow] {w}", highlight=False)


@app.command()
def invoices(tenant: Annotated[str | None, typer.Option(help="operator: which tenant")] = None,
             period: Annotated[str | None, typer.Option(help="YYYY-MM")] = None,
             status: Annotated[str | None, typer.Option(help="draft or final")] = None,
             url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False) -> None:
    """Monthly invoices and credit notes, newest first."""
    query = "&".join(f"{k}={v}" for k, v in (("tenant", tenant), ("period", period),
                                               ("status", status)) if v)
    page = _api(lambda: _client(url, token).get_json(f"/invoices?{query}"))
    if as_json:
        return _json(page["items"])
    table = Table("number", "id", "kind", "period", "status", "tenant", "net ¥", "VAT ¥",
                  "total ¥", "credited ¥")
    for i in page["items"]:
        table.add_row(i["number"] or "(draft)", i["id"], i["kind"], i["period"], i["status"],
                      i["tenant_name"], f"{Decimal(i['net']):,.2f}", f"{Decimal(i['vat']):,.2f}",
                      f"{Decimal(i['total']):,.2f}", f"{Decimal(i['credited']):,.2f}")
    out.print(table)


@app.command()
def invoice(invoice_id: Annotated[str, typer.Argument(help="id or number (GL2026-000001)")],
            pdf: Annotated[Path | None, typer.Option(help="write the PDF here")] = None,
            csv: Annotated[Path | None, typer.Option(help="write the CSV here")] = None,
            url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False) -> None:
    """One invoice with its lines; --pdf / --csv save the document."""
    client = _client(url, token)
    for path, fmt in ((pdf, "pdf"), (csv, "csv")):
        if path is not None:
            path.write_bytes(_api(lambda f=fmt: client.get_bytes(  # type: ignore[misc]
                f"/invoices/{invoice_id}?format={f}")))
            out.print(f"wrote {path}", highlight=False)
    if pdf is not None or csv is not None:
        return None
    inv = _api(lambda: client.get_json(f"/invoices/{invoice_id}"))
    if as_json:
        return _json(inv)
    kind = "Credit note" if inv["kind"] == "credit_note" else "Invoice"
    out.print(f"{kind} {inv['number'] or '(draft)'} · {inv['tenant_name']} · {inv['period']} · "
              f"{inv['status']}" + (f" · corrects {inv['corrects']}: {inv['reason']}"
                                    if inv["corrects"] else ""), highlight=False)
    table = Table("#", "description", "qty", "unit price ¥", "net ¥", "VAT ¥", "amount ¥")
    for ln in inv["lines"]:
        qty = f"{ln['quantity']} {ln['unit'] or ''}" if ln["quantity"] is not None else ""
        table.add_row(str(ln["seq"]), ln["description"], qty, ln["unit_price"] or "",
                      f"{Decimal(ln['net']):,.2f}", f"{Decimal(ln['vat']):,.2f}",
                      f"{Decimal(ln['gross']):,.2f}")
    table.add_row("", f"total (VAT {(Decimal(inv['vat_rate']) * 100).normalize():f}%)", "", "",
                  f"{Decimal(inv['net']):,.2f}", f"{Decimal(inv['vat']):,.2f}",
                  f"{Decimal(inv['total']):,.2f}")
    out.print(table)


@app.command("invoice-run")
def invoice_run(period: Annotated[str, typer.Argument(help="YYYY-MM")],
                finalize: Annotated[bool, typer.Option(help="seal them (month ended)")] = False,
                url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False) -> None:
    """Operator: draft (or refresh) every tenant's invoice of a month; --finalize seals."""
    r = _api(lambda: _client(url, token).post_json(
        "/invoices/run", {"period": period, "finalize": finalize}))
    if as_json:
        return _json(r)
    out.print(f"{r['period']}: {r['drafted']} drafted, {r['finalized']} finalized in "
              f"{r['seconds']} s", highlight=False)


@app.command("credit-note")
def credit_note_cmd(invoice_id: str,
                    reason: Annotated[str, typer.Option(help="printed on the note")],
                    amount: Annotated[str | None, typer.Option(
                        help="yuan incl. VAT; default: all that is left")] = None,
                    url: UrlOpt = "", token: TokenOpt = "") -> None:
    """Operator: correct a final invoice; the amount goes back to the tenant's wallet."""
    body: dict[str, str] = {"reason": reason, **({"amount": amount} if amount else {})}
    n = _api(lambda: _client(url, token).post_json(f"/invoices/{invoice_id}/credit-notes",
                                                   body))
    out.print(f"{n['number']}: ¥{-Decimal(n['total']):,.2f} credited against "
              f"{n['corrects']}", highlight=False)


@app.command()
def usage(instance: Annotated[str | None, typer.Option(help="one instance")] = None,
          tenant: Annotated[str | None, typer.Option(help="operator: which tenant")] = None,
          url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False) -> None:
    """Metered usage (container GPU-hours, egress, extra storage), newest first."""
    query = "&".join(f"{k}={v}" for k, v in (("instance", instance), ("tenant", tenant)) if v)
    page = _api(lambda: _client(url, token).get_json(f"/usage?{query}"))
    if as_json:
        return _json(page["items"])
    table = Table("recorded", "instance", "kind", "quantity", "unit price ¥", "amount ¥",
                  "from", "to", "key")
    for u in page["items"]:
        table.add_row(u["recorded_at"][:16], u["instance_id"] or "", u["kind"],
                      f"{u['quantity']} {u['unit']}", u["unit_price"],
                      f"{Decimal(u['amount']):,.2f}", u["started_at"][:16],
                      u["ended_at"][:16], u["key"])
    out.print(table)


@app.command()
def certificates(instance_id: str, url: UrlOpt = "", token: TokenOpt = "",
                 as_json: JsonOpt = False) -> None:
    """The erase certificates (NIST SP 800-88) of the disks an instance used."""
    data = _api(lambda: _client(url, token).get_json(
        f"/instances/{instance_id}/erase-certificates"))
    if as_json:
        return _json(data)
    table = Table("certificate", "node", "device", "serial", "method", "NIST level", "verified")
    for c in data:
        table.add_row(c["id"], c["node"], c["device"], c["serial"] or "-", c["method"],
                      c["nist_level"], "yes" if c["passed"] else "[red]NO[/red]")
    out.print(table)


@app.command()
def certificate(certificate_id: str,
                output: Annotated[Path | None, typer.Option(help="write JSON here")] = None,
                url: UrlOpt = "", token: TokenOpt = "") -> None:
    """Download one erase certificate (JSON, with its SHA-256 digest)."""
    data = _api(lambda: _client(url, token).get_json(f"/erase-certificates/{certificate_id}"))
    text = json.dumps(data["certificate"], indent=2)
    if output:
        output.write_text(text)
        out.print(f"certificate {certificate_id} written to {output}")
    else:
        print(text)


@node_app.command("agent-token")
def node_agent_token(node_id: str, url: UrlOpt = "", token: TokenOpt = "") -> None:
    """Operator: a one-time enrollment token for the node's agent (24 hours)."""
    data = _api(lambda: _client(url, token).post_json(f"/nodes/{node_id}/agent-token"))
    print(data["token"])


if __name__ == "__main__":
    app()
