"""The instance pipeline's situations: each (status, stage) of an instance names one
situation and each situation has its handler; an order's nodes start their deploys and
its status and stage move together; a delivered instance has nothing to drive."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from gpulease.db.tables import Event, Instance
from gpulease.domain.states import InstanceStage, InstanceStatus, NodeStatus
from gpulease.platform import Platform
from gpulease.services.instances import views as instances
from gpulease.testing.callers import TenantCtx
from gpulease.testing.factories import deliver, place
from gpulease.worker.pipelines import instances as instance_pipeline
from gpulease.worker.pipelines.base import drive
from gpulease.worker.pipelines.instance_steps import ON_RECONCILE, Situation, situation
from gpulease.worker.runner import Worker

IS, ISt = InstanceStatus, InstanceStage


@pytest.mark.parametrize(("status", "stage", "expected"), [
    (IS.PENDING, ISt.ORDERED, Situation.ORDERED),
    (IS.DEPLOYING, ISt.DEPLOYING, Situation.DELIVERING),
    (IS.RELEASING, ISt.READY, Situation.ENDING),
    (IS.FAILED, ISt.FAILED, Situation.ENDING),
    (IS.READY, ISt.REPLACING, Situation.REPLACING),
    (IS.READY, ISt.IN_REPAIR, Situation.IN_REPAIR),
    (IS.READY, ISt.READY, Situation.SETTLED),
    (IS.RELEASED, ISt.RELEASED, Situation.SETTLED),
])
def test_each_instance_is_in_one_situation(status: IS, stage: ISt, expected: Situation
                                           ) -> None:
    row = SimpleNamespace(status=status.value, stage=stage.value)
    assert situation(row) is expected  # type: ignore[arg-type]


def test_every_situation_has_its_handler() -> None:
    assert set(ON_RECONCILE) == set(Situation)


def test_an_order_starts_its_nodes_deploys_status_and_stage_together(
    fleet: Platform, tenant: TenantCtx, key: str
) -> None:
    iid = place(fleet, tenant, key, kind="cluster", nodes=2)
    assert drive(fleet, instance_pipeline.PIPELINE) == 1
    view = instances.show_instance(fleet, tenant.principal, iid)
    assert (view.status, view.stage) == ("deploying", "power_off")
    assert {n.status for n in view.nodes} == {NodeStatus.DEPLOYING}
    with fleet.db.read() as s:
        moved = [(e.kind, e.to_value) for e in s.query(Event).filter(
            Event.resource == "instance", Event.resource_id == iid)]
    assert ("status", "deploying") in moved and ("stage", "deploying") in moved


def test_a_delivered_instance_has_nothing_to_drive(
    fleet: Platform, tenant: TenantCtx, worker: Worker, key: str
) -> None:
    iid = deliver(fleet, tenant, worker, key)
    with fleet.db.read() as s:
        inst = s.get(Instance, iid)
        assert inst is not None and inst.next_attempt_at is None and inst.ready_at
    assert drive(fleet, instance_pipeline.PIPELINE) == 0
