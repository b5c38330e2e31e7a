"""Buckets past their quota refused writes at the store (services/storage/quota.py)."""

from __future__ import annotations

from gpulease.platform import Platform
from gpulease.services.storage.quota import check_quotas
from gpulease.worker.jobs.job import Job


def run(p: Platform, _owner: str) -> object:
    return check_quotas(p)


JOB = Job("storage-quota", run,
          "each bucket measured every GPULEASE_STORAGE_QUOTA_CHECK_S: past its quota the "
          "store refuses its tenant's writes (reads and deletes go on), under it again "
          "they may write")
