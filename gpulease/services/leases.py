"""Bare-metal leases: the term starts at delivery, not at order. No automatic renewal
unless the tenant turns it on; reminders before expiry; a grace period in which the machine
stays (flagged) and renewing cancels the erase; after grace the instance is released and
its disks erased with certificates. A price change never alters a running lease: the unit
price is fixed when the lease starts and kept for renewals of the same term."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from decimal import Decimal

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpulease.db.repositories import get_instance
from gpulease.db.tables import Instance, Lease, LeaseNotice
from gpulease.domain.accounts import Principal
from gpulease.domain.catalog import Term
from gpulease.domain.errors import Conflict, InvalidInput, PaymentRequired
from gpulease.domain.leases import Action, LeaseStatus, next_action, term_end
from gpulease.domain.money import to_fen
from gpulease.domain.pricing import PricingError
from gpulease.domain.states import InstanceStatus
from gpulease.platform import Platform
from gpulease.schemas import LeaseView
from gpulease.services.status import record_event, switch_instance_status
from gpulease.services.wallet import charge, first_hold, first_period_amount, refund_early_end

LEASED_KINDS = ("bare_metal", "cluster")


def on_delivered(s: Session, inst: Instance, now: datetime) -> None:
    """Start the lease at delivery, at the price the order held (an instance ordered
    before wallets existed holds nothing and gets no lease)."""
    if inst.kind not in LEASED_KINDS or s.scalar(
            select(Lease.id).where(Lease.instance_id == inst.id)):
        return
    price = first_hold(s, inst.id)
    if price is None:
        return
    s.add(Lease(id=uuid.uuid4().hex[:16], instance_id=inst.id, tenant_id=inst.tenant_id,
                term=inst.term, unit_price=price, starts_at=now,
                ends_at=term_end(now, inst.term, 1), status=LeaseStatus.ACTIVE.value,
                auto_renew=False, periods=1, reminders_sent="", updated_at=now))


def _current_price(p: Platform, inst: Instance, term: str) -> Decimal:
    try:
        return first_period_amount(p, inst, term)
    except PricingError as exc:
        raise InvalidInput("term", str(exc), exc.accepted) from None


def _lease(s: Session, inst: Instance, lock: bool = False) -> Lease:
    q = select(Lease).where(Lease.instance_id == inst.id)
    lease = s.scalar(q.with_for_update() if lock else q)
    if lease is None:
        raise Conflict(f"Instance {inst.id} has no lease yet: a lease starts at delivery"
                       + (" (containers are billed by the hour)"
                          if inst.kind == "container" else "") + ".")
    return lease


def view(lease: Lease, grace_days: float) -> LeaseView:
    return LeaseView(instance_id=lease.instance_id, term=lease.term,
                     unit_price=lease.unit_price, periods=lease.periods,
                     starts_at=lease.starts_at, ends_at=lease.ends_at,
                     grace_until=lease.grace_until, status=lease.status,
                     auto_renew=lease.auto_renew, grace_days=grace_days,
                     reminders_sent=[r for r in lease.reminders_sent.split(",") if r])


def show_lease(p: Platform, actor: Principal, instance_id: str) -> LeaseView:
    with p.db.read() as s:
        return view(_lease(s, get_instance(s, actor, instance_id)), p.settings.lease_grace_days)


def set_auto_renew(p: Platform, actor: Principal, instance_id: str, on: bool) -> LeaseView:
    actor.require_order_rights()
    with p.db.write() as s:
        lease = _lease(s, get_instance(s, actor, instance_id), lock=True)
        lease.auto_renew, lease.updated_at = on, p.clock.now()
        return view(lease, p.settings.lease_grace_days)


def _extend(s: Session, p: Platform, inst: Instance, lease: Lease, periods: int, term: str,
            now: datetime, by: str) -> None:
    """Charge and extend. Same term: the lease's own price; a switched term (day ↔ month):
    today's price book. Raises PaymentRequired with nothing written when short."""
    price = lease.unit_price if term == lease.term else _current_price(p, inst, term)
    amount = to_fen(price * periods)
    charge(s, inst.tenant_id, amount, now, instance_id=inst.id,
           reference=f"renewal of {inst.id}: {periods} {term}(s) ({by})")
    was = lease.status
    lease.ends_at = term_end(lease.ends_at, term, periods)
    if term != lease.term:
        lease.term, lease.unit_price = term, price
    lease.periods += periods
    lease.status, lease.grace_until = LeaseStatus.ACTIVE.value, None
    lease.reminders_sent, lease.updated_at = "", now
    record_event(s, now, "instance", inst.id, "stage", instance_id=inst.id, to_value="renewed",
                 message=f"{periods} {term}(s) to {lease.ends_at:%Y-%m-%d %H:%M} UTC "
                         f"(¥{amount:,.2f}, {by})"
                         + ("; the erase after grace is cancelled" if was == "grace" else ""))


