"""Container instances on shared hosts: a container that fails to start fails its order and
gives its GPUs back."""

from __future__ import annotations

from gpulease.platform import Platform
from gpulease.schemas import OrderRequest
from gpulease.services.instances import views as instances
from gpulease.services.orders import ordering as orders
from gpulease.testing.callers import TenantCtx
from gpulease.testing.factories import sim
from gpulease.worker.runner import Worker


def test_a_container_that_fails_to_start_gives_its_gpus_back(
    fleet: Platform, tenant: TenantCtx, worker: Worker, key: str
) -> None:
    from gpulease.services.catalog import offers as catalog

    view, _ = orders.place_order(fleet, tenant.principal, OrderRequest(
        kind="container", offer="rtx4090-24g-container", gpus=4, ssh_keys=[key]))
    sim(fleet).inject_fault(view.nodes[0].name, "runtime_start", "permanent")
    worker.run_until_idle()
    failed = instances.show_instance(fleet, tenant.principal, view.id)
    assert failed.status == "failed" and "container start failed" in (failed.status_reason or "")
    assert [n.status for n in failed.nodes] == ["released"]  # its GPUs are free again
    free = {c.id: c.free_gpus for c in catalog.catalog_view(fleet).container_offers}
    assert free == {"rtx4090-24g-container": 16}
