"""The card path and the burn-in: a rented server with a faulty GPU is repaired in place in
a window its tenant accepts (disks kept, nothing erased) and comes back burned in and
accepted, the ticket mitigated; a repaired node that fails its burn-in goes back to repair;
a tenant who releases during the repair gets the erase after it. SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select
from typer.testing import CliRunner

from gpulease.cli.main import app
from gpulease.db.ops_tables import Repair
from gpulease.db.tables import AcceptanceReport, EraseCertificate, Node
from gpulease.domain.errors import Conflict, Forbidden, InvalidInput
from gpulease.platform import Platform
from gpulease.schemas.tickets import RepairWindowAnswer, RepairWindowProposal
from gpulease.services.fleet import node_changes
from gpulease.services.instances import actions
from gpulease.services.instances import views as instances
from gpulease.services.platform.notify import OPERATORS
from gpulease.services.support import card_repairs, repairs, tickets
from gpulease.testing.callers import TenantCtx
from gpulease.testing.clock import MovableClock
from gpulease.testing.factories import faulty_rental, notices
from gpulease.testing.servers import LiveServer
from gpulease.worker.runner import Worker


def node_row(p: Platform, name: str) -> Node:
    with p.db.read() as s:
        node = s.scalar(select(Node).where(Node.name == name))
        assert node is not None
        s.expunge(node)
        return node


def test_a_card_repair_in_the_tenants_window_brings_the_same_node_back_burned_in(
    fleet: Platform, tenant: TenantCtx, operator: TenantCtx, key: str
) -> None:
    clock = MovableClock(datetime(2026, 12, 1, 9, 0, tzinfo=UTC))
    fleet.clock = clock
    worker = Worker(fleet)
    iid, node, ticket_id = faulty_rental(fleet, tenant, operator, key, worker)
    op = operator.principal
    with pytest.raises(InvalidInput, match="in the past"):
        card_repairs.propose_window(fleet, op, ticket_id, RepairWindowProposal(
            start=clock.now() - timedelta(hours=1), hours=2))
    with LiveServer(fleet) as server:
        env = {"GPULEASE_URL": server.url, "GPULEASE_TOKEN": operator.token}
        r = CliRunner().invoke(app, ["ticket", "repair", ticket_id, "--start",
                                     "2026-12-01T10:00:00+00:00", "--hours", "3",
                                     "--note", "GPU 3 reseated or replaced"], env=env)
        assert r.exit_code == 0, r.output
        assert "waiting for the" in r.output, r.output
    assert notices(fleet, tenant.tenant_id)[-1] == "ticket_updated"
    with pytest.raises(Forbidden):
        card_repairs.answer_window(fleet, op, ticket_id, RepairWindowAnswer(accept=True))
    declined = card_repairs.answer_window(fleet, tenant.principal, ticket_id,
                                          RepairWindowAnswer(accept=False, note="training"))
    assert declined.repair_window is None
    assert notices(fleet, OPERATORS)[-1] == "ops_window"
    with pytest.raises(Conflict, match="no repair window"):
        card_repairs.answer_window(fleet, tenant.principal, ticket_id,
                                   RepairWindowAnswer(accept=True))
    card_repairs.propose_window(fleet, op, ticket_id, RepairWindowProposal(
        start=datetime(2026, 12, 1, 11, 0, tzinfo=UTC), hours=3))
    with LiveServer(fleet) as server:
        env = {"GPULEASE_URL": server.url, "GPULEASE_TOKEN": tenant.token}
        r = CliRunner().invoke(app, ["ticket", "window", ticket_id, "--accept"], env=env)
        assert r.exit_code == 0 and "accepted" in r.output, r.output

    assert card_repairs.begin_due_windows(fleet) == 0  # not yet
    clock.move(hours=2)
    assert card_repairs.begin_due_windows(fleet) == 1
    out = node_row(fleet, node)
    assert (out.status, out.instance_id, out.safe_off_due) == ("repair", iid, True)
    shown = instances.show_instance(fleet, tenant.principal, iid)
    assert (shown.status, shown.stage) == ("ready", "in_repair")
    with pytest.raises(Conflict):
        card_repairs.propose_window(fleet, op, ticket_id, RepairWindowProposal(
            start=clock.now(), hours=1))
    worker.run_until_idle()
    assert node_row(fleet, node).status == "repair"  # nothing moves until it is repaired

    clock.move(hours=1)
    with LiveServer(fleet) as server:
        env = {"GPULEASE_URL": server.url, "GPULEASE_TOKEN": operator.token}
        r = CliRunner().invoke(app, ["node", "repaired", node, "--parts",
                                     "GPU 3: 1652200012 -> 1652200087"], env=env)
        assert r.exit_code == 0 and f"back to instance {iid}" in r.output, r.output
    worker.run_until_idle()
    back = node_row(fleet, node)
    assert (back.status, back.instance_id) == ("active", iid)
    after = instances.show_instance(fleet, tenant.principal, iid)
    assert (after.status, after.stage) == ("ready", "ready")
    assert [n.name for n in after.nodes] == [node]  # the same server, the tenant's own
    stages = [st.stage for st in after.stages]
    assert "in_repair" in stages and "repaired" in stages
    with fleet.db.read() as s:
        assert not s.scalars(select(EraseCertificate).where(
            EraseCertificate.node_id == back.id)).all()  # the disks were kept
        (report,) = s.scalars(select(AcceptanceReport).where(
            AcceptanceReport.node_id == back.id, AcceptanceReport.trigger == "burn_in")).all()
        assert report.passed
        repair = s.scalar(select(Repair).where(Repair.node_id == back.id))
        assert repair is not None and repair.instance_id == iid
        assert repair.burned_in_at is not None and repair.burn_in_report_id == report.id
    done = tickets.show_ticket(fleet, tenant.principal, ticket_id)
    assert done.status == "mitigated" and done.repair_window is not None
    assert any("back from repair, burned in" in e.text for e in done.timeline)
    assert any(e.ref and e.ref.startswith("claim:") for e in done.timeline)  # the outage


def test_a_failed_burn_in_goes_back_to_repair_and_a_release_waits_for_the_erase(
    fleet: Platform, tenant: TenantCtx, operator: TenantCtx, key: str
) -> None:
    clock = MovableClock(datetime(2026, 12, 1, 9, 0, tzinfo=UTC))
    fleet.clock = clock
    worker = Worker(fleet)
    iid, node, ticket_id = faulty_rental(fleet, tenant, operator, key, worker)
    op = operator.principal
    card_repairs.propose_window(fleet, op, ticket_id, RepairWindowProposal(
        start=clock.now(), hours=4))
    card_repairs.answer_window(fleet, tenant.principal, ticket_id,
                               RepairWindowAnswer(accept=True))
    assert card_repairs.begin_due_windows(fleet) == 1
    actions.release_instance(fleet, tenant.principal, iid)  # during the repair
    worker.run_until_idle()
    assert instances.show_instance(fleet, tenant.principal, iid).status == "releasing"
    assert node_row(fleet, node).instance_id == iid  # its disks still hold the tenant's data

    repairs.finish(fleet, op, node, "GPU 3 replaced")
    node_changes.inject_faults(fleet, op, node, ["xid79:5"])  # the new part is bad too
    worker.run_until_idle()
    failed = node_row(fleet, node)
    assert failed.status == "repair" and failed.instance_id is None
    assert "burn-in" in (failed.status_reason or "")
    assert instances.show_instance(fleet, tenant.principal, iid).status == "released"
    with fleet.db.read() as s:
        certificates = s.scalars(select(EraseCertificate).where(
            EraseCertificate.node_id == failed.id)).all()
        assert certificates and all(c.instance_id == iid and c.passed for c in certificates)
        runs = s.scalars(select(Repair).where(Repair.node_id == failed.id)
                         .order_by(Repair.id)).all()
        assert [r.finished_at is not None for r in runs] == [True, False]
        assert runs[1].reason.startswith("burn-in failed") and runs[1].ticket_id == ticket_id
    internal = tickets.show_ticket(fleet, op, ticket_id).timeline
    assert any("failed its burn-in" in e.text for e in internal)

    repairs.finish(fleet, op, node, "GPU 5 replaced")  # the simulated faults go with it
    worker.run_until_idle()
    assert node_row(fleet, node).status == "available"
    with fleet.db.read() as s:
        last = s.scalars(select(Repair).where(Repair.node_id == failed.id)
                         .order_by(Repair.id.desc())).first()
        assert last is not None and last.burned_in_at is not None
        # a later release's clean runs no burn-in: none is due
        assert repairs.burn_in_due(s, failed.id) is None
