"""The image-saves pipeline: a tenant's container saved as an image (services/storage/
saved_images.py asks for it). A save is claimed (a commit and a push take minutes: the
heartbeat keeps the claim, so no two workers do it twice and no row lock is held
meanwhile), committed on its host's engine and pushed outside any transaction, then ready or
failed; a retryable error tries it again after a while."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, and_, or_, select

from gpulease.db.claims import Claim, begin_step, guarded, release
from gpulease.db.ops_tables import SavedImage
from gpulease.db.repositories import instance_allocations
from gpulease.db.tables import Instance
from gpulease.domain.phrases import phrase
from gpulease.domain.states import SAVED_IMAGE, InstanceStatus, SavedImageStatus
from gpulease.lifecycle.history import WORKER, note
from gpulease.lifecycle.writer import Move, transition
from gpulease.platform import Platform
from gpulease.ports.runtime import RuntimeError_
from gpulease.services.storage.saved_images import PREFIX, RETRY_AFTER_S
from gpulease.worker.pipelines.base import Pipeline
from gpulease.worker.pipelines.fence import Fence, Fenced, fenced_runtime

log = logging.getLogger("gpulease.images")


def _due(now: datetime) -> list[ColumnElement[bool]]:
    return [SavedImage.status == SavedImageStatus.SAVING.value,
            or_(SavedImage.next_attempt_at.is_(None), SavedImage.next_attempt_at <= now)]


def _pending(now: datetime) -> ColumnElement[bool]:
    """A save no worker holds, due now (a held one is its holder's to finish)."""
    return and_(*_due(now), or_(SavedImage.lock_expires_at.is_(None),
                                SavedImage.lock_expires_at < now))


def step_save(p: Platform, held: Claim) -> None:
    """Commit and push the container, outside any transaction, then say how it went."""
    with p.db.write() as s:
        row = guarded(s, SavedImage, held)
        if row is None or row.status != SavedImageStatus.SAVING.value:
            return
        instance_id, reference = row.source_instance_id, row.reference
        begin_step(row, "save")
    with p.db.read() as s:
        inst = s.get(Instance, instance_id)
        held_gpus = instance_allocations(s, instance_id) if inst is not None else []
    if inst is None or inst.status != InstanceStatus.READY.value or not held_gpus:
        _finish(p, held, None, "the container was released before it was saved")
        return
    node = held_gpus[0][0]
    runtime = fenced_runtime(p.drivers.runtime_for(node.runtime_url), Fence(p, held))
    try:
        result = runtime.save(instance_id, node.name, node.runtime_url, reference)
    except Fenced:
        return  # taken over while this worker was away: the new holder saves it
    except RuntimeError_ as exc:
        if exc.retryable:
            log.warning("saving %s: %s; again in %.0f s", held.id, exc, RETRY_AFTER_S)
            with p.db.write() as s:
                row = guarded(s, SavedImage, held)
                if row is not None:
                    row.next_attempt_at = p.clock.now() + timedelta(seconds=RETRY_AFTER_S)
                    release(row)
            return
        _finish(p, held, None, str(exc))
    else:
        _finish(p, held, (result.digest, result.size_bytes), None)


PIPELINE = Pipeline("image-saves", SavedImage, _due, _pending, step_save,
                    region=select(Instance.region)  # the saved container's site
                    .where(Instance.id == SavedImage.source_instance_id).scalar_subquery())


def _finish(p: Platform, held: Claim, saved: tuple[str, int] | None,
            reason: str | None) -> None:
    now = p.clock.now()
    with p.db.write() as s:
        row = guarded(s, SavedImage, held)
        if row is None or row.status != SavedImageStatus.SAVING.value:
            return
        release(row)
        row.next_attempt_at = None
        if saved is not None:
            row.digest, row.size_bytes = saved
            row.saved_at = now
            transition(s, p, row, SAVED_IMAGE, "save", Move(now, actor=WORKER))
            note(s, now, row.source_instance_id, "image_saved",
                 phrase("saved as {prefix}{name} ({digest})", prefix=PREFIX,
                 name=row.name, digest=row.digest), actor=WORKER)
        else:
            transition(s, p, row, SAVED_IMAGE, "fail", Move(now, actor=WORKER,
                                                            reason=(reason or "")[:1000]))
            note(s, now, row.source_instance_id, "image_failed",
                 phrase("{prefix}{name} could not be saved: {reason}", prefix=PREFIX,
                 name=row.name, reason=reason), actor=WORKER)
