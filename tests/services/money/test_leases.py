"""Leases in moving time: the term starts at delivery; reminders 7/3/1 days before and at
expiry; grace; renewal during grace cancels the erase; after grace the disks are erased;
auto-renew; prices fixed for a running lease. SQLite and PostgreSQL."""

from __future__ import annotations

import tomllib
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy import select

from gpulease.db.money_tables import LeaseNotice
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
from gpulease.services.agents import evidence
from gpulease.services.instances import views as instances
from gpulease.services.money import leases, wallet
from gpulease.services.money.wallet import charge, ledger_sums_to_balance
from gpulease.services.orders import ordering as orders
from gpulease.testing.callers import TenantCtx, fund
from gpulease.testing.clock import MovableClock
from gpulease.testing.factories import deliver, node_by_name
from gpulease.worker.jobs.money import leases as lease_sweep
from gpulease.worker.runner import Worker


def notices(p: Platform, iid: str) -> list[str]:
    with p.db.read() as s:
        return list(s.scalars(select(LeaseNotice.kind).where(LeaseNotice.instance_id == iid)
                              .order_by(LeaseNotice.id)))


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


def test_a_late_sweep_sends_only_the_latest_reminder_due(
    fleet: Platform, clock: MovableClock, tenant: TenantCtx, worker: Worker, key: str
) -> None:
    iid = deliver(fleet, tenant, worker, key)
    lease = leases.show_lease(fleet, tenant.principal, iid)
    clock.at = lease.ends_at - timedelta(hours=12)  # no sweep ran for 29 days
    for _ in range(3):
        lease_sweep.sweep_leases(fleet)
        clock.move(minutes=5)
    assert notices(fleet, iid) == ["1d"]  # not 1d, then 3d, then 7d, seconds apart
    assert set(leases.show_lease(fleet, tenant.principal, iid).reminders_sent) == {
        "7d", "3d", "1d"}
    clock.at = lease.ends_at + timedelta(minutes=1)
    lease_sweep.sweep_leases(fleet)
    lease_sweep.sweep_leases(fleet)
    assert notices(fleet, iid) == ["1d", "expiry"]
    assert leases.show_lease(fleet, tenant.principal, iid).status == "grace"


def test_lease_life_reminders_grace_renewal_and_erase(
    fleet: Platform, clock: MovableClock, tenant: TenantCtx, worker: Worker, key: str
) -> None:
    iid = deliver(fleet, tenant, worker, key)
    inst = instances.show_instance(fleet, tenant.principal, iid)
    lease = leases.show_lease(fleet, tenant.principal, iid)
    assert lease.starts_at == inst.ready_at and lease.status == "active"
    assert lease.ends_at == add_months(lease.starts_at, 1) and not lease.auto_renew
    assert lease.unit_price == Decimal("84480.00")

    clock.move(days=25)  # 6 days left
    lease_sweep.sweep_leases(fleet)
    lease_sweep.sweep_leases(fleet)  # once only
    assert notices(fleet, iid) == ["7d"]
    clock.at = lease.ends_at - timedelta(hours=12)
    lease_sweep.sweep_leases(fleet)
    assert notices(fleet, iid) == ["7d", "1d"]

    clock.at = lease.ends_at + timedelta(minutes=1)
    lease_sweep.sweep_leases(fleet)
    now = leases.show_lease(fleet, tenant.principal, iid)
    assert now.status == "grace" and now.grace_until == lease.ends_at + timedelta(days=3)
    assert notices(fleet, iid)[-1] == "expiry"
    assert instances.show_instance(fleet, tenant.principal, iid).status == "ready"  # kept

    # renewing during grace cancels the erase; the term continues from the old end
    balance = wallet.show_wallet(fleet, tenant.principal).balance
    renewed = leases.renew(fleet, tenant.principal, iid)
    assert renewed.status == "active" and renewed.grace_until is None
    assert renewed.ends_at == add_months(lease.ends_at, 1) and renewed.periods == 2
    assert wallet.show_wallet(fleet, tenant.principal).balance == balance - Decimal("84480")
    clock.at = lease.ends_at + timedelta(days=3, minutes=1)  # the old grace would be over
    lease_sweep.sweep_leases(fleet)
    assert instances.show_instance(fleet, tenant.principal, iid).status == "ready"

    # this time nobody renews: grace, then erase
    clock.at = renewed.ends_at + timedelta(minutes=1)
    lease_sweep.sweep_leases(fleet)
    assert leases.show_lease(fleet, tenant.principal, iid).status == "grace"
    clock.move(days=2)
    lease_sweep.sweep_leases(fleet)
    assert instances.show_instance(fleet, tenant.principal, iid).status == "ready"  # not yet
    clock.move(days=1, minutes=1)
    lease_sweep.sweep_leases(fleet)
    worker.run_until_idle()
    view = instances.show_instance(fleet, tenant.principal, iid)
    assert view.status == "released" and "lease expired" in (view.status_reason or "")
    assert leases.show_lease(fleet, tenant.principal, iid).status == "ended"
    certs = evidence.instance_certificates(fleet, tenant.principal, iid)[0]
    assert len(certs) == 2 and all(c["passed"] for c in certs)
    assert node_by_name(fleet, view.nodes[0].name).status == "available"
    assert notices(fleet, iid)[-1] == "erased"
    with fleet.db.read() as s:
        assert ledger_sums_to_balance(s, tenant.tenant_id)


