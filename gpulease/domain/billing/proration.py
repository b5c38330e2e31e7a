"""Splitting an amount into parts that sum to it exactly: usage that crosses a month's end
is billed in both months, pro rata by time, and the parts always add up to the whole.
Months are the platform's calendar months (its time zone: an invoice of March in Beijing
runs from Mar 1 00:00 there, Feb 28 16:00 UTC)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, tzinfo
from decimal import ROUND_FLOOR, Decimal

from gpulease.domain.billing.money import FEN, to_fen


def allocate(amount: Decimal, weights: Sequence[Decimal | int | float]) -> list[Decimal]:
    """Parts of `amount` (already in fen) proportional to `weights`, each in fen, summing
    to `amount` exactly: every part is rounded down, then the fen left over go one each to
    the parts with the largest remainders (ties to the earlier part)."""
    amount = to_fen(amount)
    ws = [Decimal(str(w)) for w in weights]
    if not ws or any(w < 0 for w in ws) or sum(ws) == 0:
        raise ValueError("allocate needs at least one weight, none negative, not all zero")
    total_w = sum(ws)
    sign = Decimal(-1) if amount < 0 else Decimal(1)
    whole = abs(amount)
    exact = [whole * w / total_w for w in ws]
    parts = [e.quantize(FEN, rounding=ROUND_FLOOR) for e in exact]
    left = int((whole - sum(parts)) / FEN)
    order = sorted(range(len(ws)), key=lambda i: (-(exact[i] - parts[i]), i))
    for i in order[:left]:
        parts[i] += FEN
    return [sign * p for p in parts]


def month_start(at: datetime, tz: tzinfo) -> datetime:
    """The start of the calendar month (in `tz`) that `at` falls in, as a UTC instant."""
    local = at.astimezone(tz)
    return datetime(local.year, local.month, 1, tzinfo=tz).astimezone(UTC)


def next_month(start: datetime, tz: tzinfo) -> datetime:
    """The start of the month after the one `start` falls in (in `tz`), as a UTC instant."""
    local = start.astimezone(tz)
    return datetime(local.year + (local.month == 12), local.month % 12 + 1, 1,
                    tzinfo=tz).astimezone(UTC)


def period_of(at: datetime, tz: tzinfo) -> str:
    """The invoice period (calendar month in `tz`) a moment belongs to, as 'YYYY-MM'."""
    local = at.astimezone(tz)
    return f"{local.year:04d}-{local.month:02d}"


def previous_period(at: datetime, tz: tzinfo) -> str:
    """The month before the one `at` falls in: the one a run on the 1st bills."""
    local = at.astimezone(tz)
    return f"{local.year - (local.month == 1):04d}-{(local.month - 2) % 12 + 1:02d}"


def period_bounds(period: str, tz: tzinfo) -> tuple[datetime, datetime]:
    """[start, end) of a 'YYYY-MM' period in `tz`, as UTC instants; ValueError naming the
    expected form."""
    try:
        year, month = (int(x) for x in period.split("-"))
        start = datetime(year, month, 1, tzinfo=tz).astimezone(UTC)
    except ValueError:
        raise ValueError(f"A period is a month written YYYY-MM (e.g. 2026-11), not "
                         f"{period!r}.") from None
    if len(period) != 7:
        raise ValueError(f"A period is a month written YYYY-MM (e.g. 2026-11), not {period!r}.")
    return start, next_month(start, tz)


def split_by_month(start: datetime, end: datetime, tz: tzinfo
                   ) -> list[tuple[datetime, datetime]]:
    """[start, end) cut at each month's start (in `tz`): the pieces, in order."""
    if end <= start:
        return [(start, end)]
    pieces, cursor = [], start
    while cursor < end:
        cut = min(next_month(cursor, tz), end)
        pieces.append((cursor, cut))
        cursor = cut
    return pieces


def prorate_by_month(amount: Decimal, start: datetime, end: datetime, tz: tzinfo
                     ) -> list[tuple[datetime, datetime, Decimal]]:
    """(piece start, piece end, part) for each month (in `tz`) [start, end) touches; the
    parts sum to `amount` exactly. A zero-length span stays whole."""
    pieces = split_by_month(start, end, tz)
    if len(pieces) == 1:
        return [(pieces[0][0], pieces[0][1], to_fen(amount))]
    weights = [Decimal(int((b - a).total_seconds() * 1_000_000)) for a, b in pieces]
    return [(a, b, part) for (a, b), part in zip(pieces, allocate(amount, weights),
                                                 strict=True)]
