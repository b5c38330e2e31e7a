"""Bare-metal leases as their tenant sees them: the term, renewals, auto-renew. The term
starts at delivery (an effect of the instance's `deliver`, lifecycle/writer.py), not at
order. Each renewal adds periods of its own term and price after the current ones
(services/money/lease_periods.py); the lease's base term and price stay the order's. No
automatic renewal unless the tenant turns it on; reminders before expiry; a grace period in
which the machine stays (flagged) and renewing cancels the erase; after grace the instance
is released and its disks erased with certificates (the worker's lease sweep,
worker/jobs/money/leases.py). A price change never alters a running lease: the unit price is
fixed when the lease starts and kept for renewals of the same term."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpulease.db.money_tables import Lease
from gpulease.db.repositories import get_instance
from gpulease.db.tables import Instance
from gpulease.domain.accounts import Principal
from gpulease.domain.billing.leases import Period, local_text
from gpulease.domain.billing.money import to_fen
from gpulease.domain.billing.pricing import PricingError
from gpulease.domain.catalog import Term
from gpulease.domain.errors import Conflict, InvalidInput
from gpulease.domain.phrases import Phrase, phrase, stored
from gpulease.domain.states import LEASE, InstanceStatus, LeaseStatus
from gpulease.lifecycle.history import by, note
from gpulease.lifecycle.writer import Move, transition
from gpulease.ports.records import Driven, Moves, Priced, Records
from gpulease.schemas.money import LeaseView, RenewalLineView, RenewalQuoteView, RenewRequest
from gpulease.services.money import addons, lease_periods
from gpulease.services.money.budgets import budget_of, check_spend
from gpulease.services.money.wallet import Charge, charge, first_hold, first_period_amount
from gpulease.services.platform.idempotency import idem_for, remember, replay


def _current_price(p: Priced, inst: Instance, term: str) -> Decimal:
    try:
        return first_period_amount(p, inst, term)
    except PricingError as exc:
        raise InvalidInput("term", exc.phrase, exc.accepted) from None


def _lease(s: Session, inst: Instance, lock: bool = False) -> Lease:
    q = select(Lease).where(Lease.instance_id == inst.id)
    lease = s.scalar(q.with_for_update() if lock else q)
    if lease is None:
        raise Conflict(phrase("Instance {instance} has no lease yet: a lease starts at "
                              "delivery (containers are billed by the hour).", instance=inst.id)
                       if inst.kind == "container" else
                       phrase("Instance {instance} has no lease yet: a lease starts at "
                              "delivery.", instance=inst.id))
    return lease


def find_lease(s: Session, instance_id: str) -> Lease | None:
    return s.scalar(select(Lease).where(Lease.instance_id == instance_id))


def view(s: Session, p: Records, lease: Lease) -> LeaseView:
    return LeaseView(instance_id=lease.instance_id, term=lease.term,
                     unit_price=lease.unit_price, periods=lease.periods,
                     starts_at=lease.starts_at, ends_at=lease.ends_at,
                     grace_until=lease.grace_until, status=lease.status,
                     auto_renew=lease.auto_renew, grace_days=p.settings.lease_grace_days,
                     reminders_sent=[r for r in lease.reminders_sent.split(",") if r],
                     time_zone=p.settings.time_zone,
                     schedule=lease_periods.schedule(s, lease.id))


def show_lease(p: Records, actor: Principal, instance_id: str) -> LeaseView:
    with p.db.read() as s:
        return view(s, p, _lease(s, get_instance(s, actor, instance_id)))


def set_auto_renew(p: Records, actor: Principal, instance_id: str, on: bool) -> LeaseView:
    actor.require_order_rights()
    with p.db.write() as s:
        lease = _lease(s, get_instance(s, actor, instance_id), lock=True)
        lease.auto_renew, lease.updated_at = on, p.clock.now()
        return view(s, p, lease)


def _renewal(s: Session, p: Priced, inst: Instance, lease: Lease, periods: int, term: str
             ) -> tuple[Decimal, list[addons.PeriodCharge], Decimal, list[Period]]:
    """What `periods` × `term` after the current ones would cost: (the servers' price per
    period, the add-ons' lines per period, servers and add-ons per period, the periods).
    The base term: the lease's own price (the order's); the ordered term of a lease from
    before: the price the order held; another term (day ↔ month): today's price book."""
    held = first_hold(s, inst.id) if term == inst.term else None
    if term == lease.term:
        price = lease.unit_price
    elif held is not None:
        price = held
    else:
        price = _current_price(p, inst, term)
    # The add-ons on when the new periods start, each period's share on its own line.
    extras = addons.period_lines(s, p, inst, lease.ends_at, term)
    per_period = to_fen(price + sum((x.amount for x in extras), Decimal(0)))
    added = lease_periods.plan(s, lease, term, per_period, periods, p.settings.zone)
    return price, extras, per_period, added


@dataclass(frozen=True)
class Renewal:
    """`periods` more of `term`, why (`by`: renewed by its tenant, or automatically) and by
    whom."""

    periods: int
    term: str
    by: Phrase
    actor: str


