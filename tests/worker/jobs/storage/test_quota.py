"""The storage-quota job: a bucket past its quota is measured and its tenant's keys can no
longer write to it (the store refuses the upload); under the quota again, they can."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from gpulease.drivers.seaweedfs import EmbeddedS3
from gpulease.platform import Platform
from gpulease.services.storage import buckets as storage
from gpulease.testing.callers import TenantCtx
from gpulease.testing.clock import MovableClock
from gpulease.worker.jobs.storage import quota
from tests.fixtures.storage import client, with_storage


def test_past_its_quota_a_bucket_takes_no_more_writes(
    fleet: Platform, clock: MovableClock, tenant: TenantCtx, s3: EmbeddedS3
) -> None:
    with_storage(fleet, s3)
    fleet.settings.storage_quota_gb = 0.000_1  # a 100,000-byte quota
    made = storage.new_key(fleet, tenant.principal)
    bucket = client(s3, made.access_key_id, made.secret_access_key)
    bucket.put_object(Bucket=made.bucket, Key="big.bin",  # type: ignore[attr-defined]
                      Body=b"x" * 120_000)
    assert quota.JOB.run(fleet, "test") == 1
    with pytest.raises(ClientError):
        bucket.put_object(Bucket=made.bucket, Key="more.bin",  # type: ignore[attr-defined]
                          Body=b"y")
    bucket.delete_object(Bucket=made.bucket, Key="big.bin")  # type: ignore[attr-defined]
    clock.move(seconds=fleet.settings.storage_quota_check_s + 1)
    assert quota.JOB.run(fleet, "test") == 1
    bucket.put_object(Bucket=made.bucket, Key="small.bin",  # type: ignore[attr-defined]
                      Body=b"z")
