"""A tenant's object storage: its bucket and access keys."""

from __future__ import annotations

from fastapi import APIRouter

from gpulease.api.access import TENANT_USERS, Caller, access
from gpulease.api.deps import PlatformDep, PrincipalDep
from gpulease.schemas.fleet import StorageKeyCreated, StorageKeyView, StorageQuota, StorageView
from gpulease.services.storage import buckets as storage
from gpulease.services.storage import quota as storage_quota

router = APIRouter(prefix="/storage", tags=["storage"])


@router.get("", response_model=StorageView, openapi_extra=access(*TENANT_USERS))
def show(p: PlatformDep, actor: PrincipalDep) -> StorageView:
    """The S3 endpoint, your bucket (made on first look), what it holds and your keys."""
    return storage.show(p, actor)


@router.post("/keys", response_model=StorageKeyCreated, status_code=201,
             openapi_extra=access(Caller.ADMIN))
def new_key(p: PlatformDep, actor: PrincipalDep) -> StorageKeyCreated:
    """A new access key to your bucket only; the secret is in this answer and nowhere else."""
    return storage.new_key(p, actor)


@router.delete("/keys/{key_id}", response_model=StorageKeyView,
               openapi_extra=access(Caller.ADMIN, owned=True))
def revoke_key(key_id: str, p: PlatformDep, actor: PrincipalDep) -> StorageKeyView:
    return storage.revoke_key(p, actor, key_id)


@router.put("/quotas/{tenant_id}", response_model=StorageQuota,
            openapi_extra=access(Caller.OPERATOR))
def set_quota(tenant_id: str, body: StorageQuota, p: PlatformDep, actor: PrincipalDep
              ) -> StorageQuota:
    """Operator: a tenant's bucket quota in GB (null: the platform's default). Past it the
    platform starts no backup into the bucket (a lapsed lease's last ones excepted)."""
    return StorageQuota(quota_gb=storage_quota.set_quota(p, actor, tenant_id, body.quota_gb))
