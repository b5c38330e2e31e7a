"""The spending job: a tenant whose balance runs low is told once a day; a sweep with
nothing to say changes nothing."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

from gpulease.platform import Platform
from gpulease.testing.callers import new_tenant
from gpulease.testing.clock import MovableClock
from gpulease.testing.factories import container, notices
from gpulease.worker.jobs.money import spending
from gpulease.worker.runner import Worker

CAL = ZoneInfo("Asia/Shanghai")


def test_a_low_balance_is_told_once_a_day(fleet: Platform, worker: Worker, key: str) -> None:
    fleet.clock = clock = MovableClock(datetime(2026, 11, 10, 8, tzinfo=CAL))
    rich = new_tenant(fleet)
    poor = new_tenant(fleet, funds="50")
    container(fleet, poor, worker, key)  # ¥3.92 an hour on ¥46.08
    spending.JOB.run(fleet, "test")
    spending.JOB.run(fleet, "test")
    assert notices(fleet, poor.tenant_id) == ["low_balance"]
    assert notices(fleet, rich.tenant_id) == []
    clock.move(hours=25)
    spending.JOB.run(fleet, "test")
    assert notices(fleet, poor.tenant_id) == ["low_balance", "low_balance"]
