"""Spending bounded by the wallet: metered usage past balance + credit limit is told at
once, and after the grace the tenant is suspended (containers stopped, bare metal flagged
to the operator, orders refused) until a top-up restores it; a low balance is warned about
before containers run dry; unpaid invoices are reminded on their days and, past the limit,
suspend new orders until paid. SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy import select

from gpulease.db.money_tables import LeaseNotice
from gpulease.domain.errors import PaymentRequired
from gpulease.platform import Platform
from gpulease.schemas import OrderRequest
from gpulease.schemas.money import UsageIn
from gpulease.services.instances import views as instances
from gpulease.services.money import metering, spending, wallet
from gpulease.services.money.invoices import run as invoice_run
from gpulease.services.money.invoices import views as invoices
from gpulease.services.money.wallet import ledger_sums_to_balance
from gpulease.services.orders import ordering as orders
from gpulease.testing.callers import TenantCtx, new_tenant
from gpulease.testing.clock import MovableClock
from gpulease.testing.factories import container, deliver
from gpulease.worker.runner import Worker

CAL = ZoneInfo("Asia/Shanghai")


def notices(p: Platform, tenant_id: str) -> list[str]:
    with p.db.read() as s:
        return list(s.scalars(select(LeaseNotice.kind).where(
            LeaseNotice.tenant_id == tenant_id, LeaseNotice.lease_id.is_(None))
            .order_by(LeaseNotice.id)))


def _egress(iid: str, now: datetime, gb: int, key: str, hours: int = 1) -> UsageIn:
    return UsageIn(key=key, instance_id=iid, kind="egress_gb", quantity=Decimal(gb),
                   started_at=now - timedelta(hours=hours), ended_at=now)


def test_usage_past_the_limit_warns_then_suspends_until_a_top_up(
    fleet: Platform, operator: TenantCtx, worker: Worker, key: str,
) -> None:
    clock = MovableClock(datetime(2026, 11, 10, 8, tzinfo=CAL))
    fleet.clock = clock
    t = new_tenant(fleet, funds="90000")
    bm = deliver(fleet, t, worker, key)  # ¥84,480: ¥5,520 left
    clock.move(hours=12)
    # 20,000 GB of egress in 12 hours at ¥0.50: ¥10,000, ¥4,480 past the balance: charged,
    # and told
    metering.report_usage(fleet, operator.principal,
                          [_egress(bm, clock.now(), 20000, "e1", hours=12)])
    view = wallet.show_wallet(fleet, t.principal)
    assert view.balance == Decimal("-4480.00") and view.overdrawn_since == clock.now()
    assert notices(fleet, t.tenant_id) == ["overdrawn"]
    spending.sweep_spending(fleet)
    assert notices(fleet, t.tenant_id) == ["overdrawn"]  # once, and no suspension yet
    assert wallet.show_wallet(fleet, t.principal).suspended_reason is None

    clock.move(hours=24, minutes=1)  # the grace is over
    spending.sweep_spending(fleet)
    view = wallet.show_wallet(fleet, t.principal)
    assert view.suspended_reason is not None and "overdrawn by ¥4,480.00" in view.suspended_reason
    assert notices(fleet, t.tenant_id) == ["overdrawn", "suspended"]
    # bare metal is flagged to the operator, not stopped
    assert instances.show_instance(fleet, t.principal, bm).status == "ready"
    assert any(st.stage == "flagged" for st in instances.show_instance(
        fleet, t.principal, bm).stages)
    (row,) = [r for r in spending.dunning(fleet, operator.principal)
              if r.tenant_id == t.tenant_id]
    assert row.running == [bm] and row.suspended_at is not None
    with pytest.raises(PaymentRequired, match="suspended"):
        orders.place_order(fleet, t.principal, OrderRequest(
            kind="container", offer="rtx4090-24g-container", gpus=1, ssh_keys=[key]))

    wallet.top_up(fleet, operator.principal, t.tenant_id, Decimal("10000"), "back")
    view = wallet.show_wallet(fleet, t.principal)  # at once: not at the next sweep
    assert view.suspended_reason is None and view.overdrawn_since is None
    assert notices(fleet, t.tenant_id)[-1] == "restored"
    spending.sweep_spending(fleet)
    assert notices(fleet, t.tenant_id)[-1] == "restored"
    orders.place_order(fleet, t.principal, OrderRequest(
        kind="container", offer="rtx4090-24g-container", gpus=1, ssh_keys=[key]))
    with fleet.db.read() as s:
        assert ledger_sums_to_balance(s, t.tenant_id)


def test_an_overdrawn_tenant_s_containers_stop_at_the_end_of_grace(
    fleet: Platform, operator: TenantCtx, worker: Worker, key: str,
) -> None:
    clock = MovableClock(datetime(2026, 11, 10, 8, tzinfo=CAL))
    fleet.clock = clock
    t = new_tenant(fleet, funds="100")
    ct = container(fleet, t, worker, key)  # 2 GPUs, ¥3.92 an hour held
    metering.report_usage(fleet, operator.principal, [_egress(ct, clock.now(), 1000, "e1")])
    clock.move(minutes=30)  # within the hour the order paid: the meter has nothing to take
    spending.sweep_spending(fleet)
    assert instances.show_instance(fleet, t.principal, ct).status == "ready"
    fleet.settings.overdraft_grace_hours = 0.25
    spending.sweep_spending(fleet)
    worker.run_until_idle()
    view = instances.show_instance(fleet, t.principal, ct)
    assert view.status in ("releasing", "released")
    assert "suspended: overdrawn" in (view.status_reason or "")


def test_a_low_balance_is_warned_once_a_day(
    fleet: Platform, operator: TenantCtx, worker: Worker, key: str,
) -> None:
    clock = MovableClock(datetime(2026, 11, 10, 8, tzinfo=CAL))
    fleet.clock = clock
    t = new_tenant(fleet, funds="50")
    container(fleet, t, worker, key)  # ¥3.92 an hour on ¥46.08: about 12 hours
    spending.sweep_spending(fleet)
    spending.sweep_spending(fleet)
    assert notices(fleet, t.tenant_id) == ["low_balance"]
    with fleet.db.read() as s:
        text = s.scalar(select(LeaseNotice.text).where(LeaseNotice.tenant_id == t.tenant_id))
    assert "about 12 more hours" in (text or "")
    clock.move(hours=23)
    spending.sweep_spending(fleet)
    assert notices(fleet, t.tenant_id) == ["low_balance"]  # at most once a day
    clock.move(hours=2)  # (the meter does not run here: the container is still on)
    spending.sweep_spending(fleet)
    assert notices(fleet, t.tenant_id) == ["low_balance", "low_balance"]


def test_an_unpaid_invoice_is_reminded_then_suspends_orders_until_paid(
    fleet: Platform, operator: TenantCtx, worker: Worker, key: str,
) -> None:
    clock = MovableClock(datetime(2026, 11, 10, 8, tzinfo=CAL))
    fleet.clock = clock
    t = new_tenant(fleet, funds="10000")
    wallet.set_credit_limit(fleet, operator.principal, t.tenant_id, Decimal("100000"))
    deliver(fleet, t, worker, key)  # ¥74,480 of it on credit
    clock.at = datetime(2026, 12, 3, 8, tzinfo=CAL)
    invoice_run.run_invoices(fleet, operator.principal, "2026-11", finalize=True)
    spending.sweep_spending(fleet)
    assert notices(fleet, t.tenant_id) == ["dunning"]  # day 0
    clock.move(days=3)
    spending.sweep_spending(fleet)
    assert notices(fleet, t.tenant_id) == ["dunning"]
    clock.move(days=4)  # day 7
    spending.sweep_spending(fleet)
    clock.move(days=24)  # day 31: past the limit
    spending.sweep_spending(fleet)
    assert notices(fleet, t.tenant_id) == ["dunning", "dunning", "dunning", "suspended"]
    with pytest.raises(PaymentRequired, match="unpaid for more than 30 days"):
        orders.place_order(fleet, t.principal, OrderRequest(
            kind="container", offer="rtx4090-24g-container", gpus=1, ssh_keys=[key]))
    wallet.top_up(fleet, operator.principal, t.tenant_id, Decimal("74480"), "pay")
    inv = invoices.list_invoices(fleet, t.principal,
                                 invoices.InvoiceFilter(period="2026-11")).items[0]
    assert inv.payment_status == "paid"
    spending.sweep_spending(fleet)
    assert notices(fleet, t.tenant_id)[-1] == "restored"
    orders.place_order(fleet, t.principal, OrderRequest(
        kind="container", offer="rtx4090-24g-container", gpus=1, ssh_keys=[key]))
