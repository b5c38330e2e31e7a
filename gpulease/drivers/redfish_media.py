"""Virtual media wherever the vendor keeps it, inserted the way it asks: the drives under
the System (Redfish 2021 and later; Dell iDRAC 6.x moved them there) or under the managers
that manage it; InsertMedia with `TransferProtocolType` when the action names the parameter
(on the action itself or in its `@Redfish.ActionInfo`: AMI-based BMCs refuse an insert
without it), and an image URL whose scheme the BMC does not allow (OpenBMC takes HTTPS
only) refused before anything is sent, with the fix in the message."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import sushy
from sushy import exceptions as sx

from gpulease.drivers.redfish_hardware import insert_protocols
from gpulease.ports.bmc import BmcPermanentError, MediaSlot

SLOT_TYPES: dict[MediaSlot, tuple[Any, ...]] = {
    MediaSlot.CD: (sushy.VirtualMediaType.CD, sushy.VirtualMediaType.DVD),
    MediaSlot.USB: (sushy.VirtualMediaType.USB_STICK, sushy.VirtualMediaType.FLOPPY),
}


def drives(system: Any) -> list[Any]:
    """The system's virtual drives: its own where it has them, else its managers'."""
    if isinstance(system.json.get("VirtualMedia"), dict):
        try:
            return list(system.virtual_media.get_members())
        except (sx.MissingAttributeError, sx.ResourceNotFoundError):
            pass
    return [drive for manager in system.managers
            for drive in manager.virtual_media.get_members()]


def slot_drive(system: Any, slot: MediaSlot, address: str) -> Any:
    for drive in drives(system):
        if any(t in SLOT_TYPES[slot] for t in drive.media_types):
            return drive
    raise BmcPermanentError(f"BMC at {address} offers no virtual {slot.value} drive; use "
                            "network boot for this offer")


def allowed_protocols(drive: Any) -> tuple[str, ...] | None:
    """The transfer protocols the drive's InsertMedia accepts (redfish_hardware reads them
    the same way for the enrollment's inventory)."""
    def read(uri: str) -> dict[str, Any]:
        doc = drive._conn.get(path=uri).json()
        return doc if isinstance(doc, dict) else {}

    return insert_protocols(drive.json, read)


def protocol_for(image_url: str, allowed: tuple[str, ...] | None, address: str) -> str | None:
    """The `TransferProtocolType` to send for `image_url` (None: leave it out); refused
    when the BMC does not allow the URL's scheme."""
    scheme = urlsplit(image_url).scheme.upper()
    if allowed is None:
        return None
    if allowed and scheme not in allowed:
        raise BmcPermanentError(
            f"BMC at {address} fetches virtual media only over "
            f"{' or '.join(allowed)}, not {scheme}: serve the platform's media over "
            f"{allowed[0].lower()} (GPULEASE_MEDIA_BASE_URL, or the site's media_base_url)")
    return scheme


def insert(drive: Any, image_url: str, address: str) -> None:
    """Insert `image_url` in `drive` (what it held ejected first), as the BMC asks."""
    protocol = protocol_for(image_url, allowed_protocols(drive), address)
    if drive.inserted:
        drive.eject_media()
    drive.insert_media(image_url, inserted=True, write_protected=True,
                       transfer_protocol=protocol)
