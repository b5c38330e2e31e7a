"""The backup-schedule job: a tenant's schedule queues a backup of its server's data disk
when due (one at a time), not before; no object store, nothing to queue."""

from __future__ import annotations

from gpulease.drivers.seaweedfs import EmbeddedS3
from gpulease.platform import Platform
from gpulease.schemas.fleet import BackupPolicyUpdate
from gpulease.services.storage import backup_policy
from gpulease.testing.callers import TenantCtx
from gpulease.testing.clock import MovableClock
from gpulease.testing.factories import deliver
from gpulease.worker.jobs.storage import backup_schedule
from gpulease.worker.runner import Worker
from tests.fixtures.storage import with_storage


def test_a_schedule_queues_a_backup_when_due(
    fleet: Platform, clock: MovableClock, tenant: TenantCtx, key: str, s3: EmbeddedS3
) -> None:
    iid = deliver(fleet, tenant, Worker(fleet), key)
    backup_policy.update(fleet, tenant.principal, iid, BackupPolicyUpdate(every_hours=6))
    assert backup_schedule.JOB.run(fleet, "test") == 0  # no object store configured
    with_storage(fleet, s3)
    assert backup_schedule.JOB.run(fleet, "test") == 1
    assert backup_schedule.JOB.run(fleet, "test") == 0  # one at a time
    clock.move(hours=1)
    assert backup_schedule.JOB.run(fleet, "test") == 0
    assert backup_policy.show(fleet, tenant.principal, iid).every_hours == 6
