"""Does what a BMC reports match the offer's host configuration? Pure comparison: facts the
BMC does not report are listed as unchecked, never counted as a mismatch."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

from gpulease.domain.catalog import Offer

MEMORY_TOLERANCE = Decimal("0.05")  # BMCs report usable memory, a little under installed


@dataclass(frozen=True)
class GpuLink:
    """A GPU's PCIe link as the BMC reads it now, and what the slot allows."""

    name: str
    gen: int | None
    lanes: int | None
    max_gen: int | None
    max_lanes: int | None


@dataclass(frozen=True)
class Facts:
    memory_gib: float | None
    drive_count: int | None
    drive_bytes: tuple[int, ...] | None
    nic_count: int | None
    gpu_count: int | None = None
    gpu_vendors: tuple[str, ...] = ()
    gpu_links: tuple[GpuLink, ...] = ()
    hot: tuple[str, ...] = ()  # sensors at or above their critical threshold, or unhealthy


@dataclass(frozen=True)
class Comparison:
    differences: tuple[str, ...]
    unchecked: tuple[str, ...]
    checked: tuple[str, ...] = field(default=())
    notes: tuple[str, ...] = field(default=())  # worth a look, not a mismatch

    @property
    def matches(self) -> bool:
        return not self.differences

    def report(self) -> str:
        parts = []
        if self.differences:
            parts.append("differs from the offer: " + "; ".join(self.differences))
        if self.checked:
            parts.append("matches: " + ", ".join(self.checked))
        if self.unchecked:
            parts.append("not reported by the BMC: " + ", ".join(self.unchecked))
        if self.notes:
            parts.append("notes: " + "; ".join(self.notes))
        return ". ".join(parts) or "nothing to compare"


def compare(offer: Offer, facts: Facts, gpu_count: int | None = None,
            gpu_vendor: str | None = None) -> Comparison:
    """`gpu_count` and `gpu_vendor` are the offer's SKU's (checked when the BMC lists
    GPUs)."""
    differences: list[str] = []
    unchecked: list[str] = []
    checked: list[str] = []
    notes: list[str] = []
    if gpu_count is not None:
        if facts.gpu_count is None:
            unchecked.append("GPUs")
        elif facts.gpu_count != gpu_count:
            differences.append(f"{facts.gpu_count} GPUs, offer says {gpu_count}")
        elif gpu_vendor and facts.gpu_vendors and any(
                v.lower() != gpu_vendor.lower() for v in facts.gpu_vendors):
            differences.append(f"GPU vendor {', '.join(sorted(set(facts.gpu_vendors)))}, "
                               f"offer says {gpu_vendor}")
        else:
            checked.append("GPUs")
    for link in facts.gpu_links:
        if link.max_gen and link.max_lanes and (link.gen, link.lanes) != (
                link.max_gen, link.max_lanes) and link.gen is not None:
            notes.append(f"{link.name} links at Gen{link.gen} x{link.lanes} of Gen"
                         f"{link.max_gen} x{link.max_lanes} (idle GPUs train down; the "
                         "acceptance suite measures the real bandwidth)")
    notes += [f"{s} (chassis sensor)" for s in facts.hot]
    if facts.memory_gib is None:
        unchecked.append("memory")
    else:
        expected = Decimal(offer.memory_gb)
        if abs(Decimal(str(facts.memory_gib)) - expected) > expected * MEMORY_TOLERANCE:
            differences.append(f"memory {facts.memory_gib:g} GiB, offer says {offer.memory_gb} GB")
        else:
            checked.append("memory")
    wanted_drives = sum(d.count for d in offer.disks)
    if facts.drive_count is None:
        unchecked.append("drives")
    elif facts.drive_count < wanted_drives:
        differences.append(f"{facts.drive_count} drives, offer says {wanted_drives}")
    else:
        checked.append("drives")
    if offer.nic_count is not None:  # the offer may leave NICs unchecked
        if facts.nic_count is None:
            unchecked.append("NICs")
        elif facts.nic_count != offer.nic_count:
            differences.append(f"{facts.nic_count} NICs, offer says {offer.nic_count}")
        else:
            checked.append("NICs")
    return Comparison(tuple(differences), tuple(unchecked), tuple(checked), tuple(notes))
