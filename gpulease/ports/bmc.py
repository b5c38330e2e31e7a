"""The BMC port: what the provisioning engine asks of a server's baseboard controller."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from gpulease.domain.fleet.bmc_events import LogEntry


class BmcError(Exception):
    """Base of BMC failures; `message` is the BMC's own words where it gave any."""

    retryable = False


class BmcTransientError(BmcError):
    """Timeout, refused connection or 5xx: worth retrying with backoff; not before
    `retry_after_s` when the BMC said when (a 503 or 429 with Retry-After)."""

    retryable = True
    retry_after_s: float | None = None


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


class MediaSlot(StrEnum):
    CD = "cd"  # the OS image or the agent ramdisk
    USB = "usb"  # the config drive


@dataclass(frozen=True)
class BmcEndpoint:
    node_name: str
    address: str
    username: str
    password: str


@dataclass(frozen=True)
class BmcLog:
    health: str | None  # the system's health rollup: OK | Warning | Critical
    services: tuple[str, ...]  # the log services read
    entries: tuple[LogEntry, ...]


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
        """Reset the server at once (a power cycle). Raises BmcError."""
        ...

    def graceful_restart(self) -> None:
        """Ask the operating system to restart (the power button's ACPI request, as
        Redfish's GracefulRestart). Raises BmcPermanentError where the BMC does not offer
        it."""
        ...

    def set_one_time_boot(self, device: BootDevice, http_boot_uri: str | None = None) -> None:
        """Boot once from `device` at the next power on; UEFI HTTP boot fetches
        `http_boot_uri`. Raises BmcError."""
        ...

    def insert_media(self, image_url: str, slot: MediaSlot = MediaSlot.CD) -> None:
        """Insert virtual media in a slot (replacing any). Raises BmcPermanentError for a
        URL the BMC cannot fetch."""
        ...

    def eject_media(self) -> None:
        """Eject the virtual media of every slot (a no-op when empty). Raises BmcError."""
        ...

    def event_log(self, seen: Mapping[str, str] | None = None) -> BmcLog:
        """The health rollup and the entries of the BMC's log services (SEL, event log).
        `seen`: the last entry already read of each service (domain/fleet/bmc_events.py
        `cursor`); a BMC that lists its entries by link is asked only for the newer ones.
        Raises BmcError."""
        ...

    def subscribe_events(self, destination: str, context: str) -> str | None:
        """Ask the BMC to push its alerts to `destination` (an HTTP POST of a Redfish
        Event each), every event carrying `context`. The subscription's URI, or None when
        the BMC offers no enabled event service (it is polled only). Raises BmcError."""
        ...

    def subscription_alive(self, uri: str) -> bool:
        """Whether the BMC still holds the subscription (BMCs drop one whose deliveries
        fail). Raises BmcError when the BMC cannot be asked."""
        ...

    def clear_boot_override(self) -> None:
        """Boot as the server's own order says again (no one-time override). Raises
        BmcError."""
        ...

    def inserted_media(self, slot: MediaSlot = MediaSlot.CD) -> str | None:
        """The image URL in a slot, or None. Raises BmcError."""
        ...
