"""What releasing an instance now would refund and keep, said before the tenant confirms:
the same rules the release applies (lifecycle/writer.py: the order's hold back before
delivery; periods not begun refunded less the early-termination fee; the unused time in
full after a fault the platform could not replace; nothing back in grace), nothing written."""

from __future__ import annotations

from decimal import Decimal

from gpulease.db.repositories import get_instance
from gpulease.domain.accounts import Principal
from gpulease.domain.billing.leases import (
    current_period,
    early_end_refund,
    local_text,
    unused_refund,
)
from gpulease.domain.errors import Conflict
from gpulease.domain.states import InstanceStatus, LeaseStatus
from gpulease.ports.records import Priced
from gpulease.schemas.money import ReleaseTermsView
from gpulease.services.money import lease_periods
from gpulease.services.money.leases import find_lease
from gpulease.services.money.wallet import first_hold

ZERO = Decimal("0.00")
ENDING = (InstanceStatus.RELEASING.value, InstanceStatus.RELEASED.value)


def release_terms(p: Priced, actor: Principal, instance_id: str) -> ReleaseTermsView:
    now = p.clock.now()
    fee = p.catalog.pricing.early_termination_fee_percent
    with p.db.read() as s:
        inst = get_instance(s, actor, instance_id)
        if inst.status in ENDING:
            raise Conflict("Instance {instance} is already {status}; there is nothing "
                           "left to hand back.", instance=inst.id, status=inst.status)
        data = (f"Its disks are erased, one certificate per disk, and the server goes back "
                f"to the pool. Copy what you need first (`gpulease backup {inst.id}`).")
        if inst.kind == "container":
            data = ("The container and its data volume are removed. Save what you need "
                    f"first (`gpulease image save {inst.id}`, `gpulease backup {inst.id}`).")
        terms = ReleaseTermsView(instance_id=inst.id, status=inst.status, case="undelivered",
                                 refund=ZERO,
                                 kept=ZERO, paid_until=None, periods_refunded=0,
                                 fee_percent=fee, summary="", data=data)
        if inst.ready_at is None:
            held = first_hold(s, inst.id) or ZERO
            terms.refund = held
            terms.summary = (f"Not delivered yet: the ¥{held:,.2f} held for it comes back "
                             "in full.")
            return terms
        if inst.kind == "container":
            terms.case = "hourly"
            terms.summary = ("Billed by the hour up to the release; nothing more is charged "
                             "after it, and nothing is refunded.")
            return terms
        lease = find_lease(s, inst.id)
        if lease is None or lease.status != LeaseStatus.ACTIVE.value or now >= lease.ends_at:
            terms.case = "ended"
            until = (f" on {local_text(lease.ends_at, p.settings.zone)}" if lease is not None
                     else "")
            terms.summary = f"The lease ended{until}; nothing is refunded."
            return terms
        periods = lease_periods.paid_periods(s, lease.id)
        current = current_period(periods, now)
        terms.paid_until = current.ends_at if current is not None else None
        paid = sum((x.price for x in periods), ZERO)
        granted = lease_periods.refund_granted_by(s, inst.id)
        if granted is not None:
            terms.case, terms.ticket_id = "fault", granted
            todo, ahead, unused = unused_refund(periods, now)
            terms.refund, terms.fee_percent = ahead + unused, ZERO
            terms.periods_refunded = len(todo)
            terms.kept = paid - terms.refund
            terms.summary = (f"Ticket {granted} found a fault with no spare: the unused time "
                             f"comes back in full, ¥{terms.refund:,.2f}, no fee.")
            return terms
        terms.case = "early_end"
        todo, refund = early_end_refund(periods, now, fee)
        terms.refund, terms.periods_refunded = refund, len(todo)
        terms.kept = paid - sum((x.price for x in todo), ZERO)
        kept = (f"The current {current.term} stays paid (to "
                f"{local_text(current.ends_at, p.settings.zone)}): ¥{terms.kept:,.2f} is kept."
                if current is not None else f"¥{terms.kept:,.2f} is kept.")
        back = (f" {len(todo)} period(s) not begun come back less the {fee.normalize():f}% "
                 f"early-termination fee: ¥{refund:,.2f} refunded." if todo
                 else " No period is left unbegun: nothing is refunded.")
        terms.summary = kept + back
        return terms