def renew(p: Platform, actor: Principal, instance_id: str, periods: int = 1,
          term: str | None = None) -> LeaseView:
    actor.require_order_rights()
    if periods < 1 or periods > 36:
        raise InvalidInput("periods", f"Renew by 1 to 36 periods, not {periods}.")
    if term is not None and term not in (Term.DAY.value, Term.MONTH.value, Term.YEAR.value):
        raise InvalidInput("term", f"Bare metal is not leased by the {term!r}.",
                           [Term.DAY.value, Term.MONTH.value, Term.YEAR.value])
    now = p.clock.now()
    with p.db.write() as s:
        inst = get_instance(s, actor, instance_id, lock=True)
        lease = _lease(s, inst, lock=True)
        if lease.status == LeaseStatus.ENDED.value or inst.status != InstanceStatus.READY.value:
            raise Conflict(f"The lease of {inst.id} has ended (instance {inst.status}); order "
                           "a new machine.")
        _extend(s, p, inst, lease, periods, term or lease.term, now, "renewed by tenant")
        return view(lease, p.settings.lease_grace_days)


def end_early(s: Session, p: Platform, inst: Instance, now: datetime) -> None:
    """The tenant hands the machine back before the lease ends: refund the unused whole
    periods by the early-termination policy, and end the lease."""
    lease = s.scalar(select(Lease).where(Lease.instance_id == inst.id).with_for_update())
    if lease is None or lease.status == LeaseStatus.ENDED.value:
        return
    if lease.status == LeaseStatus.ACTIVE.value and now < lease.ends_at:
        refund_early_end(s, inst, lease.term, lease.ends_at, lease.unit_price,
                         p.catalog.pricing.early_termination_fee_percent, now)
    lease.status, lease.updated_at = LeaseStatus.ENDED.value, now


def on_released(s: Session, inst: Instance, now: datetime) -> None:
    lease = s.scalar(select(Lease).where(Lease.instance_id == inst.id).with_for_update())
    if lease is not None and lease.status != LeaseStatus.ENDED.value:
        lease.status, lease.updated_at = LeaseStatus.ENDED.value, now


# --- the sweep -----------------------------------------------------------------------------

def _notice(s: Session, lease: Lease, kind: str, now: datetime, text: str) -> None:
    """A reminder for the outbox (e-mail and webhook delivery read it)."""
    s.add(LeaseNotice(lease_id=lease.id, tenant_id=lease.tenant_id,
                      instance_id=lease.instance_id, kind=kind, created_at=now, text=text))
    lease.reminders_sent = ",".join(r for r in (*lease.reminders_sent.split(","), kind) if r)


def sweep_leases(p: Platform, limit: int = 200) -> int:
    """Do what is due on active and grace leases; returns how many leases moved."""
    now = p.clock.now()
    grace = timedelta(days=p.settings.lease_grace_days)
    with p.db.read() as s:
        ids = list(s.scalars(select(Lease.id).where(
            Lease.status.in_((LeaseStatus.ACTIVE.value, LeaseStatus.GRACE.value)),
            Lease.ends_at <= now + timedelta(days=7)).order_by(Lease.ends_at).limit(limit)))
    moved = 0
    for lease_id in ids:
        with p.db.write() as s:
            lease = s.get(Lease, lease_id, with_for_update=True)
            if lease is None:
                continue
            inst = s.get(Instance, lease.instance_id, with_for_update=True)
            assert inst is not None
            sent = frozenset(r for r in lease.reminders_sent.split(",") if r)
            due = next_action(LeaseStatus(lease.status), lease.ends_at, lease.grace_until,
                              lease.auto_renew, now, sent)
            if due.action == Action.NOTHING:
                continue
            moved += 1
            ends = f"{lease.ends_at:%Y-%m-%d %H:%M} UTC"
            if due.action == Action.REMIND and due.reminder:
                _notice(s, lease, due.reminder, now,
                        f"Your lease of {inst.id} ({inst.sku}) ends {ends}. Renew it, or back "
                        f"up your data: {p.settings.lease_grace_days:g} days after the end the "
                        "disks are erased.")
            elif due.action == Action.RENEW:
                try:
                    with s.begin_nested():
                        _extend(s, p, inst, lease, 1, lease.term, now, "automatic renewal")
                except PaymentRequired as exc:  # remind, then grace as without it
                    _enter_grace(s, p, lease, inst, now, grace,
                                 f"automatic renewal failed: {exc}")
            elif due.action == Action.ENTER_GRACE:
                _enter_grace(s, p, lease, inst, now, grace, None)
            elif due.action == Action.END:
                lease.status, lease.updated_at = LeaseStatus.ENDED.value, now
                _notice(s, lease, "erased", now,
                        f"The grace period of {inst.id} ended; its disks are being erased "
                        "and certified.")
                if inst.status == InstanceStatus.READY.value:
                    switch_instance_status(s, inst, InstanceStatus.RELEASING, now,
                                           "lease expired and grace ended")
                    inst.release_requested_at = now
                    inst.next_attempt_at = now
                    inst.lock_token, inst.lock_expires_at = None, None
    if moved:
        p.wake()
    return moved


def _enter_grace(s: Session, p: Platform, lease: Lease, inst: Instance, now: datetime,
                 grace: timedelta, why: str | None) -> None:
    lease.status = LeaseStatus.GRACE.value
    lease.grace_until = lease.ends_at + grace
    lease.updated_at = now
    text = (f"Your lease of {inst.id} expired {lease.ends_at:%Y-%m-%d %H:%M} UTC. The machine "
            f"stays until {lease.grace_until:%Y-%m-%d %H:%M} UTC; renew before then, or its "
            "disks are erased." + (f" ({why})" if why else ""))
    _notice(s, lease, "expiry", now, text)
    record_event(s, now, "instance", inst.id, "stage", instance_id=inst.id, to_value="grace",
                 message=text)