def extend(s: Session, p: Moves, inst: Instance, lease: Lease, renewal: Renewal,
           now: datetime) -> None:
    """Charge and add `periods` of `term` after the current ones (priced by _renewal).
    The lease's base term and price never change. Raises PaymentRequired with nothing
    written when short."""
    periods, term, by, actor = renewal.periods, renewal.term, renewal.by, renewal.actor
    price, extras, per_period, added = _renewal(s, p, inst, lease, periods, term)
    charge(s, inst.tenant_id, Charge(
        to_fen(price * periods), phrase("renewal of {instance}: {periods} {term}(s) ({by})",
                                        instance=inst.id, periods=periods, term=phrase(term),
                                        by=by),
        inst.id, service=(added[0].starts_at, added[-1].ends_at),
        extras=[x.line(periods) for x in extras], quantity=Decimal(periods), unit=term,
        unit_price=price), now)
    amount = to_fen(per_period * periods)  # the servers and their add-ons, for the text
    was = lease.status
    lease_periods.add(s, lease, added)
    lease.grace_until = None
    lease.reminders_sent = ""
    facts = {"periods": periods, "term": phrase(term),
             "until": local_text(lease.ends_at, p.settings.zone), "amount": amount, "by": by}
    text = phrase("{periods} × {term} to {until} (¥{amount:,.2f}, {by}); the erase after "
                  "grace is cancelled", **facts) if was == LeaseStatus.GRACE.value else phrase(
                  "{periods} × {term} to {until} (¥{amount:,.2f}, {by})", **facts)
    transition(s, p, lease, LEASE, "renew", Move(now, actor=actor, reason=str(text)))
    note(s, now, inst.id, "renewed", text, actor=actor)


def _renewal_args(periods: int, term: str | None) -> None:
    if periods < 1 or periods > 36:
        raise InvalidInput("periods", "Renew by 1 to 36 periods, not {periods}.", periods=periods)
    if term is not None and term not in (Term.DAY.value, Term.MONTH.value, Term.YEAR.value):
        raise InvalidInput("term", "Bare metal is not leased by the {term!r}.",
                           [Term.DAY.value, Term.MONTH.value, Term.YEAR.value], term=term)


def _renewable(inst: Instance, lease: Lease) -> None:
    if lease.status == LeaseStatus.ENDED.value or inst.status != InstanceStatus.READY.value:
        raise Conflict("The lease of {instance} has ended (instance {status}); order "
                       "a new machine.", instance=inst.id, status=inst.status)


def renewal_quote(p: Priced, actor: Principal, instance_id: str, periods: int = 1,
                  term: str | None = None) -> RenewalQuoteView:
    """What a renewal would charge and until when, as `renew` would do it (nothing
    written): shown before the tenant confirms."""
    _renewal_args(periods, term)
    with p.db.read() as s:
        inst = get_instance(s, actor, instance_id)
        lease = _lease(s, inst)
        _renewable(inst, lease)
        term = term or lease.term
        price, extras, per_period, added = _renewal(s, p, inst, lease, periods, term)
        servers = phrase("{sku} × {nodes} · {term}", sku=inst.sku, nodes=inst.node_count,
                         term=phrase(term))
        lines = [RenewalLineView(item=str(servers), phrase=stored(servers)[1],
                                 quantity=periods, unit_price=price,
                                 amount=to_fen(price * periods))]
        lines += [RenewalLineView(item=str(x.item), phrase=stored(x.item)[1], quantity=periods,
                                  unit_price=x.amount, amount=to_fen(x.amount * periods))
                  for x in extras]
        return RenewalQuoteView(
            instance_id=inst.id, periods=periods, term=term, per_period=per_period,
            total=to_fen(per_period * periods), lines=lines, starts_at=added[0].starts_at,
            ends_at=added[-1].ends_at, cancels_erase=lease.status == LeaseStatus.GRACE.value)


def renew(p: Driven, actor: Principal, instance_id: str, periods: int = 1,
          term: str | None = None, once: str | None = None) -> LeaseView:
    """Charge `periods` more of the lease. `once`: a key the same renewal is done under at
    most once (a console form resubmitted by the back button or F5 renews once)."""
    actor.require_order_rights()
    _renewal_args(periods, term)
    now = p.clock.now()
    idem = idem_for(once, f"renew:{instance_id}",
                    RenewRequest(periods=periods, term=term)) if once else None
    if idem is not None and (done := replay(p, actor, idem, LeaseView)) is not None:
        return done
    with p.db.write() as s:
        inst = get_instance(s, actor, instance_id, lock=True)
        lease = _lease(s, inst, lock=True)
        _renewable(inst, lease)
        extend(s, p, inst, lease, Renewal(periods, term or lease.term,
                                          phrase("renewed by tenant"), by(actor)), now)
        budget = budget_of(s, inst.tenant_id)
        if budget is not None:  # the renewal's charge taken, under the wallet's lock
            check_spend(s, p, inst.tenant_id, budget, phrase("renewal"), now)
        answer = view(s, p, lease)
        if idem is not None:
            remember(s, p, actor, idem, answer)
        return answer


