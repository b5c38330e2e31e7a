"""The stage timeout job: a node whose stage outlived its deadline fails to maintenance, and
its order with the reason."""

from __future__ import annotations

import pytest

from gpulease.platform import Platform
from gpulease.services.instances import views as instances
from gpulease.testing.callers import TenantCtx
from gpulease.testing.factories import node_by_name, node_name_of, occupy_spare, place, sim
from gpulease.worker.runner import Worker


def test_stage_timeout_is_swept(fleet: Platform, tenant: TenantCtx, key: str) -> None:
    fleet.settings.stage_timeout_s = 0.3
    worker = Worker(fleet, owner="sweeper", sweep_every_s=0.05)
    iid = place(fleet, tenant, key)
    occupy_spare(fleet, tenant, key)
    name = node_name_of(fleet, tenant, iid)
    sim(fleet).inject_fault(name, "agent_up", "hang", times=1000)
    worker.run_until_idle(timeout_s=10, settle_s=0.5)
    node = node_by_name(fleet, name)
    assert node.status == "maintenance"
    assert "stage wait_agent timed out" in (node.status_reason or "")
    assert "never called in" in (node.status_reason or "")  # what it most likely means
    view = instances.show_instance(fleet, tenant.principal, iid)
    assert view.status == "failed" and "timed out" in (view.status_reason or "")


def test_an_acceptance_run_the_tenant_silences_is_neither_a_fault_nor_lateness(
    fleet: Platform, tenant: TenantCtx, key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tenant with the keys stopped the agent during its own delivery's acceptance: the
    verify timeout sent the server to maintenance, moved the order and paid a late-delivery
    credit. With no fault the BMC sees, the server goes on to its tenant without the report,
    and the wait is not the platform's lateness."""
    from gpulease.domain.states import NodeStage
    from gpulease.services.money import wallet
    from gpulease.worker.pipelines import node_steps
    from gpulease.worker.pipelines.node_steps import Outcome, StepResult

    fleet.settings.stage_timeout_s = 4.0
    fleet.settings.delivery_sla_s = 3.0  # the platform's own part, even under load
    monkeypatch.setitem(node_steps.STEPS, NodeStage.VERIFY,
                        lambda p, job: StepResult(Outcome.WAIT))  # the agent never answers
    worker = Worker(fleet, owner="sweeper", sweep_every_s=0.05)
    iid = place(fleet, tenant, key)
    name = node_name_of(fleet, tenant, iid)
    worker.run_until_idle(timeout_s=20, settle_s=0.5)
    view = instances.show_instance(fleet, tenant.principal, iid)
    assert view.status == "ready" and view.nodes[0].name == name  # not moved
    assert node_by_name(fleet, name).status == "active"  # not sent to maintenance
    assert any(st.stage == "acceptance_skipped" and "stopped answering" in (st.message or "")
               for st in view.stages)
    ledger = wallet.ledger(fleet, tenant.principal, limit=50).items
    assert [e.kind for e in ledger if e.kind == "credit"] == []  # no late-delivery credit


def test_a_silent_acceptance_with_a_fault_the_bmc_sees_still_fails_the_server(
    fleet: Platform, tenant: TenantCtx, key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpulease.domain.states import NodeStage
    from gpulease.worker.pipelines import node_steps
    from gpulease.worker.pipelines.node_steps import Outcome, StepResult

    fleet.settings.stage_timeout_s = 1.0
    monkeypatch.setitem(node_steps.STEPS, NodeStage.VERIFY,
                        lambda p, job: StepResult(Outcome.WAIT))
    worker = Worker(fleet, owner="sweeper", sweep_every_s=0.05)
    iid = place(fleet, tenant, key)
    occupy_spare(fleet, tenant, key)
    name = node_name_of(fleet, tenant, iid)
    sim(fleet).set_bmc_health(name, "Critical")  # the platform's own evidence of a fault
    worker.run_until_idle(timeout_s=20, settle_s=0.5)
    assert node_by_name(fleet, name).status == "maintenance"


def test_a_worker_outage_pauses_stage_timeouts(
    fleet: Platform, tenant: TenantCtx, key: str
) -> None:
    """With every worker down for ten minutes, the first one back failed every node in
    flight at once (their deadlines passed while nobody could move them). The outage now
    moves the deadlines on by as much."""
    import time
    from datetime import timedelta

    from sqlalchemy import update

    from gpulease.db.tables import Node, WorkerProcess
    from gpulease.services.platform import workers

    fleet.settings.stage_timeout_s = 60.0
    iid = place(fleet, tenant, key)
    name = node_name_of(fleet, tenant, iid)
    sim(fleet).inject_fault(name, "agent_up", "hang", times=1000)
    stepper = Worker(fleet, owner="before")
    for _ in range(200):  # bounded: to the stage that waits for the agent
        stepper.step()
        if node_by_name(fleet, name).stage == "wait_agent":
            break
    assert node_by_name(fleet, name).stage == "wait_agent"
    now = fleet.clock.now()
    workers.register(fleet, "before", 1)  # ... then every worker died, ten minutes ago
    with fleet.db.write() as s:
        s.execute(update(WorkerProcess).values(seen_at=now - timedelta(minutes=10)))
        s.execute(update(Node).where(Node.name == name).values(
            stage_started_at=now - timedelta(minutes=10),
            stage_deadline=now - timedelta(minutes=9)))
    back = Worker(fleet, owner="back", sweep_every_s=0.05)
    back.start(1)
    try:
        time.sleep(1.5)  # its sweeps run
    finally:
        back.stop()
    node = node_by_name(fleet, name)
    assert node.status == "deploying" and node.stage == "wait_agent"  # not failed
    assert node.stage_deadline is not None and node.stage_deadline > fleet.clock.now()
