"""SLA credits beyond late delivery: a hardware fault that keeps a tenant's GPU out of
service longer than the outage SLA, and a delivered machine that fails acceptance on the
tenant's request. Each is posted to the wallet once (keyed by its item) and, being a
billable ledger entry, lands on the next invoice as a negative line."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpulease.db.money_tables import Lease
from gpulease.db.tables import HardwareAlert, Instance
from gpulease.domain.credits import (
    AcceptanceRule,
    OutageRule,
    acceptance_credit,
    outage_credit,
)
from gpulease.domain.states import InstanceStatus
from gpulease.domain.telemetry import AlertKind
from gpulease.services.history import agent
from gpulease.services.wallet import credit_sla, first_hold, has_credit

# Faults that take a GPU out of service (throttling and a down NVLink only slow it).
OUTAGE_KINDS = frozenset({AlertKind.GPU_FELL_OFF_BUS.value, AlertKind.DOUBLE_BIT_ECC.value,
                          AlertKind.ROW_REMAP_FAILURE.value})
PERIOD_S = {"hour": 3600.0, "day": 86400.0, "month": 30 * 86400.0, "year": 365 * 86400.0}


def _price_basis(s: Session, inst: Instance) -> tuple[Decimal, float] | None:
    """(price of one server's period, the period's seconds) the credit is prorated on."""
    if inst.kind == "container":
        held = first_hold(s, inst.id)
        return (held, PERIOD_S["hour"]) if held is not None else None
    lease = s.scalar(select(Lease).where(Lease.instance_id == inst.id))
    if lease is None:
        return None
    return lease.unit_price / max(inst.node_count, 1), PERIOD_S[lease.term]


def credit_outage(s: Session, alert: HardwareAlert, rule: OutageRule = OutageRule()  # noqa: B008
                  ) -> Decimal:
    """Called as an alert closes: an outage fault on a tenant's GPU beyond the SLA."""
    if alert.kind not in OUTAGE_KINDS or alert.instance_id is None or alert.closed_at is None:
        return Decimal("0.00")
    inst = s.get(Instance, alert.instance_id)
    basis = _price_basis(s, inst) if inst is not None else None
    if inst is None or basis is None:
        return Decimal("0.00")
    outage_s = (alert.closed_at - alert.opened_at).total_seconds()
    credit = outage_credit(outage_s, basis[0], basis[1], rule)
    item = f"SLA credit: GPU {alert.gpu_index} outage ({alert.kind}) of {inst.id}, alert {alert.id}"
    if credit > 0 and not has_credit(s, inst.id, item):
        credit_sla(s, inst, credit, alert.closed_at, item,
                   f"GPU {alert.gpu_index} of {inst.id} out of service {outage_s / 60:.0f} min "
                   f"({alert.kind}); rule: {rule.describe()}", actor=agent(alert.node_id))
        return credit
    return Decimal("0.00")


def credit_failed_acceptance(s: Session, instance_id: str, now: datetime, *, actor: str,
                             rule: AcceptanceRule = AcceptanceRule()  # noqa: B008
                             ) -> Decimal:
    """A delivered, leased machine that fails acceptance when its tenant asks: once per
    lease period."""
    inst = s.get(Instance, instance_id)
    if inst is None or inst.status != InstanceStatus.READY.value:
        return Decimal("0.00")
    lease = s.scalar(select(Lease).where(Lease.instance_id == inst.id))
    if lease is None:
        return Decimal("0.00")
    item = f"SLA credit: failed acceptance of {inst.id}, period {lease.periods}"
    credit = acceptance_credit(lease.unit_price, rule)
    if credit > 0 and not has_credit(s, inst.id, item):
        credit_sla(s, inst, credit, now, item, f"{inst.id} failed acceptance on request; "
                                                f"rule: {rule.describe()}", actor=actor)
        return credit
    return Decimal("0.00")
