"""Leases in moving time: the term starts at delivery; reminders 7/3/1 days before and at
expiry; grace; renewal during grace cancels the erase; after grace the disks are erased;
auto-renew; prices fixed for a running lease. SQLite and PostgreSQL."""

from __future__ import annotations

import tomllib
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest

from gpulease.domain.billing.leases import (
    add_months,
    first_period,
    following_periods,
    local_text,
    reminder_due,
    term_end,
)
from gpulease.domain.catalog import DEFAULT_CATALOG, parse_catalog
from gpulease.domain.errors import Conflict, InvalidInput, PaymentRequired
from gpulease.platform import Platform
from gpulease.schemas import OrderRequest
from gpulease.services.money import leases, wallet
from gpulease.services.money.wallet import Charge, charge
from gpulease.services.orders import ordering as orders
from gpulease.testing.callers import TenantCtx
from gpulease.testing.clock import MovableClock
from gpulease.testing.factories import deliver
from gpulease.worker.runner import Worker


def test_calendar_terms() -> None:
    jan31 = datetime(2027, 1, 31, 10, tzinfo=UTC)
    assert add_months(jan31, 1) == datetime(2027, 2, 28, 10, tzinfo=UTC)
    assert term_end(jan31, "year", 1, UTC) == datetime(2028, 1, 31, 10, tzinfo=UTC)
    assert term_end(jan31, "day", 3, UTC) == datetime(2027, 2, 3, 10, tzinfo=UTC)
    end = datetime(2027, 3, 1, tzinfo=UTC)
    assert reminder_due(end, end - timedelta(days=8), frozenset()) is None
    assert reminder_due(end, end - timedelta(days=2), frozenset()) == "3d"
    # a late sweep sends the latest reminder due, not a burst of stale ones
    assert reminder_due(end, end - timedelta(hours=1), frozenset({"7d"})) == "1d"


BEIJING = ZoneInfo("Asia/Shanghai")


def test_periods_are_counted_on_the_platform_calendar() -> None:
    # 03:00 on Mar 1 in Beijing is still Feb 28 in UTC: a month there ends on Apr 1, 03:00
    mar1 = datetime(2027, 3, 1, 3, tzinfo=BEIJING)
    assert term_end(mar1, "month", 1, BEIJING) == datetime(2027, 4, 1, 3, tzinfo=BEIJING)
    assert term_end(mar1, "month", 1, UTC) == datetime(2027, 3, 28, 19, tzinfo=UTC)  # UTC's
    assert local_text(mar1, BEIJING) == "2027-03-01 03:00 UTC+08:00"
    # a wall-clock day across a daylight-saving change is 23 hours long
    paris = ZoneInfo("Europe/Paris")
    before = datetime(2027, 3, 27, 12, tzinfo=paris)
    assert term_end(before, "day", 1, paris) - before.astimezone(UTC) == timedelta(hours=23)


def test_renewals_stay_anchored_to_the_first_day() -> None:
    # Jan 31 → Feb 28 → Mar 31 → Apr 30 (not Feb 28 → Mar 28 → Apr 28)
    jan31 = datetime(2027, 1, 31, 10, tzinfo=BEIJING)
    first = first_period(jan31, "month", Decimal(100), BEIJING)
    more = following_periods(first, "month", Decimal(100), 1, BEIJING)
    more += following_periods(more[-1], "month", Decimal(100), 2, BEIJING)  # a later renewal
    assert [p.ends_at.astimezone(BEIJING).date().isoformat() for p in [first, *more]] == [
        "2027-02-28", "2027-03-31", "2027-04-30", "2027-05-31"]
    # a day in between starts a new run where the months end; months after it anchor there
    day = following_periods(more[0], "day", Decimal(5), 1, BEIJING)[0]
    assert day.starts_at == more[0].ends_at and day.index == 1
    month = following_periods(day, "month", Decimal(100), 1, BEIJING)[0]
    assert month.anchor == day.ends_at and month.ends_at.astimezone(BEIJING).day == 1
    assert [p.seq for p in [first, *more]] == [1, 2, 3, 4]


def test_price_change_never_alters_a_running_lease(
    fleet: Platform, clock: MovableClock, tenant: TenantCtx, worker: Worker, key: str
) -> None:
    iid = deliver(fleet, tenant, worker, key)
    data = tomllib.loads(DEFAULT_CATALOG.read_text())
    next(o for o in data["offers"] if o["sku"] == "h100-80g-x8")["monthly_price"] = "99000"
    fleet.catalog = parse_catalog(data, "new prices")
    before = wallet.show_wallet(fleet, tenant.principal).balance
    lease = leases.renew(fleet, tenant.principal, iid, periods=2)
    assert lease.unit_price == Decimal("84480.00")
    assert wallet.show_wallet(fleet, tenant.principal).balance == before - Decimal("168960")
    # switching to the day term takes today's day price: 99,000 ÷ 30 × 1.3
    day = leases.renew(fleet, tenant.principal, iid, periods=1, term="day")
    assert (day.schedule[-1].term, day.schedule[-1].price) == ("day", Decimal("4290.00"))
    # the lease's base term and price stay the order's
    assert day.term == "month" and day.unit_price == Decimal("84480.00")
    assert [p.price for p in day.schedule] == [Decimal("84480.00")] * 3 + [Decimal("4290.00")]


