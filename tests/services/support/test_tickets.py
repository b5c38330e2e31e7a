"""Tickets: a GPU fault on a rented server opens a P1 ticket for its tenant (one per node,
GPU and kind), the tenant and the operators are told (a real SMTP server), operators
respond, mitigate and resolve along the timeline; tenants open their own; SLA clocks warn
operators before a breach and count breaches. SQLite and PostgreSQL."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import httpx
import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import select
from typer.testing import CliRunner

from gpulease.api.app import create_app
from gpulease.cli.main import app
from gpulease.db.tables import Node
from gpulease.demo_agents import DemoAgents
from gpulease.domain.errors import Conflict, Forbidden, InvalidInput, NotFound, OutOfStock
from gpulease.domain.states import NODE, NodeStatus
from gpulease.platform import Platform
from gpulease.schemas.tickets import TicketAction, TicketComment
from gpulease.services.agents import evidence
from gpulease.services.fleet import node_changes
from gpulease.services.instances import actions
from gpulease.services.instances import views as instances
from gpulease.services.money import wallet
from gpulease.services.platform import control_metrics, notify
from gpulease.services.support import repairs, replacement, tickets
from gpulease.services.support.ticket_sla import sweep_ticket_clocks
from gpulease.testing.callers import TenantCtx, auth, new_tenant
from gpulease.testing.clock import MovableClock
from gpulease.testing.factories import deliver, notices
from gpulease.testing.servers import LiveServer
from gpulease.worker.runner import Worker
from tests.fixtures.mail import Inbox, Receiver
from tests.web.console import signed_in


def test_a_gpu_that_falls_off_the_bus_opens_one_p1_ticket_and_operators_follow_it(
    fleet: Platform, tenant: TenantCtx, operator: TenantCtx, key: str, smtp: Inbox,
    receiver: Receiver,
) -> None:
    fleet.settings.egress_allow = ["127.0.0.1/32"]  # the operators' bridge, on loopback
    fleet.settings.operator_webhook_url = receiver.url
    fleet.settings.operator_webhook_secret = "whsec_operators"
    clock = MovableClock(datetime(2026, 12, 1, 9, 0, tzinfo=UTC))
    fleet.clock = clock
    worker = Worker(fleet)
    iid = deliver(fleet, tenant, worker, key)
    node = instances.show_instance(fleet, tenant.principal, iid).nodes[0].name
    op = operator.principal
    node_changes.inject_faults(fleet, op, node, ["xid79:3"])
    agents = DemoAgents(fleet, interval_s=2)
    agents.tick()
    agents.tick()  # the fault seen again: the same alert, the same ticket
    (ticket,) = tickets.list_tickets(fleet, tenant.principal).items
    assert (ticket.severity, ticket.kind, ticket.gpu, ticket.node, ticket.instance_id) == (
        "P1", "gpu_fell_off_bus", 3, node, iid)
    assert ticket.summary == "GPU 3 not responding (XID 79: fell off the bus)"
    assert ticket.status == "open" and ticket.response_due == ticket.opened_at + timedelta(
        minutes=15)
    assert notices(fleet, tenant.tenant_id)[-1] == "ticket_opened"
    assert notices(fleet, notify.OPERATORS) == ["ops_p1"]
    notify.deliver_notices(fleet)
    subjects = {m["Subject"]: m["To"] for m in smtp.messages}
    assert "[gpulease] New P1 ticket" in subjects
    assert "@example.com" in subjects["[gpulease] A ticket was opened"]  # the tenant's admin
    assert subjects["[gpulease] New P1 ticket"].startswith("op-")  # the operators
    ((headers, body),) = receiver.calls  # the operators' bridge: the tenant has none
    assert notify.verify_signature("whsec_operators", headers["X-Gpulease-Signature"], body)
    assert json.loads(body)["event"] == "ticket.p1"

    other = new_tenant(fleet, "neighbour")
    assert tickets.list_tickets(fleet, other.principal).total == 0
    with pytest.raises(NotFound):
        tickets.show_ticket(fleet, other.principal, ticket.id)
    with pytest.raises(Forbidden):
        tickets.resolve(fleet, tenant.principal, ticket.id, TicketAction())

    tickets.comment(fleet, op, ticket.id, TicketComment(body="card swap needs a window",
                                                        internal=True))
    shown = tickets.show_ticket(fleet, tenant.principal, ticket.id)
    assert shown.status == "open"  # an internal note is no response
    assert not any("card swap" in e.text for e in shown.timeline)
    replied = tickets.comment(fleet, op, ticket.id, TicketComment(body="Looking at it now."))
    assert replied.status == "acknowledged" and replied.acknowledged_at is not None
    evidence = [e for e in replied.timeline if e.kind == "evidence"]
    assert len(evidence) == 1 and evidence[0].ref and evidence[0].ref.startswith("alert:")
    clock.move(hours=2)  # out of service two hours: beyond the 60-minute outage SLA
    mitigated = tickets.mitigate(fleet, op, ticket.id, TicketAction(note="GPU reset"))
    assert mitigated.status == "mitigated"
    (claim_line,) = [e for e in mitigated.timeline if e.ref and e.ref.startswith("claim:")]
    claim_id = claim_line.ref.split(":", 1)[1]  # type: ignore[union-attr]
    with LiveServer(fleet) as server:
        env = {"GPULEASE_URL": server.url, "GPULEASE_TOKEN": operator.token}
        listed = CliRunner().invoke(app, ["sla-claims", "--status", "open"], env=env)
        assert listed.exit_code == 0 and claim_id in listed.output
        claims = CliRunner().invoke(app, ["sla-claims", "--json"], env=env)
        assert f"ticket {ticket.id}: hardware alert" in claims.output
        decided = CliRunner().invoke(app, ["sla-decide", claim_id, "--confirm"], env=env)
        assert decided.exit_code == 0 and "confirmed" in decided.output, decided.output
    credited = wallet.ledger(fleet, tenant.principal).items[0]
    assert credited.kind == "credit" and credited.amount > 0

    node_changes.inject_faults(fleet, op, node, [])
    agents.tick()  # the GPU answers again
    cleared = tickets.show_ticket(fleet, op, ticket.id)
    assert cleared.timeline[-1].text == "agent alert cleared"
    done = tickets.resolve(fleet, op, ticket.id, TicketAction(note="GPU reseated"))
    assert done.status == "resolved" and [e.kind for e in done.timeline][0] == "opened"
    with pytest.raises(Conflict):
        tickets.comment(fleet, tenant.principal, ticket.id, TicketComment(body="thanks"))
    assert notices(fleet, tenant.tenant_id)[-1] == "ticket_resolved"
    node_changes.inject_faults(fleet, op, node, ["xid79:3"])
    agents.tick()  # the same fault again: a new ticket
    assert tickets.list_tickets(fleet, op, tickets.OPEN).total == 1
    assert tickets.list_tickets(fleet, op).total == 2


def test_tenants_open_their_own_and_the_clocks_warn_before_a_breach(
    fleet: Platform, tenant: TenantCtx, operator: TenantCtx, key: str
) -> None:
    clock = MovableClock(datetime(2026, 12, 1, 9, 0, tzinfo=UTC))
    fleet.clock = clock
    iid = deliver(fleet, tenant, Worker(fleet), key)
    with LiveServer(fleet) as server:
        env = {"GPULEASE_URL": server.url, "GPULEASE_TOKEN": tenant.token}
        r = CliRunner().invoke(app, ["ticket", "open", iid, "--summary", "NCCL hangs on "
                                     "all-reduce", "--severity", "p1", "--gpu", "2",
                                     "--details", "since 08:40"], env=env)
        assert r.exit_code == 0, r.output
        listed = httpx.get(f"{server.url}/api/v1/tickets", headers=auth(tenant.token)).json()
        ticket = listed["items"][0]
        assert (ticket["severity"], ticket["kind"], ticket["gpu"]) == ("P1", "tenant_report", 2)
        bad = httpx.post(f"{server.url}/api/v1/tickets", headers=auth(tenant.token),
                         json={"instance_id": iid, "summary": "x" * 10, "gpu": 9})
        assert bad.status_code == 422 and "GPUs 0 to 7" in bad.json()["detail"]
        env_op = {"GPULEASE_URL": server.url, "GPULEASE_TOKEN": operator.token}
        r = CliRunner().invoke(app, ["tickets", "--open"], env=env_op)
        assert r.exit_code == 0 and ticket["id"] in r.output

    t = ticket["id"]
    clock.move(minutes=11)
    assert sweep_ticket_clocks(fleet) == 0  # 11 of 15 minutes: not yet 80 %
    clock.move(minutes=1, seconds=30)
    assert sweep_ticket_clocks(fleet) == 1  # 12.5 minutes: the response clock at risk
    assert sweep_ticket_clocks(fleet) == 0  # once per clock
    assert notices(fleet, notify.OPERATORS)[-1] == "ops_sla_risk"
    assert tickets.show_ticket(fleet, operator.principal, t).at_risk == ["response"]
    clock.move(minutes=5)
    late = tickets.show_ticket(fleet, operator.principal, t)
    assert late.breached == ["response"] and late.at_risk == []
    fleet.settings.escalation_emails = ["duty-manager@example.com"]
    assert sweep_ticket_clocks(fleet) == 1  # the breach escalated, once
    assert sweep_ticket_clocks(fleet) == 0
    assert notices(fleet, notify.OPERATORS)[-1] == "ops_sla_breach"
    mailed: list[tuple[list[str], str, str]] = []
    fleet.settings.smtp_host = "127.0.0.1"
    with pytest.MonkeyPatch.context() as m:
        m.setattr(notify, "send_email", lambda _p, to, subject, text: mailed.append(
            (to, subject, text)))
        notify.deliver_notices(fleet)
    breach = [(to, text) for to, subject, text in mailed if "breached" in subject]
    assert breach and "duty-manager@example.com" in breach[0][0]
    assert "response breached 2 min ago (due 2026-12-01 09:15 UTC)" in breach[0][1]
    metrics = {(s.name, s.labels.get("clock")): s.value for f in text_string_to_metric_families(
        control_metrics.render(fleet).decode()) for s in f.samples
        if s.name == "gpulease_tickets_breached"}
    assert metrics[("gpulease_tickets_breached", "response")] == 1
    acked = tickets.acknowledge(fleet, operator.principal, t, TicketAction(note="on it"))
    assert acked.breached == ["response"]  # answered late: still a breach, for the record
    withdrawn = tickets.resolve(fleet, tenant.principal, t, TicketAction(note="our bug"))
    assert withdrawn.status == "resolved"
    assert tickets.list_tickets(fleet, tenant.principal, tickets.OPEN).total == 0


def test_a_swap_moves_the_lease_to_a_spare_and_sends_the_faulty_node_to_repair(
    fleet: Platform, tenant: TenantCtx, operator: TenantCtx, key: str
) -> None:
    worker = Worker(fleet)
    iid = deliver(fleet, tenant, worker, key)
    before = instances.show_instance(fleet, tenant.principal, iid)
    old = before.nodes[0].name
    actions.reveal_credentials(fleet, tenant.principal, iid)  # the first password, seen
    op = operator.principal
    node_changes.inject_faults(fleet, op, old, ["xid79:3"])
    DemoAgents(fleet).tick()
    (ticket,) = tickets.list_tickets(fleet, op, tickets.OPEN).items
    with LiveServer(fleet) as server:
        env = {"GPULEASE_URL": server.url, "GPULEASE_TOKEN": operator.token}
        r = CliRunner().invoke(app, ["ticket", "swap", ticket.id, "--note", "GPU 3 dead"],
                               env=env)
        assert r.exit_code == 0, r.output
        assert "is being replaced by" in r.output
    told = tickets.show_ticket(fleet, tenant.principal, ticket.id).timeline
    assert any("not copied: the new server starts empty" in e.text for e in told)
    swapping = instances.show_instance(fleet, tenant.principal, iid)
    assert swapping.status == "ready"  # the lease runs on
    worker.run_until_idle()
    after = instances.show_instance(fleet, tenant.principal, iid)
    assert after.status == "ready" and after.stage == "ready"
    serving = [n.name for n in after.nodes if n.status == "active"]
    assert len(serving) == 1 and serving[0] != old
    assert [n.name for n in after.nodes] == serving  # the swapped-out one is history only
    with fleet.db.read() as s:
        faulty = s.scalar(select(Node).where(Node.name == old))
        assert faulty is not None and faulty.status == "repair"
        assert faulty.instance_id is None and "ticket" in (faulty.status_reason or "")
    certificates, _ = evidence.instance_certificates(fleet, tenant.principal, iid, 100, 0)
    erased = [c for c in certificates if c["node"] == old]
    assert erased and all(c["passed"] for c in erased)  # the tenant's disks erased first
    done = tickets.show_ticket(fleet, tenant.principal, ticket.id)
    assert done.status == "mitigated" and done.mitigated_at is not None
    assert any("now on" in e.text or "replaced" in e.text for e in done.timeline)
    with LiveServer(fleet) as server:  # a new password, shown once, as the notice says
        env = {"GPULEASE_URL": server.url, "GPULEASE_TOKEN": tenant.token}
        shown = CliRunner().invoke(app, ["credentials", iid], env=env)
        assert shown.exit_code == 0 and "password: " in shown.output, shown.output
        twice = CliRunner().invoke(app, ["credentials", iid], env=env)
        assert twice.exit_code != 0 and "already shown" in twice.output, twice.output
    stages = [st.stage for st in after.stages]
    assert "replacing" in stages and "replaced" in stages

    # the spare is taken: the next fault has nowhere to go, and the ticket says so
    node_changes.inject_faults(fleet, op, serving[0], ["ecc-dbe:1"])
    DemoAgents(fleet).tick()
    second = next(t for t in tickets.list_tickets(fleet, op, tickets.OPEN).items
                  if t.node == serving[0])
    with pytest.raises(OutOfStock, match="No spare h100-80g-x8 server is free"):
        replacement.swap(fleet, op, second.id)
    shown = tickets.show_ticket(fleet, tenant.principal, second.id)
    assert "No spare" in shown.timeline[-1].text
    assert instances.show_instance(fleet, tenant.principal, iid).stage == "ready"

    # the repair loop: parts replaced and recorded, erased, back in the pool
    (running,) = [r for r in repairs.list_repairs(fleet, op, open_only=True).items
                  if r.node == old]
    assert (running.node, running.ticket_id, running.finished_at) == (old, ticket.id, None)
    with pytest.raises(InvalidInput, match="serials"):
        repairs.finish(fleet, op, old, " ")
    with LiveServer(fleet) as server:
        env = {"GPULEASE_URL": server.url, "GPULEASE_TOKEN": operator.token}
        r = CliRunner().invoke(app, ["node", "repaired", old, "--parts",
                                     "GPU 3: 1652200012 -> 1652200087"], env=env)
        assert r.exit_code == 0 and "repaired in" in r.output, r.output
        listed = CliRunner().invoke(app, ["repairs", "--json"], env=env)
        assert listed.exit_code == 0 and "1652200087" in listed.output
    worker.run_until_idle()
    with fleet.db.read() as s:
        back = s.scalar(select(Node).where(Node.name == old))
        assert back is not None and back.status == "available"
    (done_repair,) = [r for r in repairs.list_repairs(fleet, op).items if r.finished_at]
    assert done_repair.hours is not None and done_repair.parts
    internal = tickets.show_ticket(fleet, op, ticket.id).timeline
    assert any("repaired: GPU 3" in e.text and e.internal for e in internal)
    assert not any("repaired: GPU 3" in e.text
                   for e in tickets.show_ticket(fleet, tenant.principal, ticket.id).timeline)

    # no spare was found for the second fault: releasing refunds the unused time in full
    assert tickets.show_ticket(fleet, op, second.id).status == "open"
    lease_price = Decimal("84480")
    actions.release_instance(fleet, tenant.principal, iid)
    refund = wallet.ledger(fleet, tenant.principal).items[0]
    assert refund.kind == "refund" and "unused time" in (refund.reference or "")
    assert lease_price * Decimal("0.99") < refund.amount <= lease_price

    # the known-faulty server never returns to stock: erased, then out for repair on the
    # ticket, which follows it; an operator cannot put it back before it is repaired
    worker.run_until_idle()
    faulty_name = serving[0]
    with fleet.db.read() as s:
        faulty = s.scalar(select(Node).where(Node.name == faulty_name))
        assert faulty is not None and faulty.status == "repair", faulty.status
        assert faulty.fault_ticket_id == second.id
        assert f"ticket {second.id} reports a fault" in (
            NODE.refusal(NodeStatus.AVAILABLE, faulty) or "")
    (following,) = [r for r in repairs.list_repairs(fleet, op, open_only=True).items
                    if r.node == faulty_name]
    assert following.ticket_id == second.id and following.instance_id is None
    assert any("follows it" in e.text for e in tickets.show_ticket(fleet, op, second.id).timeline)
    repairs.finish(fleet, op, faulty_name, "GPU 1: 1652200013 -> 1652200090")
    worker.run_until_idle()
    with fleet.db.read() as s:
        back = s.scalar(select(Node).where(Node.name == faulty_name))
        assert back is not None and back.status == "available" and back.fault_ticket_id is None


def test_a_tenant_without_an_instance_asks_about_its_account(
    fleet: Platform, tenant: TenantCtx, operator: TenantCtx,
) -> None:
    """A question before any order (billing, an offer) is a ticket too: with no instance,
    no node and no GPU, on the default support clocks; a GPU without an instance is 422."""
    with LiveServer(fleet) as server:
        env = {"GPULEASE_URL": server.url, "GPULEASE_TOKEN": tenant.token}
        r = CliRunner().invoke(app, ["ticket", "open", "--summary", "VAT on top for our "
                                     "fapiao?", "--severity", "p3"], env=env)
        assert r.exit_code == 0, r.output
        (asked,) = httpx.get(f"{server.url}/api/v1/tickets",
                             headers=auth(tenant.token)).json()["items"]
        assert (asked["instance_id"], asked["node"], asked["severity"]) == (None, None, "P3")
        bad = httpx.post(f"{server.url}/api/v1/tickets", headers=auth(tenant.token),
                         json={"summary": "GPU 3 is slow", "gpu": 3})
        assert bad.status_code == 422 and "name the instance" in bad.json()["detail"]
        with TestClient(create_app(fleet)) as client:
            signed_in(fleet, tenant, client)
            assert 'id="ticket-form"' in client.get("/console/tickets").text  # no instance
            made = client.post("/console/tickets", data={"instance_id": "", "summary":
                               "An invoice for November?", "severity": "P3"},
                               follow_redirects=False)
            assert made.status_code == 303
    assert tickets.list_tickets(fleet, operator.principal, tickets.OPEN).total == 2
