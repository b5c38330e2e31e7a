"""The tickets job: operators are warned once when a ticket's response clock has run 80 %
of its SLA, and the breach is escalated once."""

from __future__ import annotations

from datetime import UTC, datetime

from gpulease.platform import Platform
from gpulease.schemas.tickets import TicketOpen
from gpulease.services.platform import notify
from gpulease.services.support import tickets
from gpulease.testing.callers import TenantCtx
from gpulease.testing.clock import MovableClock
from gpulease.testing.factories import deliver, notices
from gpulease.worker.jobs.support import ticket_clocks
from gpulease.worker.runner import Worker


def test_a_clock_at_risk_is_warned_then_its_breach_escalated(
    fleet: Platform, tenant: TenantCtx, key: str
) -> None:
    fleet.clock = clock = MovableClock(datetime(2026, 12, 1, 9, 0, tzinfo=UTC))
    iid = deliver(fleet, tenant, Worker(fleet), key)
    tickets.open_by_tenant(fleet, tenant.principal, TicketOpen(
        instance_id=iid, summary="NCCL hangs on all-reduce", severity="P1"))
    clock.move(minutes=11)
    assert ticket_clocks.JOB.run(fleet, "test") == 0  # 11 of 15 minutes: not yet 80 %
    clock.move(minutes=1, seconds=30)
    assert ticket_clocks.JOB.run(fleet, "test") == 1  # the response clock at risk
    assert ticket_clocks.JOB.run(fleet, "test") == 0  # once per clock
    assert notices(fleet, notify.OPERATORS)[-1] == "ops_sla_risk"
    clock.move(minutes=5)
    assert ticket_clocks.JOB.run(fleet, "test") == 1  # the breach, escalated once
    assert ticket_clocks.JOB.run(fleet, "test") == 0
