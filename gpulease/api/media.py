"""What servers and their BMCs fetch from the control plane under /media (beside the API,
not in it): config drives, network boot's iPXE scripts and NoCloud seeds, the demo's
images. No bearer token: the random id in the URL is the capability, and a drive is
deleted once used; network boot answers the boot network only."""

from __future__ import annotations

import re

from fastapi import APIRouter, Request, Response
from fastapi.responses import PlainTextResponse

from gpulease.api.access import Caller, access
from gpulease.api.deps import PROBLEMS, PUBLIC_PROBLEMS, PlatformDep
from gpulease.domain.errors import NotFound
from gpulease.services.fleet import netboot

router = APIRouter(prefix="/media", tags=["media (for BMCs)"], responses=PUBLIC_PROBLEMS)


@router.get("/images/{name}", openapi_extra=access(Caller.ANYONE))
def demo_image(name: str, p: PlatformDep) -> Response:
    """The demo's placeholder images (written by `gpulease up --bmc redfish`)."""
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


OFF_BOOT_NETWORK: dict[int | str, dict[str, object]] = {403: {
    **PROBLEMS[403], "description": "asked from outside the boot network "
                                    "(GPULEASE_BOOT_NETWORKS)"}}


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
