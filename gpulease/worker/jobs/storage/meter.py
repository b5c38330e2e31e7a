"""Each tenant's bucket measured once a day and charged (services/storage/meter.py)."""

from __future__ import annotations

from gpulease.platform import Platform
from gpulease.services.storage.meter import meter_buckets
from gpulease.worker.jobs.job import Job


def run(p: Platform, _owner: str) -> object:
    return meter_buckets(p)


JOB = Job("storage-meter", run,
          "each tenant's bucket measured once a day: GB-days beyond the free allowance "
          "charged, its admins told at 80 % and 100 % of the quota")
