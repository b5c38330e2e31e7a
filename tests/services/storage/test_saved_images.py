"""Saved environments on the demo's simulated hosts: a running container saved under a
name and ordered again as my/NAME by its tenant only (the newest save of the name), with
the catalog image beneath it; bad names, bare metal, unknown or deleted images refused with
what to do. SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

import pytest
from typer.testing import CliRunner

from gpulease.cli.main import app
from gpulease.db.ops_tables import SavedImage
from gpulease.db.tables import Instance
from gpulease.domain.errors import Conflict, InvalidInput, NotFound
from gpulease.platform import Platform
from gpulease.schemas import OrderRequest
from gpulease.services.orders import ordering as orders
from gpulease.services.storage import saved_images
from gpulease.testing.callers import TenantCtx, new_tenant
from gpulease.testing.factories import deliver
from gpulease.testing.servers import LiveServer
from gpulease.worker.pipelines import image_saves
from gpulease.worker.pipelines.base import drive, pending
from gpulease.worker.runner import Worker

CONTAINER = dict(kind="container", offer="rtx4090-24g-container", gpus=1)


def test_a_saved_container_is_ordered_again_by_its_tenant_only(
    fleet: Platform, tenant: TenantCtx, key: str
) -> None:
    worker = Worker(fleet)
    me = tenant.principal
    first = orders.place_order(fleet, me, OrderRequest(ssh_keys=[key], **CONTAINER))[0].id
    server = deliver(fleet, tenant, worker, key)
    worker.run_until_idle()
    for bad in ("Torch", "-x", "a" * 64, "a/b"):
        with pytest.raises(InvalidInput, match="image name"):
            saved_images.save(fleet, me, first, bad)
    with pytest.raises(Conflict, match="bare metal"):
        saved_images.save(fleet, me, server, "env")
    with pytest.raises(InvalidInput, match="No saved image"):
        orders.place_order(fleet, me, OrderRequest(ssh_keys=[key], image="my/env",
                                                   **CONTAINER))

    running = Worker(fleet, owner="threads")
    running.start(threads=1)
    try:
        with LiveServer(fleet) as live:
            env = {"GPULEASE_URL": live.url, "GPULEASE_TOKEN": tenant.token}
            r = CliRunner().invoke(app, ["image", "save", first, "--name", "env", "--wait"],
                                   env=env)
            saved = CliRunner().invoke(app, ["image", "saved"], env=env)
    finally:
        running.stop()
    assert r.exit_code == 0 and "my/env" in r.output and "ready" in r.output, r.output
    assert saved.exit_code == 0 and "my/env" in saved.output
    newer = saved_images.save(fleet, me, first, "env")
    with pytest.raises(Conflict, match="still being saved"):
        saved_images.save(fleet, me, first, "env")
    with fleet.db.write() as s:  # another worker is pushing it: this one leaves it
        held = s.get(SavedImage, newer.id)
        assert held is not None
        held.lock_token, held.lock_owner = "another-worker", "another-worker"
        held.lock_expires_at = fleet.clock.now() + timedelta(minutes=5)
    assert drive(fleet, image_saves.PIPELINE) == 0
    assert pending(fleet, image_saves.PIPELINE) is False
    with fleet.db.write() as s:  # that worker died: its claim ran out
        held = s.get(SavedImage, newer.id)
        assert held is not None
        held.lock_expires_at = fleet.clock.now() - timedelta(seconds=1)
    assert pending(fleet, image_saves.PIPELINE)
    assert drive(fleet, image_saves.PIPELINE) == 1

    second = orders.place_order(fleet, me, OrderRequest(ssh_keys=[key], image="my/env",
                                                        **CONTAINER))[0].id
    worker.run_until_idle()
    with fleet.db.read() as s:
        row = s.get(Instance, second)
        assert row is not None and row.status == "ready"
        assert row.saved_image_id == newer.id  # the newest save of the name
        assert row.image_id == "ubuntu22.04-cuda12.4-pytorch2.5"  # the offer's, beneath
    with pytest.raises(InvalidInput, match="OS image"):
        orders.place_order(fleet, me, OrderRequest(
            ssh_keys=[key], image="my/env", sku="h100-80g-x8", region="ningxia-1"))

    stranger = new_tenant(fleet)
    with pytest.raises(InvalidInput, match="No saved image"):
        orders.place_order(fleet, stranger.principal, OrderRequest(
            ssh_keys=[key], image="my/env", **CONTAINER))
    with pytest.raises(NotFound):
        saved_images.delete(fleet, stranger.principal, newer.id)
    for image in saved_images.list_saved(fleet, me).items:
        saved_images.delete(fleet, me, image.id)
    assert saved_images.list_saved(fleet, me).items == []
    with pytest.raises(InvalidInput, match="No saved image"):
        orders.place_order(fleet, me, OrderRequest(ssh_keys=[key], image="my/env",
                                                   **CONTAINER))
