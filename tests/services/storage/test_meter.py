"""Object storage metered and bounded, against the real S3 server: a bucket measured once a
day is charged in GB-days beyond the free allowance at the catalog's price, once per day
however often the sweep runs, missed days caught up; its admins told at 80 % and 100 % of
the quota; past the quota the platform starts no backup into it until an operator raises
the quota. SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from sqlalchemy import select

from gpulease.db.money_tables import LeaseNotice, UsageRecord
from gpulease.domain.errors import Conflict, Forbidden, NotFound
from gpulease.drivers.seaweedfs import EmbeddedS3
from gpulease.platform import Platform
from gpulease.schemas.fleet import BackupRequest
from gpulease.services.storage import (
    backups,
)
from gpulease.services.storage import (
    buckets as storage,
)
from gpulease.services.storage import (
    meter as storage_meter,
)
from gpulease.services.storage import (
    quota as storage_quota,
)
from gpulease.testing.callers import TenantCtx
from gpulease.testing.clock import MovableClock
from gpulease.testing.factories import deliver
from gpulease.worker.pipelines import backup_runs
from gpulease.worker.pipelines.base import drive
from gpulease.worker.runner import Worker
from tests.fixtures.storage import client, with_storage


def records(p: Platform, tenant: str) -> list[tuple[str, Decimal, Decimal]]:
    with p.db.read() as s:
        return [(r.key, Decimal(str(r.quantity)).normalize(),
                 Decimal(str(r.unit_price)).normalize()) for r in s.scalars(
            select(UsageRecord).where(UsageRecord.tenant_id == tenant,
                                      UsageRecord.kind == "object_gb_days")
            .order_by(UsageRecord.started_at))]


def notices(p: Platform, tenant: str) -> list[str]:
    with p.db.read() as s:
        return list(s.scalars(select(LeaseNotice.kind).where(
            LeaseNotice.tenant_id == tenant, LeaseNotice.kind.like("storage%"))
            .order_by(LeaseNotice.id)))


def test_a_bucket_is_charged_by_the_day_and_bounded_by_its_quota(
    fleet: Platform, clock: MovableClock, tenant: TenantCtx, operator: TenantCtx, key: str,
    s3: EmbeddedS3
) -> None:
    with_storage(fleet, s3)
    fleet.settings.storage_free_gb = 0.000_02  # 20,000 bytes free
    fleet.settings.storage_quota_gb = 0.000_1  # a 100,000-byte quota
    me = tenant.principal
    clock.at = clock.at.replace(hour=2)  # 10:00 in Beijing
    view = storage.show(fleet, me)
    assert (view.used_bytes, view.quota_bytes, view.free_bytes) == (0, 100_000, 20_000)
    assert view.price_per_gb_month == Decimal("0.12")
    made = storage.new_key(fleet, me)
    bucket = client(s3, made.access_key_id, made.secret_access_key)
    bucket.put_object(Bucket=made.bucket, Key="a.bin",  # type: ignore[attr-defined]
                      Body=b"a" * 85_000)

    assert storage_meter.meter_buckets(fleet) == 0  # today is not over
    clock.move(days=1)
    assert storage_meter.meter_buckets(fleet) == 1
    assert storage_meter.meter_buckets(fleet) == 0  # once a day
    day = (clock.at - timedelta(days=1)).astimezone(fleet.settings.zone).date()
    charged = records(fleet, tenant.tenant_id)
    # 65,000 bytes beyond the free ones, a day, at ¥0.12 per GB-month (a thirtieth a day)
    assert charged == [(f"object-storage:{day}", Decimal("0.000065"), Decimal("0.004"))]
    assert notices(fleet, tenant.tenant_id) == ["storage_80"]

    worker = Worker(fleet)
    iid = deliver(fleet, tenant, worker, key)
    bucket.put_object(Bucket=made.bucket, Key="b.bin",  # type: ignore[attr-defined]
                      Body=b"b" * 30_000)
    clock.move(days=3)  # the worker was away: each missed day charged
    assert storage_meter.meter_buckets(fleet) == 1
    assert len(records(fleet, tenant.tenant_id)) == 4
    assert records(fleet, tenant.tenant_id)[-1][1] == Decimal("0.000095")
    assert notices(fleet, tenant.tenant_id) == ["storage_80", "storage_full"]
    with pytest.raises(Conflict, match="quota"):
        backups.request(fleet, me, iid, BackupRequest(path="/data"))

    with pytest.raises(Forbidden):
        storage_quota.set_quota(fleet, me, tenant.tenant_id, 1.0)
    with pytest.raises(NotFound, match="no bucket"):
        storage_quota.set_quota(fleet, operator.principal, operator.tenant_id, 1.0)
    assert storage_quota.set_quota(fleet, operator.principal, tenant.tenant_id, 1.0) == 1.0
    assert storage.show(fleet, me).quota_bytes == 10**9
    run = backups.request(fleet, me, iid, BackupRequest(path="/data"))
    assert run.status == "queued"
    bucket.delete_object(Bucket=made.bucket, Key="a.bin")  # type: ignore[attr-defined]
    bucket.delete_object(Bucket=made.bucket, Key="b.bin")  # type: ignore[attr-defined]
    clock.move(days=1)
    drive(fleet, backup_runs.PIPELINE)
    storage_meter.meter_buckets(fleet)
    assert len(records(fleet, tenant.tenant_id)) == 4  # within the free bytes: nothing
