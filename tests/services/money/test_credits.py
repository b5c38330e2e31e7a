"""SLA credits for late delivery and refunds for an early end, into the wallet by the
documented rules. SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from sqlalchemy import select

from gpulease.db.money_tables import LedgerEntry
from gpulease.domain.billing.credits import SlaRule, late_delivery_credit
from gpulease.domain.billing.leases import early_end_refund, first_period, following_periods
from gpulease.domain.phrases import said_stored
from gpulease.platform import Platform
from gpulease.ports.clock import SteadyClock
from gpulease.schemas import OrderRequest
from gpulease.services.instances import actions
from gpulease.services.instances import views as instances
from gpulease.services.money import leases, wallet
from gpulease.services.money.wallet import ledger_sums_to_balance
from gpulease.services.orders import ordering as orders
from gpulease.testing.callers import TenantCtx
from gpulease.testing.clock import MovableClock
from gpulease.testing.factories import deliver
from gpulease.translations import translations
from gpulease.worker.runner import Worker


def test_rules() -> None:
    month = Decimal("84480")
    assert late_delivery_credit(900, 900, month) == (Decimal("0.00"), 0)
    assert late_delivery_credit(901, 900, month) == (Decimal("4224.00"), 5)  # one started step
    assert late_delivery_credit(900 + 1800, 900, month)[0] == Decimal("8448.00")
    assert late_delivery_credit(10**6, 900, month) == (Decimal("42240.00"), 50)  # the cap
    assert "5% of the first period per started 15 minutes" in str(SlaRule().describe())
    start = datetime(2027, 1, 1, tzinfo=UTC)
    first = first_period(start, "month", month, UTC)
    periods = [first, *following_periods(first, "month", month, 3, UTC)]  # four months
    todo, refund = early_end_refund(periods, start + timedelta(days=10), Decimal(20))
    assert len(todo) == 3 and refund == Decimal("202752.00")
    todo, refund = early_end_refund(periods, periods[-1].ends_at - timedelta(days=3),
                                    Decimal(20))
    assert todo == [] and refund == Decimal("0.00")


def test_late_delivery_earns_a_credit(
    fleet: Platform, clock: MovableClock, tenant: TenantCtx, worker: Worker, key: str,
) -> None:
    iid = orders.place_order(fleet, tenant.principal, OrderRequest(
        sku="h100-80g-x8", region="ningxia-1", ssh_keys=[key]))[0].id
    clock.move(minutes=40)  # delivery lands 40 minutes after the order: 25 beyond the SLA
    worker.run_until_idle()
    view = instances.show_instance(fleet, tenant.principal, iid)
    assert view.status == "ready"
    (credit,) = [e for e in wallet.ledger(fleet, tenant.principal).items if e.kind == "credit"]
    assert credit.amount == Decimal("8448.00") and credit.instance_id == iid  # 2 steps × 5 %
    (stage,) = [st for st in view.stages if st.stage == "sla_credit"]
    assert "delivered in 40 min against 15 min" in (stage.message or "")
    with fleet.db.read() as s:
        assert ledger_sums_to_balance(s, tenant.tenant_id)
        # the credit's item and reference keep their phrases: said in Chinese where shown
        entry = s.scalars(select(LedgerEntry).where(LedgerEntry.instance_id == iid,
                                                    LedgerEntry.kind == "credit")).one()
    zh = translations("zh_CN").gettext
    assert entry.item == f"SLA credit: late delivery of {iid}"  # the key stays English
    assert said_stored(entry.item, entry.item_phrase, zh) == f"SLA 赔付：{iid} 延迟交付"
    assert said_stored(entry.reference or "", entry.phrase, zh).startswith(
        "SLA 赔付 ¥8,448.00：（10%）用时 40 分钟交付，承诺 15 分钟；规则：超出交付 SLA 后")


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)  # one host, one clock
def test_late_delivery_is_measured_across_a_step_back_of_the_host_s_clock(
    fleet: Platform, tenant: TenantCtx, worker: Worker, key: str,
) -> None:
    """The host's clock stepped back an hour while a delivery ran 40 minutes: measured on
    the wall clock the delivery took no time (and nobody was owed); on the platform's steady
    clock it is 40 minutes late by 25."""
    wall, elapsed = [datetime(2026, 12, 1, 9, 0, tzinfo=UTC)], [0.0]
    fleet.clock = SteadyClock(lambda: wall[0], lambda: elapsed[0])
    iid = orders.place_order(fleet, tenant.principal, OrderRequest(
        sku="h100-80g-x8", region="ningxia-1", ssh_keys=[key]))[0].id
    wall[0] -= timedelta(hours=1)  # stepped back
    elapsed[0] += 40 * 60  # while 40 minutes passed
    wall[0] += timedelta(minutes=40)
    worker.run_until_idle()
    view = instances.show_instance(fleet, tenant.principal, iid)
    assert view.status == "ready"
    (credit,) = [e for e in wallet.ledger(fleet, tenant.principal).items if e.kind == "credit"]
    assert credit.amount == Decimal("8448.00")  # 2 started steps of 15 minutes × 5 %


def test_on_time_delivery_earns_nothing(
    fleet: Platform, clock: MovableClock, tenant: TenantCtx, worker: Worker, key: str,
) -> None:
    deliver(fleet, tenant, worker, key)
    assert not [e for e in wallet.ledger(fleet, tenant.principal).items if e.kind == "credit"]


def test_early_end_refunds_unused_whole_periods(
    fleet: Platform, clock: MovableClock, tenant: TenantCtx, worker: Worker, key: str,
) -> None:
    iid = deliver(fleet, tenant, worker, key)
    leases.renew(fleet, tenant.principal, iid, periods=3)  # four months in all
    clock.move(days=10)
    before = wallet.show_wallet(fleet, tenant.principal).balance
    actions.release_instance(fleet, tenant.principal, iid)
    # three whole months unused, less the 20 % fee: 3 × 84,480 × 0.8
    assert wallet.show_wallet(fleet, tenant.principal).balance == before + Decimal("202752.00")
    assert leases.show_lease(fleet, tenant.principal, iid).status == "ended"
    actions.release_instance(fleet, tenant.principal, iid)  # repeating refunds nothing more
    assert wallet.show_wallet(fleet, tenant.principal).balance == before + Decimal("202752.00")
    worker.run_until_idle()
    stages = [st.stage for st in instances.show_instance(fleet, tenant.principal, iid).stages]
    assert "refund" in stages and stages[-1] == "released"
    with fleet.db.read() as s:
        assert ledger_sums_to_balance(s, tenant.tenant_id)


def test_a_switch_of_term_refunds_only_the_periods_not_begun(
    fleet: Platform, clock: MovableClock, tenant: TenantCtx, worker: Worker, key: str,
) -> None:
    """The review's case: an H100 month renewed by one day and released at once. The month
    has begun and stays paid; only the day, not begun, comes back less the fee."""
    iid = deliver(fleet, tenant, worker, key)  # ¥84,480 for the month
    lease = leases.renew(fleet, tenant.principal, iid, periods=1, term="day")
    day = lease.schedule[-1]
    assert (day.term, day.price) == ("day", Decimal("3660.80"))  # 84,480 ÷ 30 × 1.3
    before = wallet.show_wallet(fleet, tenant.principal).balance
    clock.move(minutes=5)
    actions.release_instance(fleet, tenant.principal, iid)
    refund = wallet.show_wallet(fleet, tenant.principal).balance - before
    assert refund == Decimal("2928.64")  # 3,660.80 less 20 %, not 30 days at the day price
    view = leases.show_lease(fleet, tenant.principal, iid)
    assert [p.refunded for p in view.schedule] == [False, True]
    (entry,) = [e for e in wallet.ledger(fleet, tenant.principal).items if e.kind == "refund"]
    assert "1 period(s) not begun" in (entry.reference or "")
    with fleet.db.read() as s:
        assert ledger_sums_to_balance(s, tenant.tenant_id)
