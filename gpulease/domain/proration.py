"""Splitting an amount into parts that sum to it exactly: usage that crosses a month's end
is billed in both months, pro rata by time, and the parts always add up to the whole."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from decimal import ROUND_FLOOR, Decimal

from gpulease.domain.money import FEN, to_fen


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


def month_start(at: datetime) -> datetime:
    at = at.astimezone(UTC)
    return datetime(at.year, at.month, 1, tzinfo=UTC)


def next_month(start: datetime) -> datetime:
    return datetime(start.year + (start.month == 12), start.month % 12 + 1, 1, tzinfo=UTC)


def period_of(at: datetime) -> str:
    """The invoice period (UTC calendar month) a moment belongs to, as 'YYYY-MM'."""
    at = at.astimezone(UTC)
    return f"{at.year:04d}-{at.month:02d}"


def period_bounds(period: str) -> tuple[datetime, datetime]:
    """[start, end) of a 'YYYY-MM' period; ValueError naming the expected form."""
    try:
        year, month = (int(x) for x in period.split("-"))
        start = datetime(year, month, 1, tzinfo=UTC)
    except ValueError:
        raise ValueError(f"A period is a month written YYYY-MM (e.g. 2026-11), not "
                         f"{period!r}.") from None
    if len(period) != 7:
        raise ValueError(f"A period is a month written YYYY-MM (e.g. 2026-11), not {period!r}.")
    return start, next_month(start)


def split_by_month(start: datetime, end: datetime) -> list[tuple[datetime, datetime]]:
    """[start, end) cut at each month's start: the pieces, in order."""
    if end <= start:
        return [(start, end)]
    pieces, cursor = [], start
    while cursor < end:
        cut = min(next_month(month_start(cursor)), end)
        pieces.append((cursor, cut))
        cursor = cut
    return pieces


def prorate_by_month(amount: Decimal, start: datetime, end: datetime
                     ) -> list[tuple[datetime, datetime, Decimal]]:
    """(piece start, piece end, part) for each month [start, end) touches; the parts sum
    to `amount` exactly. A zero-length span stays whole."""
    pieces = split_by_month(start, end)
    if len(pieces) == 1:
        return [(pieces[0][0], pieces[0][1], to_fen(amount))]
    weights = [Decimal(int((b - a).total_seconds() * 1_000_000)) for a, b in pieces]
    return [(a, b, part) for (a, b), part in zip(pieces, allocate(amount, weights),
                                                 strict=True)]
