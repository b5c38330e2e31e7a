"""GPU telemetry downsampled and pruned (services/telemetry/retention.py)."""

from __future__ import annotations

from gpulease.platform import Platform
from gpulease.services.telemetry.retention import downsample
from gpulease.worker.jobs.job import Job


def run(p: Platform, _owner: str) -> object:
    return downsample(p)


JOB = Job("telemetry", run,
          "GPU summaries past GPULEASE_TELEMETRY_MINUTE_DAYS merged per GPU and hour; "
          "hourly ones past GPULEASE_TELEMETRY_HOUR_DAYS deleted")
