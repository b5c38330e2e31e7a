"""A lease's periods in the database: the first at delivery, more at each renewal (each
with its own term, price and dates, anchored as domain/billing/leases.py counts them), and the
refund of those not begun when the lease ends early."""

from __future__ import annotations

from datetime import datetime, tzinfo
from decimal import Decimal

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpulease.db.money_tables import Lease, LeasePeriod
from gpulease.db.ops_tables import Ticket
from gpulease.db.tables import Instance
from gpulease.domain.billing.leases import (
    Period,
    early_end_refund,
    first_period,
    following_periods,
    unused_refund,
)
from gpulease.domain.phrases import Phrase, listed, phrase
from gpulease.lifecycle.history import note
from gpulease.schemas.money import LeasePeriodView
from gpulease.services.money.wallet import Entry, post, wallet_for_update


def _period(row: LeasePeriod) -> Period:
    return Period(seq=row.seq, term=row.term, price=row.price, anchor=row.anchor_at,
                  index=row.run_index, starts_at=row.starts_at, ends_at=row.ends_at)


def _row(lease: Lease, p: Period) -> LeasePeriod:
    return LeasePeriod(lease_id=lease.id, seq=p.seq, term=p.term, price=p.price,
                       anchor_at=p.anchor, run_index=p.index, starts_at=p.starts_at,
                       ends_at=p.ends_at, refunded_at=None)


def rows_of(s: Session, lease_id: str) -> list[LeasePeriod]:
    return list(s.scalars(select(LeasePeriod).where(LeasePeriod.lease_id == lease_id)
                          .order_by(LeasePeriod.seq)))


def paid_periods(s: Session, lease_id: str) -> list[Period]:
    """The lease's periods still paid for (not refunded), in order."""
    return [_period(r) for r in rows_of(s, lease_id) if r.refunded_at is None]


def start(s: Session, lease: Lease, tz: tzinfo, price: Decimal | None = None) -> Period:
    """The first period, from the lease's start at its base term; it cost `price` (the
    servers and add-ons the order held; default: the lease's base price)."""
    first = first_period(lease.starts_at, lease.term,
                         lease.unit_price if price is None else price, tz)
    s.add(_row(lease, first))
    return first


def plan(s: Session, lease: Lease, term: str, price: Decimal, count: int, tz: tzinfo
         ) -> list[Period]:
    """The periods a renewal by `count` × `term` at `price` would add (nothing written)."""
    last = s.scalar(select(LeasePeriod).where(LeasePeriod.lease_id == lease.id)
                    .order_by(LeasePeriod.seq.desc()).limit(1))
    assert last is not None  # every lease has its first period (migration 0021 for old ones)
    return following_periods(_period(last), term, price, count, tz)


def add(s: Session, lease: Lease, periods: list[Period]) -> None:
    for p in periods:
        s.add(_row(lease, p))
    lease.ends_at = periods[-1].ends_at
    lease.periods += len(periods)


def refund_granted_by(s: Session, instance_id: str) -> str | None:
    """The ticket that found a fault the platform could not replace on this instance (its
    release then refunds the unused time in full, no fee), if any."""
    return s.scalar(select(Ticket.id).where(Ticket.instance_id == instance_id,
                                            Ticket.refund_unused_at.is_not(None)).limit(1))


def refund_unstarted(s: Session, inst: Instance, lease: Lease, fee_percent: Decimal,
                     now: datetime, *, actor: str) -> Decimal:
    """An early end: the periods not begun are refunded, less the fee, and marked so. A
    started period stays paid whatever its term."""
    rows = {r.seq: r for r in rows_of(s, lease.id) if r.refunded_at is None}
    todo, refund = early_end_refund([_period(r) for r in rows.values()], now, fee_percent)
    for p in todo:
        rows[p.seq].refunded_at = now
    if refund > 0:
        terms = listed([phrase("{term} from {day}", term=phrase(p.term),
                                day=f"{p.starts_at:%Y-%m-%d}") for p in todo[:3]], ", ")
        if len(todo) > 3:
            terms = phrase("{terms} and {more} more", terms=terms, more=len(todo) - 3)
        paid = sum((p.price for p in todo), Decimal("0.00"))
        text = phrase("early end of {instance}: {periods} period(s) not begun ({terms}), "
                      "¥{paid:,.2f} paid, less {fee:f}%", instance=inst.id, periods=len(todo),
                      terms=terms, paid=paid, fee=fee_percent.normalize())
        wallet = wallet_for_update(s, inst.tenant_id, now)
        # the periods not begun are refunded in full over their own span (their revenue
        # is reversed where it was to be earned) and the fee kept is charged at the end:
        # it is earned when the contract ends, not over months no service was given in
        post(s, wallet, Entry(
            "refund", paid, text, inst.id,
            item=phrase("Early termination refund: {instance}", instance=inst.id),
            quantity=Decimal(len(todo)), unit="period",
            service=(min(p.starts_at for p in todo), max(p.ends_at for p in todo))), now)
        if paid > refund:
            post(s, wallet, Entry(
                "charge", refund - paid, text, inst.id,
                item=phrase("Early termination fee: {instance}", instance=inst.id),
                quantity=Decimal(1), unit="lease", service=(now, now)), now)
        note(s, now, inst.id, "refund", phrase("¥{refund:,.2f} refunded: {text}", refund=refund,
        text=text), actor=actor)
    return refund


def refund_unused(s: Session, inst: Instance, lease: Lease, now: datetime, why: str | Phrase, *,
                  actor: str) -> Decimal:
    """The platform could not keep serving (a fault, no spare): every period not begun and
    the rest of the current one come back in full, no fee; those periods are marked."""
    rows = {r.seq: r for r in rows_of(s, lease.id) if r.refunded_at is None}
    todo, ahead, unused = unused_refund([_period(r) for r in rows.values()], now)
    for p in todo:
        rows[p.seq].refunded_at = now
    refund = ahead + unused
    if refund > 0:
        text = phrase("unused time of {instance} refunded in full ({why}): ¥{unused:,.2f} of "
                      "the current period, ¥{ahead:,.2f} for {periods} period(s) not begun",
                      instance=inst.id, why=why, unused=unused, ahead=ahead, periods=len(todo))
        post(s, wallet_for_update(s, inst.tenant_id, now), Entry(
            "refund", refund, text, inst.id,
            item=phrase("Refund of unused time: {instance}", instance=inst.id),
            quantity=Decimal(1), unit="lease",
            # from now to the end of what was paid: revenue stops being earned at the end
            service=(now, max([lease.ends_at, *(p.ends_at for p in todo)]))), now)
        note(s, now, inst.id, "refund", phrase("¥{refund:,.2f} refunded: {text}", refund=refund,
        text=text), actor=actor)
    return refund


def schedule(s: Session, lease_id: str) -> list[LeasePeriodView]:
    return [LeasePeriodView(seq=r.seq, term=r.term, price=r.price, starts_at=r.starts_at,
                            ends_at=r.ends_at, refunded=r.refunded_at is not None)
            for r in rows_of(s, lease_id)]
