"""The budget sweep tells a tenant at 50, 80 and 100 % of its month's budget, once each a
month, by e-mail and webhook (billing.budget_50, …); rented servers keep renewing past it.
SQLite and PostgreSQL."""

from __future__ import annotations

from decimal import Decimal

from gpulease.platform import Platform
from gpulease.services.money import budgets
from gpulease.services.platform.notify import _subject
from gpulease.testing.callers import TenantCtx
from gpulease.testing.clock import MovableClock
from gpulease.testing.factories import deliver, notices
from gpulease.worker.jobs.money.budgets import run
from gpulease.worker.runner import Worker


def test_each_level_is_told_once_a_month(
    fleet: Platform, clock: MovableClock, tenant: TenantCtx, worker: Worker, key: str,
) -> None:
    budgets.set_budget(fleet, tenant.principal, Decimal("200000"))
    assert run(fleet, "w") == 0  # nothing spent
    deliver(fleet, tenant, worker, key)  # ¥84,480: 42 %
    assert run(fleet, "w") == 0
    budgets.set_budget(fleet, tenant.principal, Decimal("100000"))  # now 84 %
    assert run(fleet, "w") == 2 and run(fleet, "w") == 0  # 50 and 80, once
    budgets.set_budget(fleet, tenant.principal, Decimal("80000"))  # past it
    assert run(fleet, "w") == 1
    told = [k for k in notices(fleet, tenant.tenant_id) if k.startswith("budget_")]
    assert told == ["budget_50", "budget_80", "budget_100"]
    assert budgets.show_budget(fleet, tenant.principal).told == [50, 80, 100]
    assert _subject("budget_100", None)[1] == "billing.budget_100"  # the webhook's event
    clock.move(days=31)  # a new month: nothing spent in it yet, nothing told
    assert run(fleet, "w") == 0 and budgets.show_budget(fleet, tenant.principal).told == []
