"""Time comes through a port so tests and the demo can move it.

A running platform reads a `SteadyClock`: the wall time taken at an anchor plus the
monotonic time since, so a host's clock stepped back or forward (a bad NTP step, a VM
restored, an operator's `date -s`) moves no deadline, lock expiry or SLA measure. The
anchor follows the wall clock's slow corrections (within `step_bound_s`); a step larger
than that is not taken, and is said once (`stepped_s`). A worker on PostgreSQL anchors it to
the database's clock at each heartbeat (`anchor_to`), so every process measures time on
one clock (worker/runner.py)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Protocol

log = logging.getLogger("gpulease.clock")


class Clock(Protocol):
    def now(self) -> datetime:
        """The current time, timezone-aware UTC."""
        ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


def _wall() -> datetime:
    return datetime.now(UTC)


class SteadyClock:
    """The wall time at the last anchor, plus the monotonic time since."""

    def __init__(self, wall: Callable[[], datetime] = _wall,
                 monotonic: Callable[[], float] = time.monotonic,
                 step_bound_s: float = 5.0, follow_every_s: float = 60.0) -> None:
        self._wall, self._monotonic = wall, monotonic
        self.step_bound_s = step_bound_s
        self.follow_every_s = follow_every_s
        self._lock = threading.Lock()
        self.stepped_s: float | None = None  # how far the wall clock stands off, while it does
        self._at, self._since = wall(), monotonic()
        self._followed = self._since

    def now(self) -> datetime:
        with self._lock:
            t = self._monotonic()
            now = self._at + timedelta(seconds=t - self._since)
            if t - self._followed >= self.follow_every_s:
                self._followed = t
                now = self._follow(now, t)
            return now

    def _follow(self, now: datetime, t: float) -> datetime:
        """Take the wall clock's time when it agrees with ours within the bound (a slew);
        keep ours, and say so once, when it stepped away."""
        wall = self._wall()
        off = (wall - now).total_seconds()
        if abs(off) <= self.step_bound_s:
            if self.stepped_s is not None:
                log.warning("the host's clock agrees with the platform's again")
            self._at, self._since, self.stepped_s = wall, t, None
            return wall
        if self.stepped_s is None:
            log.error("the host's clock stepped %.1f s %s; deadlines, locks and SLA measures "
                      "keep counting from before the step (a worker on PostgreSQL takes the "
                      "database's time; restart to take the host's)", abs(off),
                      "ahead" if off > 0 else "back")
        self.stepped_s = off
        return now

    def anchor_to(self, reference: datetime) -> float:
        """Anchor at `reference` (the database's clock); returns how far ours stood from it
        (seconds; positive: ours was ahead)."""
        with self._lock:
            t = self._monotonic()
            off = (self._at + timedelta(seconds=t - self._since) - reference).total_seconds()
            self._at, self._since = reference, t
            return off
