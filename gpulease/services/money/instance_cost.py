"""What an instance costs: an hour of it now, and what it cost so far (its ledger entries:
the held first period, charges, usage, less refunds and credits), as the tenant sees them
on the instance's page, `gpulease show` and the API."""

from __future__ import annotations

from decimal import Decimal

from sqlalchemy import func, select

from gpulease.db.money_tables import LedgerEntry
from gpulease.db.repositories import get_instance
from gpulease.domain.accounts import Principal
from gpulease.domain.billing.leases import current_period
from gpulease.domain.billing.money import to_fen
from gpulease.domain.states import INSTANCE_LIVE
from gpulease.ports.records import Priced
from gpulease.schemas.money import InstanceCostView
from gpulease.services.money import lease_periods
from gpulease.services.money.budgets import SPENT
from gpulease.services.money.leases import find_lease
from gpulease.services.money.metering import unit_price


def cost_of(p: Priced, actor: Principal, instance_id: str) -> InstanceCostView:
    now = p.clock.now()
    with p.db.read() as s:
        inst = get_instance(s, actor, instance_id)
        spent = s.scalar(select(func.coalesce(func.sum(LedgerEntry.amount), 0)).where(
            LedgerEntry.instance_id == inst.id, LedgerEntry.kind.in_(SPENT)))
        per_hour: Decimal | None = None
        if inst.status in {status.value for status in INSTANCE_LIVE}:
            if inst.kind == "container":
                per_hour = unit_price(s, p, inst, "gpu_hours") * inst.gpu_count
            else:
                lease = find_lease(s, inst.id)
                period = current_period(lease_periods.paid_periods(s, lease.id), now) \
                    if lease is not None else None
                if period is not None:
                    hours = Decimal((period.ends_at - period.starts_at).total_seconds()) / 3600
                    per_hour = period.price / hours if hours > 0 else None
    return InstanceCostView(instance_id=inst.id,
                            per_hour=to_fen(per_hour) if per_hour is not None else None,
                            spent=to_fen(-Decimal(spent or 0)))
