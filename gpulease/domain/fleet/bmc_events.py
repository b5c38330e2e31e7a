"""What a BMC's own logs say about the hardware: the entries of its log services (the SEL,
the event log), and which of them are faults a tenant would notice. This is evidence the
tenant cannot forge (it comes from the BMC, not from the rented host), so a critical entry
about a GPU, memory, a power supply or temperature becomes a hardware alert carrying the
BMC's own message. Pure."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum


@dataclass(frozen=True)
class LogEntry:
    service: str  # the log service's path (…/LogServices/SEL)
    id: str
    created: str | None  # as the BMC wrote it (ISO 8601)
    severity: str | None  # OK | Warning | Critical
    message: str
    message_id: str | None = None
    sensor: str | None = None  # SensorType, where the BMC says


class BmcFault(StrEnum):
    GPU = "bmc_gpu"
    MEMORY = "bmc_memory"
    PSU = "bmc_psu"
    THERMAL = "bmc_thermal"


# Checked in this order: a memory error on a GPU is the GPU's; a PCIe error (on an 8-GPU
# server its slots hold the GPUs: "Uncorrectable PCI Express Error … Slot 3") is a GPU's,
# not memory's, even when it says "uncorrectable" (its card is unknown: index -1).
_PATTERNS: tuple[tuple[BmcFault, re.Pattern[str]], ...] = (
    (BmcFault.GPU, re.compile(r"\bgpu\d*\b|accelerator|\bnpu\d*\b|nvlink|\bxid\b", re.I)),
    (BmcFault.GPU, re.compile(r"pci ?express|\bpcie\b", re.I)),
    (BmcFault.MEMORY, re.compile(r"memory|\bdimm|\becc\b|uncorrectable", re.I)),
    (BmcFault.PSU, re.compile(r"power ?supply|\bpsu\d*\b|power unit", re.I)),
    # a sensor named for its temperature ("CPU 1 Temp", "CPU0_TEMP") past its critical mark
    (BmcFault.THERMAL, re.compile(r"temperature|thermal|overheat|\bfan\d*\b"
                                  r"|(?:\b|_)temp\b|critical high", re.I)),
)
_GPU_INDEX = re.compile(r"\b(?:gpu|npu|accelerator)\s*#?\s*(\d+)", re.I)


def classify(entry: LogEntry) -> BmcFault | None:
    """The fault a critical entry reports, or None (not critical, or about something
    else)."""
    if (entry.severity or "").lower() != "critical":
        return None
    text = f"{entry.sensor or ''} {entry.message} {entry.message_id or ''}"
    for fault, pattern in _PATTERNS:
        if pattern.search(text):
            return fault
    return None


def gpu_index(entry: LogEntry) -> int:
    """The GPU an entry names (GPU3, "GPU #3", NPU3), or -1."""
    m = _GPU_INDEX.search(entry.message)
    return int(m.group(1)) if m else -1


def new_entries(entries: tuple[LogEntry, ...], seen: dict[str, str]) -> list[LogEntry]:
    """Entries after the last one seen in each service (by creation time, then id); the
    first look at a service takes nothing old: only what happens from then on."""
    out = []
    for entry in entries:
        last = seen.get(entry.service)
        if last is not None and entry_key(entry.created, entry.id) > last:
            out.append(entry)
    return out


def cursor(services: tuple[str, ...], entries: tuple[LogEntry, ...], seen: dict[str, str]
           ) -> dict[str, str]:
    """The last entry seen in each service after this read (an empty service: "", so its
    first entry is new)."""
    out = dict(seen)
    for service in services:
        out.setdefault(service, "")
    for entry in entries:
        key = entry_key(entry.created, entry.id)
        if entry.service not in out or key > out[entry.service]:
            out[entry.service] = key
    return out


def entry_key(created: str | None, entry_id: str) -> str:
    """Where an entry stands in its log: by creation time, then id (the cursor's unit)."""
    return f"{created or ''}|{entry_id.zfill(12)}"
