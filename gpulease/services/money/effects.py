"""What the money family does when an instance or a lease moves: the order's hold becomes the
first period's charge at delivery, the lease starts and a late delivery is credited; a
failure or a release before delivery returns the hold; a hand-back before the term's end
refunds the periods not begun (or the unused time after a fault no spare could mend); the
lease ends with its instance; a lease whose grace ran out releases its instance."""

from __future__ import annotations

import uuid
from decimal import Decimal

from sqlalchemy import select

from gpulease.db.money_tables import Lease
from gpulease.db.tables import Instance
from gpulease.domain.billing.leases import term_end
from gpulease.domain.phrases import phrase
from gpulease.domain.states import INSTANCE, LEASE, InstanceStatus, LeaseStatus
from gpulease.lifecycle.effects import Change, Effect
from gpulease.lifecycle.writer import Move, initial, transition
from gpulease.ports.records import Moves
from gpulease.services.money import addons, lease_periods, wallet

LEASED_KINDS = ("bare_metal", "cluster")


def _charge_first_period(c: Change[Moves]) -> None:
    inst: Instance = c.row
    term = inst.term if inst.kind in LEASED_KINDS else "hour"
    extras = [x.line() for x in addons.period_lines(c.s, c.p, inst, c.now, inst.term)]
    wallet.charge_hold(c.s, inst, c.now, term_end(c.now, term, 1, c.p.settings.zone), extras)


def _start_lease(c: Change[Moves]) -> None:
    inst: Instance = c.row
    if inst.kind not in LEASED_KINDS:
        return
    held = wallet.first_hold(c.s, inst.id)
    if held is None:  # ordered before wallets existed: nothing held, no lease
        return
    extras = sum((x.amount for x in addons.period_lines(c.s, c.p, inst, c.now, inst.term)),
                 Decimal(0))
    lease = Lease(id=uuid.uuid4().hex[:16], instance_id=inst.id, tenant_id=inst.tenant_id,
                  term=inst.term, unit_price=held - extras, starts_at=c.now,
                  ends_at=term_end(c.now, inst.term, 1, c.p.settings.zone), auto_renew=False,
                  periods=1, reminders_sent="", updated_at=c.now, **initial(Lease, LEASE))
    c.s.add(lease)
    c.s.flush()  # the period refers to it
    lease_periods.start(c.s, lease, c.p.settings.zone, price=held)  # with its add-ons


def _credit_late_delivery(c: Change[Moves]) -> None:
    wallet.credit_late_delivery(c.s, c.row, c.now, c.p.settings.delivery_sla_s)


def _return_hold(c: Change[Moves]) -> None:
    inst: Instance = c.row
    if inst.ready_at is None:
        wallet.return_hold(c.s, inst, c.now)


def _open_lease(c: Change[Moves]) -> Lease | None:
    lease = c.s.scalar(select(Lease).where(Lease.instance_id == c.row.id).with_for_update())
    return lease if lease is not None and LeaseStatus(lease.status) is not LeaseStatus.ENDED \
        else None


def _end_lease_early(c: Change[Moves]) -> None:
    lease = _open_lease(c)
    if lease is None:
        return
    if LeaseStatus(lease.status) is LeaseStatus.ACTIVE and c.now < lease.ends_at:
        granted = lease_periods.refund_granted_by(c.s, c.row.id)
        if granted is not None:  # a fault the platform could not replace
            lease_periods.refund_unused(c.s, c.row, lease, c.now,
                                        phrase("ticket {ticket}: no spare", ticket=granted),
                                        actor=c.actor)
        else:
            lease_periods.refund_unstarted(
                c.s, c.row, lease, c.p.catalog.pricing.early_termination_fee_percent,
                c.now, actor=c.actor)
    transition(c.s, c.p, lease, LEASE, "end", Move(c.now, actor=c.actor, reason=c.reason))


def _end_lease(c: Change[Moves]) -> None:
    lease = _open_lease(c)
    if lease is not None:
        transition(c.s, c.p, lease, LEASE, "end", Move(c.now, actor=c.actor, reason=c.reason))


def _release_after_grace(c: Change[Moves]) -> None:
    inst = c.s.get(Instance, c.row.instance_id, with_for_update=True)
    if inst is not None and InstanceStatus(inst.status) is InstanceStatus.READY:
        transition(c.s, c.p, inst, INSTANCE, "release", Move(c.now, actor=c.actor,
                   reason=phrase("lease expired and grace ended")))


IS, L = InstanceStatus, LeaseStatus

EFFECTS: tuple[Effect[Moves], ...] = (
    Effect(INSTANCE, "deliver", _charge_first_period,
           "the order's hold becomes the charge for its first period"),
    Effect(INSTANCE, "deliver", _start_lease,
           "bare metal and clusters: the lease term starts now, at the price the order held "
           "(its first period with the add-ons)"),
    Effect(INSTANCE, "deliver", _credit_late_delivery,
           "delivered later than the SLA: a credit on the first period, by the documented "
           "rule"),
    Effect(INSTANCE, "fail", _return_hold, "never delivered: the order's hold comes back"),
    Effect(INSTANCE, "release", _end_lease_early,
           "handed back before the term ends: the periods not begun refunded, less the fee; "
           "the lease ends", only_from=frozenset({IS.READY})),
    Effect(INSTANCE, "finish", _return_hold,
           "released before delivery: the order's hold comes back"),
    Effect(INSTANCE, "finish", _end_lease, "the lease ends, if it had not"),
    Effect(LEASE, "end", _release_after_grace,
           "grace ran out: the instance is released and its disks erased",
           only_from=frozenset({L.GRACE})),
)
