"""The container meter, a periodic job: each started GPU-hour after the first charged once,
across a month's end too, a dying worker losing nothing and billing nothing twice; a
container its balance cannot pay stopped."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy import func, select

from gpulease.db.money_tables import LedgerEntry, UsageRecord
from gpulease.platform import Platform
from gpulease.services.instances import actions
from gpulease.services.instances import views as instances
from gpulease.services.money import metering, wallet
from gpulease.services.money.wallet import ledger_sums_to_balance
from gpulease.testing.callers import TenantCtx, new_tenant
from gpulease.testing.clock import MovableClock
from gpulease.testing.factories import container
from gpulease.worker.jobs.money import meter as container_meter
from gpulease.worker.runner import Worker

CAL = ZoneInfo("Asia/Shanghai")


@pytest.fixture
def clock(fleet: Platform) -> MovableClock:
    """Twenty minutes before the month's last hour: the meter's hours cross its end."""
    c = MovableClock(datetime(2026, 11, 30, 22, 40, tzinfo=CAL))
    fleet.clock = c
    return c


def usage_entries(p: Platform, iid: str) -> list[LedgerEntry]:
    with p.db.read() as s:
        return list(s.scalars(select(LedgerEntry).where(
            LedgerEntry.instance_id == iid, LedgerEntry.kind == "usage")
            .order_by(LedgerEntry.id)))


def test_container_hours_are_charged_once_each_across_the_month_end(
    fleet: Platform, clock: MovableClock, tenant: TenantCtx, worker: Worker, key: str
) -> None:
    iid = container(fleet, tenant, worker, key)  # ready at 22:40: hour 0 is the held one
    assert container_meter.meter_containers(fleet) == 0
    clock.move(hours=3, minutes=10)  # hours 1, 2, 3 have started (23:40, 00:40, 01:40)
    assert container_meter.meter_containers(fleet) == 3
    assert container_meter.meter_containers(fleet) == 0  # a second sweep bills nothing
    rows = usage_entries(fleet, iid)
    # hour 1 crosses midnight of Nov 30: ¥3.92 split 20 / 40 minutes
    assert [r.amount for r in rows] == [Decimal("-1.31"), Decimal("-2.61"), Decimal("-3.92"),
                                        Decimal("-3.92")]
    assert rows[0].service_at == datetime(2026, 11, 30, 23, 40, tzinfo=CAL)
    assert rows[1].service_at == datetime(2026, 12, 1, tzinfo=CAL)
    page = metering.list_usage(fleet, tenant.principal, iid)
    assert page.total == 3 and all(u.amount == Decimal("3.92") for u in page.items)
    assert page.items[0].unit == "GPU-hour" and page.items[0].unit_price == Decimal("1.96")

    # released at 01:50: the hour that started at 01:40 was charged; nothing more
    actions.release_instance(fleet, tenant.principal, iid)
    clock.move(hours=5)
    worker.run_until_idle()
    assert container_meter.meter_containers(fleet) == 0
    with fleet.db.read() as s:
        assert ledger_sums_to_balance(s, tenant.tenant_id)


def test_a_worker_dying_mid_write_loses_nothing_and_bills_nothing_twice(
    fleet: Platform, clock: MovableClock, tenant: TenantCtx, worker: Worker, key: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    iid = container(fleet, tenant, worker, key)
    clock.move(hours=5)
    calls = {"n": 0}
    real_post = metering.post

    def dying_post(*a: object, **kw: object) -> object:
        calls["n"] += 1
        if calls["n"] == 4:
            raise SystemExit("worker killed")  # mid-transaction, after some writes
        return real_post(*a, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(metering, "post", dying_post)
    with pytest.raises(SystemExit):
        container_meter.meter_containers(fleet)
    monkeypatch.setattr(metering, "post", real_post)
    with fleet.db.read() as s:  # the transaction rolled back whole: no record, no charge
        assert s.scalar(select(func.count()).select_from(UsageRecord)) == 0
        assert ledger_sums_to_balance(s, tenant.tenant_id)
    assert container_meter.meter_containers(fleet) == 5
    assert container_meter.meter_containers(fleet) == 0
    with fleet.db.read() as s:
        keys = list(s.scalars(select(UsageRecord.key).order_by(UsageRecord.id)))
        assert keys == [container_meter.hour_key(iid, k) for k in range(1, 6)]
        assert ledger_sums_to_balance(s, tenant.tenant_id)


def test_a_container_the_balance_cannot_pay_is_stopped(
    fleet: Platform, clock: MovableClock, worker: Worker, key: str
) -> None:
    poor = new_tenant(fleet, "poor", funds="5.00")  # the held hour (¥3.92), not the next
    iid = container(fleet, poor, worker, key)
    clock.move(hours=1, minutes=1)
    assert container_meter.meter_containers(fleet) == 0
    view = instances.show_instance(fleet, poor.principal, iid)
    assert view.status in ("releasing", "released")
    assert "balance cannot pay the next GPU-hour" in (view.status_reason or "")
    assert "¥2.84 missing" in (view.status_reason or "")
    assert wallet.show_wallet(fleet, poor.principal).balance == Decimal("1.08")
