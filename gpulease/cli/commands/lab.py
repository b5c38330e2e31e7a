"""`gpulease lab`: virtual servers on this machine behind a real Redfish BMC, enrolled like
any server (docs/operations.md, "The lab")."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from gpulease.cli.client import ApiError
from gpulease.cli.common import TokenOpt, UrlOpt, connect, err, out
from gpulease.cli.words import _
from gpulease.domain.catalog import read_catalog_text
from gpulease.lab import deploy as deploys
from gpulease.lab import lab as labs
from gpulease.lab import machines
from gpulease.osimage.build import latest

app = typer.Typer()
lab_app = typer.Typer(help="Virtual servers behind a real Redfish BMC (QEMU/libvirt).",
                      no_args_is_help=True)
app.add_typer(lab_app, name="lab")

DirOpt = Annotated[Path, typer.Option("--dir", envvar="GPULEASE_LAB_DIR",
                                      help="the lab's folder (disks, BMC, state)")]
DEFAULT_DIR = Path(".gpulease/lab")


@lab_app.command("up")
def lab_up(
    servers: Annotated[int, typer.Option(min=1, max=8, help="how many virtual servers")] = 1,
    bmc_port: Annotated[int, typer.Option(help="the BMC's port on 127.0.0.1")] = 8100,
    ssh_port: Annotated[int, typer.Option(
        help="127.0.0.1 port of the first server's SSH (the next ones follow)")] = 2201,
    media_port: Annotated[int, typer.Option(
        help="127.0.0.1 port the lab serves its deploys' files on")] = 8101,
    accel: Annotated[str | None, typer.Option(
        envvar="GPULEASE_LAB_ACCEL", help="kvm or tcg (default: detected)")] = None,
    enroll: Annotated[bool, typer.Option(
        help="enroll the servers into the platform at --url")] = False,
    folder: DirOpt = DEFAULT_DIR, url: UrlOpt = "", token: TokenOpt = "",
) -> None:
    """Make the lab's servers (powered off) and start their BMC; write the catalog with
    the lab's offer beside them."""
    if accel not in (None, "kvm", "tcg"):
        err.print(_("[red]error[/red]: --accel takes 'kvm' or 'tcg'"))
        raise typer.Exit(2)
    try:
        lab = labs.up(folder, labs.Plan(servers=servers, bmc_port=bmc_port,
                                        first_ssh_port=ssh_port, media_port=media_port,
                                        accel=accel))
    except (ImportError, RuntimeError, OSError) as exc:
        err.print(_("[red]error[/red]: the lab could not start: {error}", error=exc))
        raise typer.Exit(1) from None
    catalog = Path(lab.folder) / "catalog.toml"
    catalog.write_text(labs.catalog_text(read_catalog_text(None)))
    out.print(_("accelerator: {kind} ({why})", kind=lab.accel, why=lab.accel_why))
    _show(lab)
    out.print(_("the lab's offer is {offer}, in {catalog}: `gpulease up --lab {folder}` "
                "starts the platform with it and enrolls the lab's servers",
                offer=labs.LAB_OFFER, catalog=catalog, folder=lab.folder))
    if enroll:
        raise typer.Exit(_enroll(lab, connect(url, token)))


def _enroll(lab: labs.Lab, client: object) -> int:
    from gpulease.cli.client import Client

    assert isinstance(client, Client)
    failed = 0
    for server in lab.servers:
        try:
            node = client.enroll(labs.enroll_request(lab, server))
        except ApiError as exc:
            err.print(_("[red]error[/red] ({status} {title}): {detail}", status=exc.status,
                        title=exc.title, detail=exc.detail))
            failed += 1
            continue
        out.print(f"{node.name}: {node.status}"
                  + (f" — {node.status_reason}" if node.status_reason else ""))
    return 1 if failed else 0


