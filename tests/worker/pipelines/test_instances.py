"""The instance pipeline: a container order starts its container outside any transaction
and is delivered; its release stops the container and gives its GPUs back; a bare-metal
order is reconciled in one transaction (worker/pipelines/instance_steps.py)."""

from __future__ import annotations

from gpulease.platform import Platform
from gpulease.schemas import OrderRequest
from gpulease.services.instances import actions
from gpulease.services.instances import views as instances
from gpulease.services.orders import ordering as orders
from gpulease.testing.callers import TenantCtx
from gpulease.testing.factories import CONTAINER_OFFER, sim
from gpulease.worker.pipelines import instances as instance_pipeline
from gpulease.worker.pipelines.base import drive


def test_a_container_starts_and_stops_through_its_steps(
    fleet: Platform, tenant: TenantCtx, key: str
) -> None:
    view, _ = orders.place_order(fleet, tenant.principal, OrderRequest(
        kind="container", offer=CONTAINER_OFFER, gpus=2, ssh_keys=[key]))
    host = view.nodes[0].name
    assert drive(fleet, instance_pipeline.PIPELINE) == 1  # started and delivered
    started = instances.show_instance(fleet, tenant.principal, view.id)
    assert started.status == "ready" and started.ip_address
    assert view.id in sim(fleet).snapshot(host).get("containers", {})
    actions.release_instance(fleet, tenant.principal, view.id)
    for _ in range(5):  # bounded: the stop, then the release's end
        if drive(fleet, instance_pipeline.PIPELINE) == 0:
            break
    ended = instances.show_instance(fleet, tenant.principal, view.id)
    assert ended.status == "released" and [n.status for n in ended.nodes] == ["released"]
    assert view.id not in sim(fleet).snapshot(host).get("containers", {})
