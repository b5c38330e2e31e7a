"""The repair-windows job: a card repair whose window the tenant accepted begins when its
start comes: the node goes out for repair still bound to its instance, to be powered off,
and the instance shows `in_repair`; before its start nothing moves."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import select

from gpulease.db.tables import Node
from gpulease.platform import Platform
from gpulease.schemas.tickets import RepairWindowAnswer, RepairWindowProposal
from gpulease.services.instances import views as instances
from gpulease.services.support import card_repairs
from gpulease.testing.callers import TenantCtx
from gpulease.testing.clock import MovableClock
from gpulease.testing.factories import faulty_rental
from gpulease.worker.jobs.support import repair_windows
from gpulease.worker.runner import Worker


def test_an_accepted_window_begins_when_its_start_comes(
    fleet: Platform, tenant: TenantCtx, operator: TenantCtx, key: str
) -> None:
    fleet.clock = clock = MovableClock(datetime(2026, 12, 1, 9, 0, tzinfo=UTC))
    iid, name, ticket = faulty_rental(fleet, tenant, operator, key, Worker(fleet))
    card_repairs.propose_window(fleet, operator.principal, ticket, RepairWindowProposal(
        start=datetime(2026, 12, 1, 11, 0, tzinfo=UTC), hours=3))
    card_repairs.answer_window(fleet, tenant.principal, ticket,
                               RepairWindowAnswer(accept=True))
    assert repair_windows.JOB.run(fleet, "test") == 0  # not yet
    clock.move(hours=2)
    assert repair_windows.JOB.run(fleet, "test") == 1
    with fleet.db.read() as s:
        node = s.scalar(select(Node).where(Node.name == name))
        assert node is not None
        assert (node.status, node.instance_id, node.safe_off_due) == ("repair", iid, True)
    shown = instances.show_instance(fleet, tenant.principal, iid)
    assert (shown.status, shown.stage) == ("ready", "in_repair")