def test_a_scheduled_price_takes_effect_on_its_date_and_spares_running_leases(
    fleet: Platform, clock: MovableClock, tenant: TenantCtx, worker: Worker, key: str
) -> None:
    from gpulease.schemas.money import QuoteRequest
    from gpulease.services.catalog import offers as catalog
    from gpulease.services.catalog import quotes

    data = tomllib.loads(DEFAULT_CATALOG.read_text())
    h100 = next(o for o in data["offers"] if o["sku"] == "h100-80g-x8")
    h100["price_changes"] = [{"effective_from": "2026-12-15", "monthly_price": "79000"}]
    container = data["container_offers"][0]
    container["price_changes"] = [{"effective_from": "2026-12-15",
                                   "price_per_gpu_hour": "1.80"}]
    fleet.catalog = parse_catalog(data, "announced prices")
    req = QuoteRequest(sku="h100-80g-x8", region="ningxia-1", term="month")
    assert quotes.make_quote(fleet, req).total == Decimal("84480.00")  # Dec 1: not yet
    view = next(o for o in catalog.catalog_view(fleet).offers if o.id == "h100-80g-x8@ningxia-1")
    assert view.monthly_price == Decimal("84480.00")
    assert [(str(c.effective_from), c.monthly_price) for c in view.price_changes] == [
        ("2026-12-15", Decimal("79000.00"))]
    iid = deliver(fleet, tenant, worker, key)  # ordered at the old price

    clock.at = datetime(2026, 12, 15, 0, 0, tzinfo=UTC)
    assert quotes.make_quote(fleet, req).total == Decimal("79000.00")
    now = next(o for o in catalog.catalog_view(fleet).offers if o.id == view.id)
    assert now.monthly_price == Decimal("79000.00") and now.price_changes == []
    assert catalog.catalog_view(fleet).container_offers[0].price_per_gpu_hour == Decimal("1.80")
    lease = leases.renew(fleet, tenant.principal, iid)
    assert lease.unit_price == Decimal("84480.00")  # the running lease keeps its price
    second = deliver(fleet, tenant, worker, key)
    assert leases.show_lease(fleet, tenant.principal, second).unit_price == Decimal("79000.00")


def test_price_changes_out_of_order_name_the_offer() -> None:
    from gpulease.domain.catalog import CatalogError

    data = tomllib.loads(DEFAULT_CATALOG.read_text())
    data["offers"][0]["price_changes"] = [
        {"effective_from": "2027-02-01", "monthly_price": "7000"},
        {"effective_from": "2027-01-01", "monthly_price": "7500"}]
    with pytest.raises(CatalogError, match=r"\[\[offers\]\] #1 .*price_changes must be in order"):
        parse_catalog(data, "ops.toml")
    data["offers"][0]["price_changes"] = [{"effective_from": "2027-01-01"}]
    with pytest.raises(CatalogError, match="needs monthly_price"):
        parse_catalog(data, "ops.toml")


def test_bad_renewals_are_refused_and_write_nothing(
    fleet: Platform, clock: MovableClock, tenant: TenantCtx, worker: Worker, key: str,
    operator: TenantCtx,
) -> None:
    iid = deliver(fleet, tenant, worker, key)
    with pytest.raises(InvalidInput) as exc:
        leases.renew(fleet, tenant.principal, iid, periods=0)
    assert exc.value.field == "periods"
    with pytest.raises(InvalidInput) as exc:
        leases.renew(fleet, tenant.principal, iid, term="week")
    assert exc.value.field == "term" and exc.value.accepted == ["day", "month", "year"]
    container = orders.place_order(fleet, tenant.principal, OrderRequest(
        kind="container", offer="rtx4090-24g-container", gpus=1, ssh_keys=[key]))[0].id
    worker.run_until_idle()
    with pytest.raises(Conflict, match="billed by the hour"):
        leases.renew(fleet, tenant.principal, container)
    # drain the account, then a renewal is 402: the lease and the ledger do not move
    bal = wallet.show_wallet(fleet, tenant.principal).balance
    with fleet.db.write() as s:
        charge(s, tenant.tenant_id, Charge(bal, "spent"), fleet.clock.now())
    end = leases.show_lease(fleet, tenant.principal, iid).ends_at
    entries = wallet.ledger(fleet, tenant.principal).total
    with pytest.raises(PaymentRequired):
        leases.renew(fleet, tenant.principal, iid)
    assert leases.show_lease(fleet, tenant.principal, iid).ends_at == end
    assert wallet.ledger(fleet, tenant.principal).total == entries


