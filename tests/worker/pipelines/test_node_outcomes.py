"""A failed node's situation decides what follows, one handler each: delivering moves the
order to a spare (or fails it), cleaning says its disks are not certified erased, a spare
of a swap gives the replacement up when no other is free; a finished deploy activates the
node, a finished clean frees it and lets go of its instance."""

from __future__ import annotations

from sqlalchemy import select

from gpulease.db.tables import Instance, Node
from gpulease.domain.states import NodeStatus
from gpulease.platform import Platform
from gpulease.services.instances import views as instances
from gpulease.testing.callers import TenantCtx
from gpulease.testing.factories import node_name_of, occupy_spare, place
from gpulease.worker.pipelines import instances as instance_pipeline
from gpulease.worker.pipelines.base import drive
from gpulease.worker.pipelines.node_outcomes import (
    ON_FAILURE,
    Failure,
    Situation,
    fail_node,
    failure_situation,
)
from gpulease.worker.runner import Worker


def _node(p: Platform, name: str) -> Node:
    with p.db.read() as s:
        node = s.scalar(select(Node).where(Node.name == name))
    assert node is not None
    return node


def test_every_situation_has_its_handler() -> None:
    assert set(ON_FAILURE) == set(Situation)


def test_a_delivering_node_moves_its_order_to_a_spare(
    fleet: Platform, tenant: TenantCtx, key: str
) -> None:
    iid = place(fleet, tenant, key)
    drive(fleet, instance_pipeline.PIPELINE)  # its node deploys
    name = node_name_of(fleet, tenant, iid)
    now = fleet.clock.now()
    with fleet.db.write() as s:
        node = s.scalar(select(Node).where(Node.name == name).with_for_update())
        assert node is not None
        situation, inst = failure_situation(s, fleet, node, Failure("power", now))
        assert situation is Situation.DELIVERING and inst is not None and inst.id == iid
        fail_node(s, fleet, node, Failure("power supply gone", now))
    failed = _node(fleet, name)
    assert (failed.status, failed.instance_id) == (NodeStatus.MAINTENANCE, None)
    view = instances.show_instance(fleet, tenant.principal, iid)
    assert view.status == "deploying" and view.nodes[-1].name != name  # on the spare
    assert any(st.stage == "moved" for st in view.stages)


def test_with_no_spare_the_order_fails_with_the_reason(
    fleet: Platform, tenant: TenantCtx, key: str
) -> None:
    iid = place(fleet, tenant, key)
    occupy_spare(fleet, tenant, key)
    drive(fleet, instance_pipeline.PIPELINE, limit=2)
    name = node_name_of(fleet, tenant, iid)
    with fleet.db.write() as s:
        node = s.scalar(select(Node).where(Node.name == name).with_for_update())
        assert node is not None
        fail_node(s, fleet, node, Failure("power supply gone", fleet.clock.now()))
    view = instances.show_instance(fleet, tenant.principal, iid)
    assert view.status == "failed" and "power supply gone" in (view.status_reason or "")


def test_a_node_failing_its_clean_says_its_disks_are_not_erased(
    fleet: Platform, tenant: TenantCtx, worker: Worker, key: str
) -> None:
    iid = place(fleet, tenant, key)
    worker.run_until_idle()
    name = node_name_of(fleet, tenant, iid)
    from gpulease.services.instances import actions

    actions.release_instance(fleet, tenant.principal, iid)
    drive(fleet, instance_pipeline.PIPELINE)  # its node starts cleaning
    with fleet.db.write() as s:
        node = s.scalar(select(Node).where(Node.name == name).with_for_update())
        assert node is not None and node.status == NodeStatus.CLEANING
        fail_node(s, fleet, node, Failure("erase timed out", fleet.clock.now()))
    failed = _node(fleet, name)
    assert failed.status == NodeStatus.MAINTENANCE
    assert "not certified erased" in (failed.status_reason or "")


def test_a_finished_clean_frees_the_node_and_the_release_finishes(
    fleet: Platform, tenant: TenantCtx, worker: Worker, key: str
) -> None:
    iid = place(fleet, tenant, key)
    worker.run_until_idle()
    name = node_name_of(fleet, tenant, iid)
    deployed = _node(fleet, name)
    assert deployed.status == NodeStatus.ACTIVE  # finish_node after the deploy's last step
    from gpulease.services.instances import actions

    actions.release_instance(fleet, tenant.principal, iid)
    worker.run_until_idle()
    freed = _node(fleet, name)
    assert (freed.status, freed.instance_id, freed.stage) == (NodeStatus.AVAILABLE, None, None)
    assert freed.generation > deployed.generation  # claims read before the clean fail
    with fleet.db.read() as s:
        inst = s.get(Instance, iid)
        assert inst is not None and inst.status == "released"
