"""Lease time: a bare-metal term starts at delivery and runs through its periods (each
with its own term, price and dates), then a grace period, then erase. Calendar arithmetic
happens on the platform's wall clock (its time zone, default Asia/Shanghai): a month lease
delivered at 03:00 on Mar 1 in Beijing ends at 03:00 on Apr 1 there. No I/O: the worker's
lease sweep asks `next_action` what is due."""

from __future__ import annotations

import calendar
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from decimal import Decimal
from enum import StrEnum

from gpulease.domain.billing.money import to_fen
from gpulease.domain.states import LeaseStatus


def add_months(start: datetime, months: int) -> datetime:
    """Calendar months: Jan 31 + 1 month = Feb 28 (or 29); the time of day is kept."""
    month = start.month - 1 + months
    year = start.year + month // 12
    month = month % 12 + 1
    day = min(start.day, calendar.monthrange(year, month)[1])
    return start.replace(year=year, month=month, day=day)


def term_end(start: datetime, term: str, periods: int, tz: tzinfo) -> datetime:
    """The end of `periods` of `term` from `start`, counted on the wall clock of `tz` (days
    and months as a calendar there counts them), as a UTC instant."""
    if periods < 1:
        raise ValueError("a lease runs for at least one period")
    local = start.astimezone(tz)
    if term == "day":
        end = local + timedelta(days=periods)  # wall-clock days (same time of day)
    elif term == "month":
        end = add_months(local, periods)
    elif term == "year":
        end = add_months(local, 12 * periods)
    elif term == "hour":
        return start + timedelta(hours=periods)
    else:
        raise ValueError(f"unknown term {term!r}")
    return end.astimezone(UTC)


@dataclass(frozen=True)
class Period:
    """One paid period of a lease. Consecutive periods of the same term form a run counted
    from its first period's start, the anchor: monthly periods from Jan 31 end Feb 28,
    Mar 31, Apr 30 (never drifting to the 28th). `price` is what the period cost."""

    seq: int
    term: str
    price: Decimal
    anchor: datetime
    index: int  # its place in the run (1: the anchor's first period)
    starts_at: datetime
    ends_at: datetime


def first_period(start: datetime, term: str, price: Decimal, tz: tzinfo) -> Period:
    return Period(seq=1, term=term, price=to_fen(price), anchor=start, index=1,
                  starts_at=start, ends_at=term_end(start, term, 1, tz))


def following_periods(last: Period, term: str, price: Decimal, count: int, tz: tzinfo
                      ) -> list[Period]:
    """`count` periods of `term` after `last`: the same run when the term is the same,
    otherwise a new run anchored where `last` ends."""
    if count < 1:
        raise ValueError("renew by at least one period")
    anchor, index = (last.anchor, last.index) if term == last.term else (last.ends_at, 0)
    out: list[Period] = []
    start = last.ends_at
    for k in range(1, count + 1):
        end = term_end(anchor, term, index + k, tz)
        out.append(Period(seq=last.seq + k, term=term, price=to_fen(price), anchor=anchor,
                          index=index + k, starts_at=start, ends_at=end))
        start = end
    return out


def unstarted(periods: Sequence[Period], now: datetime) -> list[Period]:
    """The periods that have not begun at `now`: the only ones an early end refunds."""
    return [p for p in periods if p.starts_at >= now]


def early_end_refund(periods: Sequence[Period], now: datetime, fee_percent: Decimal
                     ) -> tuple[list[Period], Decimal]:
    """(unstarted periods, refund): what they cost less the fee. A started period stays
    paid, whatever its term: the refund never exceeds what was paid for periods not begun."""
    todo = unstarted(periods, now)
    paid = sum((p.price for p in todo), Decimal("0.00"))
    return todo, to_fen(paid * (100 - fee_percent) / 100)


def unused_refund(periods: Sequence[Period], now: datetime
                  ) -> tuple[list[Period], Decimal, Decimal]:
    """When the platform cannot serve the tenant any more (a fault with no spare): (the
    periods not begun, their price, the unused part of the current period's price pro
    rata), with no fee. Never more than was paid."""
    todo = unstarted(periods, now)
    ahead = sum((p.price for p in todo), Decimal("0.00"))
    current = current_period(periods, now)
    unused = Decimal("0.00")
    if current is not None:
        length = (current.ends_at - current.starts_at).total_seconds()
        left = (current.ends_at - now).total_seconds()
        if length > 0 and left > 0:
            unused = to_fen(current.price * Decimal(str(left)) / Decimal(str(length)))
    return todo, to_fen(ahead), min(unused, current.price) if current else unused


def current_period(periods: Sequence[Period], at: datetime) -> Period | None:
    """The period `at` falls in (None before the first or after the last)."""
    for p in periods:
        if p.starts_at <= at < p.ends_at:
            return p
    return None


def local_text(at: datetime, tz: tzinfo) -> str:
    """A moment as a tenant reads it: the platform's wall clock with its UTC offset."""
    local = at.astimezone(tz)
    offset = local.strftime("%z")
    return f"{local:%Y-%m-%d %H:%M} UTC{offset[:3]}:{offset[3:]}" if offset != "+0000" \
        else f"{local:%Y-%m-%d %H:%M} UTC"


REMINDER_DAYS = (7, 3, 1)  # before expiry; plus one at expiry


class Action(StrEnum):
    NOTHING = "nothing"
    REMIND = "remind"
    RENEW = "renew"  # auto-renew is on: try to renew from the balance
    ENTER_GRACE = "enter_grace"
    END = "end"  # grace is over: release and erase


@dataclass(frozen=True)
class Due:
    action: Action
    reminder: str | None = None  # "7d", "3d", "1d", "expiry"
    # Older reminders the one above supersedes (a late sweep): marked sent, never sent.
    superseded: tuple[str, ...] = ()


def reminders_due(ends_at: datetime, now: datetime,
                  sent: frozenset[str]) -> tuple[str | None, tuple[str, ...]]:
    """The reminder to send now, if any, and the older unsent ones it supersedes. Each is
    sent once; a late sweep sends only the latest one due, never a burst of stale ones."""
    due = [f"{d}d" for d in REMINDER_DAYS if now >= ends_at - timedelta(days=d)]
    if now >= ends_at:
        due.append("expiry")
    fresh = [r for r in due if r not in sent]
    if not fresh:
        return None, ()
    return fresh[-1], tuple(fresh[:-1])


def reminder_due(ends_at: datetime, now: datetime, sent: frozenset[str]) -> str | None:
    return reminders_due(ends_at, now, sent)[0]


def next_action(status: LeaseStatus, ends_at: datetime, grace_until: datetime | None,
                auto_renew: bool, now: datetime, reminders_sent: frozenset[str]) -> Due:
    if status == LeaseStatus.ENDED:
        return Due(Action.NOTHING)
    if status == LeaseStatus.ACTIVE:
        if now >= ends_at:
            if auto_renew:
                return Due(Action.RENEW)
            return Due(Action.ENTER_GRACE)
        reminder, superseded = reminders_due(ends_at, now, reminders_sent)
        return Due(Action.REMIND, reminder, superseded) if reminder else Due(Action.NOTHING)
    # grace
    assert grace_until is not None
    if now >= grace_until:
        return Due(Action.END)
    return Due(Action.NOTHING)
