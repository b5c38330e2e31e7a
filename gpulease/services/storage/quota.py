"""A bucket's quota, enforced by the object store itself: every few minutes each bucket
is measured, and one at or past its quota gets a policy that lets its tenant's keys read,
list and delete but not write (the store refuses the upload, whatever client sent it);
under the quota again, the keys may write again. The keys' policy is set again at every
check and any bucket policy removed: the bucket's access is the platform's (a key may
touch objects only, never the bucket's settings). The platform's own runs in the bucket
(a lapsed lease's last backups: data first) use a separate store user, never blocked."""

from __future__ import annotations

import logging
from datetime import timedelta

from sqlalchemy import or_, select

from gpulease.db.ops_tables import StorageAccount
from gpulease.domain.accounts import Principal
from gpulease.domain.errors import NotFound
from gpulease.ports.object_store import ObjectStore, ObjectStoreError
from gpulease.ports.records import Records, Stored
from gpulease.services.storage.meter import measured, quota_bytes

log = logging.getLogger("gpulease.storage")
PLATFORM_USER_SUFFIX = "-platform"


def platform_user(store_user: str) -> str:
    """The store user of the platform's own runs in a tenant's bucket."""
    return f"{store_user}{PLATFORM_USER_SUFFIX}"


def enforce(p: Records, store: ObjectStore, tenant: str, used: int) -> bool | None:
    """The bucket's writes opened or closed by `used` against its quota; True when closed,
    False when open, None when the store did not take the change (tried again at the next
    check)."""
    with p.db.read() as s:
        account = s.get(StorageAccount, tenant)
        if account is None:
            return None
        full = used >= quota_bytes(p, account)
        changed = full != (account.writes_blocked_at is not None)
        user, bucket = account.store_user, account.bucket
    try:  # at every check, changed or not: what a key did to the bucket's access is undone
        store.set_writable(user, bucket, not full)
    except ObjectStoreError as exc:
        log.warning("bucket %s: writes not %s: %s", bucket, "closed" if full else "opened",
                    exc)
        return None
    if not changed:
        return full
    with p.db.write() as s:
        held = s.get(StorageAccount, tenant, with_for_update=True)
        assert held is not None
        held.writes_blocked_at = p.clock.now() if full else None
    log.info("bucket %s: %s", bucket, "writes refused past its quota" if full
             else "writes allowed again")
    return full


def check_quotas(p: Stored, limit: int = 100) -> int:
    """The buckets not measured for GPULEASE_STORAGE_QUOTA_CHECK_S measured again (the
    oldest first) and their writes opened or closed; returns how many were measured."""
    store = p.object_store()
    if store is None:
        return 0
    now = p.clock.now()
    stale = now - timedelta(seconds=p.settings.storage_quota_check_s)
    with p.db.read() as s:
        due = list(s.execute(select(StorageAccount.tenant_id, StorageAccount.bucket).where(
            or_(StorageAccount.measured_at.is_(None), StorageAccount.measured_at < stale))
            .order_by(StorageAccount.measured_at.nulls_first()).limit(limit)))
    for tenant, bucket in due:
        try:
            used = store.bucket_bytes(bucket)  # outside any transaction: slow I/O
        except ObjectStoreError as exc:
            log.warning("bucket %s not measured: %s", bucket, exc)
            continue
        with p.db.write() as s:
            account = s.get(StorageAccount, tenant, with_for_update=True)
            if account is None:
                continue
            measured(s, p, account, used, p.clock.now())
        enforce(p, store, tenant, used)
    return len(due)


def set_quota(p: Stored, actor: Principal, tenant: str, quota_gb: float | None
              ) -> float:
    """Operator: the tenant's bucket quota in GB (None: the platform's default)."""
    actor.require_operator()
    with p.db.write() as s:
        account = s.get(StorageAccount, tenant, with_for_update=True)
        if account is None:
            raise NotFound("Tenant {tenant} has no bucket yet (made when the tenant first "
                           "runs `gpulease storage`).", tenant=tenant)
        account.quota_gb = quota_gb
        used = account.used_bytes
        if used is not None:
            measured(s, p, account, used, p.clock.now())
    store = p.object_store()
    if used is not None and store is not None:  # the new quota opens or closes writes now
        enforce(p, store, tenant, used)
    return quota_gb or p.settings.storage_quota_gb
