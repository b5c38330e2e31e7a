"""Tenants' scheduled backups queued when due (services/storage/backup_policy.py)."""

from __future__ import annotations

from gpulease.platform import Platform
from gpulease.services.storage.backup_policy import run_schedules
from gpulease.worker.jobs.job import Job


def run(p: Platform, _owner: str) -> object:
    return run_schedules(p)


JOB = Job("backup-schedule", run,
          "tenants' scheduled backups of their servers' data disks queued when due")
