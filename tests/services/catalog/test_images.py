from __future__ import annotations

import httpx
import pytest

from gpulease.domain.errors import Conflict, Forbidden, InvalidInput, NotFound
from gpulease.platform import Platform
from gpulease.schemas import ImageCreate, OrderRequest
from gpulease.services.catalog import images
from gpulease.services.instances import views as instances
from gpulease.services.orders import ordering as orders
from gpulease.testing.callers import TenantCtx
from gpulease.testing.servers import LiveServer
from gpulease.worker.runner import Worker

CUSTOM = ImageCreate(id="ubuntu24.04-cuda12.8", name="Ubuntu 24.04 + CUDA 12.8",
                     os="Ubuntu 24.04 LTS", gpu_vendor="nvidia",
                     url="https://images.example.com/u2404-cu128.iso",
                     checksum="sha256:" + "0f" * 32, software=["CUDA 12.8"])


def test_custom_image_can_be_ordered_and_is_booted(
    fleet: Platform, operator: TenantCtx, tenant: TenantCtx, worker: Worker, key: str
) -> None:
    added = images.add_image(fleet, operator.principal, CUSTOM)
    assert added.custom and added.checksum == CUSTOM.checksum
    assert CUSTOM.id in {i.id for i in images.list_images(fleet)}
    req = OrderRequest(sku="h100-80g-x8", region="ningxia-1", image=CUSTOM.id, ssh_keys=[key])
    iid = orders.place_order(fleet, tenant.principal, req)[0].id
    worker.run_until_idle()
    view = instances.show_instance(fleet, tenant.principal, iid)
    assert view.status == "ready" and view.image == CUSTOM.id
    snap = fleet.drivers.fleet.snapshot(view.nodes[0].name)  # type: ignore[union-attr]
    assert snap["booted_media"] == CUSTOM.url
    with pytest.raises(Conflict, match="live instance"):
        images.remove_image(fleet, operator.principal, CUSTOM.id)
    # an NVIDIA image does not fit an Ascend server
    bad = OrderRequest(sku="ascend910b-64g-x8", region="huawei-zone", image=CUSTOM.id,
                       ssh_keys=[key])
    with pytest.raises(InvalidInput, match="does not run on huawei"):
        orders.place_order(fleet, tenant.principal, bad)


def test_only_operators_manage_images_and_ids_are_unique(
    platform: Platform, operator: TenantCtx, tenant: TenantCtx
) -> None:
    with pytest.raises(Forbidden):
        images.add_image(platform, tenant.principal, CUSTOM)
    images.add_image(platform, operator.principal, CUSTOM)
    with pytest.raises(Conflict):
        images.add_image(platform, operator.principal, CUSTOM)
    with pytest.raises(Conflict):
        images.add_image(platform, operator.principal, CUSTOM.model_copy(
            update={"id": "ubuntu22.04-base"}))
    with pytest.raises(InvalidInput, match="catalog image"):
        images.remove_image(platform, operator.principal, "ubuntu22.04-base")
    images.remove_image(platform, operator.principal, CUSTOM.id)
    with pytest.raises(NotFound):
        images.remove_image(platform, operator.principal, CUSTOM.id)


def test_bad_image_fields_over_http(
    platform: Platform, server: LiveServer, operator: TenantCtx
) -> None:
    body = CUSTOM.model_dump()
    for field, value in (("checksum", "md5:abc"), ("url", "ftp://x/y.iso"),
                         ("gpu_vendor", "amd"), ("id", "Bad Id")):
        r = httpx.post(f"{server.url}/api/v1/images", json=body | {field: value},
                       headers={"Authorization": f"Bearer {operator.token}"})
        assert r.status_code == 422 and r.json()["field"] == field, r.text
    assert [i.id for i in server.client(operator.token).images() if i.custom] == []
