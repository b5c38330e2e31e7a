"""The storage-meter job: a bucket is measured once a day after the day ends, and what it
holds beyond the free allowance is charged once."""

from __future__ import annotations

from sqlalchemy import select

from gpulease.db.money_tables import UsageRecord
from gpulease.drivers.seaweedfs import EmbeddedS3
from gpulease.platform import Platform
from gpulease.services.storage import buckets as storage
from gpulease.testing.callers import TenantCtx
from gpulease.testing.clock import MovableClock
from gpulease.worker.jobs.storage import meter
from tests.fixtures.storage import client, with_storage


def test_a_bucket_is_charged_once_a_day(
    fleet: Platform, clock: MovableClock, tenant: TenantCtx, s3: EmbeddedS3
) -> None:
    with_storage(fleet, s3)
    fleet.settings.storage_free_gb = 0.000_02  # 20,000 bytes free
    made = storage.new_key(fleet, tenant.principal)
    bucket = client(s3, made.access_key_id, made.secret_access_key)
    bucket.put_object(Bucket=made.bucket, Key="a.bin",  # type: ignore[attr-defined]
                      Body=b"a" * 85_000)
    assert meter.JOB.run(fleet, "test") == 0  # today is not over
    clock.move(days=1)
    assert meter.JOB.run(fleet, "test") == 1
    assert meter.JOB.run(fleet, "test") == 0  # once a day
    with fleet.db.read() as s:
        charged = s.scalars(select(UsageRecord.quantity).where(
            UsageRecord.tenant_id == tenant.tenant_id,
            UsageRecord.kind == "object_gb_days")).all()
    assert [round(float(q), 6) for q in charged] == [0.000065]  # beyond the free bytes
