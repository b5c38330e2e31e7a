"""A tenant's monthly budget: its admin sets it, an order or a renewal by hand that would
take the month's spend past it is refused with nothing charged, two orders at once cannot
both slip under it, and it reads back with what the month spent. SQLite and PostgreSQL."""

from __future__ import annotations

from decimal import Decimal

import httpx
import pytest
from typer.testing import CliRunner

from gpulease.cli.main import app
from gpulease.domain.errors import BudgetExceeded, Forbidden
from gpulease.platform import Platform
from gpulease.services.money import budgets, leases, wallet
from gpulease.testing.callers import TenantCtx, auth
from gpulease.testing.clock import MovableClock
from gpulease.testing.factories import at_once, deliver, place
from gpulease.testing.servers import LiveServer
from gpulease.worker.runner import Worker

H100_MONTH = Decimal("84480.00")


def balance(p: Platform, t: TenantCtx) -> Decimal:
    return wallet.show_wallet(p, t.principal).balance


def test_an_order_or_a_renewal_past_the_budget_is_refused_and_charges_nothing(
    fleet: Platform, clock: MovableClock, tenant: TenantCtx, operator: TenantCtx,
    worker: Worker, key: str,
) -> None:
    view = budgets.set_budget(fleet, tenant.principal, Decimal("100000"))
    assert (view.monthly_budget, view.spent, view.period) == (Decimal("100000.00"), 0,
                                                              "2026-12")
    iid = deliver(fleet, tenant, worker, key)  # ¥84,480: under the budget
    before = balance(fleet, tenant)
    with pytest.raises(BudgetExceeded) as refused:
        place(fleet, tenant, key)
    assert refused.value.status == 409
    assert "to ¥168,960.00, past your monthly budget of ¥100,000.00" in refused.value.detail
    with pytest.raises(BudgetExceeded, match="This renewal would take 2026-12"):
        leases.renew(fleet, tenant.principal, iid, periods=1)
    assert balance(fleet, tenant) == before  # nothing of either was charged
    shown = budgets.show_budget(fleet, tenant.principal)
    assert shown.spent == H100_MONTH and shown.spent_pct == pytest.approx(84.5, abs=0.1)

    budgets.set_budget(fleet, tenant.principal, Decimal("200000"))  # raised: both go
    leases.renew(fleet, tenant.principal, iid, periods=1)
    assert budgets.show_budget(fleet, tenant.principal).spent == 2 * H100_MONTH
    budgets.set_budget(fleet, tenant.principal, None)
    assert budgets.show_budget(fleet, tenant.principal).monthly_budget is None
    place(fleet, tenant, key)  # no budget: no limit but the wallet's
    with pytest.raises(Forbidden):
        budgets.set_budget(fleet, operator.principal, Decimal("1"))  # the tenant's to set


def test_a_new_month_starts_from_nothing(
    fleet: Platform, clock: MovableClock, tenant: TenantCtx, worker: Worker, key: str,
) -> None:
    budgets.set_budget(fleet, tenant.principal, Decimal("100000"))
    deliver(fleet, tenant, worker, key)
    clock.move(days=31)  # January in Beijing
    assert budgets.show_budget(fleet, tenant.principal).spent == 0
    place(fleet, tenant, key)


def test_two_orders_at_once_cannot_both_slip_under_the_budget(
    fleet: Platform, clock: MovableClock, tenant: TenantCtx, key: str,
) -> None:
    budgets.set_budget(fleet, tenant.principal, Decimal("100000"))
    assert at_once(2, lambda: place(fleet, tenant, key), BudgetExceeded) == ["done", "refused"]
    assert budgets.show_budget(fleet, tenant.principal).spent == H100_MONTH


def test_the_budget_over_http_and_the_cli(
    fleet: Platform, clock: MovableClock, server: LiveServer, tenant: TenantCtx, key: str,
) -> None:
    env = {"GPULEASE_URL": server.url, "GPULEASE_TOKEN": tenant.token, "COLUMNS": "200"}
    done = CliRunner().invoke(app, ["budget", "--set", "100000"], env=env)
    assert done.exit_code == 0 and "¥0.00 of ¥100,000.00" in done.output, done.output
    api = f"{server.url}/api/v1"
    order = {"ssh_keys": [key], "sku": "h100-80g-x8", "region": "ningxia-1"}
    assert httpx.post(f"{api}/instances", headers=auth(tenant.token),
                      json=order).status_code == 201
    refused = httpx.post(f"{api}/instances", headers=auth(tenant.token), json=order)
    assert refused.status_code == 409 and refused.json()["title"] == "Budget exceeded"
    said = httpx.post(f"{api}/instances", json=order, headers={
        **auth(tenant.token), "Accept-Language": "zh-CN"}).json()["detail"]
    assert "月度预算" in said
    shown = CliRunner().invoke(app, ["budget"], env=env)
    assert "¥84,480.00 of ¥100,000.00 spent (84 %)" in shown.output, shown.output
    assert httpx.put(f"{api}/budget", headers=auth(tenant.token),
                     json={"monthly_budget": "-1"}).status_code == 422
