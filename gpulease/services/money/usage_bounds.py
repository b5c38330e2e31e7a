"""What an instance could physically have used: the bound on reported usage.

A metering source is outside the control plane and may be wrong or forged; money follows
only what the hardware could have done. Egress is bounded by the server's uplink
(Gbit/s × time, for each node), extra storage by its local disks (GB × days; a container
by its GPUs' share of the host's), GPU-hours by the instance's GPUs × time. A record is
checked on its own, and together with what was charged for the instance before, against
the time since the order. Beyond either bound it is held for an operator, not charged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpulease.db.money_tables import UsageRecord
from gpulease.db.tables import Instance
from gpulease.domain.billing.invoicing import USAGE_KINDS
from gpulease.domain.states import UsageStatus
from gpulease.ports.records import Priced

HOUR = timedelta(hours=1)
RELEASE_GRACE = HOUR  # a collector's last window may close a little after the release


def hourly_capacity(p: Priced, inst: Instance, kind: str) -> tuple[Decimal, str] | None:
    """The most of `kind` the instance could use in one hour, and how that was reckoned;
    None when the catalog no longer describes its servers."""
    if kind == "gpu_hours":
        return Decimal(inst.gpu_count), f"{inst.gpu_count} GPUs"
    offer = p.catalog.offer(inst.sku, inst.region)
    if offer is None:
        return None
    nodes = inst.node_count
    if kind == "egress_gb":  # Gbit/s → GB per hour; a container may fill its host's port
        per_hour = offer.uplink_gbps * 3600 / 8 * nodes
        return per_hour, f"{nodes} × {offer.uplink_gbps} Gbit/s uplink"
    disk = offer.disk_gb * nodes
    if inst.kind == "container":
        disk = disk * inst.gpu_count / p.catalog.sku_by_id[inst.sku].gpu_count
    return disk / 24, f"{disk.normalize():f} GB of disk"


def _fmt(value: Decimal) -> str:
    return f"{value.quantize(Decimal('0.01')).normalize():f}"


@dataclass(frozen=True)
class Usage:
    """One usage record as reported: its idempotency key, what kind and how much over which
    span, and who reported it; with `cover`, a balance that cannot pay refuses it
    (PaymentRequired, nothing written); with `held` (why), it is kept for an operator's
    review and not charged."""

    key: str
    kind: str
    quantity: Decimal
    start: datetime
    end: datetime
    source: str
    cover: bool = False
    held: str | None = None


def beyond_bounds(s: Session, p: Priced, inst: Instance, usage: Usage) -> str | None:
    """Why this record is more than the instance could have used (None: it could)."""
    kind, quantity, start, end = usage.kind, usage.quantity, usage.start, usage.end
    unit = USAGE_KINDS[kind].unit
    if inst.released_at is not None and start >= inst.released_at + RELEASE_GRACE:
        return (f"{inst.id} was released {inst.released_at:%Y-%m-%d %H:%M} UTC; this usage "
                "starts after that")
    capacity = hourly_capacity(p, inst, kind)
    if capacity is None:
        return f"the catalog no longer lists {inst.sku} in {inst.region} to bound it by"
    per_hour, basis = capacity
    hours = Decimal((end - start).total_seconds()) / 3600
    most = per_hour * hours
    if quantity > most:
        return (f"{_fmt(quantity)} {unit} in {_fmt(hours)} h is more than {basis} allow "
                f"({_fmt(most)} at most)")
    until = min(end, inst.released_at + RELEASE_GRACE) if inst.released_at else end
    since = min(inst.ordered_at, start)  # a collector's clock may run a little ahead
    lived = math.ceil(max((until - since) / HOUR, 0))  # started hours
    before = s.scalar(select(func.coalesce(func.sum(UsageRecord.quantity), 0)).where(
        UsageRecord.instance_id == inst.id, UsageRecord.kind == kind,
        UsageRecord.status == UsageStatus.CHARGED.value)) or 0
    total = Decimal(str(before)) + quantity
    if total > per_hour * lived:
        return (f"with the {_fmt(Decimal(str(before)))} {unit} charged before, {inst.id} "
                f"would have used {_fmt(total)} {unit} in its {lived} h, more than {basis} "
                f"allow ({_fmt(per_hour * lived)} at most)")
    return None
