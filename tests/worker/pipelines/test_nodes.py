"""The provisioning engine under faults, on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select, update

from gpulease.db.tables import Instance, Node
from gpulease.platform import Platform
from gpulease.ports.bmc import BmcEndpoint
from gpulease.services.instances import actions
from gpulease.services.instances import views as instances
from gpulease.testing.callers import TenantCtx
from gpulease.testing.clock import LeapingClock
from gpulease.testing.factories import (
    double_allocated_gpus,
    node_by_name,
    node_name_of,
    occupy_spare,
    place,
    sim,
)
from gpulease.worker.pipelines.base import claim_due
from gpulease.worker.pipelines.node_steps import Outcome, StepInput, StepResult
from gpulease.worker.pipelines.nodes import _apply_node
from gpulease.worker.runner import Worker

H100 = dict(sku="h100-80g-x8", region="ningxia-1")


def test_transient_bmc_errors_are_retried(
    fleet: Platform, tenant: TenantCtx, worker: Worker, key: str
) -> None:
    iid = place(fleet, tenant, key)
    name = node_name_of(fleet, tenant, iid)
    sim(fleet).inject_fault(name, "power_on", "transient", times=2)
    worker.run_until_idle()
    view = instances.show_instance(fleet, tenant.principal, iid)
    assert view.status == "ready"
    retries = [st for st in view.stages if st.stage == "power_on (retry)"]
    assert len(retries) == 2 and "503" in (retries[0].message or "")


def test_a_failed_node_is_replaced_by_a_free_one(
    fleet: Platform, tenant: TenantCtx, worker: Worker, key: str
) -> None:
    iid = place(fleet, tenant, key)
    name = node_name_of(fleet, tenant, iid)
    sim(fleet).inject_fault(name, "insert_media", "permanent")
    worker.run_until_idle()
    view = instances.show_instance(fleet, tenant.principal, iid)
    assert view.status == "ready", view.status_reason
    (moved,) = [st for st in view.stages if st.stage == "moved"]
    assert f"node {name} failed" in (moved.message or "") and "answered 404" in moved.message
    # it lists the server it runs on; the failed one is in its stages only
    assert [(n.name != name, n.status) for n in view.nodes] == [(True, "active")]
    assert node_by_name(fleet, name).status == "maintenance"
    assert double_allocated_gpus(fleet) == []


def test_permanent_fault_sends_node_to_maintenance_with_the_bmc_message(
    fleet: Platform, tenant: TenantCtx, worker: Worker, key: str
) -> None:
    iid = place(fleet, tenant, key)
    occupy_spare(fleet, tenant, key)
    name = node_name_of(fleet, tenant, iid)
    sim(fleet).inject_fault(name, "insert_media", "permanent")
    worker.run_until_idle()
    view = instances.show_instance(fleet, tenant.principal, iid)
    assert view.status == "failed"
    assert "attach_media failed" in (view.status_reason or "")
    assert "answered 404" in (view.status_reason or "")
    node = node_by_name(fleet, name)
    assert node.status == "maintenance" and "answered 404" in (node.status_reason or "")
    assert node.instance_id is None
    assert double_allocated_gpus(fleet) == []


def test_retries_are_bounded(
    fleet: Platform, tenant: TenantCtx, worker: Worker, key: str
) -> None:
    iid = place(fleet, tenant, key)
    occupy_spare(fleet, tenant, key)
    name = node_name_of(fleet, tenant, iid)
    sim(fleet).inject_fault(name, "power_state", "transient", times=50)
    worker.run_until_idle()
    node = node_by_name(fleet, name)
    assert node.status == "maintenance"
    assert "power_off failed after 4 attempts" in (node.status_reason or "")
    assert instances.show_instance(fleet, tenant.principal, iid).status == "failed"


def test_a_failed_cluster_node_fails_the_order_and_frees_the_rest(
    fleet: Platform, tenant: TenantCtx, worker: Worker, key: str
) -> None:
    iid = place(fleet, tenant, key, kind="cluster", nodes=2)
    names = [n.name for n in instances.show_instance(fleet, tenant.principal, iid).nodes]
    sim(fleet).inject_fault(names[0], "agent_configure", "permanent")
    worker.run_until_idle()
    view = instances.show_instance(fleet, tenant.principal, iid)
    assert view.status == "failed" and names[0] in (view.status_reason or "")
    assert node_by_name(fleet, names[0]).status == "maintenance"
    healthy = node_by_name(fleet, names[1])
    assert healthy.status == "available" and healthy.instance_id is None
    assert sim(fleet).snapshot(names[1])["erase_count"] == 1  # deployed, so erased


def test_an_expired_lock_is_taken_over_and_the_stale_write_is_dropped(
    fleet: Platform, tenant: TenantCtx, key: str
) -> None:
    fleet.clock = clock = LeapingClock()
    iid = place(fleet, tenant, key)
    worker = Worker(fleet, owner="live")
    worker.step()  # instance: pending -> deploying; node due at power_off
    (dead,) = claim_due(fleet, Node, "dead-worker", extra=[Node.status == "deploying"])
    worker.step()  # the live worker may not take the locked node
    with fleet.db.read() as s:
        node = s.get(Node, dead.id)
        assert node is not None and node.lock_owner == "dead-worker"
        assert node.stage == "power_off" and node.lock_token == dead.token
    clock.leap += timedelta(seconds=fleet.settings.lock_ttl_s + 1)
    worker.run_until_idle()
    assert instances.show_instance(fleet, tenant.principal, iid).status == "ready"
    # The dead worker wakes up and applies its old result: it must change nothing.
    job = StepInput(node_id=dead.id, node_name="", stage="power_off", bmc_driver="simulated",
                  endpoint=BmcEndpoint("", "", "", ""), instance_id=iid, image_url="",
                  agent_media_url="", ssh_keys=(), root_password="", hostname="")
    _apply_node(fleet, dead, job, StepResult(Outcome.ADVANCE))
    with fleet.db.read() as s:
        node = s.get(Node, dead.id)
        assert node is not None and node.status == "active" and node.stage is None


def _lose_a_worker_inside_configure(fleet: Platform, tenant: TenantCtx, key: str
                                    ) -> tuple[str, str, Worker]:
    fleet.clock = clock = LeapingClock()
    iid = place(fleet, tenant, key)
    name = node_name_of(fleet, tenant, iid)
    worker = Worker(fleet, owner="live")
    for _ in range(100):
        if node_by_name(fleet, name).stage == "configure":
            break
        worker.step()
    # A worker claims the configure step, marks it in progress and dies mid-I/O.
    (dead,) = claim_due(fleet, Node, "dead-worker", extra=[Node.name == name])
    with fleet.db.write() as s:
        s.execute(update(Node).where(Node.id == dead.id).values(step_in_progress="configure"))
    clock.leap += timedelta(seconds=fleet.settings.lock_ttl_s + 1)
    return iid, name, worker


def test_a_worker_lost_inside_an_unsafe_step_moves_the_order_to_a_spare_and_cleans(
    fleet: Platform, tenant: TenantCtx, key: str
) -> None:
    """The step is not repeated on the server it was lost on (it is cleaned, not blamed);
    the order goes on on a free server of its offer."""
    iid, name, worker = _lose_a_worker_inside_configure(fleet, tenant, key)
    worker.run_until_idle()
    view = instances.show_instance(fleet, tenant.principal, iid)
    serving = [n.name for n in view.nodes if n.status == "active"]
    assert view.status == "ready" and len(serving) == 1 and serving[0] != name
    assert any(st.stage == "moved" and "interrupted during configure" in (st.message or "")
               for st in view.stages)
    node = node_by_name(fleet, name)
    assert node.status == "available" and node.instance_id is None
    assert sim(fleet).snapshot(name)["erase_count"] == 1


def test_a_worker_lost_inside_an_unsafe_step_with_no_spare_fails_the_deploy_and_cleans(
    fleet: Platform, tenant: TenantCtx, key: str
) -> None:
    iid, name, worker = _lose_a_worker_inside_configure(fleet, tenant, key)
    occupy_spare(fleet, tenant, key)
    worker.run_until_idle()
    view = instances.show_instance(fleet, tenant.principal, iid)
    assert view.status == "failed"
    assert "interrupted during configure" in (view.status_reason or "")
    assert "not safe to repeat" in (view.status_reason or "")
    node = node_by_name(fleet, name)
    assert node.status == "available" and node.instance_id is None
    assert sim(fleet).snapshot(name)["erase_count"] == 1


def test_release_during_deploy_cleans_the_node(
    fleet: Platform, tenant: TenantCtx, key: str
) -> None:
    iid = place(fleet, tenant, key)
    name = node_name_of(fleet, tenant, iid)
    worker = Worker(fleet, owner="live")
    for _ in range(4):
        worker.step()
    actions.release_instance(fleet, tenant.principal, iid)
    worker.run_until_idle()
    assert instances.show_instance(fleet, tenant.principal, iid).status == "released"
    node = node_by_name(fleet, name)
    assert node.status == "available" and node.instance_id is None
    with fleet.db.read() as s:
        inst = s.scalar(select(Instance).where(Instance.id == iid))
        assert inst is not None and inst.root_password_enc is None


