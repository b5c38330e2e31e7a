"""Does what a BMC reports match the offer's host configuration? Pure comparison: facts the
BMC does not report are listed as unchecked, never counted as a mismatch."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

from gpulease.domain.catalog import Offer

MEMORY_TOLERANCE = Decimal("0.05")  # BMCs report usable memory, a little under installed


@dataclass(frozen=True)
class Facts:
    memory_gib: float | None
    drive_count: int | None
    drive_bytes: tuple[int, ...] | None
    nic_count: int | None


@dataclass(frozen=True)
class Comparison:
    differences: tuple[str, ...]
    unchecked: tuple[str, ...]
    checked: tuple[str, ...] = field(default=())

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
        return ". ".join(parts) or "nothing to compare"


def compare(offer: Offer, facts: Facts) -> Comparison:
    differences: list[str] = []
    unchecked: list[str] = []
    checked: list[str] = []
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
    return Comparison(tuple(differences), tuple(unchecked), tuple(checked))
