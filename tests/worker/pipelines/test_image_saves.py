"""The image-saves pipeline on the demo's simulated hosts: a save is claimed, committed and
pushed, then ready, its claim let go; a save whose container was released meanwhile fails
saying so."""

from __future__ import annotations

from gpulease.db.ops_tables import SavedImage
from gpulease.platform import Platform
from gpulease.services.instances import actions
from gpulease.services.storage import saved_images
from gpulease.testing.callers import TenantCtx
from gpulease.testing.factories import container
from gpulease.worker.pipelines import image_saves
from gpulease.worker.pipelines.base import drive, pending
from gpulease.worker.runner import Worker


def _row(p: Platform, image_id: str) -> SavedImage:
    with p.db.read() as s:
        row = s.get(SavedImage, image_id)
    assert row is not None
    return row


def test_a_save_is_claimed_pushed_and_let_go(fleet: Platform, tenant: TenantCtx, key: str
                                            ) -> None:
    iid = container(fleet, tenant, Worker(fleet), key, gpus=1)
    asked = saved_images.save(fleet, tenant.principal, iid, "env")
    assert pending(fleet, image_saves.PIPELINE)
    assert drive(fleet, image_saves.PIPELINE) == 1
    saved = _row(fleet, asked.id)
    assert saved.status == "ready" and (saved.digest or "").startswith("sha256:")
    assert (saved.lock_token, saved.step_in_progress) == (None, None)
    assert not pending(fleet, image_saves.PIPELINE)


def test_a_save_of_a_released_container_fails_saying_so(
    fleet: Platform, tenant: TenantCtx, key: str
) -> None:
    worker = Worker(fleet)
    iid = container(fleet, tenant, worker, key, gpus=1)
    asked = saved_images.save(fleet, tenant.principal, iid, "env")
    actions.release_instance(fleet, tenant.principal, iid)
    assert drive(fleet, image_saves.PIPELINE) == 1
    failed = _row(fleet, asked.id)
    assert failed.status == "failed" and "released" in (failed.status_reason or "")
