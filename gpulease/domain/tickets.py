"""Tickets: what a fault is worth (its severity), the SLA clocks a ticket runs under and
where each stands. No I/O here."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from enum import StrEnum

from gpulease.domain.catalog import SupportTerms
from gpulease.domain.phrases import Phrase, phrase

# How a node swapped out of a rented instance says why it is erased and set aside.
SWAPPED_OUT = "swapped out for repair"


class Severity(StrEnum):
    P1 = "P1"  # a node or a GPU down
    P2 = "P2"  # degraded
    P3 = "P3"  # a question


# Hardware alerts (domain/telemetry.AlertKind, domain/bmc_events.BmcFault) and the other
# faults that open tickets on their own.
SEVERITY_OF_FAULT: dict[str, Severity] = {
    "gpu_fell_off_bus": Severity.P1,  # XID 79
    "double_bit_ecc": Severity.P1,  # XID 48, uncorrectable memory
    "ecc_uncontained": Severity.P1,  # XID 95
    "ecc_contained": Severity.P2,  # XID 94: one process stopped, the GPU runs on
    "row_remap_failure": Severity.P1,
    "device_unhealthy": Severity.P1,  # an NPU's own health
    "bmc_gpu": Severity.P1,
    "acceptance_failed": Severity.P1,
    "nvlink_down": Severity.P2,
    "thermal_throttling": Severity.P2,
    "bmc_memory": Severity.P2,
    "bmc_psu": Severity.P2,
    "bmc_thermal": Severity.P2,
}
FAULT_TITLES = {
    "gpu_fell_off_bus": phrase("GPU {gpu} not responding (XID 79: fell off the bus)"),
    "double_bit_ecc": phrase("GPU {gpu}: uncorrectable (double-bit) memory errors"),
    "ecc_uncontained": phrase("GPU {gpu}: uncontained memory error (XID 95), needs a reset"),
    "ecc_contained": phrase("GPU {gpu}: contained memory error (XID 94)"),
    "row_remap_failure": phrase("GPU {gpu}: row remapping failed"),
    "device_unhealthy": phrase("NPU {gpu} reports itself unhealthy"),
    "bmc_gpu": phrase("The BMC reports a GPU fault"),
    "acceptance_failed": phrase("The acceptance suite failed"),
    "nvlink_down": phrase("GPU {gpu}: NVLink links down"),
    "thermal_throttling": phrase("GPU {gpu}: sustained thermal throttling"),
    "bmc_memory": phrase("The BMC reports a memory fault"),
    "bmc_psu": phrase("The BMC reports a power supply fault"),
    "bmc_thermal": phrase("The BMC reports a thermal fault"),
}


def severity_of(fault: str) -> Severity:
    return SEVERITY_OF_FAULT.get(fault, Severity.P2)


def title_phrase(fault: str, gpu: int | None) -> Phrase:
    """The title of a ticket its evidence opened, to say in the reader's language."""
    known = FAULT_TITLES.get(fault)
    return Phrase(known.template if known is not None else fault.replace("_", " "),
                  {"gpu": gpu if gpu is not None and gpu >= 0 else "?"})


def title_of(fault: str, gpu: int | None) -> str:
    return str(title_phrase(fault, gpu))


def summary_phrase(kind: str, gpu: int | None, summary: str) -> Phrase | None:
    """The summary the platform gave a ticket its evidence opened, as a phrase (None for
    what a person wrote)."""
    title = title_phrase(kind, gpu)
    if summary == str(title):
        return title
    node = summary.removeprefix(f"{title} on ")
    if kind == "acceptance_failed" and node != summary:
        return phrase("{title} on {node}", title=title, node=node)
    return None


@dataclass(frozen=True)
class Deadlines:
    response: datetime | None
    mitigation: datetime | None
    resolution: datetime | None


def deadlines(terms: SupportTerms, severity: Severity, opened: datetime) -> Deadlines:
    def after(length: Decimal | None, unit: str) -> datetime | None:
        if length is None:
            return None
        return opened + timedelta(**{unit: float(length)})

    return Deadlines(after(terms.response_minutes.of(severity), "minutes"),
                     after(terms.mitigation_hours.of(severity), "hours"),
                     after(terms.resolution_hours.of(severity), "hours"))


@dataclass(frozen=True)
class Clock:
    """One SLA clock of a ticket: when it is due, when its milestone came (if it did)."""

    name: str  # response | mitigation | resolution
    due: datetime | None
    met_at: datetime | None

    def breached(self, now: datetime) -> bool:
        if self.due is None:
            return False
        return (self.met_at or now) > self.due

    def warning_at(self, opened: datetime, warn_at: Decimal) -> datetime | None:
        """When `warn_at` of the clock has run (None: no deadline, or its milestone came)."""
        if self.due is None or self.met_at is not None:
            return None
        return opened + (self.due - opened) * float(warn_at)

    def at_risk(self, opened: datetime, now: datetime, warn_at: Decimal) -> bool:
        """Running, not breached, and past `warn_at` of its length."""
        if self.due is None or self.met_at is not None or now > self.due:
            return False
        return (now - opened) >= (self.due - opened) * float(warn_at)


BREACHED = "!"  # a clock's name with this mark in `warned`: its breach was escalated


def next_warning(clocks: list[Clock], opened: datetime, warned: set[str],
                 warn_at: Decimal) -> datetime | None:
    """When operators are next to be warned: the earliest warning point (at `warn_at` of
    its length, then at its breach) of a clock still running that they were not warned
    about (None: no warning left)."""
    points = [point for c in clocks if c.name not in warned
              if (point := c.warning_at(opened, warn_at)) is not None]
    points += [c.due for c in clocks if c.name + BREACHED not in warned
               if c.due is not None and c.met_at is None]
    return min(points) if points else None
