"""The audit job: rows past GPULEASE_AUDIT_RETENTION_DAYS are pruned from the chain's
start, and what stays still verifies as a chain."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import func, select

from gpulease.db.tables import AuditEntry
from gpulease.platform import Platform
from gpulease.services.platform import audit
from gpulease.testing.callers import TenantCtx
from gpulease.worker.jobs.platform import audit as audit_job


def test_old_rows_are_pruned_and_the_rest_still_verifies(
    platform: Platform, operator: TenantCtx
) -> None:
    now = platform.clock.now()
    for days in (400, 300, 10, 1):
        audit.record(platform, audit.Happening(at=now - timedelta(days=days),
                                               action="POST /api/v1/tokens", outcome=201))
    platform.settings.audit_retention_days = 365
    audit_job.JOB.run(platform, "test")
    with platform.db.read() as s:
        assert s.scalar(select(func.count()).select_from(AuditEntry)) == 4  # 3 + the record
    assert audit.verify(platform, operator.principal).intact
