"""The BMC port: what the provisioning engine asks of a server's baseboard controller."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol


class BmcError(Exception):
    """Base of BMC failures; `message` is the BMC's own words where it gave any."""

    retryable = False


class BmcTransientError(BmcError):
    """Timeout, refused connection or 5xx: worth retrying with backoff."""

    retryable = True


class BmcPermanentError(BmcError):
    """Bad credentials, unknown resource, unreachable image: retrying will not help."""


class PowerState(StrEnum):
    ON = "on"
    OFF = "off"
    UNKNOWN = "unknown"


class BootDevice(StrEnum):
    VIRTUAL_CD = "cd"
    PXE = "pxe"
    UEFI_HTTP = "uefi_http"
    DISK = "hdd"


@dataclass(frozen=True)
class BmcEndpoint:
    node_name: str
    address: str
    username: str
    password: str


class Bmc(Protocol):
    """One server's BMC. Power requests return at once; callers poll power_state."""

    def power_state(self) -> PowerState:
        """Raises BmcError."""
        ...

    def power_on(self) -> None:
        """Request power on (a no-op when on). Raises BmcError."""
        ...

    def power_off(self) -> None:
        """Request a hard power off (a no-op when off). Raises BmcError."""
        ...

    def force_restart(self) -> None:
        """Raises BmcError."""
        ...

    def set_one_time_boot(self, device: BootDevice) -> None:
        """Boot once from `device` at the next power on. Raises BmcError."""
        ...

    def insert_media(self, image_url: str) -> None:
        """Insert virtual media (replacing any). Raises BmcPermanentError for a bad URL."""
        ...

    def eject_media(self) -> None:
        """Eject virtual media (a no-op when empty). Raises BmcError."""
        ...

    def inserted_media(self) -> str | None:
        """The image URL in the virtual CD, or None. Raises BmcError."""
        ...
