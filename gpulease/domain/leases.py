"""Lease time: a bare-metal term starts at delivery, ends after its periods, then a grace
period, then erase. No I/O: the worker's lease sweep asks `next_action` what is due."""

from __future__ import annotations

import calendar
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from gpulease.domain.states import LeaseStatus


def add_months(start: datetime, months: int) -> datetime:
    """Calendar months: Jan 31 + 1 month = Feb 28 (or 29); the time of day is kept."""
    month = start.month - 1 + months
    year = start.year + month // 12
    month = month % 12 + 1
    day = min(start.day, calendar.monthrange(year, month)[1])
    return start.replace(year=year, month=month, day=day)


def term_end(start: datetime, term: str, periods: int) -> datetime:
    if periods < 1:
        raise ValueError("a lease runs for at least one period")
    if term == "day":
        return start + timedelta(days=periods)
    if term == "month":
        return add_months(start, periods)
    if term == "year":
        return add_months(start, 12 * periods)
    if term == "hour":
        return start + timedelta(hours=periods)
    raise ValueError(f"unknown term {term!r}")


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
