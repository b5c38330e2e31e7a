"""The stage timeout job: a node whose stage outlived its deadline fails to maintenance, and
its order with the reason; a silent acceptance run too (nothing of the tenant's was on the
server yet)."""

from __future__ import annotations

import pytest

from gpulease.platform import Platform
from gpulease.services.instances import views as instances
from gpulease.testing.callers import TenantCtx
from gpulease.testing.factories import node_by_name, node_name_of, occupy_spare, place, sim
from gpulease.worker.runner import Worker


def _waiting_for_its_agent(fleet: Platform, tenant: TenantCtx, key: str,
                           spare_taken: bool = False) -> str:
    """An order's node stepped to the stage that waits for its agent, which never calls
    in; the node's name."""
    iid = place(fleet, tenant, key)
    if spare_taken:
        occupy_spare(fleet, tenant, key)
    name = node_name_of(fleet, tenant, iid)
    sim(fleet).inject_fault(name, "agent_up", "hang", times=1000)
    stepper = Worker(fleet, owner="stepper")
    for _ in range(200):  # bounded: to the stage that waits for the agent
        stepper.step()
        if node_by_name(fleet, name).stage == "wait_agent":
            break
    assert node_by_name(fleet, name).stage == "wait_agent"
    return name


def test_stage_timeout_is_swept(fleet: Platform, tenant: TenantCtx, key: str) -> None:
    # power_off and power_on finish within it under load (1 s was not always enough when
    # the whole suite ran beside it)
    fleet.settings.stage_timeout_s = 2.5
    worker = Worker(fleet, owner="sweeper", sweep_every_s=0.05)
    iid = place(fleet, tenant, key)
    occupy_spare(fleet, tenant, key)
    name = node_name_of(fleet, tenant, iid)
    sim(fleet).inject_fault(name, "agent_up", "hang", times=1000)
    worker.run_until_idle(timeout_s=20, settle_s=0.5)
    node = node_by_name(fleet, name)
    assert node.status == "maintenance"
    assert "stage wait_agent timed out" in (node.status_reason or "")
    assert "never called in" in (node.status_reason or "")  # what it most likely means
    view = instances.show_instance(fleet, tenant.principal, iid)
    assert view.status == "failed" and "timed out" in (view.status_reason or "")


def test_a_silent_acceptance_fails_the_server_which_held_nothing_of_the_tenants(
    fleet: Platform, tenant: TenantCtx, key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The acceptance suite runs before the tenant's keys go on the server (configure comes
    after verify) and before its address is shown: a tenant cannot stop the agent during
    it, so an agent that falls silent there is the server's fault, whatever the BMC says."""
    from gpulease.domain.states import NodeStage
    from gpulease.worker.pipelines import node_steps
    from gpulease.worker.pipelines.node_steps import Outcome, StepResult

    fleet.settings.stage_timeout_s = 1.0
    configured: list[str] = []
    monkeypatch.setitem(node_steps.STEPS, NodeStage.VERIFY,
                        lambda p, job: StepResult(Outcome.WAIT))  # the agent never answers
    real_configure = node_steps.STEPS[NodeStage.CONFIGURE]
    monkeypatch.setitem(node_steps.STEPS, NodeStage.CONFIGURE, lambda p, job: (
        configured.append(job.node_id), real_configure(p, job))[1])
    worker = Worker(fleet, owner="sweeper", sweep_every_s=0.05)
    iid = place(fleet, tenant, key)
    occupy_spare(fleet, tenant, key)
    name = node_name_of(fleet, tenant, iid)
    worker.run_until_idle(timeout_s=20, settle_s=0.5)
    assert node_by_name(fleet, name).status == "maintenance"  # the BMC's health is OK
    view = instances.show_instance(fleet, tenant.principal, iid)
    assert view.status == "failed" and "verify timed out" in (view.status_reason or "")
    assert configured == []  # the tenant's keys never went on it


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
    name = _waiting_for_its_agent(fleet, tenant, key)
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


def test_after_the_clock_went_back_a_stage_waits_one_timeout_not_the_jump(
    fleet: Platform, tenant: TenantCtx, key: str
) -> None:
    """The clock went back an hour during a deploy: its stage deadline lay an hour and a
    timeout ahead, and the node sat for the hour. It is brought back to one timeout from
    the clock's now, and the stage then times out as any other."""
    from datetime import UTC, datetime, timedelta

    from gpulease.testing.clock import MovableClock
    from gpulease.worker.jobs.fleet import timeouts

    fleet.settings.stage_timeout_s = 60.0
    name = _waiting_for_its_agent(fleet, tenant, key, spare_taken=True)
    assert node_by_name(fleet, name).stage_deadline is not None
    fleet.clock = clock = MovableClock(datetime.now(UTC))
    clock.move(hours=-1)  # the clock steps back
    assert timeouts.sweep_timeouts(fleet, "sweeper") == 0
    brought = node_by_name(fleet, name).stage_deadline
    assert brought is not None and brought == clock.now() + timedelta(seconds=60)
    clock.move(seconds=61)
    assert timeouts.sweep_timeouts(fleet, "sweeper") >= 1  # (the occupied spare too)
    assert node_by_name(fleet, name).status == "maintenance"
