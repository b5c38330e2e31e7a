"""The invoice job: on the 1st of a month of the platform's calendar the month just ended is
drafted, on the finalize day its drafts are finalized; each step once."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

from gpulease.platform import Platform
from gpulease.services.money.invoices import views as invoices
from gpulease.testing.callers import TenantCtx
from gpulease.testing.clock import MovableClock
from gpulease.testing.factories import deliver
from gpulease.worker.jobs.money import invoices as invoice_job
from gpulease.worker.runner import Worker

CAL = ZoneInfo("Asia/Shanghai")


def test_the_month_is_drafted_on_the_first_and_finalized_on_its_day(
    fleet: Platform, tenant: TenantCtx, worker: Worker, key: str
) -> None:
    fleet.clock = clock = MovableClock(datetime(2026, 11, 10, 9, tzinfo=CAL))
    deliver(fleet, tenant, worker, key)  # a charge in November
    assert invoice_job.JOB.run(fleet, "test") is None  # mid-month: nothing to do
    clock.at = datetime(2026, 12, 1, 0, 30, tzinfo=CAL)
    drafted = invoice_job.JOB.run(fleet, "test")
    assert drafted is not None and drafted.drafted == 1  # type: ignore[attr-defined]
    assert invoice_job.JOB.run(fleet, "test") is None  # once
    assert invoices.list_invoices(fleet, tenant.principal).items[0].status == "draft"
    clock.at = datetime(2026, 12, 3, 0, 5, tzinfo=CAL)
    final = invoice_job.JOB.run(fleet, "test")
    assert final is not None and final.finalized == 1  # type: ignore[attr-defined]
    assert invoices.list_invoices(fleet, tenant.principal).items[0].status == "final"
