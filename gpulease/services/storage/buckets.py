"""Object storage as a product: each tenant's bucket on the platform's S3 (the embedded
SeaweedFS, or the provider's own), made on first use, with access keys scoped to it (one
tenant's key is refused on another's bucket by the store itself); a key's secret is shown
once and never kept."""

from __future__ import annotations

import contextlib

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpulease.db.ops_tables import StorageAccount, StorageKey
from gpulease.domain.accounts import Principal
from gpulease.domain.errors import BadGateway, Conflict, NotFound
from gpulease.lifecycle.history import by
from gpulease.ports.object_store import AccessKey, ObjectStore, ObjectStoreError
from gpulease.ports.records import Records, Stored
from gpulease.schemas.fleet import StorageKeyCreated, StorageKeyView, StorageView
from gpulease.services.storage import quota as storage_quota
from gpulease.services.storage.meter import (
    GB,
    first_day_to_meter,
    measure_now,
    quota_bytes,
)


def _store(p: Stored) -> ObjectStore:
    store = p.object_store()
    if store is None:
        raise Conflict("Object storage is not set up on this platform: the provider sets "
                       "GPULEASE_S3_ENDPOINT (or runs `gpulease up`, which starts one).")
    return store


def configured(p: Stored) -> None:
    """A 409 that says how, when the platform has no object storage."""
    _store(p)


def _endpoint(p: Records) -> str:
    return p.settings.s3_public_endpoint or p.settings.s3_endpoint


def bucket_of(tenant_id: str) -> str:
    return f"gl-{tenant_id.lower()}"[:63]


def _account(s: Session, p: Records, store: ObjectStore, tenant: str) -> StorageAccount:
    account = s.get(StorageAccount, tenant)
    if account is None:
        bucket = bucket_of(tenant)
        try:
            store.ensure_bucket(bucket)
        except ObjectStoreError as exc:
            raise BadGateway("{exc}. Retry shortly.", exc=exc) from None
        now = p.clock.now()
        account = StorageAccount(tenant_id=tenant, bucket=bucket, store_user=tenant,
                                 created_at=now, quota_warned=0,
                                 metered_through=first_day_to_meter(p, now))
        s.add(account)
        s.flush()
    return account


def show(p: Stored, actor: Principal) -> StorageView:
    """The tenant's endpoint, bucket (made on first look), what it holds and its keys."""
    tenant = actor.require_tenant()
    store = _store(p)
    with p.db.write() as s:
        account = _account(s, p, store, tenant)
        bucket = account.bucket
        keys = [StorageKeyView(access_key_id=k.access_key_id, created_at=k.created_at,
                               created_by=k.created_by, revoked_at=k.revoked_at)
                for k in s.scalars(select(StorageKey).where(StorageKey.tenant_id == tenant)
                                   .order_by(StorageKey.created_at))]
    try:
        used = store.bucket_bytes(bucket)
    except ObjectStoreError as exc:
        raise BadGateway("{exc}. Retry shortly.", exc=exc) from None
    with p.db.write() as s:
        held = s.get(StorageAccount, tenant, with_for_update=True)
        assert held is not None
        measure_now(s, p, held, used)
        quota = quota_bytes(p, held)
    blocked = storage_quota.enforce(p, store, tenant, used)
    addon = p.catalog.addon_by_id.get("object-storage")
    return StorageView(endpoint=_endpoint(p), region=p.settings.s3_region, bucket=bucket,
                       used_bytes=used, quota_bytes=quota,
                       free_bytes=int(p.settings.storage_free_gb * GB),
                       price_per_gb_month=addon.price if addon else None, keys=keys,
                       writes_blocked=bool(blocked))


def new_key(p: Stored, actor: Principal) -> StorageKeyCreated:
    """A new access key to the tenant's bucket (tenant admins); its secret is shown once."""
    tenant = actor.require_tenant_admin()
    store = _store(p)
    with p.db.write() as s:
        account = _account(s, p, store, tenant)
        bucket, user = account.bucket, account.store_user
        blocked = account.writes_blocked_at is not None
    try:
        key = store.create_key(user, bucket)  # the user's policy written again: …
        if blocked:  # … still read and delete only while the bucket is past its quota
            store.set_writable(user, bucket, False)
    except ObjectStoreError as exc:
        raise BadGateway("{exc}. Retry shortly.", exc=exc) from None
    with p.db.write() as s:
        s.add(StorageKey(access_key_id=key.access_key_id, tenant_id=tenant,
                         created_at=p.clock.now(), created_by=by(actor)))
    return StorageKeyCreated(endpoint=_endpoint(p), bucket=bucket,
                             access_key_id=key.access_key_id,
                             secret_access_key=key.secret_access_key)


def revoke_key(p: Stored, actor: Principal, access_key_id: str) -> StorageKeyView:
    tenant = actor.require_tenant_admin()
    with p.db.write() as s:
        key = s.scalar(select(StorageKey).where(StorageKey.access_key_id == access_key_id,
                                                StorageKey.tenant_id == tenant)
                       .with_for_update())
        if key is None:
            raise NotFound("No storage key {access_key_id} in your account; `gpulease "
                           "storage` lists them.", access_key_id=access_key_id)
        if key.revoked_at is None:
            account = s.get(StorageAccount, tenant)
            assert account is not None
            try:
                _store(p).delete_key(account.store_user, access_key_id)
            except ObjectStoreError as exc:
                raise BadGateway("{exc}. Nothing was changed; retry.", exc=exc) from None
            key.revoked_at = p.clock.now()
        return StorageKeyView(access_key_id=key.access_key_id, created_at=key.created_at,
                              created_by=key.created_by, revoked_at=key.revoked_at)


def run_user(store_user: str, run_id: str) -> str:
    """The store user of one run the platform carries out in a tenant's bucket."""
    return f"{storage_quota.platform_user(store_user)}-{run_id}"


def run_key(p: Stored, tenant: str, run_id: str, prefix: str) -> tuple[str, str, AccessKey]:
    """(endpoint, bucket, key) for one run the platform carries out in the tenant's bucket
    (a backup or restore by the node's agent; the key reaches the tenant's server): of a
    store user of the run's own, allowed on the objects under the run's `prefix` only (and
    to list the bucket), not blocked past the quota (a lapsed lease's last backup: data
    first), not listed among the tenant's keys, and gone with its user when the run ends
    (end_run_key)."""
    store = _store(p)
    with p.db.write() as s:
        account = _account(s, p, store, tenant)
        bucket, user = account.bucket, run_user(account.store_user, run_id)
    try:
        return _endpoint(p), bucket, store.create_key(user, bucket, prefix)
    except ObjectStoreError as exc:
        raise BadGateway("{exc}. Retry shortly.", exc=exc) from None


def end_run_key(p: Stored, tenant: str, run_id: str, access_key_id: str) -> bool:
    """Delete a run's key, and its user with its last key; False when the store did not
    answer (the caller retries)."""
    store = p.object_store()
    with p.db.read() as s:
        account = s.get(StorageAccount, tenant)
        user = account.store_user if account else tenant
    if store is None:
        return True
    try:
        store.delete_key(run_user(user, run_id), access_key_id)
    except ObjectStoreError:
        pass
    else:
        with contextlib.suppress(ObjectStoreError):  # a user without a key can do nothing
            store.delete_user(run_user(user, run_id))  # its last key: the user goes too
        return True
    # keys made before runs had users of their own: of the platform's user, or before 0046
    # of the tenant's
    for owner in (storage_quota.platform_user(user), user):
        try:
            store.delete_key(owner, access_key_id)
            return True
        except ObjectStoreError:
            continue
    return False
