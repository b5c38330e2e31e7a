"""The image-saves pipeline on the demo's simulated hosts: a save is claimed, committed and
pushed, then ready, its claim let go; a save whose container was released meanwhile fails
saying so; a worker that lost its save before the commit sends nothing."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy.orm import Session

from gpulease.db.claims import Hold, claim, take
from gpulease.db.ops_tables import SavedImage
from gpulease.drivers.simulated import SimulatedRuntime
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


def test_a_worker_that_lost_its_save_before_the_commit_sends_nothing(
    fleet: Platform, tenant: TenantCtx, key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    iid = container(fleet, tenant, Worker(fleet), key, gpus=1)
    asked = saved_images.save(fleet, tenant.principal, iid, "env")
    (held,) = claim(fleet.db, SavedImage, Hold("a", fleet.clock.now(), timedelta(seconds=30)),
                    [SavedImage.id == asked.id])
    looked_up = image_saves.instance_allocations
    sent: list[str] = []

    def then_frozen(s: Session, instance_id: str) -> Any:
        with fleet.db.write() as w:  # frozen here past its lock, and taken over
            row = w.get(SavedImage, asked.id)
            assert row is not None
            take(row)
        return looked_up(s, instance_id)

    monkeypatch.setattr(image_saves, "instance_allocations", then_frozen)
    monkeypatch.setattr(SimulatedRuntime, "save", lambda *a, **k: sent.append(asked.id))
    image_saves.step_save(fleet, held)
    assert sent == []  # the fence stopped the commit: the new holder saves it
    assert _row(fleet, asked.id).status == "saving"
