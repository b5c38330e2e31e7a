"""The platform's steady clock: a step of the host's clock moves no measure of time; a slow
correction is followed; an anchor to the database's clock is taken whole."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gpulease.ports.clock import SteadyClock

T0 = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


class Host:
    def __init__(self) -> None:
        self.wall, self.elapsed = T0, 0.0

    def tick(self, seconds: float) -> None:
        self.wall += timedelta(seconds=seconds)
        self.elapsed += seconds


def test_a_step_back_of_the_host_s_clock_is_not_taken() -> None:
    host = Host()
    clock = SteadyClock(lambda: host.wall, lambda: host.elapsed, step_bound_s=5)
    host.tick(600)
    host.wall -= timedelta(hours=1)  # `date -s`, a VM restored, a bad NTP step
    host.tick(600)
    assert clock.now() == T0 + timedelta(minutes=20)
    assert clock.stepped_s is not None and round(clock.stepped_s) == -3600
    host.wall += timedelta(hours=1)  # NTP put it right
    host.tick(60)
    assert clock.now() == T0 + timedelta(minutes=21) and clock.stepped_s is None


def test_a_slow_correction_is_followed() -> None:
    host = Host()
    clock = SteadyClock(lambda: host.wall, lambda: host.elapsed, step_bound_s=5)
    host.tick(120)
    host.wall += timedelta(seconds=2)  # a slew within the bound
    assert clock.now() == T0 + timedelta(seconds=122) and clock.stepped_s is None


def test_anchored_to_the_database_s_clock() -> None:
    host = Host()
    clock = SteadyClock(lambda: host.wall - timedelta(hours=1), lambda: host.elapsed)
    assert clock.now() == T0 - timedelta(hours=1)  # started on a host an hour behind
    assert clock.anchor_to(T0) == -3600.0
    host.tick(30)
    assert clock.now() == T0 + timedelta(seconds=30)