def _show(lab: labs.Lab) -> None:
    t = Table(_("server"), _("power"), _("BMC (Redfish system)"), "SSH",
              title=_("lab {name}: {count} servers", name=lab.name, count=len(lab.servers)))
    for s in lab.servers:
        try:
            power = machines.power_state(str(s["name"]))
        except Exception:  # libvirt's own error types: a server gone from libvirt
            power = "?"
        t.add_row(str(s["name"]), power, lab.system_url(s), f"127.0.0.1:{s['ssh_port']}")
    out.print(t)


@lab_app.command("status")
def lab_status(folder: DirOpt = DEFAULT_DIR) -> None:
    """The lab's servers, their power (as libvirt sees it), BMC URLs and SSH ports."""
    lab = labs.load(folder.resolve())
    if lab is None:
        out.print(_("no lab in {folder}: `gpulease lab up` makes one", folder=folder))
        return
    machines.quiet_libvirt()
    _show(lab)


@lab_app.command("down")
def lab_down(folder: DirOpt = DEFAULT_DIR) -> None:
    """Stop the lab's BMC and remove its servers, their disks and its pool (nothing else)."""
    removed = labs.down(folder)
    out.print(_("removed: {servers}", servers=", ".join(removed) or _("nothing")))


def _lab(folder: Path) -> labs.Lab:
    lab = labs.load(folder.resolve())
    if lab is None:
        err.print(_("[red]error[/red]: no lab in {folder}: `gpulease lab up` makes one",
                    folder=folder))
        raise typer.Exit(1)
    machines.quiet_libvirt()
    return lab


CacheOpt = Annotated[Path, typer.Option(
    "--image-cache", envvar="GPULEASE_IMAGE_STORE",
    help="where `gpulease image build` keeps images")]


@lab_app.command("deploy")
def lab_deploy(
    server: Annotated[str, typer.Argument(help="the lab server, e.g. gpulease-lab-01")],
    ssh_key: Annotated[Path, typer.Option(help="your SSH public key file")],
    hostname: Annotated[str | None, typer.Option(help="default: the server's name")] = None,
    image_cache: CacheOpt = Path("/var/tmp/gpulease-images"), folder: DirOpt = DEFAULT_DIR,
) -> None:
    """Write the newest built image onto a lab server through its BMC and boot it with a
    config drive; print the SSH line and the root password (once)."""
    lab = _lab(folder)
    built = latest(image_cache)
    if built is None:
        err.print(_("[red]error[/red]: no image in {cache}: `gpulease image build` makes one",
                    cache=image_cache))
        raise typer.Exit(1)
    try:
        key = ssh_key.read_text().strip()
        lab.server(server)
        done = deploys.deploy(lab, server, deploys.Order(
            Path(built.path), built.sha256, hostname or server, (key,)),
            Path(lab.folder) / "cache")
    except (OSError, KeyError, deploys.DeployFailed) as exc:
        err.print(_("[red]error[/red]: {server} was not deployed: {error}", server=server,
                    error=exc))
        raise typer.Exit(1) from None
    out.print(_("{server} runs {image} (sha256 {sha}); ready in {seconds:g} s",
                server=server, image=built.image_id, sha=built.sha256[:16],
                seconds=done.stages["ssh_answers_s"]))
    out.print(f"  {done.ssh}")
    out.print(_("  root password (shown once): {password}", password=done.root_password))


@lab_app.command("erase")
def lab_erase(
    server: Annotated[str, typer.Argument(help="the lab server, e.g. gpulease-lab-01")],
    folder: DirOpt = DEFAULT_DIR,
) -> None:
    """Power a lab server off and erase both its disks from the ramdisk (read back)."""
    lab = _lab(folder)
    try:
        lab.server(server)
        report = deploys.erase(lab, server, Path(lab.folder) / "cache")
    except (KeyError, deploys.DeployFailed) as exc:
        err.print(_("[red]error[/red]: {server} was not erased: {error}", server=server,
                    error=exc))
        raise typer.Exit(1) from None
    out.print(_("{server} erased: {methods} (read back: zeros)", server=server,
                methods=report.get("methods", "").strip(",")))
