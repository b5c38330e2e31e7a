"""The stage timeout job: a node whose stage outlived its deadline fails to maintenance, and
its order with the reason."""

from __future__ import annotations

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
