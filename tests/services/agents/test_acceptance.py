"""Acceptance gates delivery; agents enroll once and push telemetry that raises and closes
alerts; on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from gpulease.db.tables import HardwareAlert, Node
from gpulease.domain.errors import Forbidden, InvalidInput, NotFound, Unauthorized
from gpulease.platform import Platform
from gpulease.services.agents import credentials as agent_credentials
from gpulease.services.agents import evidence
from gpulease.services.fleet import inventory
from gpulease.services.instances import actions
from gpulease.services.instances import views as instances
from gpulease.services.telemetry import pushes
from gpulease.testing.callers import TenantCtx, new_tenant
from gpulease.testing.factories import (
    double_allocated_gpus,
    node_by_name,
    node_name_of,
    place,
    sim,
    window,
)
from gpulease.worker.runner import Worker


def offer_nodes(p: Platform) -> list[str]:
    with p.db.read() as s:
        return list(s.scalars(select(Node.name).where(Node.sku == "h100-80g-x8",
                                                      Node.region == "ningxia-1")))


def test_failed_acceptance_moves_the_order_and_keeps_the_report(
    fleet: Platform, tenant: TenantCtx, worker: Worker, key: str
) -> None:
    iid = place(fleet, tenant, key)
    bad = node_name_of(fleet, tenant, iid)
    sim(fleet).set_gpu_faults(bad, ["slow-gpu:2"])
    worker.run_until_idle()
    view = instances.show_instance(fleet, tenant.principal, iid)
    assert view.status == "ready", view.status_reason
    assert [n.name for n in view.nodes if n.status == "active"] != [bad]
    node = node_by_name(fleet, bad)
    assert node.status == "maintenance"
    assert "acceptance failed" in (node.status_reason or "")
    assert "matmul_bf16 gpu2" in (node.status_reason or "")
    reports = evidence.acceptance_reports(fleet, tenant.principal, iid)
    assert [(r["node"], r["passed"]) for r in reports] == [
        (bad, False), (next(n.name for n in view.nodes if n.status == "active"), True)]
    assert reports[0]["report"]["simulated"] and "FAIL" in reports[0]["report"]["summary"]
    assert "verify result" in [st.stage for st in view.stages]
    assert double_allocated_gpus(fleet) == []


def test_no_good_node_left_fails_the_order_with_the_reason(
    fleet: Platform, tenant: TenantCtx, worker: Worker, key: str
) -> None:
    for name in offer_nodes(fleet):
        sim(fleet).set_gpu_faults(name, ["nvlink-down:0:3"])
    iid = place(fleet, tenant, key)
    worker.run_until_idle()
    view = instances.show_instance(fleet, tenant.principal, iid)
    assert view.status == "failed"
    assert "acceptance failed" in (view.status_reason or "")
    assert "allreduce_busbw" in (view.status_reason or "")
    assert all(node_by_name(fleet, n).status == "maintenance" for n in offer_nodes(fleet))


def test_bad_gpu_fault_spec_is_refused_at_injection(fleet: Platform) -> None:
    with pytest.raises(ValueError, match="unknown fault"):
        sim(fleet).set_gpu_faults(offer_nodes(fleet)[0], ["melted"])


def test_enroll_push_alerts_and_scoping(
    fleet: Platform, tenant: TenantCtx, operator: TenantCtx, worker: Worker, key: str
) -> None:
    iid = place(fleet, tenant, key)
    worker.run_until_idle()
    name = node_name_of(fleet, tenant, iid)
    with pytest.raises(Forbidden):
        agent_credentials.operator_enrollment(fleet, tenant.principal, name)
    token = agent_credentials.operator_enrollment(fleet, operator.principal, name)
    node_id, credential = agent_credentials.register(fleet, token, "gpu-host", "10.0.0.5:9400",
                                          {"simulated_gpus": True})
    assert node_id == node_by_name(fleet, name).id
    report = inventory.get_node(fleet, operator.principal, name).agent_report
    assert report and report["hostname"] == "gpu-host" and report["address"] == "10.0.0.5:9400"
    with pytest.raises(Unauthorized, match="used or expired"):
        agent_credentials.register(fleet, token, "gpu-host", None, None)  # one-time
    with pytest.raises(Unauthorized):
        pushes.ingest(fleet, "glan_wrong", window())
    with pytest.raises(InvalidInput, match="GPU summary"):
        pushes.ingest(fleet, credential, [{"index": 0}])

    raised = pushes.ingest(fleet, credential, window("xid79:4"))
    assert [(a["gpu"], a["kind"]) for a in raised] == [(4, "gpu_fell_off_bus")]
    metrics = pushes.instance_metrics(fleet, tenant.principal, iid)
    (node,) = metrics["nodes"]
    assert len(node["gpus"]) == 8 and node["simulated"] is True
    assert [a["kind"] for a in node["alerts"]] == ["gpu_fell_off_bus"]
    # a window without the fault closes the alert
    assert pushes.ingest(fleet, credential, window()) == []
    assert pushes.instance_metrics(fleet, tenant.principal, iid)["nodes"][0]["alerts"] == []
    with fleet.db.read() as s:
        rows = s.scalars(select(HardwareAlert)).all()
        assert [(r.kind, r.closed_at is not None) for r in rows] == [("gpu_fell_off_bus", True)]
    other = new_tenant(fleet, "other")
    with pytest.raises(NotFound):
        pushes.instance_metrics(fleet, other.principal, iid)
    # re-enrolling replaces the credential
    _, second = agent_credentials.register(fleet, agent_credentials.operator_enrollment(
        fleet, operator.principal, name), "gpu-host", None, None)
    with pytest.raises(Unauthorized):
        pushes.ingest(fleet, credential, window())
    assert pushes.ingest(fleet, second, window()) == []


def test_certificates_are_scoped_to_the_lease(
    fleet: Platform, tenant: TenantCtx, operator: TenantCtx, worker: Worker, key: str
) -> None:
    iid = place(fleet, tenant, key)
    worker.run_until_idle()
    name = node_name_of(fleet, tenant, iid)
    actions.release_instance(fleet, tenant.principal, iid)
    worker.run_until_idle()
    (first, _), _ = evidence.instance_certificates(fleet, tenant.principal, iid)
    other = new_tenant(fleet, "other")
    with pytest.raises(NotFound):
        evidence.certificate(fleet, other.principal, first["id"])
    assert evidence.certificate(fleet, operator.principal, first["id"])["node"] == name
    assert len(evidence.node_certificates(fleet, operator.principal, name).items) == 2
    one = evidence.node_certificates(fleet, operator.principal, name, limit=1)
    assert len(one.items) == 1 and one.total == 2
    with pytest.raises(Forbidden):
        evidence.node_certificates(fleet, tenant.principal, name)


def test_demo_stand_in_agents_push_through_the_real_ingest_path(
    fleet: Platform, tenant: TenantCtx, worker: Worker, key: str
) -> None:
    from gpulease.demo_agents import DemoAgents

    iid = place(fleet, tenant, key)
    worker.run_until_idle()
    name = node_name_of(fleet, tenant, iid)
    sim(fleet).set_gpu_faults(name, ["row-remap:7"])
    demo = DemoAgents(fleet, interval_s=5)
    assert demo.tick() == 1 and demo.tick() == 1  # enrolls once, pushes twice
    (node,) = pushes.instance_metrics(fleet, tenant.principal, iid)["nodes"]
    assert node["simulated"] is True and len(node["gpus"]) == 8
    assert all(g["simulated"] and g["samples"] == 5 for g in node["gpus"])
    assert [(a["gpu"], a["kind"]) for a in node["alerts"]] == [(7, "row_remap_failure")]


def test_on_demand_verify_with_a_stand_in_agent(
    fleet: Platform, tenant: TenantCtx, worker: Worker, key: str
) -> None:
    from gpulease.domain.errors import Conflict
    from gpulease.services.agents import node_agent as node_agents

    iid = place(fleet, tenant, key)
    with pytest.raises(Conflict, match="ready instance"):
        node_agents.verify_now(fleet, tenant.principal, iid)
    worker.run_until_idle()
    sim(fleet).set_gpu_faults(node_name_of(fleet, tenant, iid), ["thermal:1"])
    (run,) = node_agents.verify_now(fleet, tenant.principal, iid)
    assert run.status == "done" and run.passed is False  # the burn-in saw throttling
    reports = evidence.acceptance_reports(fleet, tenant.principal, iid)
    assert [(r["trigger"], r["passed"]) for r in reports] == [("delivery", True),
                                                              ("on_demand", False)]
    page = evidence.acceptance_reports(fleet, tenant.principal, iid, limit=1, offset=1)
    assert [r["trigger"] for r in page] == ["on_demand"]
    assert evidence.count_acceptance_reports(fleet, tenant.principal, iid) == 2
    from gpulease.domain.errors import TooManyRequests

    with pytest.raises(TooManyRequests, match="at least 300 s apart") as refused:
        node_agents.verify_now(fleet, tenant.principal, iid)  # a burn-in is not a toy
    assert 0 < refused.value.retry_after_s <= 301
    # an on-demand failure is reported; the tenant's machine is not taken away
    assert instances.show_instance(fleet, tenant.principal, iid).status == "ready"
    # and it is a P1 ticket for the tenant, with the report as its evidence
    from gpulease.services.support import tickets

    (ticket,) = tickets.list_tickets(fleet, tenant.principal).items
    assert (ticket.kind, ticket.severity, ticket.instance_id) == ("acceptance_failed", "P1", iid)
    timeline = tickets.show_ticket(fleet, tenant.principal, ticket.id).timeline
    assert any(e.ref == f"report:{reports[1]['id']}" and "acceptance failed" in e.text
               for e in timeline)