def test_auto_renew_with_and_without_money(
    fleet: Platform, clock: MovableClock, tenant: TenantCtx, worker: Worker, key: str,
    operator: TenantCtx,
) -> None:
    from gpulease.services.accounts import identity as accounts

    iid = deliver(fleet, tenant, worker, key)
    leases.set_auto_renew(fleet, tenant.principal, iid, True)
    end = leases.show_lease(fleet, tenant.principal, iid).ends_at
    clock.at = end + timedelta(minutes=5)
    lease_sweep.sweep_leases(fleet)
    lease = leases.show_lease(fleet, tenant.principal, iid)
    assert lease.status == "active" and lease.ends_at == add_months(end, 1)

    created = accounts.create_tenant(fleet, "thin", "thin@example.com", "Thin")
    thin = TenantCtx(accounts.authenticate(fleet, created.token.token), created.token.token,
                     created.tenant.id)
    fund(fleet, thin.tenant_id, "90000")  # one month, not two
    other = deliver(fleet, thin, worker, key)
    leases.set_auto_renew(fleet, thin.principal, other, True)
    clock.at = leases.show_lease(fleet, thin.principal, other).ends_at + timedelta(minutes=1)
    lease_sweep.sweep_leases(fleet)
    short = leases.show_lease(fleet, thin.principal, other)
    assert short.status == "grace"  # the renewal failed for money: remind, then grace
    with fleet.db.read() as s:
        text = s.scalars(select(LeaseNotice.text).where(LeaseNotice.instance_id == other)
                         .order_by(LeaseNotice.id.desc())).first()
    assert text and "automatic renewal failed" in text and "missing" in text

    # In grace, later sweeps do not retry until the wallet moves; a top-up that still
    # falls short leaves it in grace; one that covers the month renews it, erase cancelled.
    clock.move(hours=1)
    assert lease_sweep.sweep_leases(fleet) == 0
    fund(fleet, thin.tenant_id, "100", "wire 2")
    clock.move(hours=1)
    lease_sweep.sweep_leases(fleet)
    assert leases.show_lease(fleet, thin.principal, other).status == "grace"
    assert lease_sweep.sweep_leases(fleet) == 0  # short again: waits for the next top-up
    clock.move(hours=1)
    fund(fleet, thin.tenant_id, "90000", "wire 3")
    clock.move(minutes=1)
    assert lease_sweep.sweep_leases(fleet) == 1
    renewed = leases.show_lease(fleet, thin.principal, other)
    assert renewed.status == "active" and renewed.ends_at == add_months(short.ends_at, 1)


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
        charge(s, tenant.tenant_id, bal, fleet.clock.now(), instance_id=None, reference="spent")
    end = leases.show_lease(fleet, tenant.principal, iid).ends_at
    entries = wallet.ledger(fleet, tenant.principal).total
    with pytest.raises(PaymentRequired):
        leases.renew(fleet, tenant.principal, iid)
    assert leases.show_lease(fleet, tenant.principal, iid).ends_at == end
    assert wallet.ledger(fleet, tenant.principal).total == entries


def test_a_one_off_renewal_by_the_day_does_not_make_auto_renew_go_by_the_day(
    fleet: Platform, clock: MovableClock, tenant: TenantCtx, worker: Worker, key: str,
) -> None:
    iid = deliver(fleet, tenant, worker, key)  # an H100 month: ¥84,480
    month = leases.show_lease(fleet, tenant.principal, iid)
    two_days = leases.renew(fleet, tenant.principal, iid, periods=2, term="day")
    assert two_days.term == "month" and two_days.ends_at == month.ends_at + timedelta(days=2)
    assert [p.term for p in two_days.schedule] == ["month", "day", "day"]
    leases.set_auto_renew(fleet, tenant.principal, iid, True)
    before = wallet.show_wallet(fleet, tenant.principal).balance
    clock.at = two_days.ends_at + timedelta(minutes=5)
    assert lease_sweep.sweep_leases(fleet) == 1
    renewed = leases.show_lease(fleet, tenant.principal, iid)
    # By the month it was ordered for, at the price its order held; not by the day.
    assert renewed.term == "month" and renewed.unit_price == month.unit_price
    assert renewed.ends_at == add_months(two_days.ends_at, 1)
    assert wallet.show_wallet(fleet, tenant.principal).balance == before - month.unit_price
