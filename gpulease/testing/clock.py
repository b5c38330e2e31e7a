"""Clocks a test moves by hand: the platform reads `now()` wherever it asks the time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta


class MovableClock:
    """Stands still at `at` until moved."""

    def __init__(self, start: datetime) -> None:
        self.at = start

    def now(self) -> datetime:
        return self.at

    def move(self, **delta: float) -> None:
        self.at += timedelta(**delta)


class LeapingClock:
    """The real time, plus a leap a test adds (a lock's TTL passed without waiting)."""

    def __init__(self) -> None:
        self.leap = timedelta(0)

    def now(self) -> datetime:
        return datetime.now(UTC) + self.leap
