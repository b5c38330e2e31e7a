"""What servers and their BMCs fetch from the control plane: config drives. No bearer
token: the random id in the URL is the capability, and a drive is deleted once used."""

from __future__ import annotations

import re

from fastapi import APIRouter, Response

from gpulease.api.deps import PlatformDep
from gpulease.db.tables import ConfigDrive
from gpulease.domain.errors import NotFound

router = APIRouter(prefix="/media", tags=["media (for BMCs)"])


@router.get("/images/{name}")
def demo_image(name: str, p: PlatformDep) -> Response:
    """The demo's placeholder images (written by `gpulease up --bmc redfish`)."""
    folder = p.settings.data_dir / "media" / "images"
    path = folder / name
    if not re.fullmatch(r"[a-z0-9][a-z0-9.-]*\.iso", name) or not path.is_file():
        raise NotFound(f"No image {name} here; real images live on your image server "
                       "(GPULEASE_MEDIA_BASE_URL).")
    return Response(path.read_bytes(), media_type="application/octet-stream")


@router.get("/config/{drive_id}.iso")
def config_drive(drive_id: str, p: PlatformDep) -> Response:
    with p.db.read() as s:
        drive = s.get(ConfigDrive, drive_id)
        if drive is None:
            raise NotFound("No such config drive; it is deleted once its server is installed.")
        return Response(drive.iso, media_type="application/octet-stream",
                        headers={"Cache-Control": "no-store"})
