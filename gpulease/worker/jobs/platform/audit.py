"""The audit trail pruned past its retention (services/platform/audit.py)."""

from __future__ import annotations

from gpulease.platform import Platform
from gpulease.services.platform.audit import prune
from gpulease.worker.jobs.job import Job


def run(p: Platform, _owner: str) -> object:
    return prune(p)


JOB = Job("audit", run,
          "audit rows past GPULEASE_AUDIT_RETENTION_DAYS pruned from the chain's start")
