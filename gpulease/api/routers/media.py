"""What servers and their BMCs fetch from the control plane: config drives. No bearer
token: the random id in the URL is the capability, and a drive is deleted once used."""

from __future__ import annotations

from fastapi import APIRouter, Response

from gpulease.api.deps import PlatformDep
from gpulease.db.tables import ConfigDrive
from gpulease.domain.errors import NotFound

router = APIRouter(prefix="/media", tags=["media (for BMCs)"])


@router.get("/config/{drive_id}.iso")
def config_drive(drive_id: str, p: PlatformDep) -> Response:
    with p.db.read() as s:
        drive = s.get(ConfigDrive, drive_id)
        if drive is None:
            raise NotFound("No such config drive; it is deleted once its server is installed.")
        return Response(drive.iso, media_type="application/octet-stream",
                        headers={"Cache-Control": "no-store"})
