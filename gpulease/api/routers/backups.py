"""Backups of a rented server's data disk to the tenant's bucket, and restores from it."""

from __future__ import annotations

from fastapi import APIRouter

from gpulease.api.access import EVERY_USER, ORDERING, access
from gpulease.api.deps import Limit, Offset, PlatformDep, PrincipalDep
from gpulease.schemas import Page
from gpulease.schemas.fleet import (
    BackupPolicyUpdate,
    BackupPolicyView,
    BackupRequest,
    BackupView,
    RestoreRequest,
)
from gpulease.services.storage import backup_policy, backups

router = APIRouter(prefix="/instances", tags=["backups"])


@router.post("/{instance_id}/backups", response_model=BackupView, status_code=202,
             openapi_extra=access(*ORDERING, owned=True))
def back_up(instance_id: str, p: PlatformDep, actor: PrincipalDep,
            body: BackupRequest | None = None) -> BackupView:
    """Back a directory of the server's data disk (default /data/checkpoints) up to your
    bucket as a snapshot (only what the bucket lacks is sent). The node's agent does it
    with a key made for the run; follow it with GET …/backups/{run_id}."""
    return backups.request(p, actor, instance_id, body or BackupRequest())


@router.post("/{instance_id}/restores", response_model=BackupView, status_code=202,
             openapi_extra=access(*ORDERING, owned=True))
def restore(instance_id: str, body: RestoreRequest, p: PlatformDep,
            actor: PrincipalDep) -> BackupView:
    """Restore a snapshot onto the server's data disk, each file verified by SHA-256."""
    return backups.request(p, actor, instance_id, body)


@router.get("/{instance_id}/backups", response_model=Page[BackupView],
            openapi_extra=access(*EVERY_USER, owned=True))
def list_runs(instance_id: str, p: PlatformDep, actor: PrincipalDep, limit: Limit = 50,
              offset: Offset = 0) -> Page[BackupView]:
    """The instance's backups and restores, newest first, with their snapshots and
    figures, a page at a time."""
    return backups.list_runs(p, actor, instance_id, limit, offset)


@router.get("/{instance_id}/backups/{run_id}", response_model=BackupView,
            openapi_extra=access(*EVERY_USER, owned=True))
def show_run(instance_id: str, run_id: str, p: PlatformDep, actor: PrincipalDep
             ) -> BackupView:
    return backups.show_run(p, actor, instance_id, run_id)


@router.get("/{instance_id}/backup-policy", response_model=BackupPolicyView,
            openapi_extra=access(*EVERY_USER, owned=True))
def show_policy(instance_id: str, p: PlatformDep, actor: PrincipalDep) -> BackupPolicyView:
    """The directory kept, the schedule, whether a lapsed lease is backed up before its
    erase, and the last success."""
    return backup_policy.show(p, actor, instance_id)


@router.patch("/{instance_id}/backup-policy", response_model=BackupPolicyView,
              openapi_extra=access(*ORDERING, owned=True))
def update_policy(instance_id: str, body: BackupPolicyUpdate, p: PlatformDep,
                  actor: PrincipalDep) -> BackupPolicyView:
    """Change the directory, the schedule (`every_hours`, 0 for none) or the backups when
    the lease lapses (`at_lease_end: false` opts out)."""
    return backup_policy.update(p, actor, instance_id, body)
