"""What servers and their BMCs fetch from the control plane under /media (beside the API,
not in it): config drives, network boot's iPXE scripts and NoCloud seeds, the demo's
images. No bearer token: the random id in the URL is the capability, and a drive is
deleted once used; network boot answers the boot network only."""

from __future__ import annotations

import re

from fastapi import APIRouter, Request, Response
from fastapi.responses import FileResponse, PlainTextResponse

from gpulease.api.access import Caller, access
from gpulease.api.deps import PROBLEMS, PUBLIC_PROBLEMS, PlatformDep
from gpulease.domain.errors import NotFound
from gpulease.services.fleet import netboot, ramdisk_boots

router = APIRouter(prefix="/media", tags=["media (for BMCs)"], responses=PUBLIC_PROBLEMS)

OFF_BOOT_NETWORK: dict[int | str, dict[str, object]] = {403: {
    **PROBLEMS[403], "description": "asked from outside the boot network "
                                    "(GPULEASE_BOOT_NETWORKS)"}}


@router.get("/images/{name}", openapi_extra=access(Caller.ANYONE),
            responses=OFF_BOOT_NETWORK)
def image(name: str, request: Request, p: PlatformDep) -> Response:
    """An image of the image store (`gpulease image build`), `<image>.raw`, streamed to a
    deploy ramdisk on the boot network; or the demo's placeholder ISOs (written by
    `gpulease up --bmc redfish`)."""
    if name.endswith(".raw"):
        return FileResponse(ramdisk_boots.stored_image(p, name.removesuffix(".raw"),
                                                       _source(request)),
                            media_type="application/octet-stream")
    folder = p.settings.data_dir / "media" / "images"
    path = folder / name
    if not re.fullmatch(r"[a-z0-9][a-z0-9.-]*\.iso", name) or not path.is_file():
        raise NotFound("No image {name} here; real images live on your image server "
                       "(GPULEASE_MEDIA_BASE_URL).", name=name)
    return Response(path.read_bytes(), media_type="application/octet-stream")


@router.get("/config/{drive_id}.iso", openapi_extra=access(Caller.ANYONE))
def config_drive(drive_id: str, p: PlatformDep) -> Response:
    return Response(netboot.config_drive_iso(p, drive_id),
                    media_type="application/octet-stream", headers={"Cache-Control": "no-store"})


@router.get("/ipxe", response_class=PlainTextResponse, responses=OFF_BOOT_NETWORK,
            openapi_extra=access(Caller.ANYONE))
def ipxe(mac: str, request: Request, p: PlatformDep) -> PlainTextResponse:
    """For network boot: the iPXE script of the server with this MAC (its image's kernel
    and NoCloud seed while deploying, the agent ramdisk while cleaning, else its disk).
    Only from the boot network (GPULEASE_BOOT_NETWORKS), and from the node's boot address
    when it has one; anyone else is told to boot from disk, or refused (403)."""
    return PlainTextResponse(netboot.ipxe_script(p, mac, _source(request)),
                             headers={"Cache-Control": "no-store"})


def _source(request: Request) -> str | None:
    return request.client.host if request.client else None


@router.get("/nocloud/{drive_id}/{name}", response_class=PlainTextResponse,
            responses=OFF_BOOT_NETWORK, openapi_extra=access(Caller.ANYONE))
def nocloud(drive_id: str, name: str, request: Request, p: PlatformDep) -> PlainTextResponse:
    """A network-booted installer's cloud-init seed (the config drive's files over HTTP),
    to the deploying node's address only, while it deploys."""
    return PlainTextResponse(netboot.nocloud_file(p, drive_id, name, _source(request)),
                             headers={"Cache-Control": "no-store"})


@router.get("/ramdisk/{boot_id}.iso", openapi_extra=access(Caller.ANYONE))
def ramdisk_iso(boot_id: str, p: PlatformDep) -> FileResponse:
    """The deploy ramdisk a server's BMC mounts for one boot (an image deploy's write, or
    a clean's erase); its id is the capability, gone when the deploy or clean is over."""
    return FileResponse(ramdisk_boots.iso_file(p, boot_id),
                        media_type="application/octet-stream",
                        headers={"Cache-Control": "no-store"})


@router.get("/ramdisk/{boot_id}/plan", response_class=PlainTextResponse,
            responses=OFF_BOOT_NETWORK, openapi_extra=access(Caller.ANYONE))
def ramdisk_plan(boot_id: str, request: Request, p: PlatformDep, disks: str = ""
                 ) -> PlainTextResponse:
    """The booted ramdisk's plan (key=value lines), given the disks it found."""
    return PlainTextResponse(ramdisk_boots.plan_text(p, boot_id, disks, _source(request)),
                             headers={"Cache-Control": "no-store"})


@router.get("/ramdisk/{boot_id}/report", response_class=PlainTextResponse,
            responses=OFF_BOOT_NETWORK, openapi_extra=access(Caller.ANYONE))
def ramdisk_report(boot_id: str, request: Request, p: PlatformDep) -> PlainTextResponse:
    """The ramdisk's report, once (its busybox wget sends it as the query): step=,
    ok=0|1 and what it measured."""
    ramdisk_boots.record_report(p, boot_id, dict(request.query_params), _source(request))
    return PlainTextResponse("recorded\n")
